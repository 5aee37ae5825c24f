"""Network faults between the sink and the real services: an S3 proxy and a PostgreSQL proxy.

Both run on loopback inside the test process, in front of the real servers
(``integration/services``), so the clients the sink uses (the plain-HTTP S3 store for
the WAL, Arrow's S3 client for data and metadata, psycopg2 for the catalog)
see genuine transport failures, exactly as they would against a flaky network:

* :class:`S3FaultProxy` -- an HTTP proxy that, per request, forwards it
  untouched, answers ``500`` without forwarding, forwards it and then answers
  ``500`` (the server applied the PUT), forwards it and then drops the
  connection or stays silent past the client's read timeout (applied, response
  lost), or forwards it slowly. A :class:`FaultPolicy` decides per request.
* :class:`PgCommitLossProxy` -- a TCP proxy for the PostgreSQL wire protocol
  that, when armed, drops the connection of the transaction that moves an
  Iceberg table's metadata pointer (``UPDATE iceberg_tables`` ... ``COMMIT``):
  either after PostgreSQL applied the ``COMMIT`` (the catalog commit landed,
  its response is lost) or before the ``COMMIT`` reaches it (rolled back).
  psycopg2 reports both the same way: the commit's outcome is unknown.
"""

from __future__ import annotations

import http.client
import itertools
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["FaultPolicy", "PgCommitLossProxy", "S3FaultProxy", "S3Request"]

#: What the proxy can do to one request.
PASS, ERROR_BEFORE, ERROR_AFTER, DROP_AFTER, TIMEOUT_AFTER, SLOW = (
    "pass",
    "500-before",
    "500-after-apply",
    "drop-after-apply",
    "timeout-after-apply",
    "slow",
)
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
_S3_500 = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>injected by the fault proxy</Message></Error>"
)


@dataclass(frozen=True)
class S3Request:
    """What a :class:`FaultPolicy` sees of one request."""

    method: str
    path: str  # without the query string
    query: str

    @property
    def is_wal_put(self) -> bool:
        """A put-if-absent of a WAL position (the protocol's conditional write)."""
        return self.method == "PUT" and "/_fencedlake/" in self.path and "/wal/" in self.path

    @property
    def is_data_put(self) -> bool:
        """An upload (a multipart part, or a single PUT) of a Parquet data file: a fresh, unique name."""
        return self.method == "PUT" and "/data/" in self.path and self.path.endswith(".parquet")


class FaultPolicy:
    """Deterministic faults: only the FIRST request for a given method+path is ever faulted.

    A client's retry of the same request therefore always reaches the server
    untouched, so every fault is one the clients (and the protocol) must absorb
    -- none is a permanent outage. Faults cycle through fixed sequences, so
    every kind is injected at least once in a run of a few dozen requests.

    * WAL puts (put-if-absent): ``wal_cycle``, one kind per new WAL key;
    * data-file uploads (Arrow sends multipart parts): every ``data_drop_every``-th is dropped
      after the server applied it (re-sending a part is idempotent);
    * every other request: every ``other_error_every``-th answers 500 unforwarded and
      every ``other_slow_every``-th is delayed.
    """

    def __init__(
        self,
        *,
        wal_cycle: tuple[str, ...] = (DROP_AFTER, ERROR_AFTER, ERROR_BEFORE, TIMEOUT_AFTER, SLOW, PASS),
        data_drop_every: int = 3,
        other_error_every: int = 7,
        other_slow_every: int = 5,
    ) -> None:
        self._wal = itertools.cycle(wal_cycle)
        self._data = itertools.count(1)
        self._other = itertools.count(1)
        self.data_drop_every = data_drop_every
        self.other_error_every = other_error_every
        self.other_slow_every = other_slow_every
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, request: S3Request) -> str:
        with self._lock:
            key = (request.method, request.path, request.query if request.method == "GET" else "")
            if key in self._seen:
                return PASS
            self._seen.add(key)
            if request.is_wal_put:
                return next(self._wal)
            if request.is_data_put:
                return DROP_AFTER if next(self._data) % self.data_drop_every == 0 else PASS
            n = next(self._other)
            if n % self.other_error_every == 0:
                return ERROR_BEFORE
            return SLOW if n % self.other_slow_every == 0 else PASS


