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
import math
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import SuiteResult, markdown_table, median
from pyspark_fenced_sink.spark import workers
from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource
from pyspark_fenced_sink.spark.warmup import WARM_UP

__all__ = ["PHASES", "TRACE_DIR", "TRACE_ID", "TracedFencedLake", "breakdown", "read_trace"]

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
        if WARM_UP in self.options:  # warm_workers(spark, n, source=name()): this source's own pools
            return super().writer(schema, overwrite)
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


#: The breakdown's columns: per-write medians (ms) of each phase (benchmarks.traced_sink's lines).
PHASES = (
    "total",
    "plan",
    "tasks",
    "commit",
    "spark + JVM",
    "imports",
    "freeze",
    "gc in steps",
    "gc between requests",
    "gc cpu between requests",
    "cpu in workers",
)


def breakdown(
    result: SuiteResult, writes: dict[tuple[str, int], tuple[dict[str, float], dict[str, float]]], trace_dir: Path
) -> None:
    """Where a fencedlake write's time went, per mode and T: medians over the measured writes (ms).

    ``writes``: (mode, T) -> (trace id -> the write's seconds, trace id -> when its ``save()`` began).

    ``plan``, ``tasks`` (first task start to last task end) and ``commit`` are wall times of the
    Python worker steps; ``spark + JVM`` is the rest of ``save()`` (job scheduling, the JVM's round
    trips, waiting for a free worker or a fork); ``imports`` and ``freeze`` are the steps' module
    imports and ``gc.freeze`` (non-zero only in fresh workers), ``gc in steps`` the collections
    during the steps, ``gc between requests`` pyspark's collection after each of the write's
    workers' previous request (CPU the next request may wait for). ``fresh`` counts the steps that
    ran in a newly forked worker.
    """
    lines = read_trace(str(trace_dir))
    table: list[dict[str, Any]] = []
    for (mode, t), (by_id, began) in writes.items():
        per: dict[str, list[float]] = {k: [] for k in PHASES}
        fresh = {"plan": 0, "task": 0, "commit": 0}
        slow: list[tuple[float, str, str, dict[str, float], list[dict[str, Any]]]] = []
        for write_id, total in by_id.items():
            steps = lines.get(write_id, [])
            plan = [x for x in steps if x["step"] == "plan"]
            tasks = [x for x in steps if x["step"] == "task"]
            commit = [x for x in steps if x["step"] == "commit"]
            if not (plan and tasks and commit):
                continue
            wall = {
                "plan": plan[0]["end"] - plan[0]["start"],
                "tasks": max(x["end"] for x in tasks) - min(x["start"] for x in tasks),
                "commit": commit[0]["end"] - commit[0]["start"],
            }
            values = {
                "total": total,
                **wall,
                "spark + JVM": total - sum(wall.values()),
                "imports": sum(x["imports"] for x in steps),
                "freeze": sum(x["freeze"] for x in steps),
                "gc in steps": sum(x["gc_in"] for x in steps),
                "gc between requests": sum(x["gc_before"] for x in steps),
                "gc cpu between requests": sum(x.get("gc_cpu_before", math.nan) for x in steps),
                "cpu in workers": sum(x["cpu"] for x in steps),
            }
            for k, v in values.items():
                per[k].append(v * 1000)
            for x in steps:  # a worker started after the write began was forked for it (or for a peer's)
                born = x.get("born")
                fresh[x["step"]] += int(x["fresh"] if born is None else born >= began[write_id] - 0.5)
            slow.append((total, write_id, f"{mode}/{t}", values, steps))
        row: dict[str, Any] = {"writer": mode, "threads": t, "writes": len(per["total"])}
        row.update({k: median(v) for k, v in per.items()})
        row["fresh workers (plan/task/commit)"] = "/".join(str(n) for n in fresh.values())
        table.append(row)
        slow.sort(key=lambda x: x[0], reverse=True)
        for _total, write_id, key, values, steps in slow[:2]:
            result.data.setdefault("slowest", {}).setdefault(key, []).append(
                {"id": write_id, "phases_ms": {k: v * 1000 for k, v in values.items()}, "steps": steps}
            )
    result.data["breakdown"] = table
    cols = ["writer", "threads", "writes", *PHASES, "fresh workers (plan/task/commit)"]
    result.notes.append(
        "breakdown, median ms per write (benchmarks.traced_sink):\n\n" + markdown_table(cols, table) + "\n"
    )
