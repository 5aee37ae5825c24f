"""A worker process of the latency suite: many writer threads through the real plan / task / commit path.

Started by :mod:`benchmarks.latency` (``python -m benchmarks.latency_worker``);
it installs the latency seams once (:mod:`benchmarks.latency_seams`), then
serves rounds read as JSON lines from stdin: ``run`` (table, threads, id
bases, latencies) answered by ``ready``, then ``go`` with the wall-clock start
and stop times, answered by every write's record, the request counts and the
process's CPU seconds. Each thread writes 5-row appends in a loop until the
stop time, each one ``testing.harness.plan`` -> ``write_tasks`` -> ``commit``
(what Spark's driver, one executor task and the commit worker run).

Two shapes of writer (the round's ``shape``): ``long``, a long-lived anonymous
writer (no barrier per write); ``spark``, an idempotent job per write as a Spark
application runs it — ``writer.id`` + ``writer.batch-id``, so its open puts a fence
barrier; then its executor time (``task_s``, four times longer on every other
thread: a mix of fast and slow jobs) while its barrier is pending; then its commit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

from benchmarks.latency_seams import Latency, Meter, install_catalog, install_store
from benchmarks.worker_process import MARK

#: Id span of one writer thread (the parent's ``latency.SPAN``): every other writer's base is a slow job's.
SPAN = 10**9

__all__ = ["main"]


def _send(obj: Any) -> None:
    sys.stdout.write(f"{MARK}{json.dumps(obj)}\n")
    sys.stdout.flush()


def _write(target: Any, table: str, lo: int, rows: int, job: dict[str, Any] | None = None) -> dict[str, Any]:
    """One write of ``rows`` rows with ids from ``lo``; its timings and what the commit reported.

    ``job``: the Spark shape (``writer_id``, ``batch``, ``task_s``): a writer.id job with its batch id that
    runs its executor time between its open and its commit.
    """
    from pyspark_fenced_sink.testing import harness

    t0 = time.time()
    record: dict[str, Any] = {"lo": lo, "n": rows, "t0": t0}
    try:
        if job is None:
            p = harness.plan(target, table)
        else:
            p = harness.plan(target, table, writer_id=job["writer_id"], writer_batch_id=job["batch"])
            time.sleep(job["task_s"])  # executors run; the job's barrier is pending meanwhile
        messages = harness.write_tasks(p, harness.rows("bench", lo, rows), tasks=1)
        record["t1"] = time.time()
        res = harness.commit(p, messages)
    except Exception as e:  # noqa: BLE001 - an error reaching the writer is counted, never hidden
        record.update(t2=time.time(), ok=False, error=type(e).__name__, message=str(e)[:300])
        return record
    record.update(
        t2=time.time(),
        ok=res.outcome.name == "APPLIED",
        outcome=res.outcome.name,
        seq=res.seq,
        attempts=res.attempts,
        conflicts=res.conflicts,
        catalog_commits=res.catalog_commits,
        by_peer=res.by_peer,
        group=res.group,
        helped=getattr(res, "for_peers", getattr(res, "helped", 0)),  # named helped before issue 31
        waits=getattr(res, "waits", 0),  # an earlier version's result has no waits / helper
        helper=getattr(res, "helper", False),
        waited_for=getattr(res, "waited_for", None),
    )
    return record


def _loop(
    target: Any, table: str, base: int, rows: int, start: float, stop: float, out: list[Any], shape: dict[str, Any]
) -> None:
    time.sleep(max(0.0, start - time.time()))
    k = 0
    while time.time() < stop:
        job = None
        if shape.get("kind") == "spark":
            task_s = float(shape["task_s"]) * (4.0 if shape.get("slow") else 1.0)
            job = {"writer_id": f"job-{base}", "batch": k, "task_s": task_s}
        out.append(_write(target, table, base + k * rows, rows, job))
        k += 1


#: Benchmark-only switches that turn one mechanism of the commit path off (``--ablate``), to measure the
#: mechanisms alone and together. Each patches a module attribute in this worker process only.
ABLATIONS = {
    # Claims take the tail + 1, and after a lost race the next position (no window, no holes).
    "no-spread": ("pyspark_fenced_sink.protocol.wal", "SPREAD_MAX", 1),
    # A first claim spreads over a quarter / half of the default window (fewer holes, more lost races).
    "spread-2": ("pyspark_fenced_sink.protocol.wal", "SPREAD_FACTOR", 2.0),
    "spread-4": ("pyspark_fenced_sink.protocol.wal", "SPREAD_FACTOR", 4.0),
    # Pending entries are read one GET after the other.
    "serial-reads": ("pyspark_fenced_sink.protocol.wal", "READ_THREADS", 1),
    # Every waiting writer commits as soon as it looks (no head, no patience): every writer a committer.
    "no-head": ("pyspark_fenced_sink.protocol.waiting", "CANDIDATE_SPAN", 10**9),
}


def _ablate(names: list[str]) -> None:
    import importlib

    for name in names:
        module, attr, value = ABLATIONS[name]
        setattr(importlib.import_module(module), attr, value)
    if "no-head" in names:  # a candidate whose LIST shows entries ahead still commits: it never waits
        from pyspark_fenced_sink.protocol.waiting import Waiting

        Waiting.head = lambda self: True  # type: ignore[method-assign]
    if "serial-reads" in names:
        from pyspark_fenced_sink.protocol.wal import Wal

        real = Wal.__init__

        def serial(self: Any, *args: Any, **kwargs: Any) -> None:
            real(self, *args, **{**kwargs, "parallel_reads": False})

        Wal.__init__ = serial  # type: ignore[method-assign]


def _round(cmd: dict[str, Any], latency: Latency, meter: Meter) -> None:
    from pyspark_fenced_sink.testing import harness

    target, table, rows = cmd["target"], cmd["table"], int(cmd["rows"])
    install_catalog(harness.open_catalog(target), latency, meter)
    latency.store_s, latency.table_s, latency.cas_s = cmd["store_s"], cmd["table_s"], cmd["cas_s"]
    latency.jitter = cmd["jitter"]
    _send({"ready": True})
    go = json.loads(sys.stdin.readline())
    meter.take()
    results: list[list[dict[str, Any]]] = [[] for _ in cmd["bases"]]
    shape = {"kind": cmd.get("shape", "long"), "task_s": cmd.get("task_s", 0.0)}
    threads = [
        threading.Thread(
            target=_loop,
            args=(target, table, base, rows, go["start"], go["stop"], out, {**shape, "slow": (base // SPAN) % 2 == 1}),
            daemon=True,
            name=f"w{i}",
        )
        for i, (base, out) in enumerate(zip(cmd["bases"], results, strict=True))
    ]
    cpu0 = os.times()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu1 = os.times()
    _send(
        {
            "ok": True,
            "writes": [w for out in results for w in out],
            "counts": meter.take(),
            "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
        }
    )


def main() -> None:
    """Serve rounds until ``exit`` or EOF."""
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    latency, meter = Latency(), Meter()
    install_store(latency, meter)
    _ablate([a for a in os.environ.get("FENCEDLAKE_BENCH_ABLATE", "").split(",") if a])
    import pyspark_fenced_sink.testing.harness  # noqa: F401 - import cost paid before the first round

    _send({"hello": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "exit":
            return
        try:
            _round(cmd, latency, meter)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the suite
            _send({"ok": False, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    main()
