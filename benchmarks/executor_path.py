"""Suite "executor": the executor write path alone, in this process (no Spark, no JVM).

Times :func:`pyspark_fenced_sink.write.task.write_task` on the benchmark rows
(fed as Spark feeds a Python writer: 10k-row Arrow batches), unpartitioned and
``day(ts)``-partitioned, against the floor: pyarrow's own ``ParquetWriter``
writing the same rows with the same settings (the table's codec, row-group
size) in one call, with pyarrow's default of a dictionary for every column
(``write_task`` keeps one only where it pays: ``iceberg.write_properties.dictionary_columns``),
and the unpartitioned write without its NaN counts (what counting them costs).
Interleaved rounds, median; ratio = floor time / variant time. One extra
profiled run (cProfile) of the unpartitioned write says where the executor's
time goes. Files are written into the tables' data directories and never
committed (they are deleted after each run).
"""

from __future__ import annotations

import cProfile
import dataclasses
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import BenchmarkError, SuiteResult, interleaved, median, paired_ratios, stopwatch
from benchmarks.data import SPARK_SCHEMA, arrow_rows
from pyspark_fenced_sink.testing import harness

__all__ = ["run"]


def _data_dir(spec: Any) -> Path:
    return Path(spec.location.removeprefix("file://")) / "data"


NO_NANS = "write_task unpartitioned, no NaN counts"


def _nan_cpu_share(p: Any, batches: list[pa.RecordBatch]) -> tuple[float, float]:
    """CPU seconds of counting NaNs over all the rows, and of one unpartitioned ``write_task`` of them."""
    from pyspark_fenced_sink.write.layout import layout as _layout
    from pyspark_fenced_sink.write.nan_counts import count_nans
    from pyspark_fenced_sink.write.task import TaskInfo, write_task

    layout = _layout(p.spec.schema_json, p.spec.spec_json, tuple(sorted(p.spec.properties.items())))
    table = pa.Table.from_batches(batches)
    started = time.process_time()
    for _, values in layout.nan_columns:
        count_nans(values(table))
    counting = time.process_time() - started
    started = time.process_time()
    write_task(p.spec, iter(batches), TaskInfo(0, 998, None))
    writing = time.process_time() - started
    shutil.rmtree(_data_dir(p.spec), ignore_errors=True)
    return counting, writing


def _no_nans(p: Any) -> Any:
    """``p`` with NaN counting off: the price of the NaN counts every file carries (PROTOCOL.md step 2).

    Only a baseline to measure against: its layout (parsed once per schema, spec and properties) is built
    here with ``write.nan_counts`` finding no float column; a marker property keeps it apart from ``p``'s.
    """
    from pyspark_fenced_sink.write import layout as executor

    spec = dataclasses.replace(p.spec, properties={**p.spec.properties, "fencedlake.bench.nan-counts": "off"})
    counted = executor.nan_columns
    executor.nan_columns = lambda schema, plan: ()  # type: ignore[assignment]
    try:
        executor.layout(spec.schema_json, spec.spec_json, tuple(sorted(spec.properties.items())))
    finally:
        executor.nan_columns = counted
    return dataclasses.replace(p, spec=spec)


