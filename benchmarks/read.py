"""Suite "read": ``spark.read.format("fencedlake")`` vs Spark's native Parquet reader vs pyiceberg (issue 15).

Setup (not timed): the benchmark frame (:func:`benchmarks.data.spark_frame`,
``ts`` time-ordered over 30 days) written once with fencedlake into an
unpartitioned table of 16 data files (one row group each) with disjoint
``ts`` ranges. Two queries, each consuming every column of
every row it returns through Spark's ``noop`` sink, run in interleaved rounds
for each reader:

* ``native``: ``spark.read.parquet`` of the table's current data files (the
  same files), the baseline;
* ``fencedlake``: ``spark.read.format("fencedlake").load(table)`` in a session
  set up with :func:`pyspark_fenced_sink.tune_session` (filter pushdown on; on
  Spark 4.1-4.3 pushed filters prune nothing: ``spark.reader.PUSHED_FILTERS_PRUNE``);
* ``fencedlake filter option``: the same with ``option("filter", <the query as an
  Iceberg filter>)``, which prunes files on every Spark (the full scan has no filter);
* ``fencedlake read_table``: :func:`pyspark_fenced_sink.read_table` (the
  same planning, then Spark's own Parquet reader over the planned files,
  columns matched by field id);
* ``pyiceberg+createDataFrame``: what a user without a Spark reader does:
  ``table.scan(row_filter).to_arrow()`` on the driver, then
  ``spark.createDataFrame(arrow)``;
* ``python floor``: a bare Python data source reading the same files with
  plain pyarrow (:mod:`benchmarks.floor_source`), in as many splits as
  fencedlake makes: what Spark's Python read path costs by itself.

A note also gives the Python half alone: fencedlake's executor read path
(``read_files``) over every file in this process, without Spark, next to
``pyarrow.parquet.read_table`` of the same files.

Then an upserted table (issue 34): ``rows`` (at most 1M) keys written in 10 files, then
10 upserts (3 on the quick profile) of ``rows / 100`` random keys each through the sink's
harness (position deletes, not compacted), read in full by ``read_table`` (deletes
anti-joined natively) vs ``spark.read.parquet`` of the same data files (deletes ignored:
the same bytes), then the same after ``compact`` folded the deletes. Row counts are
checked against pyiceberg outside the timing.

Queries: a full scan, and a selective filter (one day of the 30:
``ts >= day 10 and ts < day 11``). The "files" column is how many data files
each reader opens: fencedlake's and pyiceberg's planned files (partition and
column statistics pruning), native's whole listing (it skips row groups inside
each file by their statistics). Every query's row count is verified once per
reader, outside the timing.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult, interleaved, median, paired_ratios
from benchmarks.data import T0, spark_frame

__all__ = ["TARGET_RATIO", "run"]

TARGET_RATIO = 0.8  # issue 15: fencedlake full scan >= 0.8x Spark's native Parquet scan
UPSERTED_TARGET = 0.8  # issue 34: read_table of an upserted table >= 0.8x native over its data files
UPSERTED_MAX_ROWS = 1_000_000
TABLE = "bench.read"
DAY_LO, DAY_HI = (
    dt.datetime.fromtimestamp(T0 + 10 * 86_400, dt.UTC),
    dt.datetime.fromtimestamp(T0 + 11 * 86_400, dt.UTC),
)
QUERIES = {
    "full scan": None,
    "one day of 30": f"ts >= timestamp'{DAY_LO:%Y-%m-%d %H:%M:%S}' AND ts < timestamp'{DAY_HI:%Y-%m-%d %H:%M:%S}'",
}
#: The same queries as Iceberg filters (the read option ``filter``; UTC literals for the timestamptz column).
ICEBERG_QUERIES = {
    "full scan": None,
    "one day of 30": f"ts >= '{DAY_LO:%Y-%m-%dT%H:%M:%S}' AND ts < '{DAY_HI:%Y-%m-%dT%H:%M:%S}'",
}
READERS = (
    "native",
    "fencedlake",
    "fencedlake filter option",
    "fencedlake read_table",
    "python floor",
    "pyiceberg+createDataFrame",
)


def _noop_timer(make: Callable[[], Any]) -> Callable[[int], float]:
    """A sample function for :func:`interleaved`: seconds to build ``make()``'s DataFrame and run it into ``noop``."""

    def fn(rep: int) -> float:
        t0 = time.perf_counter()
        make().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    return fn


