"""Suite "streaming": Structured Streaming into fencedlake vs Spark's native Parquet file sink (issue 6.4).

Both sinks read the same source, Spark's ``rate-micro-batch`` (a rate source
with a fixed number of rows per micro-batch: every batch is the same size, so
runs are comparable and row counts checkable), shaped into the benchmark
schema of :mod:`benchmarks.data`, on the shared ``local[2]`` session, with the
default trigger (the next batch starts as soon as the previous one ends).
Two phases, interleaved between the sinks:

* **per-batch overhead**: tiny batches (1,000 rows), so a batch's time is the
  fixed cost of a micro-batch: Spark's ``durationMs`` from the query progress
  (``addBatch`` = the write job and the sink's commit; ``commitOffsets`` =
  Spark's commit log; ``triggerExecution`` = the whole micro-batch). The
  fencedlake commit step is estimated per batch as the time from its WAL
  entry being built (``created_ms``) to its snapshot being built
  (``timestamp_ms``): the WAL put, reconciliation and manifest writes,
  without the catalog request itself.
* **sustained throughput**: large batches back to back; rows/s = rows of the
  steady-state batches / their wall time (first batch start to last batch end,
  from the progress timestamps).

Targets (issue 6): fencedlake ``addBatch`` + ``commitOffsets`` <= 300 ms per (tiny) batch and >=
100k rows/s sustained; the native file sink's numbers, measured in the same
run, are the baseline. Every run is verified: after ``stop()`` the table (or
the file sink's committed files) holds ids ``0 .. n-1`` exactly once, with
``n`` = rows of at least every batch Spark recorded as committed (a batch the
sink committed just before the stop may be there too: exactly once either
way).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult, median, percentile, ratio

__all__ = ["TARGET_OVERHEAD_MS", "TARGET_ROWS_PER_S", "run"]

TARGET_OVERHEAD_MS = 300.0
TARGET_ROWS_PER_S = 100_000.0
SKIP = 2  # first batches of a query: Python workers start, JIT; not steady state
NATIVE, FENCED = "native parquet", "fencedlake"


def _shaped(spark: Any, rows_per_batch: int) -> Any:
    """The rate-micro-batch source in the benchmark schema (id, ts, user_id, code, value)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    src = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 2)
        .load()
    )
    h = F.xxhash64("value")
    return src.select(
        F.col("value").alias("id"),
        F.col("timestamp").alias("ts"),
        F.pmod(h, 1_000_000).cast("int").alias("user_id"),
        F.concat(F.lit("c"), F.pmod(h, 500).cast("string")).alias("code"),
        (F.pmod(h, 10_000_000) / 100.0).alias("value"),
    )