def run(*, rows: int, reps: int, workdir: str | None = None, log: Callable[[str], None] = print) -> SuiteResult:
    """Time the executor path on ``rows`` rows, ``reps`` interleaved rounds, plus one profiled run."""
    from pyspark_fenced_sink.iceberg.codec.write_properties import parquet_kwargs
    from pyspark_fenced_sink.write.task import TaskInfo, write_task

    result = SuiteResult("executor", f"Executor write path without Spark, {rows:,} rows, 1 task")
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-exec-", dir=workdir) as tmp:
        wh = str(Path(tmp) / "wh")
        data = arrow_rows(0, rows)
        batches = data.to_batches(max_chunksize=harness.SPARK_BATCH_ROWS)
        flat = harness.plan(wh, "bench.exec_flat", schema=SPARK_SCHEMA)
        daily = harness.plan(wh, "bench.exec_day", {"partition-by": "day(ts)"}, schema=SPARK_SCHEMA)
        props = dict(flat.spec.properties)
        kwargs = parquet_kwargs(props)
        row_group = int(props.get("write.parquet.row-group-limit", 1_048_576))
        raw_path = Path(tmp) / "raw.parquet"
        sizes: dict[str, int] = {}

        def raw(rep: int) -> float:
            with stopwatch() as elapsed:
                table = pa.Table.from_batches(batches)
                with pq.ParquetWriter(raw_path, table.schema, **kwargs) as w:
                    w.write_table(table, row_group_size=row_group)
            n = pq.read_metadata(raw_path).num_rows
            if n != rows:
                raise BenchmarkError(f"pyarrow floor wrote {n} rows, expected {rows}")
            sizes["pyarrow ParquetWriter (floor)"] = raw_path.stat().st_size
            raw_path.unlink()
            return elapsed()

        def task(name: str, p: Any) -> Callable[[int], float]:
            def fn(rep: int) -> float:
                with stopwatch() as elapsed:
                    res = write_task(p.spec, iter(batches), TaskInfo(0, rep + 1, None))
                if res.rows != rows or sum(f["n"] for f in res.files) != rows:
                    raise BenchmarkError(f"{name}: wrote {res.rows} rows, expected {rows}")
                sizes[name] = res.bytes
                result.data.setdefault("files", {})[name] = len(res.files)
                shutil.rmtree(_data_dir(p.spec), ignore_errors=True)
                return elapsed()

            return fn

        variants = [
            ("pyarrow ParquetWriter (floor)", raw),
            ("write_task unpartitioned", task("write_task unpartitioned", flat)),
            (NO_NANS, task(NO_NANS, _no_nans(flat))),
            ("write_task day(ts)", task("write_task day(ts)", daily)),
        ]
        samples = interleaved(variants, reps, log=log)

        nan_cpu, write_cpu = _nan_cpu_share(flat, batches)
        profiler = cProfile.Profile()
        profiler.enable()
        write_task(flat.spec, iter(batches), TaskInfo(0, 999, None))
        profiler.disable()
        shutil.rmtree(_data_dir(flat.spec), ignore_errors=True)

    floor = variants[0][0]
    result.columns = ["variant", "median s", "rows/s", "vs floor", "files", "MB written"]
    for name, _ in variants:
        s = median(samples[name])
        result.rows.append(
            {
                "variant": name,
                "median s": s,
                "rows/s": rows / s,
                "vs floor": median(paired_ratios(samples, name, floor)),
                "files": result.data.get("files", {}).get(name, 1),
                "MB written": sizes.get(name, 0) / 1e6,
            }
        )
    result.data["samples_s"] = samples
    nan_speed = median(paired_ratios(samples, "write_task unpartitioned", NO_NANS))
    result.data["nan_counts_speed"] = nan_speed
    result.data["nan_counts_cpu_share"] = nan_cpu / write_cpu
    result.notes.append(
        f"NaN counts (every float column, from the rows written; the benchmark rows have one double column): the "
        f"write with them runs at {nan_speed:.2f}x the speed of the same write without them (median of paired "
        f"rounds); counting them takes {nan_cpu * 1000:.1f} ms of CPU, {nan_cpu / write_cpu:.2%} of the write's "
        f"{write_cpu:.2f} s (process CPU time, less noisy than wall time on a shared machine)."
    )
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:10]  # type: ignore[attr-defined]
    profile = [
        {"function": f"{os.path.basename(f)}:{line}({fn})", "tottime_s": tt, "share": tt / total}
        for (f, line, fn), (_cc, _nc, tt, _ct, _callers) in top
    ]
    result.data["profile"] = profile
    result.notes.append(
        f"Floor: one pyarrow ParquetWriter.write_table of the same rows (codec {kwargs['compression']}, "
        f"row groups of {row_group:,} rows, pyarrow's default dictionary on every column); 'vs floor' = floor "
        "time / variant time, median of paired rounds."
    )
    result.notes.append(
        "Profile of one unpartitioned write_task (cProfile, self time; profiling overhead inflates Python-level "
        "calls): " + "; ".join(f"{p['function']} {p['tottime_s']:.2f}s ({p['share']:.0%})" for p in profile[:6])
    )
    return result
