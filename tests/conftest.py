"""Fixtures shared by every test module.

``wh``: a fresh warehouse path for the embedded catalog (a directory not
created yet, under the test's ``tmp_path``); modules that need a populated or
module-scoped warehouse define their own.

``spark``: ONE local[2] SparkSession for the whole test run (a cold session
costs ~7 s here; one per module cost a minute per run). Modules that change
session settings take ``spark.newSession()`` instead, which shares the
SparkContext but not the SQL conf. Streaming queries left running by a test
are stopped at the end of the run.

``silent_port``: a server on loopback that accepts connections and never answers
(a hung service, a response lost in the network), for the tests of request timeouts.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from tests.spark.support import start_spark, stop_spark

    session = start_spark("fencedlake-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    stop_spark(session)


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose server accepts every connection, reads what it is sent and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()
