"""Suite "compaction": a table of many small files from streaming-like appends, before and after compaction.

``commits`` appends of ``files_per_commit`` one-task files each (the sink's own
write and commit path, without Spark: :func:`pyspark_fenced_sink.testing.harness.sink_write`)
leave ``commits * files_per_commit`` small files and one manifest per commit, as
a streaming writer committing every few seconds does. Then, measured:

* planning: pyiceberg ``scan().plan_files()`` on the current snapshot;
* full scan, fencedlake reader: ``spark.read.format("fencedlake")`` count and sum of ``id``;
* full scan, DuckDB: ``iceberg_scan`` count and sum (if ``duckdb`` and its iceberg/avro
  extension wheels are installed: the ``test`` extra);
* compaction: ``pyspark_fenced_sink.compact(spark, table, min_input_files=2)``, once.

Each read is repeated ``reps`` times before and after (medians); ratios are
before / after (>1: faster after). Every read checks the row count and id sum,
which the compaction must not change.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult, median

__all__ = ["run"]

TABLE = "bench.small_files"


def _duckdb() -> Any | None:
    """A DuckDB connection with the iceberg extension loaded from its wheel, or None if not installed."""
    try:
        import duckdb
    except ImportError:
        return None
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            return None
        con.execute(f"LOAD '{next(Path(spec.origin).parent.rglob('*.duckdb_extension'))}'")
    return con


def _timed(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    samples, value = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        samples.append(time.perf_counter() - t0)
    return median(samples), value


def run(
    *,
    spark: Any,
    commits: int,
    files_per_commit: int,
    rows_per_file: int,
    reps: int,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Build the small-file table, measure reads and planning, compact, measure again."""
    import pyspark_fenced_sink
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.testing.harness import rows, sink_write

    files = commits * files_per_commit
    total = files * rows_per_file
    result = SuiteResult(
        "compaction", f"Compaction of {files:,} small files ({commits:,} commits, {total:,} rows), local[2]"
    )
    expected = (total, total * (total - 1) // 2)
    con = _duckdb()
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-compact-", dir=workdir) as wh:
        t0 = time.perf_counter()
        per_commit = files_per_commit * rows_per_file
        for c in range(commits):
            sink_write(wh, TABLE, rows("stream", c * per_commit, per_commit), tasks=files_per_commit)
            if (c + 1) % 100 == 0:
                log(f"[compaction] {c + 1}/{commits} commits written")
        build_s = time.perf_counter() - t0
        catalog = embedded_catalog(wh)

        def plan() -> int:
            return len(list(catalog.load_table(TABLE).scan().plan_files()))

        def spark_scan() -> tuple[int, int]:
            df = spark.read.format("fencedlake").option("warehouse", wh).load(TABLE)
            row = df.selectExpr("count(*) AS n", "sum(id) AS s").collect()[0]
            return int(row.n), int(row.s)

        def duck_scan() -> tuple[int, int]:
            location = str(catalog.load_table(TABLE).metadata_location).removeprefix("file://")
            n, s = con.execute(f"SELECT count(*), sum(id) FROM iceberg_scan('{location}')").fetchone()
            return int(n), int(s)

        readers: list[tuple[str, Callable[[], Any]]] = [("planning (pyiceberg plan_files)", plan)]
        readers.append(("full scan, fencedlake reader", spark_scan))
        if con is not None:
            readers.append(("full scan, DuckDB iceberg_scan", duck_scan))

        def measure(label: str) -> dict[str, float]:
            out = {}
            for name, fn in readers:
                fn()  # warm-up
                seconds, value = _timed(fn, reps)
                want = files if name.startswith("planning") else expected
                if label == "after" and name.startswith("planning"):
                    want = value
                if value != want:
                    raise BenchmarkError(f"{name} {label}: got {value}, expected {want}")
                out[name] = seconds
                log(f"[compaction] {label}: {name}: {seconds:.3f} s")
            return out

        before = measure("before")
        t0 = time.perf_counter()
        done = pyspark_fenced_sink.compact(spark, TABLE, min_input_files=2, warehouse=wh)
        compact_s = time.perf_counter() - t0
        if done.outcome != "applied" or done.input_files != files or done.rows != total:
            raise BenchmarkError(f"compaction: {done}")
        log(f"[compaction] compacted {done.input_files} files into {done.output_files} in {compact_s:.1f} s")
        after = measure("after")
    result.columns = ["measure", "before s", "after s", "ratio"]
    for name, _ in readers:
        result.rows.append(
            {"measure": name, "before s": before[name], "after s": after[name], "ratio": before[name] / after[name]}
        )
    result.data.update(
        {
            "files": files,
            "commits": commits,
            "rows": total,
            "output_files": done.output_files,
            "compaction_s": compact_s,
            "build_s": build_s,
            "before_s": before,
            "after_s": after,
        }
    )
    result.notes += [
        f"ratio = before / after (>1: faster after compaction); medians of {reps} run(s) after a warm-up.",
        f"Compaction (pyspark_fenced_sink.compact on local[2], one task per group, one WAL entry) took "
        f"{compact_s:.1f} s for {files:,} files -> {done.output_files} file(s) "
        f"({total / max(compact_s, 1e-9):,.0f} rows/s); building the table took {build_s:.0f} s.",
    ]
    if con is None:
        result.notes.append("DuckDB or its iceberg extension wheels are not installed: its scan was not measured.")
    return result
