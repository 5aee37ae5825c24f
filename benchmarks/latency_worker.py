"""A worker process of the latency suite: many writer threads through the real plan / task / commit path.

Started by :mod:`benchmarks.latency` (``python -m benchmarks.latency_worker``);
it installs the latency seams once (:mod:`benchmarks.latency_seams`), then
serves rounds read as JSON lines from stdin: ``run`` (table, threads, id
bases, latencies) answered by ``ready``, then ``go`` with the wall-clock start
and stop times, answered by every write's record, the request counts and the
process's CPU seconds. Each thread writes 5-row appends in a loop until the
stop time, each one ``testing.harness.plan`` -> ``write_tasks`` -> ``commit``
(what Spark's driver, one executor task and the commit worker run).
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

__all__ = ["MARK", "main"]

MARK = "@@"  # protocol lines on stdout start with this


def _send(obj: Any) -> None:
    sys.stdout.write(f"{MARK}{json.dumps(obj)}\n")
    sys.stdout.flush()


def _write(target: Any, table: str, lo: int, rows: int) -> dict[str, Any]:
    """One write of ``rows`` rows with ids from ``lo``; its timings and what the commit reported."""
    from pyspark_fenced_sink.testing import harness

    t0 = time.time()
    record: dict[str, Any] = {"lo": lo, "n": rows, "t0": t0}
    try:
        p = harness.plan(target, table)
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
        helped=res.helped,
        waits=res.waits,
        helper=res.helper,
    )
    return record


def _loop(target: Any, table: str, base: int, rows: int, start: float, stop: float, out: list[Any]) -> None:
    time.sleep(max(0.0, start - time.time()))
    k = 0
    while time.time() < stop:
        out.append(_write(target, table, base + k * rows, rows))
        k += 1


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
    threads = [
        threading.Thread(
            target=_loop, args=(target, table, base, rows, go["start"], go["stop"], out), daemon=True, name=f"w{i}"
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
    if os.environ.get("FENCEDLAKE_BENCH_PHASES"):  # ad-hoc profiling hook (experiments only)
        sys.path.insert(0, os.environ["FENCEDLAKE_BENCH_PHASES"])
        import phases

        phases.install()
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
