"""Suite "overwrite": a dynamic overwrite of 1 of 30 day partitions (issue 16).

A table of ``rows`` rows over 30 days (:func:`benchmarks.data.spark_frame`) is
written once, outside the timing, twice: as Parquet partitioned by
``ts_day`` (``df.write.partitionBy``) and as a fencedlake table partitioned by
``day(ts)``. Then, in interleaved rounds, one day's rows (a cached frame of
``rows / 30`` rows) replace that day in each:

* ``native dynamic``: ``df.write.mode("overwrite").option("partitionOverwriteMode",
  "dynamic").partitionBy("ts_day").parquet(...)``, Spark's own dynamic
  partition overwrite, the baseline;
* ``fencedlake dynamic``: ``df.write.format("fencedlake").mode("overwrite")
  .option("overwrite-mode", "dynamic")``: the WAL entry carries the partition
  set, the commit removes that day's live files and adds the new ones.

Every write is verified: the Parquet directory holds ``rows`` rows after each
native write (its other 29 days untouched); the fencedlake snapshot removed and
added exactly one day's rows and the table still holds ``rows`` rows.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.common import BenchmarkError, SuiteResult, interleaved, median, paired_ratios
from benchmarks.data import spark_frame

__all__ = ["run"]

DAYS = 30


def _parquet_rows(path: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in path.rglob("*.parquet"))


def run(
    *, spark: Any, rows: int, reps: int, workdir: str | None = None, log: Callable[[str], None] = print
) -> SuiteResult:
    """Interleaved rounds of the two dynamic overwrites of one day of a 30-day table of ``rows`` rows."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    per_day = rows // DAYS
    day = "2025-01-02"
    result = SuiteResult(
        "overwrite",
        f"Dynamic partition overwrite: 1 of {DAYS} day partitions ({per_day:,} of {rows:,} rows), local[2]",
    )
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-ow-", dir=workdir) as tmp:
        native, wh, table = Path(tmp) / "native", str(Path(tmp) / "wh"), "bench.days"
        base = spark_frame(spark, rows, days=DAYS)
        with_day = F.to_date("ts")
        base.withColumn("ts_day", with_day).write.partitionBy("ts_day").option("compression", "zstd").parquet(
            str(native)
        )
        base.write.format("fencedlake").mode("append").option("warehouse", wh).option("partition-by", "day(ts)").save(
            table
        )
        one_day = spark_frame(spark, rows, days=DAYS).where(with_day == F.lit(day)).cache()
        replaced = one_day.count()
        if not 0 < replaced < rows:
            raise BenchmarkError(f"day {day} holds {replaced} of {rows} rows: the frame is not spread over days")
        catalog = embedded_catalog(wh)

        def native_write(rep: int) -> float:
            t0 = time.perf_counter()
            (
                one_day.withColumn("ts_day", with_day)
                .write.mode("overwrite")
                .option("partitionOverwriteMode", "dynamic")
                .option("compression", "zstd")
                .partitionBy("ts_day")
                .parquet(str(native))
            )
            seconds = time.perf_counter() - t0
            if _parquet_rows(native) != rows:
                raise BenchmarkError(f"native: {_parquet_rows(native)} rows after the overwrite, expected {rows}")
            return seconds

        def fencedlake_write(rep: int) -> float:
            t0 = time.perf_counter()
            (
                one_day.write.format("fencedlake")
                .mode("overwrite")
                .option("warehouse", wh)
                .option("overwrite-mode", "dynamic")
                .save(table)
            )
            seconds = time.perf_counter() - t0
            summary = catalog.load_table(table).current_snapshot().summary.additional_properties
            got = (int(summary["deleted-records"]), int(summary["added-records"]), int(summary["total-records"]))
            if got != (replaced, replaced, rows):
                raise BenchmarkError(
                    f"fencedlake: deleted/added/total records {got}, expected {(replaced,) * 2 + (rows,)}"
                )
            return seconds

        samples = interleaved(
            [("native dynamic", native_write), ("fencedlake dynamic", fencedlake_write)], reps, log=log
        )
        live_files = len(list(catalog.load_table(table).scan().plan_files()))
    result.columns = ["writer", "vs", "median s", "rows/s", "ratio"]
    for name in samples:
        base_name = "native dynamic"
        result.rows.append(
            {
                "writer": name,
                "vs": "(baseline)" if name == base_name else base_name,
                "median s": median(samples[name]),
                "rows/s": replaced / median(samples[name]),
                "ratio": median(paired_ratios(samples, name, base_name)),
            }
        )
    result.data.update({"rows": rows, "replaced": replaced, "reps": reps, "samples_s": samples})
    result.notes += [
        f"ratio = native seconds / writer seconds, median of {reps} paired round(s) (>1: faster than Spark's "
        "own dynamic overwrite); rounds alternate the order of the writers; a warm-up round is not counted.",
        f"Each write replaces day {day} ({replaced:,} rows) of a {DAYS}-day table of {rows:,} rows "
        f"({live_files} live data files in the fencedlake table); both check their row counts after every write.",
    ]
    return result
