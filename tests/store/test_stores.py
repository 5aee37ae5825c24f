"""Control-object stores and put-if-absent (PROTOCOL.md §2, §2.1; invariant I7).

One contract runs against every store: ``LocalStore`` (a tmp directory),
``MemoryStore``, ``S3Store`` (s3fs) and ``S3HttpStore`` (plain signed HTTP),
both against moto's S3 server on loopback.
moto checks ``If-None-Match`` and then writes as two steps with no lock in
between, so only *sequential* conditional-PUT semantics are tested against it
here; races run on the local and memory stores. S3 error responses moto cannot
produce (409 ConditionalRequestConflict, 5xx, dropped connections, timeouts)
are injected at the botocore client under s3fs, so s3fs's own retry and
error translation run as they do against real S3.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.protocol.layout import control_root, wal_key
from pyspark_fenced_sink.store.base import CountingStore, ObjectStore, create_resolved
from pyspark_fenced_sink.store.local import LocalStore
from pyspark_fenced_sink.store.memory import MemoryStore
from pyspark_fenced_sink.store.registry import SCHEMES, Scheme, open_filesystem, open_store
from pyspark_fenced_sink.store.s3 import S3Store
from pyspark_fenced_sink.store.s3_http import S3HttpStore, http_store

BUCKET = "fencedlake-test"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

TABLE_UUID = "0b8e6f0e-5d5a-4f57-9f5c-3e0a7d1c2b44"


def _no_sleep(_: float) -> None:
    return None


def _token_of(raw: bytes) -> str:
    """Objects in these tests are ``b"<token>|<payload>"``."""
    return raw.split(b"|", 1)[0].decode()


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, a random free port, one bucket (sequential use only)."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **CREDENTIALS).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def s3fs_client(s3_endpoint: str) -> Any:
    """One s3fs filesystem on the moto server; s3fs's own retries off (tests turn them on when needed)."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=CREDENTIALS["aws_access_key_id"],
        secret=CREDENTIALS["aws_secret_access_key"],
        client_kwargs={"endpoint_url": s3_endpoint, "region_name": "us-east-1"},
        config_kwargs={"s3": {"addressing_style": "path"}},
        skip_instance_cache=True,
    )
    fs.retries = 1
    fs.ls(BUCKET)  # opens the session: fs.s3 exists from here on
    return fs


@pytest.fixture
def s3_store(s3fs_client: Any) -> S3Store:
    """An S3Store under a fresh table prefix."""
    return S3Store(control_root(f"s3://{BUCKET}/{uuid.uuid4().hex}", TABLE_UUID), s3fs_client)


@pytest.fixture
def s3_http_store(s3_endpoint: str) -> S3HttpStore:
    """An S3HttpStore under a fresh table prefix."""
    props = {
        "s3.endpoint": s3_endpoint,
        "s3.access-key-id": CREDENTIALS["aws_access_key_id"],
        "s3.secret-access-key": CREDENTIALS["aws_secret_access_key"],
        "s3.region": "us-east-1",
    }
    store = http_store(control_root(f"s3://{BUCKET}/{uuid.uuid4().hex}", TABLE_UUID), props)
    assert isinstance(store, S3HttpStore)
    return store


