"""``format("fencedlake_bench_traced")``: the fencedlake sink with each Python worker step timed (issue 31's breakdown).

Exactly the fencedlake batch writer (same plan, same tasks, same commit); each
step Spark runs in a Python worker — planning (``writer()``), every task's
``write()``, the ``commit()`` — appends one JSON line to
``<option trace.dir>/<pid>.jsonl``: the write's ``trace.id``, the step, its
start and end (epoch seconds), its CPU seconds, whether the worker process was
fresh (this is its first step), the seconds spent importing the role's modules
and freezing (:func:`pyspark_fenced_sink.spark.workers.settle`; the imports are
timed even with the freeze off), garbage-collection seconds inside the step and
those since the worker's previous step (pyspark's daemon collects after every
request). :func:`breakdown` turns the lines into per-write phases.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.spark import workers
from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource

__all__ = ["TRACE_DIR", "TRACE_ID", "TracedFencedLake", "read_trace"]

TRACE_DIR = "trace.dir"
TRACE_ID = "trace.id"

_gc_seconds = [0.0]  # this worker's collections so far (wall)
_gc_cpu = [0.0]  # the same in CPU seconds
_gc_started = [0.0, 0.0]
_steps = [0]  # steps this worker ran
_last_gc = [0.0, 0.0]  # _gc_seconds and _gc_cpu at the end of the worker's previous step


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started[:] = [time.perf_counter(), time.process_time()]
    else:
        _gc_seconds[0] += time.perf_counter() - _gc_started[0]
        _gc_cpu[0] += time.process_time() - _gc_started[1]


def _born() -> float | None:
    """When this process started (epoch seconds; Linux ``/proc``), or None."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age


_BORN = _born()


def _step(directory: str, write_id: str, step: str, role: workers.Role, run: Any) -> Any:
    """Run ``run()`` as step ``step`` of write ``write_id`` and append its trace line."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)
    start, cpu0, gc0, gc_cpu0 = time.time(), time.process_time(), _gc_seconds[0], _gc_cpu[0]
    gc_cpu_between = gc_cpu0 - _last_gc[1]
    fresh = _steps[0] == 0
    between = gc0 - _last_gc[0]
    t0 = time.perf_counter()
    if role not in workers._settled:
        for name in workers._MODULES[role]:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    t1 = time.perf_counter()
    workers.settle(role)
    t2 = time.perf_counter()
    try:
        return run()
    finally:
        _steps[0] += 1
        _last_gc[:] = [_gc_seconds[0], _gc_cpu[0]]
        line = {
            "id": write_id,
            "step": step,
            "pid": os.getpid(),
            "start": start,
            "end": time.time(),
            "cpu": time.process_time() - cpu0,
            "fresh": fresh,
            "imports": t1 - t0,
            "freeze": t2 - t1,
            "gc_in": _gc_seconds[0] - gc0,
            "gc_before": between if not fresh else 0.0,
            "gc_cpu_in": _gc_cpu[0] - gc_cpu0,
            "gc_cpu_before": gc_cpu_between if not fresh else 0.0,
            "born": _BORN,
            "frozen": gc.get_freeze_count(),
        }
        with open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")


class _TracedWriter(FencedLakeBatchWriter):
    trace_dir = ""
    trace_id = ""

    def write(self, iterator: Iterator[Any]) -> Any:
        run = super().write
        return _step(self.trace_dir, self.trace_id, "task", workers.Role.WRITE_TASK, lambda: run(iterator))

    def commit(self, messages: Sequence[Any]) -> None:
        run = super().commit
        _step(self.trace_dir, self.trace_id, "commit", workers.Role.DRIVER, lambda: run(messages))


class TracedFencedLake(FencedLakeDataSource):
    """fencedlake, tracing each Python worker step (benchmarks only)."""

    @classmethod
    def name(cls) -> str:
        return "fencedlake_bench_traced"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        options = {k: v for k, v in self.options.items() if k.lower() not in (TRACE_DIR, TRACE_ID)}
        directory, write_id = self.options[TRACE_DIR], self.options[TRACE_ID]

        def plan() -> Any:
            writer: Any = _TracedWriter.open(options, schema, overwrite)
            writer.trace_dir, writer.trace_id = directory, write_id
            return writer

        return _step(directory, write_id, "plan", workers.Role.DRIVER, plan)


def read_trace(directory: str) -> dict[str, list[dict[str, Any]]]:
    """The trace lines of every write, by ``trace.id``, in start order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in Path(directory).glob("*.jsonl"):
        for text in path.read_text().splitlines():
            line = json.loads(text)
            out.setdefault(line["id"], []).append(line)
    for lines in out.values():
        lines.sort(key=lambda x: x["start"])
    return out
