"""Table reads shared by the threads of one process (iceberg/commit/shared_loads.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

from pyspark_fenced_sink.iceberg.commit import shared_loads


class _Loaded:
    """What the fake catalog's read returns: the read's number, and a field a commit would move."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.metadata_location = f"v{number}"


class _GatedCatalog:
    """A catalog whose n-th read blocks until the test opens gate n; read n fails if n is in ``failing``."""

    def __init__(self, failing: tuple[int, ...] = ()) -> None:
        self.reads = 0
        self.failing = failing
        self.gates: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def gate(self, n: int) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(n, threading.Event())

    def load_table(self, identifier: str) -> _Loaded:
        with self.lock:
            self.reads += 1
            n = self.reads
        assert self.gate(n).wait(10), f"read {n} was never released"
        if n in self.failing:
            raise ConnectionError(f"read {n} failed")
        return _Loaded(n)


def _call(catalog: Any, out: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = shared_loads.load_table(catalog, "db.t")
        except ConnectionError as e:
            out[name] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until(check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_callers_during_a_read_share_the_next_read_not_the_one_in_flight() -> None:
    """A read in flight when a caller asks may predate what it knows: it gets the next read, shared."""
    catalog = _GatedCatalog()
    out: dict[str, Any] = {}
    first = _call(catalog, out, "a")
    _until(lambda: catalog.reads == 1)
    later = [_call(catalog, out, name) for name in ("b", "c", "d")]
    time.sleep(0.3)  # b, c and d now wait behind read 1
    catalog.gate(1).set()
    first.join(10)
    assert out["a"].number == 1
    _until(lambda: catalog.reads == 2)
    catalog.gate(2).set()
    for thread in later:
        thread.join(10)
    assert [out[n].number for n in ("b", "c", "d")] == [2, 2, 2]
    assert catalog.reads == 2, "one read served the three callers that asked during read 1"
    assert len({id(out[n]) for n in ("a", "b", "c", "d")}) == 4, "every caller has its own table object"


def test_a_caller_after_a_read_ended_reads_again() -> None:
    """Nothing is cached: a call after the last read ended starts a read of its own."""
    catalog = _GatedCatalog()
    catalog.gate(1).set()
    catalog.gate(2).set()
    assert shared_loads.load_table(catalog, "db.t").number == 1
    assert shared_loads.load_table(catalog, "db.t").number == 2
    assert catalog.reads == 2


def test_a_commit_through_one_callers_table_leaves_the_others_at_their_version() -> None:
    """pyiceberg's commit moves the Table object it went through; the other callers' objects stay put."""
    catalog = _GatedCatalog()
    out: dict[str, Any] = {}
    first = _call(catalog, out, "a")
    _until(lambda: catalog.reads == 1)
    names = ("b", "c", "d")
    later = [_call(catalog, out, name) for name in names]
    time.sleep(0.3)
    catalog.gate(1).set()
    first.join(10)
    _until(lambda: catalog.reads == 2)
    catalog.gate(2).set()
    for thread in later:
        thread.join(10)
    for name in names:  # each caller commits through its table, which moves it
        out[name].metadata_location = f"moved by {name}"
    assert [out[n].metadata_location for n in names] == [f"moved by {n}" for n in names]
    catalog.gate(3).set()
    assert shared_loads.load_table(catalog, "db.t").metadata_location == "v3", "a later caller reads afresh"


def test_a_failed_shared_read_is_not_shared_each_waiter_reads_on_its_own() -> None:
    """The caller whose read failed sees its error; the others that waited on it read again themselves."""
    catalog = _GatedCatalog(failing=(2,))
    out: dict[str, Any] = {}
    first = _call(catalog, out, "a")
    _until(lambda: catalog.reads == 1)
    later = [_call(catalog, out, name) for name in ("b", "c")]
    time.sleep(0.3)
    catalog.gate(1).set()
    first.join(10)
    _until(lambda: catalog.reads == 2)
    for n in (2, 3, 4):
        catalog.gate(n).set()
    for thread in later:
        thread.join(10)
    results = sorted((out["b"], out["c"]), key=lambda r: isinstance(r, Exception))
    assert isinstance(results[1], ConnectionError) and "read 2 failed" in str(results[1])
    assert results[0].number == 3, "the other waiter read on its own"
    assert catalog.reads == 3


def test_many_threads_on_a_real_catalog_each_get_a_current_version_with_fewer_reads(tmp_path: Any) -> None:
    """Threads re-reading a real SQLite catalog in a loop see every commit, with fewer reads than calls."""
    import pyarrow as pa

    from pyspark_fenced_sink.iceberg.sql_catalog import LeanSqlCatalog

    catalog = LeanSqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    reads = 0
    real = catalog.load_table
    lock = threading.Lock()

    def counted(identifier: str) -> Any:
        nonlocal reads
        with lock:
            reads += 1
        return real(identifier)

    catalog.load_table = counted  # type: ignore[method-assign]
    stale: list[str] = []
    calls = 0
    stop = threading.Event()

    def reader() -> None:
        nonlocal calls
        while not stop.is_set():
            before = real("db.t").metadata_location  # committed before this call
            got = shared_loads.load_table(catalog, "db.t")
            with lock:
                calls += 1
            if _version(got.metadata_location) < _version(before):
                stale.append(f"{got.metadata_location} older than {before}")

    workers = [threading.Thread(target=reader, daemon=True) for _ in range(8)]
    for w in workers:
        w.start()
    for n in range(5):
        table.append(pa.table({"id": [n]}))
    stop.set()
    for w in workers:
        w.join(30)
    assert not stale
    assert calls > 0 and reads < calls


def _version(location: str) -> int:
    return int(location.rsplit("/", 1)[1].split("-", 1)[0])
