"""``format("fencedlake_bench_profiled")``: the fencedlake sink with each task's ``write()`` under cProfile.

Exactly the fencedlake batch writer (same plan, same commit), except that every
task profiles its ``write()`` — the Arrow batches arriving from the JVM and
``executor.write_task`` — and dumps the stats to ``<option profile-dir>/task-*.prof``.
:func:`task_profile` merges them: where a Python data source task's time goes,
which Spark's own UDF profiler does not cover.
"""

from __future__ import annotations

import cProfile
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource

__all__ = ["PROFILE_DIR", "ProfiledFencedLake", "task_profile"]

PROFILE_DIR = "profile-dir"


class _ProfiledWriter(FencedLakeBatchWriter):
    profile_dir = ""

    def write(self, iterator: Iterator[Any]) -> Any:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return super().write(iterator)
        finally:
            profiler.disable()
            profiler.dump_stats(os.path.join(self.profile_dir, f"task-{uuid.uuid4().hex}.prof"))


class ProfiledFencedLake(FencedLakeDataSource):
    """fencedlake, profiling each task's write (benchmarks only)."""

    @classmethod
    def name(cls) -> str:
        return "fencedlake_bench_profiled"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        options = {k: v for k, v in self.options.items() if k.lower() != PROFILE_DIR}
        writer: Any = _ProfiledWriter.open(options, schema, overwrite)
        writer.profile_dir = self.options[PROFILE_DIR]
        return writer


def task_profile(directory: str) -> Any:
    """The tasks' profiles merged into one ``pstats.Stats`` (None if there are none)."""
    import pstats

    files = sorted(str(p) for p in Path(directory).glob("task-*.prof"))
    if not files:
        return None
    stats = pstats.Stats(files[0])
    for f in files[1:]:
        stats.add(f)
    return stats
