"""Suite "throughput": Spark's native Parquet writer vs ``format("fencedlake")`` vs collect + pyiceberg (issue 6.1).

For each size (``--full``: 1M and 10M rows), one cached DataFrame
(:func:`benchmarks.data.spark_frame`) is written, in interleaved rounds, by:

* ``native``: ``df.write.parquet`` with the table's codec (zstd), the baseline;
* ``fencedlake``: ``df.write.format("fencedlake").mode("append")`` into an
  unpartitioned table;
* ``native day``: ``df.withColumn("ts_day", to_date(ts)).write.partitionBy("ts_day")``;
* ``fencedlake day(ts)``: the same into a table partitioned by ``day(ts)``;
* ``collect+pyiceberg`` / ``collect+pyiceberg day(ts)``: what a user without
  an Iceberg sink for Spark would write: ``df.toArrow()`` to the driver, then
  pyiceberg's ``table.append(arrow)`` into an unpartitioned / ``day(ts)``
  table (created by pyiceberg from the Arrow schema, outside the timing);
* ``python no-op``: a Python Arrow data source that only reads its input
  (:mod:`benchmarks.noop_sink`) — what any Python sink pays for Spark's
  JVM -> Arrow -> Python worker transport, whatever it does with the rows.

The session is set up as the README tells users to:
:func:`pyspark_fenced_sink.tune_session` turns off Spark's per-row Arrow batch
size check (``spark.sql.execution.arrow.maxBytesPerBatch=2147483647``; native
writers do not use Arrow and are unaffected). ``fencedlake, Spark defaults``
and ``python no-op, Spark defaults`` run with Spark's default instead (64 MiB,
:func:`spark_defaults`), to show what the setting is worth.

Every write is verified (rows in the Parquet footers; ``added-records`` of the
new Iceberg snapshot; the no-op's own count). Each write's wall time is split,
from Spark's REST API (job submission and completion times), into: before
the job (Spark planning, and fencedlake's ``WriteTransaction.begin``), the job (executors),
after the job (the commit: Spark's output committer, or fencedlake's
``WriteTransaction.commit``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.common import BenchmarkError, SuiteResult, interleaved, median, paired_ratios
from benchmarks.data import spark_frame
from pyspark_fenced_sink.spark.tuning import ARROW_MAX_BYTES_PER_BATCH, SPARK_DEFAULT_BATCH_BYTES

__all__ = ["TARGET_RATIO", "run", "spark_defaults", "spark_session"]

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 0.9  # issue 6.1: fencedlake unpartitioned >= 0.9x native


def spark_session(driver_memory: str = "4g", conf: Mapping[str, str] | None = None, *, tuned: bool = True) -> Any:
    """A local[2] session whose Python workers run this interpreter with the repo importable.

    ``tuned``: apply :func:`pyspark_fenced_sink.tune_session`, as the README tells users to
    (``conf`` is applied first, so an explicit ``spark.sql.execution.arrow.maxBytesPerBatch`` wins).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("fencedlake-benchmarks")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if tuned:
        from pyspark_fenced_sink import tune_session

        tune_session(spark)
    return spark


@contextlib.contextmanager
def spark_defaults(spark: Any) -> Iterator[None]:
    """Run the block with Spark's default Arrow batch byte bound (undoing :func:`tune_session`)."""
    before = spark.conf.get(ARROW_MAX_BYTES_PER_BATCH, None)
    spark.conf.set(ARROW_MAX_BYTES_PER_BATCH, str(SPARK_DEFAULT_BATCH_BYTES))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(ARROW_MAX_BYTES_PER_BATCH)
        else:
            spark.conf.set(ARROW_MAX_BYTES_PER_BATCH, before)