def _planned_files(wh: str, where: str | None, option: str | None = None) -> tuple[int, int]:
    """(files fencedlake plans for the query, data files in the snapshot), through the reader's own API.

    ``option``: the query as the ``filter`` read option instead of pushed filters.
    """
    from pyspark.sql import datasource as F  # noqa: N812 - the filter classes, as Spark's docs spell them

    from pyspark_fenced_sink import FencedLakeDataSource
    from pyspark_fenced_sink.spark.reader import FencedLakeFilteringReader, open_read

    options = {"warehouse": wh, "path": TABLE, **({"filter": option} if option else {})}
    source = FencedLakeDataSource(options)
    reader = FencedLakeFilteringReader(*open_read(source.options, source.schema(), streaming=False))
    if where is not None and option is None:
        reader.pushFilters([F.GreaterThanOrEqual(("ts",), DAY_LO), F.LessThan(("ts",), DAY_HI)])
    reader.partitions()
    stats = reader.stats
    assert stats is not None
    return stats.files, stats.total_files or 0


def _python_half(wh: str, paths: list[str]) -> tuple[float, float]:
    """Seconds for fencedlake's executor read path over every file in this process, and for pq.read_table."""
    import pyarrow.parquet as pq

    from pyspark_fenced_sink import FencedLakeDataSource
    from pyspark_fenced_sink.spark.reader import FencedLakeReader, open_read

    source = FencedLakeDataSource({"warehouse": wh, "path": TABLE})
    reader = FencedLakeReader(*open_read(source.options, source.schema(), streaming=False))
    splits = reader.partitions()
    t0 = time.perf_counter()
    decoded = sum(batch.num_rows for split in splits for batch in reader.read(split))
    t1 = time.perf_counter()
    plain = sum(pq.read_table(p.removeprefix("file://")).num_rows for p in paths)
    t2 = time.perf_counter()
    if decoded != plain:
        raise BenchmarkError(f"the executor read path decoded {decoded} rows, pyarrow {plain}")
    return t1 - t0, t2 - t1


def _iceberg_filter(where: str | None) -> Any:
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThan

    if where is None:
        return AlwaysTrue()
    micros = [int(d.timestamp()) * 1_000_000 for d in (DAY_LO, DAY_HI)]
    return And(GreaterThanOrEqual("ts", micros[0]), LessThan("ts", micros[1]))


