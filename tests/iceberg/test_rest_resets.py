"""A REST catalog request whose connection is refused or reset is retried only when that changes nothing.

iceberg/timeouts.py (PROTOCOL.md §4): a refused connection sent nothing, so any request is tried
again; a reset before the answer is retried for ``GET``/``HEAD`` and the OAuth2 token request, never
for a request that changes the catalog (a commit's outcome is then unknown, and §4 decides). A
timeout is never retried. Each test points pyiceberg's real client at a real socket server that
resets (``SO_LINGER`` 0: the peer gets an RST), answers, or stays silent, request by request.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import requests

from pyspark_fenced_sink.errors import ServiceError
from pyspark_fenced_sink.iceberg import timeouts
from pyspark_fenced_sink.iceberg.catalogs import load_catalog
from pyspark_fenced_sink.options.catalog import catalog_config

TOKEN = ("POST", "/v1/oauth/tokens")
CONFIG = ("GET", "/v1/config")
ANSWERS = {
    TOKEN: {"access_token": "t", "token_type": "bearer", "expires_in": 3600},
    CONFIG: {"defaults": {}, "overrides": {}},
    ("GET", "/v1/namespaces"): {"namespaces": [["db"]]},
}


class ScriptedServer:
    """Reads each request, then resets the first ``resets[key]`` of its kind, stays silent, or answers."""

    def __init__(self, listener: socket.socket, resets: dict[tuple[str, str], int], silent: set[tuple[str, str]]):
        self.listener = listener
        self.resets = resets
        self.silent = silent
        self.seen: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.port = listener.getsockname()[1]

    def serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        key = (method, target.split("?", 1)[0])
        with self.lock:
            self.seen[key] += 1
            nth = self.seen[key]
        if key in self.silent:
            self.held.append(conn)
            return
        if nth <= self.resets.get(key, 0) or key not in ANSWERS:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        payload = json.dumps(ANSWERS[key]).encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        conn.close()


def _server(resets: dict[tuple[str, str], int], silent: frozenset = frozenset(), listen_after_s: float = 0.0):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = ScriptedServer(listener, resets, set(silent))

    if not listen_after_s:
        listener.listen(64)

    def run() -> None:
        # Until then a connection is refused: the port is bound, not listening.
        if listen_after_s and not server.stop.wait(listen_after_s):
            listener.listen(64)
        server.serve()

    server.thread = threading.Thread(target=run, daemon=True)
    server.thread.start()
    return server


@pytest.fixture
def start() -> Iterator:
    servers: list[ScriptedServer] = []

    def starting(*args: object, **kwargs: object) -> ScriptedServer:
        servers.append(_server(*args, **kwargs))
        return servers[-1]

    yield starting
    for server in servers:
        server.stop.set()
        server.thread.join(5)
        for conn in server.held:
            conn.close()
        server.listener.close()


def _config(server: ScriptedServer, **extra: str):
    return catalog_config(properties={"type": "rest", "uri": f"http://127.0.0.1:{server.port}", **extra})


def test_opening_retries_the_token_and_config_requests_whose_connections_were_reset(start) -> None:
    """Two resets of the token request and two of the config fetch: the catalog still opens."""
    server = start({TOKEN: 2, CONFIG: 2})
    catalog = load_catalog(_config(server, credential="client:secret"))
    assert server.seen[CONFIG] == 3, server.seen
    assert server.seen[TOKEN] >= 3, server.seen  # the first two were reset; pyiceberg asks for one per session
    assert catalog.list_namespaces() == [("db",)]


def test_a_read_reset_once_more_than_the_retries_allow_fails_as_a_retryable_service_error(start) -> None:
    """Resets past RESET_RETRIES: a retryable ServiceError after 1 + RESET_RETRIES tries, no more."""
    server = start({CONFIG: timeouts.RESET_RETRIES + 1})
    with pytest.raises(ServiceError) as raised:
        load_catalog(_config(server))
    assert raised.value.retryable, raised.value
    assert server.seen[CONFIG] == 1 + timeouts.RESET_RETRIES, server.seen


def test_a_request_that_changes_the_catalog_is_not_sent_again_after_a_reset(start) -> None:
    """Creating a namespace (a POST) whose connection resets fails once: it may have been applied."""
    server = start({})
    catalog = load_catalog(_config(server))
    with pytest.raises(requests.exceptions.ConnectionError):  # as without the sink's adapters: §4 decides
        catalog.create_namespace("db2")
    assert server.seen[("POST", "/v1/namespaces")] == 1, server.seen


def test_a_refused_connection_is_retried_until_the_server_listens(start) -> None:
    """The port refuses connections for 0.25 s (a server restarting): the retries (0, 0.2, 0.4 s) span it."""
    server = start({}, listen_after_s=0.25)
    t0 = time.monotonic()
    load_catalog(_config(server))  # without the retries: "Connection refused" at once
    assert server.seen[CONFIG] == 1, server.seen
    assert time.monotonic() - t0 < 5


def test_a_request_that_timed_out_is_not_retried(start) -> None:
    """A config fetch that gets no answer fails after one request-timeout: one request, not 1 + retries."""
    server = start({}, silent={CONFIG})
    t0 = time.monotonic()
    with pytest.raises(ServiceError):
        load_catalog(_config(server, **{"request-timeout": "0.5"}))
    assert time.monotonic() - t0 < 3
    assert server.seen[CONFIG] == 1, server.seen


def test_with_sigv4_the_token_url_stays_with_the_signing_adapter(start) -> None:
    """SigV4 signs every request on the catalog URI: no adapter of the sink's takes the token URL from it."""
    pytest.importorskip("boto3")
    server = start({})
    config = _config(
        server,
        credential="client:secret",
        **{
            "rest.sigv4-enabled": "1",  # pyiceberg reads it with strtobool: "1" turns SigV4 on
            "rest.signing-region": "us-east-1",
            "client.access-key-id": "AKIAEXAMPLE",
            "client.secret-access-key": "example-secret",
        },
    )
    catalog = load_catalog(config)
    adapter = catalog._session.get_adapter(f"http://127.0.0.1:{server.port}/v1/oauth/tokens")
    assert type(adapter).__name__ == "SigV4Adapter", adapter
    assert adapter.fencedlake_bounded  # and it got the request timeout
