"""Suite "upsert": upserts and deletes by key into a large table (issue 25; docs/PROTOCOL.md §5.5).

Spark-free: the sink's real driver and executor code through ``testing.harness``
(plan, one task, commit), on the embedded SQLite catalog. A base table of
``sizes`` rows (``id`` 0..N-1 in files of disjoint id ranges, as a table loaded
in key order) receives a change set of ``changes`` rows: 30 % new keys, 60 %
updates, 10 % deletes (``op = 'D'``), every order value newer than the base's.
Keys are either *spread* over the whole table (every file touched: the worst
case for pruning) or *clustered* among the newest 10 % of keys (recent data:
what CDC usually touches).

Measured, interleaved, each run on the same table state (main is rolled back to
the base snapshot and the remembered deletes cleared between runs):

* ``append``: appending the same rows (the baseline: what an upsert costs beyond it);
* fencedlake upsert, spread and clustered, with a cold key cache (a new committer
  process) and spread with a warm one (the committer's second upsert): seconds,
  data files read for the commit (its ``fencedlake.upsert`` summary);
* pyiceberg ``Table.upsert`` of the new and updated rows plus ``Table.delete``
  of the deleted keys (copy-on-write), up to ``pyiceberg_max_rows`` table rows.

Then, per size, peak memory of the executor (writing the changes) and of the
committer (the commit applying them), each in a fresh process: Arrow's pool
peak and the process's peak RSS. Then the read cost of a table with delete files
(after ``read_upserts`` spread upserts) before and after compaction folds them
(pyiceberg ``to_arrow`` and DuckDB ``iceberg_scan``). Last, N concurrent
upserting processes (random overlapping keys, unique order values) vs N
appending processes: writes landed per second, p50/p99 latency; the final table
is checked against the oracle (per key, the greatest order wins).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import BenchmarkError, SuiteResult, interleaved, median, percentile, ratio

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]
TABLE = "bench.keyed"
UPSERT = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}
FILES = 10  # the base table is written in this many files of disjoint id ranges (one write each)
NEWER = 10**12  # every change's order value is above every base row's


def _schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("id", LongType(), False),
            StructField("ts", LongType(), True),
            StructField("v", StringType(), True),
            StructField("op", StringType(), True),
        ]
    )


def frame(ids: np.ndarray, ts: np.ndarray, deletes: np.ndarray | None = None) -> pa.Table:
    """Rows (id, ts, v, op); ``deletes`` marks delete rows."""
    ops = np.where(deletes, "D", "U") if deletes is not None else np.full(len(ids), "U")
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array(ts, pa.int64()),
            "v": pa.array(ts.astype(str)),
            "op": pa.array(ops),
        }
    )


def changes(rng: np.random.Generator, rows: int, count: int, clustered: bool, salt: int = 0) -> pa.Table:
    """30 % new keys, 60 % updates, 10 % deletes of a table of ``rows`` keys (distinct keys)."""
    new, updated = int(count * 0.3), int(count * 0.6)
    deleted = count - new - updated
    lo = int(rows * 0.9) if clustered else 0
    existing = rng.choice(np.arange(lo, rows), size=updated + deleted, replace=False)
    ids = np.concatenate([np.arange(rows, rows + new) + salt * count, existing])
    ts = NEWER + salt * count + np.arange(count)
    return frame(ids, ts, np.arange(count) >= new + updated)


def _write(wh: str, data: pa.Table, options: dict[str, str] | None = None) -> Any:
    from pyspark_fenced_sink.testing.harness import sink_write

    return sink_write(wh, TABLE, data, options or {}, schema=_schema(), tasks=1)


def build(wh: str, rows: int) -> int:
    """The base table (the first file through an upsert, which creates the keyed table); its snapshot id."""
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    step = max(1, rows // FILES)
    for lo in range(0, rows, step):
        ids = np.arange(lo, min(rows, lo + step))
        _write(wh, frame(ids, ids.copy()), UPSERT if lo == 0 else None)
    return int(embedded_catalog(wh).load_table(TABLE).current_snapshot().snapshot_id)


def reset(wh: str, base: int) -> None:
    """Main back to the base snapshot, remembered deletes forgotten (the next run sees the same table)."""
    from dataclasses import replace

    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState

    table = embedded_catalog(wh).load_table(TABLE)
    if table.current_snapshot().snapshot_id != base:
        table.manage_snapshots().set_current_snapshot(snapshot_id=base).commit()
    state = CommittedState.decode(table.properties[STATE_PROPERTY])
    if state.tombstones:
        with table.transaction() as tx:
            tx.set_properties({STATE_PROPERTY: replace(state, tombstones=()).encode()})


def _metrics(wh: str) -> dict[str, int]:
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.ops.inspect import upsert_metrics
    from pyspark_fenced_sink.protocol.state import SUMMARY_UPSERT

    summary = embedded_catalog(wh).load_table(TABLE).current_snapshot().summary.additional_properties
    parts = dict(p.split("=") for p in summary.get(SUMMARY_UPSERT, "").split(",") if p)
    return {**upsert_metrics(summary), "candidates": int(parts.get("candidates", 0))}


def _pyiceberg_upsert(wh: str, data: pa.Table) -> None:
    """What a pyiceberg user would write: ``Table.upsert`` of the new and updated rows, ``Table.delete`` of the rest."""
    from pyiceberg.expressions import In

    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    table = embedded_catalog(wh).load_table(TABLE)
    rows = data.filter(pc.equal(data.column("op"), "U")).cast(table.schema().as_arrow())
    table.upsert(rows, join_cols=["id"])
    doomed = data.filter(pc.equal(data.column("op"), "D")).column("id").to_pylist()
    table.refresh().delete(In("id", doomed))


# ----------------------------------------------------------------- memory (fresh processes)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak(start_mb: float) -> dict[str, float]:
    """Arrow's pool peak, and the process's RSS peak above what it had after its imports."""
    return {"arrow_peak_mb": pa.default_memory_pool().max_memory() / 2**20, "rss_peak_mb": _rss_mb() - start_mb}


def _memory_phase(phase: str, wh: str, data_path: str, state_path: str) -> None:
    """``executor``: plan and write the change set (one task); ``committer``: commit it. Prints its peaks."""
    import pyarrow.parquet as pq

    from pyspark_fenced_sink.testing.harness import commit, plan, write_tasks

    start = _rss_mb()
    if phase == "executor":
        p = plan(wh, TABLE, UPSERT, schema=_schema())
        messages = write_tasks(p, pq.read_table(data_path), tasks=1)
        Path(state_path).write_bytes(pickle.dumps((p, messages)))
    else:
        p, messages = pickle.loads(Path(state_path).read_bytes())
        commit(p, messages)
    print(json.dumps(_peak(start)), flush=True)


def _in_process(phase: str, wh: str, data_path: str, state_path: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.upsert", "--memory", phase, wh, data_path, state_path],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode != 0:
        raise BenchmarkError(f"memory {phase} process failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# ----------------------------------------------------------------- concurrent upserters


def _writer_rows(index: int, writes: int, rows: int, keys: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed * 1000 + index)
    out = []
    for k in range(writes):
        ids = rng.choice(keys, size=rows, replace=False)
        ts = NEWER * 10 + (index * writes + k) * rows + np.arange(rows)
        out.append(frame(ids, ts, rng.random(rows) < 0.1))
    return out


def _writer(wh: str, index: int, writes: int, rows: int, keys: int, seed: int, upsert: bool, start: str) -> None:
    """One concurrent writer process: ``writes`` writes, released when ``start`` exists; prints latencies."""
    batches = _writer_rows(index, writes, rows, keys, seed)
    from pyspark_fenced_sink.testing import harness  # noqa: F401 - imported before the start, not timed

    print("ready", flush=True)
    while not os.path.exists(start):
        time.sleep(0.005)
    out = []
    for data in batches:
        t0 = time.perf_counter()
        try:
            result = _write(wh, data, UPSERT if upsert else None)
            out.append({"s": time.perf_counter() - t0, "ok": True, "catalog_commits": result.catalog_commits})
        except Exception as e:  # noqa: BLE001 - counted as a surfaced error
            out.append({"s": time.perf_counter() - t0, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
    print(json.dumps(out), flush=True)


def _contention(wh: str, n: int, writes: int, rows: int, keys: int, upsert: bool, seed: int) -> dict[str, Any]:
    start = Path(wh) / f"start-{n}-{upsert}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.upsert",
                "--writer",
                wh,
                str(i),
                str(writes),
                str(rows),
                str(keys),
                str(seed),
                "1" if upsert else "0",
                str(start),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    for p in procs:  # every writer has imported and built its rows
        assert p.stdout is not None
        if p.stdout.readline().strip() != "ready":
            raise BenchmarkError(f"writer failed before the start: {p.stderr.read()[-2000:] if p.stderr else ''}")
    t0 = time.perf_counter()
    start.touch()
    results = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise BenchmarkError(f"writer failed: {stderr[-2000:]}")
        results.extend(json.loads(stdout.strip().splitlines()[-1]))
    wall = time.perf_counter() - t0
    latencies = [r["s"] for r in results if r["ok"]]
    return {
        "landed": len(latencies),
        "failed": len(results) - len(latencies),
        "writes_per_s": len(latencies) / wall,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "catalog_commits": sum(r.get("catalog_commits", 0) for r in results),
    }


def _oracle_check(wh: str, n: int, writes: int, rows: int, keys: int, seed: int, base: int) -> None:
    """The table after the concurrent upserts: per key, the greatest order value wins (deletes remove)."""
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    best: dict[int, tuple[int, str]] = {k: (k, "U") for k in range(base)}
    for i in range(n):
        for data in _writer_rows(i, writes, rows, keys, seed):
            for k, t, op in zip(*(data.column(c).to_pylist() for c in ("id", "ts", "op")), strict=True):
                if k not in best or t > best[k][0]:
                    best[k] = (t, op)
    expected = sorted((k, t) for k, (t, op) in best.items() if op != "D")
    got = embedded_catalog(wh).load_table(TABLE).scan(selected_fields=("id", "ts")).to_arrow()
    found = sorted(zip(got.column("id").to_pylist(), got.column("ts").to_pylist(), strict=True))
    if found != expected:
        raise BenchmarkError(f"concurrent upserts: {len(found)} rows, the oracle says {len(expected)}")


# ----------------------------------------------------------------- the suite


def _measure_size(
    wh: str,
    size: int,
    count: int,
    reps: int,
    pyiceberg_max_rows: int,
    rng: np.random.Generator,
    log: Callable[[str], None],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The timed writes on a ``size``-row table, then the memory of each side; (rows, data, memory)."""
    import pyarrow.parquet as pq

    from pyspark_fenced_sink.iceberg.commit import key_index

    t0 = time.perf_counter()
    base = build(wh, size)
    log(f"[upsert] built {size:,} rows in {time.perf_counter() - t0:.1f} s")
    spread = changes(rng, size, count, clustered=False)
    clustered = changes(rng, size, count, clustered=True)
    seen: dict[str, dict[str, int]] = {}

    def timed(name: str, fn: Callable[[], Any], cold: bool = True) -> Callable[[int], float]:
        def go(rep: int) -> float:
            if cold:
                key_index.clear_caches()
            t = time.perf_counter()
            fn()
            seconds = time.perf_counter() - t
            if name.startswith("fencedlake"):
                seen[name] = _metrics(wh)
            reset(wh, base)
            return seconds

        return (name, go)  # type: ignore[return-value]

    variants: list[Any] = [
        timed("append", lambda: _write(wh, spread)),
        timed("fencedlake upsert, spread, cold cache", lambda: _write(wh, spread, UPSERT)),
        timed("fencedlake upsert, spread, warm cache", lambda: _write(wh, spread, UPSERT), cold=False),
        timed("fencedlake upsert, clustered, cold cache", lambda: _write(wh, clustered, UPSERT)),
    ]
    if size <= pyiceberg_max_rows:
        variants.append(timed("pyiceberg Table.upsert + delete", lambda: _pyiceberg_upsert(wh, spread)))
    samples = interleaved(variants, reps, log=log)
    append_s = median(samples["append"])
    rows = []
    for name, _ in variants:
        m = seen.get(name, {})
        rows.append(
            {
                "table rows": f"{size:,}",
                "write": name,
                "s": median(samples[name]),
                "vs append": ratio(median(samples[name]), append_s),
                "files read": m.get("files_read", ""),
                "candidates": m.get("candidates", ""),
                "keys rewritten": m.get("keys_rewritten", ""),
            }
        )
    memory = []
    for label, data in (("spread", spread), ("clustered", clustered)):
        data_path, state_path = str(Path(wh) / f"{label}.parquet"), str(Path(wh) / f"{label}.pickle")
        pq.write_table(data, data_path)
        executor = _in_process("executor", wh, data_path, state_path)
        committer = _in_process("committer", wh, data_path, state_path)
        reset(wh, base)
        memory.append({"table rows": size, "keys": label, "executor": executor, "committer": committer})
        log(f"[upsert] memory {size:,} {label}: executor {executor}, committer {committer}")
    return rows, {"samples": samples, "metrics": seen}, memory