def _epoch(text: str) -> float:
    return datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _query(
    spark: Any, sink: str, rows_per_batch: int, batches: int, tmp: Path, timeout_s: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run one streaming query until ``batches`` batches completed; verify; return (progress, info)."""
    run = uuid.uuid4().hex[:8]
    chk = tmp / f"chk-{run}"
    df = _shaped(spark, rows_per_batch)
    writer = df.writeStream.option("checkpointLocation", str(chk)).trigger(processingTime="0 seconds")
    info: dict[str, Any] = {"sink": sink, "rows_per_batch": rows_per_batch}
    if sink == NATIVE:
        path = tmp / f"native-{run}"
        query = writer.format("parquet").option("compression", "zstd").start(str(path))
    else:
        wh, table = str(tmp / "wh"), f"bench.stream_{run}"
        query = writer.format("fencedlake").option("warehouse", wh).option("writer.id", f"bench-{run}").start(table)
    t0 = time.time()
    try:
        while True:
            last = query.lastProgress
            if last is not None and last["batchId"] >= batches - 1 and last["numInputRows"] > 0:
                break
            if query.exception() is not None:
                raise BenchmarkError(f"{sink}: the query failed: {query.exception()}")
            if time.time() - t0 > timeout_s:
                raise BenchmarkError(f"{sink}: {batches} batches not done in {timeout_s:.0f}s")
            time.sleep(0.1)
    finally:
        # Stopping interrupts the batch in flight; Spark logs that at ERROR with stack traces: not news here.
        sc = spark.sparkContext
        sc.setLogLevel("OFF")
        try:
            query.stop()
            quiet = time.time() + 10
            while sc.statusTracker().getActiveJobsIds() and time.time() < quiet:
                time.sleep(0.05)  # killed tasks log their abort after stop() returns
            time.sleep(0.3)
        finally:
            sc.setLogLevel("ERROR")
    info["wall_s"] = time.time() - t0
    if query.exception() is not None:
        raise BenchmarkError(f"{sink}: the query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    committed = max(p["batchId"] for p in progress) + 1  # batches Spark recorded (rate-micro-batch: every one full)
    if sink == NATIVE:
        n, distinct, lo, hi = _native_ids(spark, str(path))
        shutil.rmtree(path, ignore_errors=True)
    else:
        n, distinct, lo, hi, commit_ms = _fenced_ids(wh, table)
        info["commit_ms"] = commit_ms
    expected = committed * rows_per_batch
    exact = n == distinct and (n == 0 or (lo == 0 and hi == n - 1))
    if not exact or n % rows_per_batch or n not in (expected, expected + rows_per_batch):
        raise BenchmarkError(
            f"{sink}: the output holds {n} rows ({distinct} distinct ids, {lo}..{hi}); expected ids 0..{expected - 1} "
            f"exactly once ({committed} committed batches of {rows_per_batch}; one more batch allowed)"
        )
    info["rows_out"] = n
    shutil.rmtree(chk, ignore_errors=True)
    return progress, info


def _native_ids(spark: Any, path: str) -> tuple[int, int, int, int]:
    from pyspark.sql import functions as F  # noqa: N812

    row = spark.read.parquet(path).agg(F.count("*"), F.countDistinct("id"), F.min("id"), F.max("id")).collect()[0]
    return int(row[0]), int(row[1]), int(row[2] if row[2] is not None else 0), int(row[3] if row[3] is not None else -1)


def _fenced_ids(wh: str, table: str) -> tuple[int, int, int, int, list[float]]:
    import pyarrow.compute as pc

    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.protocol.entry import decode_entry
    from pyspark_fenced_sink.protocol.layout import control_root, wal_key
    from pyspark_fenced_sink.protocol.state import decode_record

    t = embedded_catalog(wh).load_table(table)
    ids = t.scan(selected_fields=("id",)).to_arrow().column("id")
    n = len(ids)
    lo = pc.min(ids).as_py() if n else 0
    hi = pc.max(ids).as_py() if n else -1
    distinct = pc.count_distinct(ids).as_py() if n else 0
    # The commit step of each batch: from its WAL entry being built (``created_ms``, just before the WAL put)
    # to its snapshot being built (``timestamp_ms``, just before the catalog commit request).
    wal = Path(control_root(t.metadata.location, str(t.metadata.table_uuid)).removeprefix("file://"))
    commit_ms = []
    for s in t.metadata.snapshots:
        record = decode_record(s.summary.additional_properties if s.summary else {})
        if record is None:
            continue
        path = wal / wal_key(record.last)
        if path.exists():
            created = decode_entry(path.read_bytes()).created_ms
            commit_ms.append(float(s.timestamp_ms - created))
    return n, distinct, int(lo), int(hi), commit_ms


def _steady(progress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return progress[SKIP:] if len(progress) > SKIP + 1 else progress[1:] or progress


def _durations(progress: list[dict[str, Any]], key: str) -> list[float]:
    return [float(p["durationMs"].get(key, 0)) for p in _steady(progress)]


def _sink_time(progress: list[dict[str, Any]]) -> list[float]:
    return [
        float(p["durationMs"].get("addBatch", 0)) + float(p["durationMs"].get("commitOffsets", 0))
        for p in _steady(progress)
    ]


def _rate(progress: list[dict[str, Any]]) -> float:
    steady = _steady(progress)
    rows = sum(p["numInputRows"] for p in steady)
    start = _epoch(steady[0]["timestamp"])
    end = _epoch(steady[-1]["timestamp"]) + steady[-1]["durationMs"]["triggerExecution"] / 1000
    return rows / (end - start) if end > start else float("nan")


def run(
    *,
    spark: Any,
    small_rows: int,
    small_batches: int,
    large_rows: int,
    large_batches: int,
    reps: int,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Per-batch overhead (``small_batches`` of ``small_rows``) and sustained rate (``large_batches`` of
    ``large_rows``), each sink ``reps`` times, interleaved."""
    result = SuiteResult("streaming", "Streaming: rate source -> sink, local[2] (issue 6.4)")
    phases = {"overhead": (small_rows, small_batches), "sustained": (large_rows, large_batches)}
    runs: dict[str, dict[str, list[tuple[list[dict[str, Any]], dict[str, Any]]]]] = {p: {} for p in phases}
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-stream-", dir=workdir) as tmp:
        # Warm-up: one short query per sink (Python workers, the fencedlake imports, JIT).
        for sink in (NATIVE, FENCED):
            _query(spark, sink, small_rows, SKIP + 1, Path(tmp), 300)
        for rep in range(reps):
            for phase, (rows, batches) in phases.items():
                order = (NATIVE, FENCED) if rep % 2 == 0 else (FENCED, NATIVE)
                for sink in order:
                    progress, info = _query(spark, sink, rows, batches, Path(tmp), 120 + batches * 30)
                    runs[phase].setdefault(sink, []).append((progress, info))
                    log(
                        f"  rep {rep + 1}/{reps} {phase} {sink}: {len(progress)} batches of {rows:,} rows, "
                        f"addBatch median {median(_durations(progress, 'addBatch')):.0f} ms, "
                        f"{_rate(progress):,.0f} rows/s"
                    )

    result.columns = [
        "phase",
        "sink",
        "rows/batch",
        "batches",
        "addBatch p50 ms",
        "addBatch p90 ms",
        "commitOffsets p50 ms",
        "sink time p50 ms",
        "batch p50 ms",
        "fencedlake commit p50 ms",
        "Δ sink time vs native ms",
        "Δ batch vs native ms",
        "rows/s",
        "vs native",
    ]
    summary: dict[tuple[str, str], dict[str, Any]] = {}
    for phase, (rows, _batches) in phases.items():
        for sink in (NATIVE, FENCED):
            rs = runs[phase][sink]
            add = [x for p, _ in rs for x in _durations(p, "addBatch")]
            sink_time = [x for p, _ in rs for x in _sink_time(p)]
            trig = [x for p, _ in rs for x in _durations(p, "triggerExecution")]
            commit = [x for _, i in rs for x in i.get("commit_ms", [])[SKIP:]]
            rate = median([_rate(p) for p, _ in rs])
            summary[(phase, sink)] = {
                "phase": phase,
                "sink": sink,
                "rows/batch": rows,
                "batches": len(add),
                "addBatch p50 ms": median(add),
                "addBatch p90 ms": percentile(add, 90),
                "commitOffsets p50 ms": median([x for p, _ in rs for x in _durations(p, "commitOffsets")]),
                "sink time p50 ms": median(sink_time),
                "batch p50 ms": median(trig),
                "fencedlake commit p50 ms": median(commit) if commit else "",
                "rows/s": rate,
            }
        base = summary[(phase, NATIVE)]
        for sink in (NATIVE, FENCED):
            row = summary[(phase, sink)]
            fenced = sink != NATIVE
            row["Δ sink time vs native ms"] = row["sink time p50 ms"] - base["sink time p50 ms"] if fenced else ""
            row["Δ batch vs native ms"] = row["batch p50 ms"] - base["batch p50 ms"] if fenced else ""
            row["vs native"] = ratio(row["rows/s"], base["rows/s"]) if fenced else "(baseline)"
            result.rows.append(row)
    result.data["runs"] = {
        phase: {sink: [{"info": i, "progress": [_slim(x) for x in p]} for p, i in rs] for sink, rs in by.items()}
        for phase, by in runs.items()
    }
    over, sus = summary[("overhead", FENCED)], summary[("sustained", FENCED)]
    native_time = summary[("overhead", NATIVE)]["sink time p50 ms"]
    if over["sink time p50 ms"] > TARGET_OVERHEAD_MS:
        result.warnings.append(
            f"fencedlake addBatch + commitOffsets {over['sink time p50 ms']:.0f} ms per {small_rows:,}-row batch "
            f"(target <= {TARGET_OVERHEAD_MS:.0f} ms; native parquet {native_time:.0f} ms; fencedlake's commit "
            f"step {over['fencedlake commit p50 ms'] or 'n/a'} ms)"
        )
    if sus["rows/s"] < TARGET_ROWS_PER_S:
        result.warnings.append(
            f"fencedlake sustains {sus['rows/s']:,.0f} rows/s (target >= {TARGET_ROWS_PER_S:,.0f}; "
            f"{sus['vs native']:.2f}x native parquet)"
        )
    result.notes += [
        f"Source: rate-micro-batch shaped into the benchmark schema, 2 partitions, default trigger; first {SKIP} "
        f"batches of every query excluded (warm-up); {reps} run(s) per sink and phase, interleaved.",
        "From Spark's query progress durationMs: addBatch (the write job and the sink's commit), commitOffsets "
        "(Spark's commit log), sink time = addBatch + commitOffsets per batch (the target applies to its p50), "
        "batch = triggerExecution (the whole micro-batch). fencedlake commit = WAL entry built -> snapshot built "
        "(WAL put, reconcile, manifests; the catalog request itself excluded). "
        "Δ = fencedlake p50 - native parquet's p50.",
        "rows/s = rows of the steady-state batches / their wall time (first batch start to last batch end); "
        "'vs native' = over the native Parquet file sink's in the same run. Every run is verified: ids 0..n-1 "
        "exactly once in the output.",
    ]
    return result


def _slim(p: dict[str, Any]) -> dict[str, Any]:
    return {k: p.get(k) for k in ("batchId", "timestamp", "numInputRows", "durationMs")}
