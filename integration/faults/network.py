"""Every app under test reaches every service through its own toxiproxy links.

An app's *links* are one proxy per service it uses (S3, PostgreSQL, Apache Iceberg's REST
fixture), named ``<app>-<service>``: a toxic on one link hurts that app's requests to that
service only, a partition of an app blackholes all of its links, a service down disables
that service's link of every app. :meth:`Network.options` rewrites a table's sink options
so that the app's clients (s3fs for the WAL, Arrow's S3 client for data and metadata,
psycopg2 for the catalog, pyiceberg's REST client) use its links, with the request bounds
the suite runs with (:data:`BOUNDS`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from integration.faults.toxiproxy import Proxy, Toxiproxy, restart_service

__all__ = ["BOUNDS", "SERVICES", "Network"]

SERVICES = ("s3", "pg", "rest")
#: Request bounds of the apps under test (catalog and FileIO properties): a request that gets no answer fails
#: after these many seconds, so faults cost seconds, not the defaults' minutes; ``commit.max-wait-ms`` too.
BOUNDS = {
    "catalog.request-timeout": "10",
    "catalog.s3.connect-timeout": "2",
    "catalog.s3.request-timeout": "5",
    "commit.max-wait-ms": "60000",
}


def _hostport(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.hostname}:{parts.port}"


@dataclass
class Network:
    """The links of every app, created on demand (``api`` is a running toxiproxy).

    Attributes:
        upstreams: service -> ``host:port`` of the real service.
        links: ``(app, service)`` -> its proxy.
        faults: what was injected, in order: ``(seconds since start, what, link or app)``.
    """

    api: Toxiproxy
    upstreams: Mapping[str, str]
    links: dict[tuple[str, str], Proxy] = field(default_factory=dict)
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def of(cls, api: Toxiproxy, *, s3_endpoint: str, pg_uri: str, rest_uri: str = "") -> Network:
        """The network in front of the suite's services (``rest_uri`` empty: no REST fixture)."""
        upstreams = {"s3": _hostport(s3_endpoint), "pg": _hostport(pg_uri)}
        if rest_uri:
            upstreams["rest"] = _hostport(rest_uri)
        return cls(api, upstreams)

    def link(self, app: str, service: str) -> Proxy:
        """The proxy between ``app`` and ``service`` (created the first time)."""
        with self._lock:
            proxy = self.links.get((app, service))
            if proxy is None:
                proxy = self.api.create(f"{app}-{service}", upstream=self.upstreams[service])
                self.links[(app, service)] = proxy
            return proxy

    def options(self, app: str, options: Mapping[str, str]) -> dict[str, str]:
        """``options`` (a table's sink options on the real services) with every endpoint through ``app``'s links."""
        out = {**options, **BOUNDS}
        if "catalog.s3.endpoint" in out or out.get("catalog.type") == "rest":
            out["catalog.s3.endpoint"] = f"http://{self.link(app, 's3').listen}"
        uri = out.get("catalog.uri", "")
        if uri.startswith("postgresql"):
            out["catalog.uri"] = uri.replace(self.upstreams["pg"], self.link(app, "pg").listen, 1)
        elif uri.startswith("http") and "rest" in self.upstreams:
            out["catalog.uri"] = uri.replace(self.upstreams["rest"], self.link(app, "rest").listen, 1)
        return out

    def apps(self) -> list[str]:
        """Every app with a link."""
        return sorted({app for app, _ in self.links})

    def record(self, at: float, what: str, where: str) -> None:
        """Note an injected fault."""
        with self._lock:
            self.faults.append((round(at, 1), what, where))

    def everywhere(self, kind: str, *, service: str | None = None, **attributes: object) -> None:
        """Add toxic ``kind`` to every link (of ``service`` only, if given) for the rest of the run."""
        for (_, svc), proxy in list(self.links.items()):
            if service is None or svc == service:
                proxy.add_toxic(kind, **attributes)

    @contextmanager
    def partitioned(self, app: str) -> Iterator[None]:
        """``app`` cut off from every service (its bytes go nowhere, its connections hang) for the block."""
        mine = [p for (a, _), p in self.links.items() if a == app]
        names = [(p, p.blackhole()) for p in mine]
        try:
            yield
        finally:
            for proxy, toxics in names:
                for name in toxics:
                    proxy.remove_toxic(name)

    @contextmanager
    def down(self, service: str) -> Iterator[None]:
        """``service`` unreachable for every app (connections refused, open ones cut) for the block."""
        mine = [p for (_, s), p in self.links.items() if s == service]
        for proxy in mine:
            proxy.set_enabled(False)
        try:
            yield
        finally:
            for proxy in mine:
                proxy.set_enabled(True)

    def restart_proxy(self) -> None:
        """Restart the toxiproxy process under load: every connection cut, proxies back on their ports with
        the toxics they had."""
        toxics = {name: proxy.toxics() for name, proxy in ((p.name, p) for p in self.links.values())}
        self.api = restart_service(list(self.links.values()))
        for proxy in self.links.values():
            proxy.api = self.api
            for toxic in toxics.get(proxy.name, []):
                proxy.add_toxic(
                    toxic["type"],
                    stream=toxic["stream"],
                    toxicity=toxic["toxicity"],
                    name=toxic["name"],
                    **toxic["attributes"],
                )