def run(
    *,
    sizes: Sequence[int],
    changes_count: int,
    reps: int,
    pyiceberg_max_rows: int,
    read_upserts: int,
    writers: Sequence[int],
    contention_writes: int,
    contention_rows: int,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Every measurement of the module docstring."""
    result = SuiteResult(
        "upsert", f"Upserts: {changes_count:,} changed keys into {', '.join(f'{s:,}' for s in sizes)}-row tables"
    )
    result.columns = ["table rows", "write", "s", "vs append", "files read", "candidates", "keys rewritten"]
    rng = np.random.default_rng(25)
    memory: list[dict[str, Any]] = []
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="fencedlake-bench-upsert-", dir=workdir) as wh:
            rows, data, mem = _measure_size(wh, size, changes_count, reps, pyiceberg_max_rows, rng, log)
            result.rows += rows
            result.data[f"size_{size}"] = data
            memory += mem
            if size == sizes[0]:
                result.data["read"] = _read_cost(wh, size, changes_count, read_upserts, rng, log)
    result.data["memory"] = memory
    result.notes.append(
        "vs append = the write's seconds / appending the same rows (1.0: no extra cost); medians of "
        f"{reps} interleaved run(s) after a warm-up, each on the same table state. files read = data and "
        "delete files the commit read (cache misses); candidates = data files whose partition and key "
        "bounds could hold a key of the write."
    )
    skipped = [s for s in sizes if s > pyiceberg_max_rows]
    if skipped:
        result.notes.append(
            f"pyiceberg Table.upsert was not run on {', '.join(f'{s:,}' for s in skipped)} rows (it took too long "
            f"at the smaller size to repeat; see the ratio there)."
        )
    for m in memory:
        e, c = m["executor"], m["committer"]
        result.notes.append(
            f"memory, {m['table rows']:,} rows, {m['keys']} keys: executor Arrow peak {e['arrow_peak_mb']:.0f} MB, "
            f"committer Arrow peak {c['arrow_peak_mb']:.0f} MB (each in a fresh process; the processes' peak RSS "
            f"rose {e['rss_peak_mb']:.0f} / {c['rss_peak_mb']:.0f} MB above what their imports had reached)"
        )
    read = result.data["read"]
    for reader, (before, after) in read["seconds"].items():
        result.notes.append(
            f"read, {reader}: {before:.3f} s with {read['delete_files']} delete files, {after:.3f} s after "
            f"compaction folded them ({ratio(before, after):.2f}x)"
        )
    if writers:
        result.data["contention"] = _contention_rows(writers, contention_writes, contention_rows, workdir, log, result)
    return result


def _read_cost(
    wh: str, size: int, count: int, upserts: int, rng: np.random.Generator, log: Callable[[str], None]
) -> dict[str, Any]:
    """Full-scan seconds with the delete files of ``upserts`` spread upserts, then after compaction folds them."""
    from benchmarks.compaction import _duckdb
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.ops.compact import compact_table, local_runner
    from pyspark_fenced_sink.testing.harness import open_target

    for u in range(upserts):
        _write(wh, changes(rng, size, count, clustered=False, salt=u + 1), UPSERT)
    con = _duckdb()
    catalog = embedded_catalog(wh)

    def readers() -> dict[str, Callable[[], int]]:
        out: dict[str, Callable[[], int]] = {
            "pyiceberg to_arrow": lambda: catalog.load_table(TABLE).scan().to_arrow().num_rows
        }
        if con is not None:
            location = str(catalog.load_table(TABLE).metadata_location).removeprefix("file://")
            out["DuckDB iceberg_scan"] = lambda: int(
                con.execute(f"SELECT count(*) FROM iceberg_scan('{location}')").fetchone()[0]
            )
        return out

    def measure() -> dict[str, tuple[float, int]]:
        out = {}
        for name, fn in readers().items():
            fn()
            t = time.perf_counter()
            n = fn()
            out[name] = (time.perf_counter() - t, n)
        return out

    deletes = len(catalog.load_table(TABLE).inspect.delete_files())
    before = measure()
    done = compact_table(open_target(wh, TABLE), TABLE, local_runner, min_input_files=2)
    after = measure()
    for name in before:
        if before[name][1] != after[name][1]:
            raise BenchmarkError(f"{name}: {before[name][1]} rows before compaction, {after[name][1]} after")
    log(f"[upsert] read: {deletes} delete files; compaction {done.outcome}, {done.input_files} files")
    return {
        "delete_files": deletes,
        "compaction": done.outcome,
        "seconds": {name: (before[name][0], after[name][0]) for name in before},
    }


def _contention_rows(
    writers: Sequence[int], writes: int, rows: int, workdir: str | None, log: Callable[[str], None], result: SuiteResult
) -> list[dict[str, Any]]:
    out = []
    keys, seed = 20_000, 7
    for n in writers:
        for upsert in (False, True):
            with tempfile.TemporaryDirectory(prefix="fencedlake-bench-upsert-n-", dir=workdir) as wh:
                build(wh, keys)
                row = _contention(wh, n, writes, rows, keys, upsert, seed)
                if upsert:
                    _oracle_check(wh, n, writes, rows, keys, seed, keys)
                row.update(n=n, write="upsert" if upsert else "append")
                out.append(row)
                log(f"[upsert] N={n} {row['write']}: {row}")
    for row in out:
        result.notes.append(
            f"N={row['n']} concurrent {row['write']} writers x {writes} writes of {rows} rows: {row['landed']} landed, "
            f"{row['failed']} failed, {row['writes_per_s']:.1f} writes/s, p50 {row['p50_s']:.2f} s, "
            f"p99 {row['p99_s']:.2f} s, {row['catalog_commits']} catalog commits"
        )
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory"]:
        _memory_phase(*sys.argv[2:6])
    elif sys.argv[1:2] == ["--writer"]:
        a = sys.argv[2:]
        _writer(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]), a[6] == "1", a[7])
