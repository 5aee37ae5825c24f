"""A control store on S3 in plain HTTP requests signed here, no SDK (PROTOCOL.md §2, §2.1; driver).

The WAL's requests are few and small: GET, LIST (v2, ``start-after``), the
conditional PUT (``If-None-Match: *``) and DELETE. Through s3fs each costs
aiobotocore's pipeline (1.5-6 ms of CPU), and every new Python process pays
~0.45 s of CPU importing s3fs, aiobotocore and aiohttp and building a client
before its first request -- once per Spark Python worker that plans or commits
a write. :class:`S3HttpStore` sends the same requests through ``http.client``
on kept-alive connections, signed with :mod:`.sigv4`.

It serves a configuration only when it can do exactly what s3fs would
(:func:`http_store`): static keys (the table's ``s3.access-key-id`` /
``s3.secret-access-key`` [/ ``s3.session-token``], else ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` [/ ``AWS_SESSION_TOKEN``]), a known region (``s3.region``,
``client.region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``; ``us-east-1`` for an
explicit ``s3.endpoint``) and no proxy for the endpoint. Anything else -- instance
profiles, SSO, shared profiles, proxies -- and ``FENCEDLAKE_S3_CLIENT=s3fs`` go
to :class:`~.s3.S3Store` and botocore's credential chain. TLS verifies against
the system's trust store, or ``AWS_CA_BUNDLE``.

Outcomes and bounds are :class:`~.s3.S3Store`'s: ``412`` -> exists; ``409
ConditionalRequestConflict`` is retried on the same key; every request is
bounded by the same connect / read timeouts and attempts
(:func:`~.s3.request_bound_s`); a PUT whose request may have reached the server
(a lost answer, a 5xx; not a connection that was never made) and still failed after its attempts is an ambiguous
:class:`StoreError`, resolved by the owner token (invariant I7). A retry of a
landed PUT answers ``412`` on itself, which the caller resolves the same way.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import random
import ssl
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.masking import mask_secrets
from pyspark_fenced_sink.store.base import check_key
from pyspark_fenced_sink.store.s3 import (
    CONNECT_TIMEOUT_S,
    MAX_ATTEMPTS,
    READ_TIMEOUT_S,
    put_through_conflicts,
    seconds,
)
from pyspark_fenced_sink.store.sigv4 import EMPTY_SHA256, Credentials, amz_date, canonical_path, canonical_query, sign

__all__ = ["S3_CLIENT_ENV", "S3HttpClient", "S3HttpStore", "http_client", "http_store"]

#: ``s3fs`` sends every control-store request through s3fs (botocore's credential chain, proxies) even
#: where :class:`S3HttpStore` could serve; unset or ``http``: the HTTP store where it can.
S3_CLIENT_ENV = "FENCEDLAKE_S3_CLIENT"

#: Idle connections kept per host (one per concurrent request beyond it is opened and closed).
_POOL_SIZE = 16

#: Transport failures: the request may or may not have reached the server.
_TRANSPORT = (OSError, http.client.HTTPException)


class _Unsent(Exception):
    """No connection could be made: the request never left (a refused or timed-out connect)."""


class _Answer:
    """One HTTP answer: status, body, and the S3 error code and message when it is an error."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        self.code = ""
        self.message = ""
        if status >= 300 and body:
            try:
                root = ET.fromstring(body)
            except ET.ParseError:
                return
            self.code = _child_text(root, "Code")
            self.message = _child_text(root, "Message")

    def describe(self) -> str:
        return f"HTTP {self.status} {self.code} {self.message}".strip()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(element: ET.Element, name: str) -> str:
    for child in element:
        if _local(child.tag) == name:
            return child.text or ""
    return ""


@dataclass(frozen=True)
class _Target:
    """Where requests go: ``scheme://host``, and whether the bucket is in the host name (virtual addressing)."""

    scheme: str
    host: str
    virtual: bool