def run(
    *,
    spark: Any,
    rows: int,
    reps: int,
    partitions: int = 2,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Write the table once, then interleaved rounds of every reader for each query."""
    from benchmarks.floor_source import FloorDataSource
    from pyspark_fenced_sink import read_table
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    spark.dataSource.register(FloorDataSource)
    result = SuiteResult(
        "read",
        f"Read throughput, {rows:,} rows, local[2], fencedlake vs native Parquet on the same files (issue 15)",
    )
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-read-", dir=workdir) as tmp:
        wh = str(Path(tmp) / "wh")
        frame = spark_frame(spark, rows, partitions=partitions)
        writer = frame.write.format("fencedlake").mode("append").option("warehouse", wh)
        # 16 data files: a row group of rows/16 rows each, every file rolled after its first row group.
        writer = writer.option("table.write.parquet.row-group-limit", str(max(rows // 16, 1000)))
        writer.option("table.write.target-file-size-bytes", "1").save(TABLE)
        table = embedded_catalog(wh).load_table(TABLE)
        paths = sorted(t.file.file_path for t in table.scan().plan_files())
        splits = spark.read.format("fencedlake").option("warehouse", wh).load(TABLE).rdd.getNumPartitions()
        log(f"  {rows:,} rows in {len(paths)} data files, {splits} splits")
        floor_options = {"schema": ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in frame.schema)}
        floor_options.update(paths=json.dumps(paths), splits=str(splits))
        samples: dict[str, dict[str, list[float]]] = {}
        files: dict[str, dict[str, str]] = {}
        expected: dict[str, int] = {}
        for query, where in QUERIES.items():

            def frames(
                where: str | None = where, option: str | None = ICEBERG_QUERIES[query]
            ) -> dict[str, Callable[[], Any]]:
                def native() -> Any:
                    df = spark.read.parquet(*paths)
                    return df.where(where) if where else df

                def fenced() -> Any:
                    df = spark.read.format("fencedlake").option("warehouse", wh).load(TABLE)
                    return df.where(where) if where else df

                def fenced_filter() -> Any:
                    reader = spark.read.format("fencedlake").option("warehouse", wh)
                    df = (reader.option("filter", option) if option else reader).load(TABLE)
                    return df.where(where) if where else df

                def table_read() -> Any:
                    df = read_table(spark, TABLE, warehouse=wh)
                    return df.where(where) if where else df

                def floor() -> Any:
                    df = spark.read.format("fencedlake_bench_floor").options(**floor_options).load()
                    return df.where(where) if where else df

                def collected() -> Any:
                    arrow = embedded_catalog(wh).load_table(TABLE).scan(row_filter=_iceberg_filter(where)).to_arrow()
                    return spark.createDataFrame(arrow)

                return {
                    "native": native,
                    "fencedlake": fenced,
                    "fencedlake filter option": fenced_filter,
                    "fencedlake read_table": table_read,
                    "python floor": floor,
                    "pyiceberg+createDataFrame": collected,
                }

            made = frames()
            counts = {name: make().count() for name, make in made.items()}
            expected[query] = counts["native"]
            if len(set(counts.values())) != 1 or (where is None and counts["native"] != rows):
                raise BenchmarkError(f"{query}: readers disagree on the row count: {counts} (table rows {rows})")
            planned, total = _planned_files(wh, where)
            by_option, _ = _planned_files(wh, where, ICEBERG_QUERIES[query])
            pyiceberg_files = len(list(table.scan(row_filter=_iceberg_filter(where)).plan_files()))
            files[query] = {
                "native": f"{len(paths)} of {len(paths)}",
                "fencedlake": f"{planned} of {total}",
                "fencedlake filter option": f"{by_option} of {total}",
                "fencedlake read_table": f"{len(paths)} of {total}",
                "python floor": f"{len(paths)} of {len(paths)}",
                "pyiceberg+createDataFrame": f"{pyiceberg_files} of {total}",
            }

            log(f"  {query}: {expected[query]:,} rows")
            variants = [(name, _noop_timer(make)) for name, make in made.items()]
            samples[query] = interleaved(variants, reps, warmup=reps > 1, log=log)  # the quick run: no warm-up
        python_s, pyarrow_s = _python_half(wh, paths)

    result.columns = ["query", "reader", "rows", "files read", "median s", "rows/s", "ratio vs native"]
    for query, by_reader in samples.items():
        for name in READERS:
            seconds = median(by_reader[name])
            result.rows.append(
                {
                    "query": query,
                    "reader": name,
                    "rows": expected[query],
                    "files read": files[query][name],
                    "median s": seconds,
                    "rows/s": expected[query] / seconds if seconds else float("nan"),
                    "ratio vs native": median(paired_ratios(by_reader, name, "native")),
                }
            )
    upserted = _upserted(spark, min(rows, UPSERTED_MAX_ROWS), reps, workdir, log)
    for row in upserted["rows"]:
        result.rows.append(row)
        if row["reader"] == "fencedlake read_table" and row["ratio vs native"] < UPSERTED_TARGET:
            result.warnings.append(
                f"{row['query']}: read_table is {row['ratio vs native']:.2f}x native (target >= {UPSERTED_TARGET}x)"
            )
    result.notes.append(upserted["note"])
    result.data.update(
        {
            "upserted": upserted["data"],
            "rows": rows,
            "reps": reps,
            "samples_s": samples,
            "files": files,
            "splits": splits,
            "python_half_s": python_s,
        }
    )
    result.notes += [
        f"ratio = native time / reader time, median of the {reps} paired round(s) (>1 is faster than native). "
        "Every query writes all its columns to Spark's noop sink, so no reader can skip a column.",
        "fencedlake: Arrow batches decoded by pyiceberg's ArrowScan in Spark's Python workers; the selective query's "
        "filters reach it through spark.sql.python.filterPushdown.enabled (tune_session) and prune data files by "
        "their ts statistics only where Spark plans every scan anew (not Spark 4.1-4.3: PROTOCOL.md section 14); "
        "fencedlake filter option: the query as option('filter', ...), which prunes on every Spark; Spark applies "
        "the filter again to every row it returns.",
    ]
    full = {r["reader"]: r for r in result.rows if r["query"] == "full scan"}
    result.notes.append(
        "fencedlake read_table: the same planning, then Spark's vectorized Parquet reader over the planned files "
        "(columns by field id); it opens every planned file and skips row groups by their statistics, as native "
        f"does. Full scan: {full['fencedlake read_table']['ratio vs native']:.2f}x native."
    )
    result.notes.append(
        f"The Python half alone (no Spark, one process): fencedlake's executor read path decodes the {rows:,} "
        f"rows in {python_s:.2f}s, pyarrow.parquet.read_table of the same files takes {pyarrow_s:.2f}s; the full "
        f"scan took fencedlake {full['fencedlake']['median s']:.2f}s and the python floor "
        f"{full['python floor']['median s']:.2f}s in Spark ({splits} tasks on local[2])."
    )
    if full["fencedlake read_table"]["ratio vs native"] < TARGET_RATIO:
        result.warnings.append(
            f"full scan: fencedlake read_table is {full['fencedlake read_table']['ratio vs native']:.2f}x native "
            f"(target >= {TARGET_RATIO}x)"
        )
    if full["fencedlake"]["ratio vs native"] < TARGET_RATIO:
        result.warnings.append(
            f"full scan: fencedlake is {full['fencedlake']['ratio vs native']:.2f}x native (target >= "
            f"{TARGET_RATIO}x): {full['fencedlake']['median s']:.2f}s vs {full['native']['median s']:.2f}s; "
            f"a bare pyarrow Python source over the same files runs at {full['python floor']['ratio vs native']:.2f}x"
        )
    return result


#: Untimed rounds before the upserted table's timed ones: the JVM compiles each reader's generated code for a
#: new query shape over its first reads. Read after read in one session (1M rows, no warm-up), both readers
#: settled only by about the tenth read: read_table 1.00, 0.72, 0.52-0.56 (reads 3-7), then 0.37-0.41 s;
#: native 0.79, 0.42, 0.38-0.48, then 0.29-0.39 s. The warm-up reads are printed in the suite's log.
UPSERTED_WARM_ROUNDS = 8
#: Timed rounds of the upserted and compacted tables at least (``--reps`` when more): five rounds of the
#: upserted table's read spread 0.33-0.46 s in the suite's session, too few to settle a median.
UPSERTED_MIN_ROUNDS = 9


def _upserted(spark: Any, rows: int, reps: int, workdir: str | None, log: Callable[[str], None]) -> dict[str, Any]:
    """read_table vs native over the same data files: an upserted table with position deletes, then compacted."""
    import numpy as np

    from benchmarks import upsert
    from pyspark_fenced_sink import read_table
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
    from pyspark_fenced_sink.ops.compact import compact_table, local_runner
    from pyspark_fenced_sink.testing.harness import open_target

    upserts = 10 if rows >= UPSERTED_MAX_ROWS else 3
    keys = max(rows // 100, 10)
    out: list[dict[str, Any]] = []
    data: dict[str, Any] = {"rows": rows, "upserts": upserts, "keys": keys}
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-upserted-", dir=workdir) as tmp:
        wh = str(Path(tmp) / "wh")
        upsert.build(wh, rows)
        rng = np.random.default_rng(34)
        for u in range(upserts):
            upsert._write(wh, upsert.changes(rng, rows, keys, clustered=False, salt=u + 1), upsert.UPSERT)
        for state in ("upserted", "compacted"):
            if state == "compacted":
                compact_table(open_target(wh, upsert.TABLE), upsert.TABLE, local_runner, min_input_files=2)
            table = embedded_catalog(wh).load_table(upsert.TABLE)
            tasks = list(table.scan().plan_files())
            paths = [t.file.file_path for t in tasks]
            deletes = len({d.file_path for t in tasks for d in t.delete_files})
            expected = table.scan().to_arrow().num_rows

            def native(paths: list[str] = paths) -> Any:
                return spark.read.parquet(*paths)

            def table_read() -> Any:
                return read_table(spark, upsert.TABLE, warehouse=wh)

            counts = {"native": native().count(), "read_table": table_read().count()}
            if counts["read_table"] != expected:
                raise BenchmarkError(f"{state}: read_table counted {counts['read_table']} rows, pyiceberg {expected}")

            query = f"{state} table, full scan"
            log(f"  {query}: {expected:,} rows, {len(paths)} data files, {deletes} delete files")
            runs = max(reps, UPSERTED_MIN_ROUNDS)
            samples = interleaved(
                [("native", _noop_timer(native)), ("fencedlake read_table", _noop_timer(table_read))],
                runs,
                warmup=True,
                log=log,
                warm_rounds=UPSERTED_WARM_ROUNDS,
            )
            data[state] = {"samples_s": samples, "data_files": len(paths), "delete_files": deletes}
            for name in ("native", "fencedlake read_table"):
                seconds = median(samples[name])
                out.append(
                    {
                        "query": query,
                        "reader": name + (" (deletes ignored)" if name == "native" and deletes else ""),
                        "rows": counts["native" if name == "native" else "read_table"],
                        "files read": f"{len(paths)} data + {deletes if name != 'native' else 0} delete",
                        "median s": seconds,
                        "rows/s": expected / seconds if seconds else float("nan"),
                        "ratio vs native": median(paired_ratios(samples, name, "native")),
                    }
                )
    note = (
        f"Upserted table: {rows:,} keys in 10 files, {upserts} upserts of {keys:,} random keys (position deletes, "
        "not compacted), then compacted; read_table drops the deleted (data file, row index) pairs natively "
        "(a bitmap filter; an anti-join on larger states); "
        "native reads the same data files and ignores the deletes (more rows, the same bytes)."
    )
    return {"rows": out, "note": note, "data": data}