class S3FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of an S3 endpoint, injecting the faults a policy picks.

    Attributes:
        endpoint: ``http://127.0.0.1:<port>``, what clients use as their S3 endpoint.
        injected: How many faults of each kind were injected, by ``(kind, "wal"|"data"|"other")``.
        self_412: WAL puts whose earlier attempt the server applied (the proxy lost its response)
            and whose retry, with the same body, got ``412 Precondition Failed`` -- the
            "retried put-if-absent hits its own earlier success" case.
    """

    def __init__(
        self,
        upstream: str,
        policy: Callable[[S3Request], str],
        *,
        slow_s: float = 0.25,
        hold_s: float = 3.0,
    ) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.policy = policy
        self.slow_s = slow_s
        self.hold_s = hold_s
        self.injected: Counter[tuple[str, str]] = Counter()
        self.self_412 = 0
        self.requests = 0
        self._applied_then_lost: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)

    def __enter__(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, kind: str, request: S3Request) -> None:
        what = "wal" if request.is_wal_put else "data" if request.is_data_put else "other"
        with self._lock:
            self.injected[(kind, what)] += 1

    def _forward(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            response = conn.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _reply(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status, reason)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() not in ("content-length", "date", "server"):
                        self.send_header(name, value)
                if self.command == "HEAD":
                    length = next((v for k, v in headers if k.lower() == "content-length"), "0")
                    self.send_header("Content-Length", length)
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _drop(self) -> None:
                self.close_connection = True
                with suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _handle(self) -> None:
                path, _, query = self.path.partition("?")
                request = S3Request(self.command, path, query)
                body = self._body()
                headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
                headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
                kind = proxy.policy(request)
                with proxy._lock:
                    proxy.requests += 1
                if kind == ERROR_BEFORE:
                    proxy._count(kind, request)
                    self._reply(500, "Internal Server Error", [("Content-Type", "application/xml")], _S3_500)
                    return
                status, reason, resp_headers, data = proxy._forward(self.command, self.path, headers, body)
                if request.is_wal_put:
                    with proxy._lock:
                        if status == 412 and proxy._applied_then_lost.get(path) == body:
                            proxy.self_412 += 1
                        if kind in (ERROR_AFTER, DROP_AFTER, TIMEOUT_AFTER) and status == 200:
                            proxy._applied_then_lost[path] = body
                if kind != PASS:
                    proxy._count(kind, request)
                if kind == ERROR_AFTER:
                    self._reply(500, "Internal Server Error", [("Content-Type", "application/xml")], _S3_500)
                elif kind == DROP_AFTER:
                    self._drop()
                elif kind == TIMEOUT_AFTER:
                    time.sleep(proxy.hold_s)  # longer than the client's read timeout
                    self._drop()
                else:
                    if kind == SLOW:
                        time.sleep(proxy.slow_s)
                    self._reply(status, reason, resp_headers, data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815 - http.server's names

        return Handler


# ------------------------------------------------------------------ PostgreSQL


_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102
LOSE_RESPONSE, LOSE_REQUEST = "lose-response", "lose-request"


class PgCommitLossProxy:
    """A TCP proxy on 127.0.0.1 in front of PostgreSQL that can lose a catalog commit.

    It parses the client side of the wire protocol (psycopg2 sends simple
    ``Query`` messages: ``BEGIN``, ``UPDATE iceberg_tables ...``, ``COMMIT``; on an
    autocommit connection, as ``iceberg.sql_catalog`` makes them, the ``UPDATE``
    alone). :meth:`arm` makes the next catalog commit lose the statement that
    makes it durable — the ``COMMIT`` of a transaction that updated
    ``iceberg_tables``, or an ``UPDATE iceberg_tables`` outside a transaction:
    with ``lose-response`` the proxy forwards it, waits for PostgreSQL's
    ``CommandComplete`` (the commit is durable) and then closes both connections
    without forwarding it; with ``lose-request`` it closes them before the
    statement reaches the server (nothing applied). Everything else is forwarded
    byte for byte.

    Attributes:
        port: The port clients connect to.
        lost: ``(mode, applied)`` for every commit lost so far.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.lost: list[tuple[str, bool]] = []
        self._armed: list[str] = []
        self._lock = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._accept, name="pg-commit-loss-proxy", daemon=True)

    def __enter__(self) -> PgCommitLossProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        self._listener.close()

    def arm(self, mode: str = LOSE_RESPONSE) -> None:
        """Lose the next catalog commit (``lose-response`` or ``lose-request``)."""
        if mode not in (LOSE_RESPONSE, LOSE_REQUEST):
            raise ValueError(mode)
        with self._lock:
            self._armed.append(mode)

    def _take(self) -> str | None:
        with self._lock:
            return self._armed.pop(0) if self._armed else None

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        with _closing(client), _closing(server):
            self._pump(client, server)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        pending = b""
        started = False  # past the untyped start-up messages
        in_update = in_transaction = False
        while True:
            readable, _, _ = select.select([client, server], [], [], 1.0)
            if self._closing:
                return
            if server in readable:
                data = server.recv(65536)
                if not data:
                    return
                client.sendall(data)
            if client not in readable:
                continue
            data = client.recv(65536)
            if not data:
                return
            pending += data
            while True:
                typed = started
                message, pending, started = _next_message(pending, started)
                if message is None:
                    break
                kind, body = (message[:1], message[5:]) if typed else (b"", b"")
                if kind == b"Q":
                    text = body.rstrip(b"\x00").strip().upper()
                    mode, tag = None, b""
                    if text.startswith(b"UPDATE ICEBERG_TABLES"):
                        in_update = in_transaction
                        if not in_transaction:  # an autocommit connection: the UPDATE is the commit
                            mode, tag = self._take(), b"UPDATE 1"
                    elif text in (b"COMMIT", b"ROLLBACK", b"BEGIN"):
                        if text == b"COMMIT" and in_update:
                            mode, tag = self._take(), b"COMMIT"
                        in_update, in_transaction = False, text == b"BEGIN"
                    if mode == LOSE_REQUEST:
                        self.lost.append((mode, False))
                        return
                    if mode == LOSE_RESPONSE:
                        server.sendall(message)
                        applied = _await_command_complete(server, tag)
                        self.lost.append((mode, applied))
                        return
                server.sendall(message)