class _Jobs:
    """Job submission/completion times by job group, from Spark's REST API (None if unavailable)."""

    def __init__(self, spark: Any) -> None:
        sc = spark.sparkContext
        self.url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs" if sc.uiWebUrl else None

    def span(self, group: str) -> tuple[float, float] | None:
        if not self.url:
            return None
        try:
            with urllib.request.urlopen(self.url, timeout=10) as r:
                jobs = [j for j in json.load(r) if j.get("jobGroup") == group]
        except (OSError, ValueError):
            return None
        if not jobs or any("completionTime" not in j for j in jobs):
            return None
        return min(_epoch(j["submissionTime"]) for j in jobs), max(_epoch(j["completionTime"]) for j in jobs)


def _epoch(text: str) -> float:
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _parquet_rows(path: Path) -> tuple[int, int, int]:
    files = sorted(path.rglob("*.parquet"))
    return sum(pq.read_metadata(f).num_rows for f in files), sum(f.stat().st_size for f in files), len(files)


BASELINES = {
    "native": "native",
    "fencedlake": "native",
    "native day": "native day",
    "fencedlake day(ts)": "native day",
    "collect+pyiceberg": "native",
    "collect+pyiceberg day(ts)": "native day",
    "python no-op": "native",
    "fencedlake, Spark defaults": "native",
    "python no-op, Spark defaults": "native",
}
DEFAULTS = ", Spark defaults"  # suffix of the writers run without tune_session's setting


