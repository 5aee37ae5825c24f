"""Suite "requests": object-store requests per uncontended commit, by kind (issue 6.3).

Counts, for one commit at a time (no contention), every request fencedlake
makes and every request Iceberg makes on its behalf:

* control store (``storage.CountingStore`` around the store ``catalogs.open_store``
  returns): GET, LIST, PUT_IF_ABSENT (the conditional PUTs), DELETE;
* catalog calls (``load_table``, ``commit_table``: each a database query or a
  REST call, and a load also reads the metadata file);
* Iceberg file I/O (pyiceberg's ``PyArrowFile.open`` = GET, ``create`` = PUT,
  ``exists``/size lookups = HEAD), by kind of file.

The baseline, measured in the same run on a twin table, is a plain pyiceberg
``fast_append`` of the same kind of data files (load, append, commit): what
any Iceberg writer pays. Reported by kind: GET, LIST, PUT, conditional PUT,
DELETE, HEAD (object store) and catalog calls. Scenarios: anonymous batch
write, ``writer.id`` + ``writer.batch-id`` (open and commit), a re-run of an
applied batch id (a duplicate: its files are deleted), a steady-state
streaming micro-batch and the first batch of a new streaming run. Targets
(issue 6.3): at most 1 conditional PUT and at most 3 requests beyond
pyiceberg's own per uncontended commit. A missed target is a ``WARN`` line,
never a failure.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult
from benchmarks.data import SPARK_SCHEMA, arrow_rows
from pyspark_fenced_sink.testing import harness

__all__ = ["KINDS", "Counts", "by_kind", "counting", "pyiceberg_append", "run"]

TARGET_CONDITIONAL_PUTS = 1
TARGET_EXTRA_REQUESTS = 3


@dataclass
class Counts:
    """Requests counted while a :func:`counting` block was open."""

    control: Counter[str] = field(default_factory=Counter)
    catalog: Counter[str] = field(default_factory=Counter)
    iceberg: Counter[str] = field(default_factory=Counter)
    #: Seconds spent in control-store requests, by kind.
    control_seconds: dict[str, float] = field(default_factory=dict)
    #: Keys returned by the control store's LISTs (what a LIST transfers).
    listed: int = 0

    def flat(self) -> dict[str, int]:
        out = {f"store {k}": v for k, v in self.control.items()}
        out.update({f"catalog {k}": v for k, v in self.catalog.items()})
        out.update({f"iceberg {k}": v for k, v in self.iceberg.items()})
        return dict(sorted(out.items()))


def _file_kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".metadata.json"):
        return "metadata.json"
    if "/metadata/" in path and name.startswith("snap-"):
        return "manifest-list"
    if "/metadata/" in path and name.endswith(".avro"):
        return "manifest"
    if "/_fencedlake/" in path:
        return "control"
    if "/data/" in path:
        return "data"
    return "other"


@contextlib.contextmanager
def counting(catalog: Any) -> Iterator[Counts]:
    """Count control-store, catalog and Iceberg file requests made inside the block (this process)."""
    from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

    from pyspark_fenced_sink.iceberg import catalogs
    from pyspark_fenced_sink.store.base import CountingStore

    class TimedStore(CountingStore):
        """CountingStore that also times each request and counts the keys LISTs return."""

        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.seconds: dict[str, float] = {}
            self.listed = 0

        def _timed(self, kind: str, fn: Callable[..., Any], *args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - t0

        def get(self, key: str) -> bytes | None:
            return self._timed("GET", super().get, key)  # type: ignore[no-any-return]

        def list(self, prefix: str, start_after: str = "") -> list[str]:
            keys: list[str] = self._timed("LIST", super().list, prefix, start_after)
            self.listed += len(keys)
            return keys

        def put_if_absent(self, key: str, data: bytes) -> bool:
            return bool(self._timed("PUT_IF_ABSENT", super().put_if_absent, key, data))

        def delete(self, key: str) -> None:
            self._timed("DELETE", super().delete, key)

    counts = Counts()
    stores: list[TimedStore] = []
    real_open_store = getattr(catalogs, "open_store")  # noqa: B009 - patched for the block, restored after

    def open_store(location: str, props: Any) -> Any:
        store = TimedStore(real_open_store(location, props))
        stores.append(store)
        return store

    def wrap(owner: Any, name: str, key: Callable[..., str], counter: Counter[str]) -> Callable[[], None]:
        real = getattr(owner, name)

        @functools.wraps(real)
        def counted(*args: Any, **kwargs: Any) -> Any:
            counter[key(*args, **kwargs)] += 1
            return real(*args, **kwargs)

        setattr(owner, name, counted)
        return lambda: setattr(owner, name, real) if isinstance(owner, type) else delattr(owner, name)

    restore = [
        wrap(PyArrowFile, "open", lambda self, *a, **k: f"GET {_file_kind(self.location)}", counts.iceberg),
        wrap(PyArrowFile, "create", lambda self, *a, **k: f"PUT {_file_kind(self.location)}", counts.iceberg),
        wrap(PyArrowFile, "exists", lambda self, *a, **k: f"HEAD {_file_kind(self.location)}", counts.iceberg),
        wrap(PyArrowFile, "_file_info", lambda self, *a, **k: f"HEAD {_file_kind(self.location)}", counts.iceberg),
        wrap(PyArrowFileIO, "delete", lambda self, loc, *a, **k: f"DELETE {_file_kind(str(loc))}", counts.iceberg),
        wrap(catalog, "load_table", lambda *a, **k: "load_table", counts.catalog),
        wrap(catalog, "commit_table", lambda *a, **k: "commit_table", counts.catalog),
    ]
    setattr(catalogs, "open_store", open_store)  # noqa: B010
    try:
        yield counts
    finally:
        setattr(catalogs, "open_store", real_open_store)  # noqa: B010
        for undo in reversed(restore):
            undo()
        for store in stores:
            counts.control.update(store.counts)
            for kind, secs in store.seconds.items():
                counts.control_seconds[kind] = counts.control_seconds.get(kind, 0.0) + secs
            counts.listed += store.listed


def pyiceberg_append(catalog: Any, table: str, messages: list[Any]) -> None:
    """The baseline commit: load the table, fast-append the data files, commit (pyiceberg's own path)."""
    from pyspark_fenced_sink.iceberg.codec.datafiles import decode_data_file

    t = catalog.load_table(table)
    ptype = t.metadata.spec().partition_type(t.metadata.schema())
    tx = t.transaction()
    with tx.update_snapshot().fast_append() as append:
        for m in messages:
            for f in m.files:
                append.append_data_file(decode_data_file(f, ptype, t.metadata.format_version))
    tx.commit_transaction()


def _added_records(catalog: Any, table: str) -> int:
    snapshot = catalog.load_table(table).current_snapshot()
    return int(snapshot.summary.additional_properties.get("added-records", 0)) if snapshot else 0


def _total_records(catalog: Any, table: str) -> int:
    snapshot = catalog.load_table(table).current_snapshot()
    return int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot else 0


@dataclass
class _Scenario:
    name: str
    phase: str
    target: bool  # the per-commit targets apply
    samples: list[Counts] = field(default_factory=list)


def run(*, reps: int, workdir: str | None = None, log: Callable[[str], None] = print) -> SuiteResult:
    """Measure the request counts of each scenario ``reps`` times (sequential commits, no contention)."""
    from pyspark_fenced_sink.iceberg.catalogs import load_catalog

    result = SuiteResult("requests", "Object-store requests per uncontended commit (issue 6.3)")
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-req-", dir=workdir) as wh:
        rows_per_write = 1000
        next_id = [0]

        def data() -> Any:
            start = next_id[0]
            next_id[0] += rows_per_write
            return arrow_rows(start, rows_per_write, total=10**9)

        # Create both tables and warm every code path once (imports, caches) before counting.
        harness.sink_write(wh, "bench.req", data(), schema=SPARK_SCHEMA, tasks=1)
        harness.sink_write(wh, "bench.base", data(), schema=SPARK_SCHEMA, tasks=1)
        catalog = load_catalog(harness.catalog_of(wh))  # the per-process instance the sink uses
        scenarios = {
            "baseline": _Scenario("pyiceberg fast_append (baseline)", "commit", False),
            "anon": _Scenario("fencedlake batch write, anonymous", "commit", True),
            "stable-open": _Scenario("fencedlake batch write, writer.id + batch-id", "open (plan)", False),
            "stable": _Scenario("fencedlake batch write, writer.id + batch-id", "commit", True),
            "rerun": _Scenario("fencedlake re-run of an applied writer.batch-id (duplicate)", "commit", False),
            "stream": _Scenario("fencedlake streaming micro-batch, steady state", "commit", True),
            "stream-new": _Scenario("fencedlake streaming, first batch of a new run", "commit", False),
        }
        run_id, query = uuid.uuid4().hex, "bench-query"
        sp = harness.plan(wh, "bench.req", {"writer.id": "bench-stream"}, streaming=True, schema=SPARK_SCHEMA)
        harness.commit(sp, harness.write_tasks(sp, data(), batch=0, run=run_id, query=query, tasks=1), batch_id=0)
        batch = 1

        def measure(key: str, table: str, commit: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
            """Count the requests of ``commit(*args, **kwargs)``; check it applied exactly this write's rows."""
            with counting(catalog) as c:
                res = commit(*args, **kwargs)
            scenarios[key].samples.append(c)
            if res is not None and res.outcome.name != "APPLIED":
                raise BenchmarkError(f"{scenarios[key].name}: outcome {res.outcome.name}, expected APPLIED")
            found = _added_records(catalog, table)
            if found != rows_per_write:
                raise BenchmarkError(f"{scenarios[key].name}: the commit added {found} rows, expected {rows_per_write}")

        for rep in range(reps):
            # Baseline: plain pyiceberg append of the same kind of files, on the twin table.
            bp = harness.plan(wh, "bench.base", schema=SPARK_SCHEMA)
            base_messages = harness.write_tasks(bp, data(), tasks=1)
            measure("baseline", "bench.base", pyiceberg_append, catalog, "bench.base", base_messages)

            p = harness.plan(wh, "bench.req", schema=SPARK_SCHEMA)
            messages = harness.write_tasks(p, data(), tasks=1)
            measure("anon", "bench.req", harness.commit, p, messages)

            with counting(catalog) as c:
                sp = harness.plan(
                    wh, "bench.req", {"writer.id": "bench-stable", "writer.batch-id": rep + 1}, schema=SPARK_SCHEMA
                )
            scenarios["stable-open"].samples.append(c)
            stable_messages = harness.write_tasks(sp, data(), tasks=1)
            measure("stable", "bench.req", harness.commit, sp, stable_messages)

            # A re-run of an applied batch id (own table, so its pending barrier does not reach the scenarios
            # above): DUPLICATE, nothing added, the re-run's own files removed (DELETEs).
            opts = {"writer.id": "bench-dup", "writer.batch-id": rep + 1}
            fp = harness.plan(wh, "bench.dup", opts, schema=SPARK_SCHEMA)
            harness.commit(fp, harness.write_tasks(fp, data(), tasks=1))
            before = _total_records(catalog, "bench.dup")
            rp = harness.plan(wh, "bench.dup", opts, schema=SPARK_SCHEMA)
            rerun_messages = harness.write_tasks(rp, data(), tasks=1)
            with counting(catalog) as c:
                res = harness.commit(rp, rerun_messages)
            scenarios["rerun"].samples.append(c)
            if res.outcome.name != "DUPLICATE" or _total_records(catalog, "bench.dup") != before:
                raise BenchmarkError(f"re-run of batch {rep + 1}: outcome {res.outcome.name}, expected DUPLICATE")

            for key in ("stream", "stream-new"):
                if key == "stream-new":
                    run_id = uuid.uuid4().hex  # a restarted query: a new run continues with the next batch
                stp = harness.plan(wh, "bench.req", {"writer.id": "bench-stream"}, streaming=True, schema=SPARK_SCHEMA)
                msgs = harness.write_tasks(stp, data(), batch=batch, run=run_id, query=query, tasks=1)
                measure(key, "bench.req", harness.commit, stp, msgs, batch_id=batch)
                batch += 1
            log(f"  rep {rep + 1}/{reps}: counted {len(scenarios)} scenarios")

    base = _summary(scenarios["baseline"].samples)
    result.columns = [
        "scenario",
        "phase",
        "GET",
        "LIST",
        "PUT",
        "cond. PUT",
        "DELETE",
        "HEAD",
        "catalog calls",
        "object-store beyond",
        "total beyond",
    ]
    for key, sc in scenarios.items():
        s = _summary(sc.samples)
        kinds = by_kind(s)
        base_kinds = by_kind(base)
        store_beyond = sum(max(0, kinds[k] - base_kinds[k]) for k in KINDS)
        catalog_beyond = max(0, kinds["catalog"] - base_kinds["catalog"])
        extra = store_beyond + catalog_beyond
        row = {
            "scenario": sc.name,
            "phase": sc.phase,
            **{k: kinds[k] for k in KINDS},
            "catalog calls": kinds["catalog"],
            "object-store beyond": "—" if key == "baseline" else store_beyond,
            "total beyond": "—" if key == "baseline" else extra,
        }
        result.rows.append(row)
        result.data[key] = {"name": sc.name, "phase": sc.phase, "max": s, "samples": [c.flat() for c in sc.samples]}
        varying = {k for c in sc.samples for k, v in c.flat().items() if v != s.get(k)}
        if varying:
            result.notes.append(f"{sc.name} ({sc.phase}): counts varied between reps for {sorted(varying)}; max shown")
        if sc.target:
            puts = s.get("store PUT_IF_ABSENT", 0)
            if puts > TARGET_CONDITIONAL_PUTS:
                result.warnings.append(
                    f"{sc.name} ({sc.phase}): {puts} conditional PUTs per commit, target <= {TARGET_CONDITIONAL_PUTS}"
                )
            if extra > TARGET_EXTRA_REQUESTS:
                result.warnings.append(
                    f"{sc.name} ({sc.phase}): {extra} requests beyond a plain pyiceberg append "
                    f"(target <= {TARGET_EXTRA_REQUESTS}): {_diff(s, base)}"
                )
    result.notes += [
        "Counted per commit, max over reps; the writer's own data files are not counted (executor side).",
        "GET/LIST/PUT/cond. PUT/DELETE/HEAD = object-store requests (fencedlake's control store + Iceberg's "
        "metadata, manifest-list and manifest files; HEAD = pyiceberg's size/existence lookups, a stat locally). "
        "catalog calls = load_table + commit_table (a database query each for a SQL catalog, a REST call for a "
        "REST catalog); every load also GETs the metadata.json (counted under GET).",
        "'object-store beyond' / 'total beyond' = requests above the baseline's, per kind (a plain pyiceberg "
        "fast_append of the same kind of files, measured in this run), without / with catalog calls.",
        f"Targets (issue 6.3), for the steady-state commits: <= {TARGET_CONDITIONAL_PUTS} conditional PUT, "
        f"<= {TARGET_EXTRA_REQUESTS} requests beyond pyiceberg's own ('total beyond', catalog calls included). "
        "'open' happens once per batch write with "
        "writer.id; 'first batch of a new run' once per streaming run.",
        "Baseline detail: " + ", ".join(f"{k}={v}" for k, v in base.items()),
    ]
    return result


KINDS = ("GET", "LIST", "PUT", "cond. PUT", "DELETE", "HEAD")


def by_kind(s: dict[str, int]) -> dict[str, int]:
    """Object-store requests by kind (control store + Iceberg files) and catalog calls, from flat counts."""
    out = dict.fromkeys((*KINDS, "catalog"), 0)
    for k, v in s.items():
        source, _, rest = k.partition(" ")
        verb = rest.split(" ", 1)[0]
        if source == "catalog":
            out["catalog"] += v
        elif verb == "PUT_IF_ABSENT":
            out["cond. PUT"] += v
        elif verb in out:
            out[verb] += v
    return out


def _summary(samples: list[Counts]) -> dict[str, int]:
    """Per-kind maximum over the samples."""
    out: Counter[str] = Counter()
    for c in samples:
        for k, v in c.flat().items():
            out[k] = max(out[k], v)
    return dict(sorted(out.items()))


def _diff(s: dict[str, int], base: dict[str, int]) -> str:
    keys = sorted(set(s) | set(base))
    return ", ".join(f"{k} {s.get(k, 0)} vs {base.get(k, 0)}" for k in keys if s.get(k, 0) != base.get(k, 0))