class S3HttpClient:
    """Signed S3 requests to one endpoint over pooled keep-alive connections; thread-safe, fork-aware."""

    def __init__(
        self,
        target: _Target,
        region: str,
        credentials: Credentials,
        connect_s: float = CONNECT_TIMEOUT_S,
        read_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.target = target
        self.region = region
        self.credentials = credentials
        self.connect_s = connect_s
        self.read_s = read_s
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"S3HttpClient({self.target.scheme}://{self.target.host}, region={self.region!r})"

    # ------------------------------------------------------------------ connections

    def _connect(self, host: str) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.target.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None)
            conn = http.client.HTTPSConnection(host, timeout=self.connect_s, context=self._tls)
        else:
            conn = http.client.HTTPConnection(host, timeout=self.connect_s)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self.read_s)
        return conn

    def _take(self, host: str) -> http.client.HTTPConnection:
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not share its parent's sockets
                self._idle, self._pid = {}, os.getpid()
            idle = self._idle.get(host)
            if idle:
                return idle.pop()
        return self._connect(host)

    def _give(self, host: str, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(host, [])
            if self._pid == os.getpid() and len(idle) < _POOL_SIZE:
                idle.append(conn)
                return
        conn.close()

    # ------------------------------------------------------------------ requests

    def url_of(self, bucket: str, key: str = "") -> tuple[str, str]:
        """(``Host`` header, encoded path) of ``key`` in ``bucket`` (the bucket itself when ``key`` is empty).

        A bucket name with a dot goes in the path even where addressing is virtual, as botocore does: as a
        host name it would not match the endpoint's TLS certificate.
        """
        if self.target.virtual and "." not in bucket:
            return f"{bucket}.{self.target.host}", canonical_path(f"/{key}")
        return self.target.host, canonical_path(f"/{bucket}/{key}" if key else f"/{bucket}")

    def _once(
        self, method: str, host: str, path: str, query: Mapping[str, str], body: bytes, extra: Mapping[str, str]
    ) -> _Answer:
        payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        headers = sign(self.credentials, self.region, method, host, path, query, payload, amz_date())
        headers.update(extra)
        target = f"{path}?{canonical_query(query)}" if query else path
        try:
            conn = self._take(host)
        except _TRANSPORT as e:
            raise _Unsent(f"{type(e).__name__}: {e}") from e
        try:
            conn.request(method, target, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()
        else:
            self._give(host, conn)
        return _Answer(response.status, data)

    def request(
        self,
        method: str,
        bucket: str,
        key: str = "",
        *,
        query: Mapping[str, str] | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> _Answer:
        """Send one request, retried on transport failures, ``5xx`` and ``429`` up to :data:`MAX_ATTEMPTS` times.

        Raises:
            StoreError: every attempt failed; ``ambiguous`` when the method is ``PUT`` and an attempt may
                have been applied (a failure after the connection was made, a 5xx; not a refused connect).
        """
        host, path = self.url_of(bucket, key)
        maybe = False
        failure = ""
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, 0.1 * 2**attempt))
            try:
                answer = self._once(method, host, path, query or {}, body, headers or {})
            except _Unsent as e:
                failure = f"no connection: {e}"
                continue
            except _TRANSPORT as e:
                maybe, failure = True, f"{type(e).__name__}: {e}"
                continue
            if answer.status >= 500 or answer.status == 429:
                maybe, failure = maybe or answer.status >= 500, answer.describe()
                continue
            return answer
        raise StoreError(
            f"{method} s3://{bucket}/{key} failed after {MAX_ATTEMPTS} attempts: {mask_secrets(failure)[:500]}",
            ambiguous=maybe and method == "PUT",
        )


class S3HttpStore:
    """Control objects under ``bucket/prefix`` on S3, through one shared :class:`S3HttpClient`."""

    scheme = "s3"
    conflict_retries = 8

    def __init__(self, root: str, client: S3HttpClient) -> None:
        self.root = root.split("://", 1)[-1].strip("/")
        self.bucket, _, prefix = self.root.partition("/")
        self.base = f"{prefix}/" if prefix else ""
        self.client = client

    def __repr__(self) -> str:
        return f"S3HttpStore('s3://{self.root}')"

    def _error(self, what: str, key: str, answer: _Answer) -> StoreError:
        return StoreError(f"{what} s3://{self.root}/{key} failed: {mask_secrets(answer.describe())[:500]}")

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""
        answer = self.client.request("GET", self.bucket, self.base + check_key(key))
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise self._error("GET", key, answer)
        return answer.body

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Keys under ``prefix``, sorted, all ``> start_after`` (ListObjectsV2, every page)."""
        keys: list[str] = []
        query = {"list-type": "2", "prefix": self.base + check_key(prefix)}
        if start_after:
            query["start-after"] = self.base + start_after
        while True:
            answer = self.client.request("GET", self.bucket, query=query)
            if answer.status != 200:
                raise self._error("LIST", prefix, answer)
            try:
                page = ET.fromstring(answer.body)
            except ET.ParseError as e:
                raise StoreError(f"LIST s3://{self.root}/{prefix}: unreadable answer ({e})") from e
            token = ""
            truncated = False
            for child in page:
                name = _local(child.tag)
                if name == "Contents":
                    keys.append(_child_text(child, "Key")[len(self.base) :])
                elif name == "IsTruncated":
                    truncated = (child.text or "").strip().lower() == "true"
                elif name == "NextContinuationToken":
                    token = child.text or ""
            if not truncated or not token:
                return keys
            query = {**query, "continuation-token": token}

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent (``If-None-Match: *``): True created, False it exists."""
        path = self.base + check_key(key)

        def once() -> bool | None:
            answer = self.client.request("PUT", self.bucket, path, body=data, headers={"If-None-Match": "*"})
            if answer.status in (200, 412):
                return answer.status == 200
            if answer.status == 409 and answer.code in ("", "ConditionalRequestConflict"):
                return None
            raise self._error("PUT", key, answer)

        return put_through_conflicts(once, f"s3://{self.root}/{key}", self.conflict_retries)

    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""
        answer = self.client.request("DELETE", self.bucket, self.base + check_key(key))
        if answer.status not in (200, 204, 404):
            raise self._error("DELETE", key, answer)


# ---------------------------------------------------------------------------------------------- configuration


def _credentials(props: Mapping[str, str]) -> Credentials | None:
    if props.get("s3.access-key-id") and props.get("s3.secret-access-key"):
        return Credentials(props["s3.access-key-id"], props["s3.secret-access-key"], props.get("s3.session-token", ""))
    if props.get("s3.access-key-id") or props.get("s3.secret-access-key"):
        return None  # half a pair: s3fs decides what that means, as before
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return Credentials(key, secret, os.environ.get("AWS_SESSION_TOKEN", "")) if key and secret else None


def _target(props: Mapping[str, str], region: str) -> _Target | None:
    endpoint = props.get("s3.endpoint", "")
    virtual = props.get("s3.force-virtual-addressing", "").lower() == "true" or not endpoint
    if not endpoint:
        return _Target("https", f"s3.{region}.amazonaws.com", virtual=True)
    scheme, sep, rest = endpoint.partition("://")
    host = rest.split("/", 1)[0] if sep else ""
    if scheme.lower() not in ("http", "https") or not host or (sep and rest.strip("/") != host):
        return None  # an endpoint with a path: s3fs handles it
    return _Target(scheme.lower(), host, virtual)


def _proxied(target: _Target) -> bool:
    proxies = urllib.request.getproxies()
    if target.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(target.host.split(":", 1)[0])


_clients: dict[tuple[Any, ...], S3HttpClient | None] = {}
_clients_lock = threading.Lock()


def http_client(io_properties: Mapping[str, str]) -> S3HttpClient | None:
    """The shared client for these FileIO properties, or None when s3fs must serve them (module docstring)."""
    if os.environ.get(S3_CLIENT_ENV, "").strip().lower() == "s3fs":
        return None
    relevant = tuple(sorted((k, v) for k, v in io_properties.items() if k.startswith(("s3.", "client."))))
    env = tuple(os.environ.get(n, "") for n in _ENV_NAMES)
    with _clients_lock:
        if (relevant, env) not in _clients:
            _clients[(relevant, env)] = _build(dict(relevant))
        return _clients[(relevant, env)]


_ENV_NAMES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


def _build(props: Mapping[str, str]) -> S3HttpClient | None:
    credentials = _credentials(props)
    if credentials is None:
        return None
    region = (
        props.get("s3.region")
        or props.get("client.region")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or ("us-east-1" if props.get("s3.endpoint") else "")
    )
    target = _target(props, region) if region else None
    if target is None or _proxied(target):
        return None
    connect = seconds(props, "s3.connect-timeout", CONNECT_TIMEOUT_S)
    read = seconds(props, "s3.request-timeout", READ_TIMEOUT_S)
    return S3HttpClient(target, region, credentials, connect, read)


def http_store(root: str, io_properties: Mapping[str, str]) -> S3HttpStore | None:
    """An :class:`S3HttpStore` at ``root`` when these properties allow one (module docstring), else None."""
    client = http_client(io_properties)
    return None if client is None else S3HttpStore(root, client)
