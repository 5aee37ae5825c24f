"""A small client of Shopify's toxiproxy: proxies in front of real services, toxics on their links.

The server is ``integration/services/toxiproxy.sh`` (built once from the Go module proxy,
cached under ``.integration/bin``); :func:`start_service` runs that script and skips the
calling test when the Go toolchain is missing. Standard library only, so benchmarks and
the fault suite use it alike::

    from integration.faults.toxiproxy import Toxiproxy, start_service

    api = start_service()                       # or Toxiproxy() if it already runs
    s3 = api.create("s3-app0", upstream="127.0.0.1:24330")
    endpoint = f"http://{s3.listen}"            # what the app uses as its S3 endpoint
    s3.add_toxic("latency", latency=20, jitter=5)   # every response 20 +- 5 ms late
    with s3.toxic("reset_peer", stream="downstream", timeout=0):
        ...                                     # responses lost after the server applied the request
    with s3.blackholed():                       # a partition: bytes go nowhere, connections stay open
        ...
    api.reset()                                 # every proxy enabled, every toxic removed

Toxics (toxiproxy v2.5): ``latency`` (``latency``, ``jitter`` ms), ``bandwidth`` (``rate`` KB/s),
``slow_close`` (``delay`` ms), ``timeout`` (``timeout`` ms: drop every byte, close after it; 0:
never close), ``reset_peer`` (``timeout`` ms, then a TCP RST), ``slicer`` (``average_size``,
``size_variation`` bytes, ``delay`` us), ``limit_data`` (``bytes``: close once that many passed).
``stream`` is ``downstream`` (server -> client: the response) or ``upstream`` (the request);
``toxicity`` is the share of connections a toxic applies to, drawn per connection.

Listen ports come from ``FENCEDLAKE_IT_TOXIPROXY_LISTEN`` (``FIRST-LAST``, default
24341-24360), so proxies never take a port another service or engineer was given;
the API is at ``FENCEDLAKE_IT_TOXIPROXY_PORT`` (24340).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Proxy",
    "Toxiproxy",
    "ToxiproxyError",
    "api_port",
    "listen_ports",
    "restart_service",
    "start_service",
    "stop_service",
]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "integration" / "services" / "toxiproxy.sh"
#: ``toxiproxy.sh install`` exits with this status when the Go toolchain is missing.
MISSING_TOOL = 3


class ToxiproxyError(RuntimeError):
    """The toxiproxy API refused a request (its status and message)."""


def api_port() -> int:
    """The API port (``FENCEDLAKE_IT_TOXIPROXY_PORT``, default 24340)."""
    return int(os.environ.get("FENCEDLAKE_IT_TOXIPROXY_PORT", "24340"))


def listen_ports() -> range:
    """The ports proxies listen on (``FENCEDLAKE_IT_TOXIPROXY_LISTEN``, ``FIRST-LAST`` inclusive)."""
    text = os.environ.get("FENCEDLAKE_IT_TOXIPROXY_LISTEN", f"{api_port() + 1}-{api_port() + 20}")
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def _script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def start_service() -> Toxiproxy:
    """Start the server (building it first if needed) and return a client; skip the test if Go is missing.

    Raises:
        RuntimeError: the build or the start failed (with the script's output).
    """
    proc = _script("start")
    if proc.returncode == MISSING_TOOL:
        import pytest

        pytest.skip(proc.stderr.strip().removeprefix("[toxiproxy] SKIP: "))
    if proc.returncode != 0:
        raise RuntimeError(f"toxiproxy.sh start failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return Toxiproxy()


def stop_service() -> None:
    """Stop the server (every proxy and its connections go with it)."""
    _script("stop", timeout=60)


def restart_service(proxies: list[Proxy]) -> Toxiproxy:
    """Stop the server and start it again with ``proxies`` on their ports (toxics are not restored): the
    proxy process restarted under load -- every connection through it is cut, new ones are refused
    until it is back."""
    stop_service()
    api = start_service()
    api.populate([{"name": p.name, "listen": p.listen, "upstream": p.upstream, "enabled": True} for p in proxies])
    return api


class Toxiproxy:
    """The server's HTTP API at ``127.0.0.1:<port>``."""

    def __init__(self, port: int | None = None, *, timeout_s: float = 10.0) -> None:
        self.url = f"http://127.0.0.1:{port or api_port()}"
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One API call; its decoded JSON answer (None for an empty one)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                text = response.read()
        except urllib.error.HTTPError as e:
            raise ToxiproxyError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from None
        return json.loads(text) if text.strip() else None

    def version(self) -> str:
        """The server's version string (answers once the server is up)."""
        with urllib.request.urlopen(self.url + "/version", timeout=self.timeout_s) as response:
            return response.read().decode().strip()

    def proxies(self) -> dict[str, Proxy]:
        """Every proxy, by name."""
        return {name: Proxy._of(self, p) for name, p in self.request("GET", "/proxies").items()}

    def create(self, name: str, upstream: str, listen: str | None = None) -> Proxy:
        """A proxy ``name`` forwarding to ``upstream`` (``host:port``); a stale one of that name is replaced.

        ``listen`` defaults to the first free port of :func:`listen_ports` on 127.0.0.1.
        """
        existing = self.proxies()
        if name in existing:
            self.request("DELETE", f"/proxies/{name}")
            listen = listen or existing[name].listen
        if listen is not None:
            return Proxy._of(
                self, self.request("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream})
            )
        taken = {p.listen for p in existing.values() if p.name != name}
        for port in listen_ports():
            if f"127.0.0.1:{port}" in taken:
                continue
            body = {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream}
            try:
                return Proxy._of(self, self.request("POST", "/proxies", body))
            except ToxiproxyError as e:  # the range is in the ephemeral range: a client socket may hold a port
                if "address already in use" not in str(e):
                    raise
        raise ToxiproxyError(f"no free listen port in {listen_ports()} (FENCEDLAKE_IT_TOXIPROXY_LISTEN)")

    def populate(self, proxies: list[dict[str, Any]]) -> None:
        """Create or update proxies in one call (``name``, ``listen``, ``upstream``): how a restarted server
        gets its proxies back on the same ports."""
        self.request("POST", "/populate", proxies)

    def delete(self, name: str) -> None:
        """Remove proxy ``name`` (its connections close)."""
        self.request("DELETE", f"/proxies/{name}")

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self.request("POST", "/reset")


@dataclass
class Proxy:
    """One proxy: ``listen`` is what clients connect to, ``upstream`` the real service."""

    api: Toxiproxy = field(repr=False)
    name: str
    listen: str
    upstream: str
    enabled: bool = True

    @classmethod
    def _of(cls, api: Toxiproxy, answer: dict[str, Any]) -> Proxy:
        return cls(api, answer["name"], answer["listen"], answer["upstream"], bool(answer.get("enabled", True)))

    @property
    def port(self) -> int:
        """The port clients connect to."""
        return int(self.listen.rsplit(":", 1)[1])

    def add_toxic(
        self,
        kind: str,
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
        name: str | None = None,
        **attributes: Any,
    ) -> str:
        """Add a toxic of ``kind`` (see the module docstring); its name (default ``<kind>_<stream>``)."""
        name = name or f"{kind}_{stream}"
        body = {"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        self.api.request("POST", f"/proxies/{self.name}/toxics", body)
        return name

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name`` (connections it held resume)."""
        self.api.request("DELETE", f"/proxies/{self.name}/toxics/{name}")

    def toxics(self) -> list[dict[str, Any]]:
        """The toxics on this proxy now."""
        return list(self.api.request("GET", f"/proxies/{self.name}/toxics"))

    @contextmanager
    def toxic(self, kind: str, **options: Any) -> Iterator[str]:
        """:meth:`add_toxic` for the duration of the block."""
        name = self.add_toxic(kind, **options)
        try:
            yield name
        finally:
            self.remove_toxic(name)

    def set_enabled(self, enabled: bool) -> None:
        """Disabled: the listener closes and every connection is cut (clients see "connection refused")."""
        self.api.request("POST", f"/proxies/{self.name}", {"enabled": enabled})
        self.enabled = enabled

    @contextmanager
    def disabled(self) -> Iterator[None]:
        """The service is down for the duration of the block (refused connections)."""
        self.set_enabled(False)
        try:
            yield
        finally:
            self.set_enabled(True)

    def blackhole(self) -> list[str]:
        """A partition: every byte either way is dropped and connections stay open (clients hang until their
        own timeouts); the names of the two toxics, for :meth:`remove_toxic`."""
        return [
            self.add_toxic("timeout", stream=stream, name=f"partition_{stream}", timeout=0)
            for stream in ("upstream", "downstream")
        ]

    @contextmanager
    def blackholed(self) -> Iterator[None]:
        """:meth:`blackhole` for the duration of the block."""
        names = self.blackhole()
        try:
            yield
        finally:
            for name in names:
                self.remove_toxic(name)
