"""Every control-store request to S3 has a bound, through s3fs and plain HTTP alike (store/s3*.py; PROTOCOL.md §2.1).

``silent_port`` is a real server that accepts connections and never answers. s3fs's
defaults let a PUT to it hang for ever: botocore asks for ``100 Continue`` and
aiobotocore waits for it with no timeout (measured through toxiproxy: a WAL put to a
blackholed S3 endpoint was still hanging after 15 minutes).
"""

from __future__ import annotations

import time
import uuid

import pytest

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.base import ObjectStore
from pyspark_fenced_sink.store.s3 import S3Store, request_bound_s, s3_filesystem
from pyspark_fenced_sink.store.s3_http import http_store


@pytest.mark.parametrize("client", ["s3fs", "http"])
def test_put_to_a_server_that_never_answers_fails_ambiguous_within_its_bound(silent_port: int, client: str) -> None:
    """A WAL put to an S3 endpoint that never answers raises an ambiguous StoreError within attempts x timeouts."""
    props = {
        "s3.endpoint": f"http://127.0.0.1:{silent_port}",
        "s3.access-key-id": "k",
        "s3.secret-access-key": "s",
        "s3.region": "us-east-1",
        "s3.connect-timeout": "0.5",
        "s3.request-timeout": "0.5",
    }
    root = f"bucket/{uuid.uuid4().hex}"
    store: ObjectStore | None = S3Store(root, s3_filesystem(props)) if client == "s3fs" else http_store(root, props)
    assert store is not None
    bound = request_bound_s(props)
    assert bound == 11.0  # 3 attempts x (0.5 + 0.5) s + backoff and overhead
    t0 = time.monotonic()
    with pytest.raises(StoreError) as raised:
        store.put_if_absent("wal/00000000000000000001", b"{}")
    elapsed = time.monotonic() - t0
    assert raised.value.ambiguous  # it may have landed: resolved by the owner token (I7)
    assert elapsed < bound, elapsed