def _next_message(buf: bytes, started: bool) -> tuple[bytes | None, bytes, bool]:
    """Split one client message off ``buf``: (message, rest, started)."""
    if not started:
        if len(buf) < 8:
            return None, buf, started
        length, code = struct.unpack("!ii", buf[:8])
        if len(buf) < length:
            return None, buf, started
        # SSL/GSS negotiation and cancel requests precede the real start-up message.
        return buf[:length], buf[length:], code not in (_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST)
    if len(buf) < 5:
        return None, buf, started
    length = struct.unpack("!i", buf[1:5])[0]
    if len(buf) < 1 + length:
        return None, buf, started
    return buf[: 1 + length], buf[1 + length :], started


def _await_command_complete(server: socket.socket, tag: bytes, timeout_s: float = 10.0) -> bool:
    """Read the server's replies until ``CommandComplete(tag)``; True if it arrived (the commit is durable)."""
    deadline = time.monotonic() + timeout_s
    seen = b""
    server.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            data = server.recv(65536)
        except TimeoutError:
            continue
        if not data:
            break
        seen += data
        if b"C" + struct.pack("!i", 4 + len(tag) + 1) + tag + b"\x00" in seen:
            return True
    return False


@contextmanager
def _closing(sock: socket.socket) -> Iterator[socket.socket]:
    try:
        yield sock
    finally:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