@pytest.fixture(params=["local", "memory", "s3", "s3-http"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Every store implementation, fresh and empty."""
    if request.param == "local":
        return LocalStore(control_root(str(tmp_path / "table"), TABLE_UUID))
    if request.param == "memory":
        return MemoryStore()
    s3: ObjectStore = request.getfixturevalue("s3_http_store" if request.param == "s3-http" else "s3_store")
    return s3


@pytest.fixture(params=["local", "memory"])
def atomic_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """Stores whose put-if-absent is atomic under concurrency in this test environment."""
    if request.param == "local":
        return LocalStore(str(tmp_path / "ctl"))
    return MemoryStore()


def _inject(
    monkeypatch: pytest.MonkeyPatch, fs: Any, operation: str, behave: Callable[..., Any]
) -> list[dict[str, Any]]:
    """Replace one botocore S3 operation under s3fs; returns the list of calls' kwargs.

    ``behave(real, calls, **kwargs)`` is awaited for each call; ``real`` is the original operation.
    The replacement keeps the operation's name: s3fs looks the operation up by ``__name__``.
    """
    real = getattr(fs.s3, operation)
    calls: list[dict[str, Any]] = []

    @functools.wraps(real)
    async def fake(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return await behave(real, len(calls), **kwargs)

    monkeypatch.setattr(fs.s3, operation, fake)
    return calls


def _client_error(status: int, code: str, operation: str = "PutObject") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": f"injected {code}"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        operation,
    )


# ---------------------------------------------------------------------------------------------- the contract


def test_put_if_absent_creates_once_then_reports_exists(store: ObjectStore) -> None:
    """The first put creates the object; a second put to the key answers False and changes nothing."""
    assert store.put_if_absent("wal/a.json", b"first") is True
    assert store.put_if_absent("wal/a.json", b"second") is False
    assert store.get("wal/a.json") == b"first"


def test_get_of_a_missing_key_is_none(store: ObjectStore) -> None:
    """A missing key reads as None, not an error."""
    assert store.get("wal/missing.json") is None


def test_binary_and_empty_objects_round_trip(store: ObjectStore) -> None:
    """Bytes come back exactly, including NULs and the empty object."""
    payload = bytes(range(256)) * 3
    assert store.put_if_absent("runs/w/bin.json", payload)
    assert store.put_if_absent("runs/w/empty.json", b"")
    assert store.get("runs/w/bin.json") == payload
    assert store.get("runs/w/empty.json") == b""


def test_list_is_sorted_within_prefix_and_after_start(store: ObjectStore) -> None:
    """LIST returns the prefix's keys sorted, strictly after ``start_after``; other prefixes are excluded."""
    for seq in (3, 0, 12, 2, 1):
        assert store.put_if_absent(wal_key(seq), b"x")
    assert store.put_if_absent("runs/w/r.json", b"x")
    all_wal = [wal_key(s) for s in (0, 1, 2, 3, 12)]
    assert store.list("wal/") == all_wal
    assert store.list("wal/", wal_key(1)) == [wal_key(2), wal_key(3), wal_key(12)]
    assert store.list("wal/", wal_key(1)[: -len(".json")]) == [wal_key(1), wal_key(2), wal_key(3), wal_key(12)]
    assert store.list("wal/", wal_key(12)) == []
    assert store.list("nothing/") == []


def test_delete_removes_and_a_missing_key_is_no_error(store: ObjectStore) -> None:
    """DELETE removes the object (GET None, gone from LIST); deleting again is a no-op; the key can be created again."""
    store.put_if_absent(wal_key(0), b"old")
    store.put_if_absent(wal_key(1), b"keep")
    store.delete(wal_key(0))
    store.delete(wal_key(0))
    store.delete("wal/never-existed.json")
    assert store.get(wal_key(0)) is None
    assert store.list("wal/") == [wal_key(1)]
    assert store.put_if_absent(wal_key(0), b"new") is True
    assert store.get(wal_key(0)) == b"new"


def test_counting_store_counts_each_request_kind(store: ObjectStore) -> None:
    """CountingStore forwards every call unchanged and counts it under its kind."""
    counting = CountingStore(store)
    assert isinstance(counting, ObjectStore)
    assert counting.put_if_absent("wal/a.json", b"1") is True
    assert counting.put_if_absent("wal/a.json", b"2") is False
    assert counting.get("wal/a.json") == b"1"
    assert counting.get("wal/b.json") is None
    assert counting.list("wal/") == ["wal/a.json"]
    counting.delete("wal/a.json")
    assert counting.counts == Counter({"PUT_IF_ABSENT": 2, "GET": 2, "LIST": 1, "DELETE": 1})
    assert store.get("wal/a.json") is None


@pytest.mark.parametrize("key", ["../x.json", "/etc/passwd", "wal/../../x.json", "..", "wal/.."])
@pytest.mark.parametrize("kind", ["local", "s3_store", "s3_http_store"])
def test_keys_cannot_escape_the_control_root(
    kind: str, key: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A key that is absolute or has a ``..`` segment is refused by every request, before any I/O."""
    store: ObjectStore = (
        LocalStore(str(tmp_path / "t" / "_fencedlake")) if kind == "local" else request.getfixturevalue(kind)
    )
    with pytest.raises(ValueError, match="escapes the control prefix"):
        store.put_if_absent(key, b"x")
    with pytest.raises(ValueError, match="escapes the control prefix"):
        store.get(key)
    with pytest.raises(ValueError, match="escapes the control prefix"):
        store.delete(key)
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_local_list_of_a_prefix_that_escapes_is_refused(tmp_path: Path) -> None:
    """LocalStore refuses to list a directory outside its root."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "x.json").write_text("x")
    store = LocalStore(str(tmp_path / "root"))
    with pytest.raises(ValueError, match="escapes the control prefix"):
        store.list("../secret/")


def test_racing_puts_to_one_key_have_exactly_one_winner(atomic_store: ObjectStore) -> None:
    """Eight threads put the same key at once: one True, seven False, and the object is the winner's."""
    barrier = threading.Barrier(8)
    results: dict[int, bool] = {}

    def put(i: int) -> None:
        barrier.wait()
        results[i] = atomic_store.put_if_absent("wal/race.json", f"writer-{i}".encode())

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, created in results.items() if created]
    assert len(results) == 8
    assert len(winners) == 1
    assert atomic_store.get("wal/race.json") == f"writer-{winners[0]}".encode()


# ---------------------------------------------------------------------------------------------- owner tokens


class _LostAfterFirstPut:
    """Wraps a store: the first put lands, then its response is lost (an ambiguous error)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.puts = 0

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        return self.inner.list(prefix, start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.puts += 1
        created = self.inner.put_if_absent(key, data)
        if self.puts == 1:
            raise StoreError(f"PUT {key}: connection reset", ambiguous=True)
        return created

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def test_create_resolved_first_put_is_ours(store: ObjectStore) -> None:
    """An uncontended create is ours after one put."""
    assert create_resolved(store, "runs/w/r.json", b"tok-a|x", "tok-a", _token_of, sleep=_no_sleep) is True
    assert store.get("runs/w/r.json") == b"tok-a|x"


def test_create_resolved_peer_object_is_taken(store: ObjectStore) -> None:
    """A key a peer created is reported taken (False) and keeps the peer's object."""
    store.put_if_absent("runs/w/r.json", b"tok-peer|theirs")
    assert create_resolved(store, "runs/w/r.json", b"tok-me|mine", "tok-me", _token_of, sleep=_no_sleep) is False
    assert store.get("runs/w/r.json") == b"tok-peer|theirs"


def test_create_resolved_retry_that_finds_its_own_landed_put_is_ours(store: ObjectStore) -> None:
    """The first put landed but its response was lost; the retry's "exists" is resolved by token to ours."""
    lossy = _LostAfterFirstPut(store)
    assert create_resolved(lossy, "wal/x.json", b"tok-me|mine", "tok-me", _token_of, sleep=_no_sleep) is True
    assert lossy.puts == 2
    assert store.get("wal/x.json") == b"tok-me|mine"
    assert store.list("wal/") == ["wal/x.json"]


def test_create_resolved_gives_up_ambiguous_after_its_attempts() -> None:
    """Every attempt's response lost before applying: StoreError(ambiguous) after exactly ``attempts`` puts."""
    store = MemoryStore()
    puts: list[str] = []

    def lost_before(key: str) -> str:
        puts.append(key)
        return "lost-before"

    store.before_put = lost_before
    sleeps: list[float] = []
    with pytest.raises(StoreError, match="not confirmed after 3 attempts") as err:
        create_resolved(store, "wal/x.json", b"t|x", "t", _token_of, attempts=3, sleep=sleeps.append)
    assert err.value.ambiguous is True
    assert puts == ["wal/x.json"] * 3
    assert sleeps == [0.05, 0.1, 0.2]
    assert store.objects == {}


def test_create_resolved_definite_failures_are_not_ambiguous() -> None:
    """Puts that definitely failed (not ambiguous) end in a StoreError with ambiguous False."""

    class Refusing(MemoryStore):
        def put_if_absent(self, key: str, data: bytes) -> bool:
            raise StoreError("403 AccessDenied", ambiguous=False)

    with pytest.raises(StoreError) as err:
        create_resolved(Refusing(), "wal/x.json", b"t|x", "t", _token_of, attempts=2, sleep=_no_sleep)
    assert err.value.ambiguous is False


def test_create_resolved_retries_when_the_existing_object_vanished(store: ObjectStore) -> None:
    """ "Exists" but gone when read back (deleted in between): the key is tried again and created."""

    class VanishingPeer:
        def __init__(self) -> None:
            self.puts = 0

        def get(self, key: str) -> bytes | None:
            return store.get(key)

        def list(self, prefix: str, start_after: str = "") -> list[str]:
            return store.list(prefix, start_after)

        def put_if_absent(self, key: str, data: bytes) -> bool:
            self.puts += 1
            return False if self.puts == 1 else store.put_if_absent(key, data)

        def delete(self, key: str) -> None:
            store.delete(key)

    wrapped = VanishingPeer()
    assert create_resolved(wrapped, "wal/x.json", b"t|x", "t", _token_of, sleep=_no_sleep) is True
    assert wrapped.puts == 2


# ---------------------------------------------------------------------------------------------- MemoryStore hooks


def test_memory_lost_before_raises_ambiguous_and_applies_nothing() -> None:
    """``lost-before``: the request never reached the store, but the caller cannot know."""
    store = MemoryStore()
    store.before_put = lambda key: "lost-before"
    with pytest.raises(StoreError, match="not applied") as err:
        store.put_if_absent("wal/a.json", b"x")
    assert err.value.ambiguous is True
    assert store.objects == {}


def test_memory_lost_after_applies_then_raises_ambiguous() -> None:
    """``lost-after``: the object is created, then the response is lost; on an existing key nothing changes."""
    store = MemoryStore()
    store.before_put = lambda key: "lost-after"
    with pytest.raises(StoreError, match=r"applied=True") as err:
        store.put_if_absent("wal/a.json", b"x")
    assert err.value.ambiguous is True
    assert store.objects == {"wal/a.json": b"x"}
    with pytest.raises(StoreError, match=r"applied=False"):
        store.put_if_absent("wal/a.json", b"y")
    assert store.objects == {"wal/a.json": b"x"}


def test_memory_before_op_sees_every_request_in_order() -> None:
    """``before_op(kind, key)`` is called before each request with its kind and key (or prefix)."""
    store = MemoryStore()
    seen: list[tuple[str, str]] = []
    store.before_op = lambda kind, key: seen.append((kind, key))
    store.put_if_absent("wal/a.json", b"x")
    store.get("wal/a.json")
    store.list("wal/", "")
    store.delete("wal/a.json")
    assert seen == [("put", "wal/a.json"), ("get", "wal/a.json"), ("list", "wal/"), ("delete", "wal/a.json")]


# ---------------------------------------------------------------------------------------------- LocalStore


def test_local_readers_never_see_a_partial_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The object appears by link() of a complete, hidden temporary file: before it, GET and LIST see nothing."""
    store = LocalStore(str(tmp_path / "ctl"))
    data = b"0123456789" * 1000
    observed: list[tuple[bytes | None, list[str], bytes]] = []
    real_link = os.link

    def link(src: Any, dst: Any) -> None:
        observed.append((store.get("wal/a.json"), store.list("wal/"), Path(src).read_bytes()))
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    assert store.put_if_absent("wal/a.json", data) is True
    assert observed == [(None, [], data)]
    assert store.get("wal/a.json") == data
    assert sorted(p.name for p in (tmp_path / "ctl" / "wal").iterdir()) == ["a.json"]


def test_local_losing_put_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A put that finds the key taken removes its temporary file; hidden files never show in LIST."""
    store = LocalStore(str(tmp_path / "ctl"))
    store.put_if_absent("wal/a.json", b"1")
    assert store.put_if_absent("wal/a.json", b"2") is False
    (tmp_path / "ctl" / "wal" / ".b.json.stray.tmp").write_bytes(b"partial")
    assert sorted(p.name for p in (tmp_path / "ctl" / "wal").iterdir()) == [".b.json.stray.tmp", "a.json"]
    assert store.list("wal/") == ["wal/a.json"]


def test_local_store_accepts_a_file_uri_root(tmp_path: Path) -> None:
    """``file://`` roots are local paths."""
    store = LocalStore(f"file://{tmp_path}/ctl")
    assert store.root == tmp_path / "ctl"
    assert store.put_if_absent("wal/a.json", b"x")
    assert (tmp_path / "ctl" / "wal" / "a.json").read_bytes() == b"x"


def test_local_os_errors_become_store_errors(tmp_path: Path) -> None:
    """A root blocked by a regular file: put and get fail with StoreError (not ambiguous), not a bare OSError."""
    (tmp_path / "blocked").write_text("not a directory")
    store = LocalStore(str(tmp_path / "blocked" / "ctl"))
    with pytest.raises(StoreError) as err:
        store.put_if_absent("wal/a.json", b"x")
    assert err.value.ambiguous is False
    with pytest.raises(StoreError):
        store.get("wal/a.json")


def test_open_store_picks_the_store_by_scheme(tmp_path: Path, s3_endpoint: str) -> None:
    """Paths and file:// get a LocalStore, s3:// with keys an S3HttpStore, rooted where asked; unknown fail clearly."""
    local = open_store(control_root(str(tmp_path / "t"), TABLE_UUID), {})
    assert isinstance(local, LocalStore)
    assert local.root == tmp_path / "t" / "_fencedlake" / TABLE_UUID
    local_uri = open_store(control_root(f"file://{tmp_path}/t/", TABLE_UUID), {})
    assert isinstance(local_uri, LocalStore)
    assert local_uri.root == tmp_path / "t" / "_fencedlake" / TABLE_UUID
    props = {
        "s3.endpoint": s3_endpoint,
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.region": "us-east-1",
    }
    s3 = open_store(control_root(f"s3://{BUCKET}/opened-{uuid.uuid4().hex}", TABLE_UUID), props)
    assert isinstance(s3, S3HttpStore)
    assert s3.root.endswith(f"/_fencedlake/{TABLE_UUID}")
    assert s3.put_if_absent("wal/a.json", b"x") is True
    assert s3.get("wal/a.json") == b"x"
    with pytest.raises(StoreError, match="no object store for scheme 'nosuch'"):
        open_store("nosuch://bucket/t", {})


def test_the_wal_and_gc_listing_resolve_a_scheme_through_one_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheme added to SCHEMES serves the control store and gc's listing; one missing serves neither."""
    from fsspec.implementations.local import LocalFileSystem

    with pytest.raises(StoreError, match="scheme 'mem9'"):
        open_filesystem("mem9://bucket/t", {})
    seen: list[str] = []

    def store(root: str, props: Any) -> Any:
        seen.append(root)
        return MemoryStore()

    monkeypatch.setitem(SCHEMES, "mem9", Scheme(store=store, filesystem=lambda location, props: LocalFileSystem()))
    assert isinstance(open_store("mem9://bucket/t/_fencedlake", {}), MemoryStore)
    fs, path = open_filesystem("mem9://bucket/t", {})
    assert isinstance(fs, LocalFileSystem)
    assert path == "bucket/t"
    assert seen == ["mem9://bucket/t/_fencedlake"]


# ---------------------------------------------------------------------------------------------- S3Store errors


def test_s3_409_conditional_request_conflict_is_retried_on_the_same_key(
    s3_store: S3Store, s3fs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two 409 ConditionalRequestConflict answers, then the put goes through: created, on the same key."""

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        if n <= 2:
            raise _client_error(409, "ConditionalRequestConflict")
        return await real(**kwargs)

    calls = _inject(monkeypatch, s3fs_client, "put_object", behave)
    assert s3_store.put_if_absent("wal/a.json", b"x") is True
    assert [c["Key"] for c in calls] == [calls[0]["Key"]] * 3
    assert all(c["IfNoneMatch"] == "*" for c in calls)
    assert s3_store.get("wal/a.json") == b"x"


def test_s3_persistent_409_conflict_fails_not_ambiguous(
    s3_store: S3Store, s3fs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conflict that never clears ends after ``conflict_retries`` puts with a definite (non-ambiguous) StoreError."""

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        raise _client_error(409, "ConditionalRequestConflict")

    calls = _inject(monkeypatch, s3fs_client, "put_object", behave)
    s3_store.conflict_retries = 3
    with pytest.raises(StoreError, match="ConditionalRequestConflict") as err:
        s3_store.put_if_absent("wal/a.json", b"x")
    assert err.value.ambiguous is False
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("error", "ambiguous"),
    [
        pytest.param(lambda: _client_error(500, "InternalError"), True, id="500-internal-error"),
        pytest.param(lambda: _client_error(503, "ServiceUnavailable"), True, id="503-unavailable"),
        pytest.param(lambda: ReadTimeoutError(endpoint_url="http://s3"), True, id="read-timeout"),
        pytest.param(lambda: ConnectionClosedError(endpoint_url="http://s3"), True, id="connection-closed"),
        pytest.param(lambda: _client_error(403, "AccessDenied"), False, id="403-access-denied"),
        pytest.param(lambda: _client_error(400, "InvalidRequest"), False, id="400-invalid-request"),
        pytest.param(lambda: _client_error(404, "NoSuchBucket"), False, id="404-no-such-bucket"),
    ],
)
def test_s3_put_error_mapping(
    error: Callable[[], Exception],
    ambiguous: bool,
    s3_store: S3Store,
    s3fs_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Timeouts, dropped connections and 5xx may have applied (ambiguous); other 4xx definitely did not."""

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        raise error()

    calls = _inject(monkeypatch, s3fs_client, "put_object", behave)
    with pytest.raises(StoreError, match="PUT s3://") as err:
        s3_store.put_if_absent("wal/a.json", b"x")
    assert err.value.ambiguous is ambiguous
    assert len(calls) == 1
    assert s3_store.get("wal/a.json") is None


def test_s3_lost_response_retried_by_us_resolves_to_ours(
    s3_store: S3Store, s3fs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PUT lands, the connection drops: ambiguous; the retry gets 412 on itself and the token says ours."""

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        result = await real(**kwargs)
        if n == 1:
            raise ConnectionClosedError(endpoint_url="http://s3")
        return result

    calls = _inject(monkeypatch, s3fs_client, "put_object", behave)
    assert create_resolved(s3_store, "wal/a.json", b"tok-me|x", "tok-me", _token_of, sleep=_no_sleep) is True
    assert len(calls) == 2
    assert s3_store.get("wal/a.json") == b"tok-me|x"


def test_s3_lost_response_retried_by_s3fs_hits_412_on_itself(
    s3_store: S3Store, s3fs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs's own retry of a landed PUT answers "exists" (412 on itself); the owner token resolves it to ours."""
    monkeypatch.setattr(s3fs_client, "retries", 2)
    timed_out: set[str] = set()

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        result = await real(**kwargs)
        if kwargs["Key"] not in timed_out:  # the first PUT of each key lands, then its response times out
            timed_out.add(kwargs["Key"])
            raise ReadTimeoutError(endpoint_url="http://s3")
        return result

    calls = _inject(monkeypatch, s3fs_client, "put_object", behave)
    assert s3_store.put_if_absent("wal/a.json", b"tok-me|x") is False  # the store alone cannot tell
    assert len(calls) == 2
    assert _token_of(s3_store.get("wal/a.json") or b"") == "tok-me"
    assert create_resolved(s3_store, "wal/b.json", b"tok-me|y", "tok-me", _token_of, sleep=_no_sleep) is True
    assert len(calls) == 4


@pytest.mark.parametrize(
    ("operation", "call"),
    [
        ("list_objects_v2", lambda s: s.list("wal/")),
        ("delete_object", lambda s: s.delete("wal/a.json")),
        ("get_object", lambda s: s.get("wal/a.json")),
    ],
)
@pytest.mark.parametrize(
    "error",
    [lambda op: _client_error(500, "InternalError", op), lambda op: ConnectionClosedError(endpoint_url="http://s3")],
    ids=["500", "connection-closed"],
)
def test_s3_read_and_delete_failures_are_store_errors(
    operation: str,
    call: Callable[[S3Store], Any],
    error: Callable[[str], Exception],
    s3_store: S3Store,
    s3fs_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GET, LIST and DELETE failures surface as StoreError (retryable), never as a raw s3fs/botocore error."""
    s3_store.put_if_absent("wal/a.json", b"x")

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        raise error(operation)

    _inject(monkeypatch, s3fs_client, operation, behave)
    with pytest.raises(StoreError) as err:
        call(s3_store)
    assert err.value.retryable is True


def test_s3_list_follows_continuation_pages(
    s3_store: S3Store, s3fs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing longer than one page is read to the end, in order, honouring start-after."""
    for seq in range(7):
        s3_store.put_if_absent(wal_key(seq), b"x")

    async def behave(real: Any, n: int, **kwargs: Any) -> Any:
        return await real(**{**kwargs, "MaxKeys": 2})

    calls = _inject(monkeypatch, s3fs_client, "list_objects_v2", behave)
    assert s3_store.list("wal/") == [wal_key(s) for s in range(7)]
    assert len(calls) == 4
    assert s3_store.list("wal/", wal_key(2)) == [wal_key(s) for s in range(3, 7)]
    assert calls[-1]["StartAfter"].endswith(wal_key(2))