def run(
    *,
    rows: int | Sequence[int],
    reps: int,
    partitions: int = 2,
    days: int = 30,
    codec: str = "zstd",
    extra_table_props: Mapping[str, str] | None = None,
    spark_conf: Mapping[str, str] | None = None,
    spark: Any = None,
    collect: bool = True,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """For each size in ``rows``: interleaved rounds of the seven writers over one cached frame.

    ``extra_table_props`` adds a writer: fencedlake, unpartitioned, into a table created with these
    table properties (an experiment, e.g. ``write.parquet.compression-level``); ``spark_conf`` applies
    to the whole session (every writer); ``collect=False`` leaves out the collect+pyiceberg writers.
    """
    from benchmarks.noop_sink import NoopDataSource

    sizes = [rows] if isinstance(rows, int) else list(rows)
    result = SuiteResult(
        "throughput",
        f"Write throughput, {' and '.join(f'{n:,}' for n in sizes)} rows, local[2] ({partitions} tasks), "
        "same cached frame (issue 6.1)",
    )
    own_session = spark is None
    spark = spark or spark_session(conf=spark_conf)
    spark.dataSource.register(NoopDataSource)
    per_size: dict[int, tuple[list[str], dict[str, list[float]], dict[str, dict[str, list[float]]]]] = {}
    tuned_value = spark.conf.get(ARROW_MAX_BYTES_PER_BATCH, None)
    try:
        for n in sizes:
            log(f"  {n:,} rows")
            per_size[n] = _one_size(
                spark, n, reps, partitions, days, codec, extra_table_props or {}, collect, workdir, log, n == max(sizes)
            )
    finally:
        if own_session:
            spark.stop()

    result.columns = [
        "rows",
        "writer",
        "vs",
        "median s",
        "rows/s",
        "ratio",
        "before job s",
        "job s",
        "after job s",
        "files",
        "MB",
    ]
    for n, (names, samples, stats) in per_size.items():
        for name in names:
            st = stats.get(name, {})
            base = BASELINES.get(name, "native")
            result.rows.append(
                {
                    "rows": n,
                    "writer": name,
                    "vs": base if base != name else "(baseline)",
                    "median s": median(samples[name]),
                    "rows/s": n / median(samples[name]),
                    "ratio": median(paired_ratios(samples, name, base)),
                    "before job s": median(st.get("before", [])),
                    "job s": median(st.get("job", [])),
                    "after job s": median(st.get("after", [])),
                    "files": int(median(st.get("files", [0]))) if "files" in st else "",
                    "MB": median(st["bytes"]) / 1e6 if "bytes" in st else "",
                }
            )
    result.data.update(
        {
            "rows": sizes,
            "reps": reps,
            "partitions": partitions,
            "days": days,
            "codec": codec,
            "samples_s": {str(n): v[1] for n, v in per_size.items()},
            "breakdown": {str(n): {k: x for k, x in v[2].items() if k != "_profile"} for n, v in per_size.items()},
        }
    )
    result.notes += [
        f"ratio = baseline time / writer time, median of the {reps} paired round(s) (>1 is faster than the "
        "baseline); rows/s from the median time. Rounds alternate the order of the writers.",
        f"native writes use compression={codec} (the Iceberg table's codec); `native day` derives ts_day = "
        "to_date(ts) (UTC) and uses partitionBy, as a Spark user would. collect+pyiceberg = df.toArrow() on the "
        "driver + pyiceberg table.append (its 'after job' is the whole pyiceberg write and commit).",
        "before/job/after: wall time before Spark's job starts (query planning; fencedlake WriteTransaction.begin), "
        "the job itself (executors), after it ends (output commit; fencedlake WriteTransaction.commit), from "
        "Spark's REST API.",
        f"The session ran with {ARROW_MAX_BYTES_PER_BATCH}={tuned_value} (pyspark_fenced_sink.tune_session, as the "
        f"README advises); the '{DEFAULTS.strip(', ')}' writers ran with Spark's default "
        f"({SPARK_DEFAULT_BATCH_BYTES // 2**20} MiB), which makes Spark check each Arrow batch's size after every row.",
    ]
    for n, (_names, _samples, size_stats) in per_size.items():
        prof: Any = size_stats.get("_profile")
        if prof:
            result.data["task_profile"] = {"rows": n, **prof}
            result.notes.append(
                f"Where a fencedlake task's time goes ({n:,} rows, one extra profiled write, cProfile in the Python "
                f"workers, {prof['task_s']:.1f} s of task time in all): {prof['breakdown']}"
            )
    if spark_conf:
        result.notes.append("Spark conf for every writer: " + ", ".join(f"{k}={v}" for k, v in spark_conf.items()))
    for n in sizes:
        by = {r["writer"]: r for r in result.rows if r["rows"] == n}
        flat = by["fencedlake"]
        if flat["ratio"] < TARGET_RATIO:
            nat, nop = by["native"], by["python no-op"]
            result.warnings.append(
                f"{n:,} rows: fencedlake unpartitioned is {flat['ratio']:.2f}x native (target >= {TARGET_RATIO}x): "
                f"job {flat['job s']:.2f}s vs {nat['job s']:.2f}s, before job {flat['before job s']:.2f}s vs "
                f"{nat['before job s']:.2f}s, after job (commit) {flat['after job s']:.2f}s vs "
                f"{nat['after job s']:.2f}s, {flat['MB']:.1f} MB vs {nat['MB']:.1f} MB written; a Python sink that "
                f"writes nothing runs at {nop['ratio']:.2f}x native"
            )
    return result


def _one_size(
    spark: Any,
    rows: int,
    reps: int,
    partitions: int,
    days: int,
    codec: str,
    extra_table_props: Mapping[str, str],
    collect: bool,
    workdir: str | None,
    log: Callable[[str], None],
    profile: bool = False,
) -> tuple[list[str], dict[str, list[float]], dict[str, dict[str, list[float]]]]:
    """Interleaved rounds over one cached frame of ``rows`` rows: (writer names, seconds, breakdown)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    jobs = _Jobs(spark)
    sc = spark.sparkContext
    stats: dict[str, dict[str, list[float]]] = {}

    def record(name: str, **values: float) -> None:
        for k, v in values.items():
            stats.setdefault(name, {}).setdefault(k, []).append(v)

    def timed(name: str, rep: int, action: Callable[[], None]) -> tuple[float, float]:
        group = f"bench-{rows}-{name.replace(' ', '-')}-{rep}"
        sc.setJobGroup(group, group)
        t0 = time.time()
        action()
        t1 = time.time()
        sc.setJobGroup("bench-other", "bench-other")
        span = jobs.span(group)
        if span is not None and rep >= 0:
            record(name, before=max(0.0, span[0] - t0), job=span[1] - span[0], after=max(0.0, t1 - span[1]))
        return t0, t1

    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-tp-", dir=workdir) as tmp:
        out, wh = Path(tmp) / "native", str(Path(tmp) / "wh")
        frame = spark_frame(spark, rows, days=days, partitions=partitions).cache()
        try:
            cached = frame.count()
            if cached != rows:
                raise BenchmarkError(f"the cached frame has {cached} rows, expected {rows}")
            catalog = embedded_catalog(wh)

            def check_snapshot(name: str, table: str, before: int | None) -> None:
                snapshot = catalog.load_table(table).current_snapshot()
                if snapshot is None or snapshot.snapshot_id == before:
                    raise BenchmarkError(f"{name}: the write made no new snapshot")
                summary = snapshot.summary.additional_properties
                if int(summary.get("added-records", -1)) != rows:
                    raise BenchmarkError(f"{name}: snapshot added {summary.get('added-records')} rows, expected {rows}")
                record(
                    name,
                    bytes=float(summary.get("added-files-size", 0)),
                    files=float(summary.get("added-data-files", 0)),
                )

            def native(partitioned: bool) -> Callable[[int], float]:
                name = "native day" if partitioned else "native"

                def fn(rep: int) -> float:
                    path = out / f"{name.replace(' ', '-')}-{rep}"
                    if partitioned:
                        action = lambda: (  # noqa: E731
                            frame.withColumn("ts_day", F.to_date("ts"))
                            .write.option("compression", codec)
                            .partitionBy("ts_day")
                            .parquet(str(path))
                        )
                    else:
                        action = lambda: frame.write.option("compression", codec).parquet(str(path))  # noqa: E731
                    t0, t1 = timed(name, rep, action)
                    n, size, files = _parquet_rows(path)
                    if n != rows:
                        raise BenchmarkError(f"{name}: {n} rows in the written Parquet files, expected {rows}")
                    record(name, bytes=size, files=files)
                    shutil.rmtree(path)
                    return t1 - t0

                return fn

            def fenced(
                partitioned: bool, props: Mapping[str, str] | None = None, defaults: bool = False
            ) -> Callable[[int], float]:
                name = "fencedlake day(ts)" if partitioned else "fencedlake"
                table = "bench.tp_day" if partitioned else "bench.tp_flat"
                if props:
                    name, table = f"fencedlake {_props_label(props)}", "bench.tp_props"
                if defaults:
                    name, table = name + DEFAULTS, table + "_defaults"

                def fn(rep: int) -> float:
                    writer = frame.write.format("fencedlake").mode("append").option("warehouse", wh)
                    if partitioned:
                        writer = writer.option("partition-by", "day(ts)")
                    for key, value in (props or {}).items():
                        writer = writer.option(f"table.{key}", value)
                    before = _snapshot_id(catalog, table)
                    with spark_defaults(spark) if defaults else contextlib.nullcontext():
                        t0, t1 = timed(name, rep, lambda: writer.save(table))
                    check_snapshot(name, table, before)
                    return t1 - t0

                return fn

            def collected(partitioned: bool) -> Callable[[int], float]:
                name = "collect+pyiceberg day(ts)" if partitioned else "collect+pyiceberg"
                table = "bench.tp_collect_day" if partitioned else "bench.tp_collect_flat"
                _create_pyiceberg_table(catalog, table, frame.limit(0).toArrow().schema, partitioned)

                def fn(rep: int) -> float:
                    before = _snapshot_id(catalog, table)
                    t0, t1 = timed(name, rep, lambda: catalog.load_table(table).append(frame.toArrow()))
                    check_snapshot(name, table, before)
                    return t1 - t0

                return fn

            def noop(defaults: bool) -> Callable[[int], float]:
                name = "python no-op" + (DEFAULTS if defaults else "")

                def fn(rep: int) -> float:
                    marker = Path(tmp) / f"noop-{rep}-{defaults}.json"
                    writer = frame.write.format("fencedlake_bench_noop").mode("append").option("marker", str(marker))
                    with spark_defaults(spark) if defaults else contextlib.nullcontext():
                        t0, t1 = timed(name, rep, lambda: writer.save())
                    seen = json.loads(marker.read_text())["rows"]
                    if seen != rows:
                        raise BenchmarkError(f"{name}: the writer saw {seen} rows, expected {rows}")
                    return t1 - t0

                return fn

            variants = [
                ("native", native(False)),
                ("fencedlake", fenced(False)),
                ("native day", native(True)),
                ("fencedlake day(ts)", fenced(True)),
                ("python no-op", noop(False)),
                ("fencedlake" + DEFAULTS, fenced(False, defaults=True)),
                ("python no-op" + DEFAULTS, noop(True)),
            ]
            if collect:
                variants[4:4] = [
                    ("collect+pyiceberg", collected(False)),
                    ("collect+pyiceberg day(ts)", collected(True)),
                ]
            if extra_table_props:
                variants.insert(2, (f"fencedlake {_props_label(extra_table_props)}", fenced(False, extra_table_props)))
            samples = interleaved(variants, reps, log=log)
            if profile:
                stats["_profile"] = _profiled_write(spark, frame, wh, Path(tmp) / "profile")
        finally:
            frame.unpersist()
    return [name for name, _ in variants], samples, stats


#: Where a fencedlake task's time goes, as (label, file, function) of its cProfile listing.
TASK_STEPS: tuple[tuple[str, str, str], ...] = (
    ("waiting for Arrow batches from the JVM (pyspark load_stream)", "serializers.py", "load_stream"),
    ("Parquet encode + compress + write (pyarrow write_table)", "core.py", "write_table"),
    ("schema conform / casts", "arrowcast.py", "conform_batch"),
    ("partition split", "task.py", "_split"),
    ("DataFile statistics", "pyarrow.py", "data_file_statistics_from_parquet_metadata"),
)


def _profiled_write(spark: Any, frame: Any, wh: str, directory: Path) -> dict[str, Any]:
    """One unpartitioned fencedlake write with every task's ``write()`` under cProfile (not timed)."""
    from benchmarks.common import profile_top, step_breakdown
    from benchmarks.profiled_sink import PROFILE_DIR, ProfiledFencedLake, task_profile

    spark.dataSource.register(ProfiledFencedLake)
    directory.mkdir(parents=True, exist_ok=True)
    (
        frame.write.format("fencedlake_bench_profiled")
        .mode("append")
        .option("warehouse", wh)
        .option(PROFILE_DIR, str(directory))
        .save("bench.tp_profiled")
    )
    stats = task_profile(str(directory))
    if stats is None:
        return {}
    cum = profile_top(stats, 60, key="cum")
    total = max((p["cum_s"] for p in cum if p["function"].endswith("(write_task)")), default=0.0)
    return {"cum": cum, "task_s": total, "breakdown": step_breakdown(cum, TASK_STEPS)}


def _create_pyiceberg_table(catalog: Any, table: str, schema: Any, partitioned: bool) -> None:
    """A table for the collect+pyiceberg writers, created the pyiceberg way from the Arrow schema."""
    from pyiceberg.transforms import DayTransform

    catalog.create_namespace_if_not_exists(table.rsplit(".", 1)[0])
    t = catalog.create_table(table, schema=schema)
    if partitioned:
        with t.update_spec() as spec:
            spec.add_field("ts", DayTransform(), "ts_day")


def _props_label(props: Mapping[str, str]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in props.items()) + "]"


def _snapshot_id(catalog: Any, table: str) -> int | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        snapshot = catalog.load_table(table).current_snapshot()
    except NoSuchTableError:
        return None
    return snapshot.snapshot_id if snapshot else None
