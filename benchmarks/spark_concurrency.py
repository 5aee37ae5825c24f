"""Suite "spark-concurrency": small Spark appends from T threads of one app, fencedlake vs native Parquet (issue 31).

What a user sees when a few jobs of one application append at once: one
``local[2]`` session (:func:`pyspark_fenced_sink.tune_session` applied), T
threads (1 and 4), each doing R appends of a 5,000-row frame into one table,
for three writers:

* ``native``: Spark's Parquet writer, ``df.write.mode("append").parquet(dir)``
  (the baseline; each thread appends to its own directory: concurrent appends
  to one directory race on its ``_temporary`` staging directory and lose
  rows or fail, as Hadoop's file committer supports one job per path);
* ``anonymous``: ``format("fencedlake")`` with no writer identity;
* ``idempotent``: ``format("fencedlake")`` as the README recommends for jobs
  that may be re-run: ``writer.id`` per thread + an increasing ``writer.batch-id``.

Each write is timed from ``save()`` to its return. The writers run in rounds,
alternating their order, so the machine's load falls on all alike; a warm-up
round (1 thread, not measured) starts the session's Python workers, then one
round at the largest T (reported apart: its maxima are what the first
overlapping writes cost while Spark forks more Python workers). Reported
per writer and T: p50 / p90 / p99 / max, and the goal of issue 31:

    contention ratio = (fencedlake p50 at 4 / native p50 at 4) / (fencedlake p50 alone / native p50 alone)

(goal <= 1.5: contention costs fencedlake no more than it costs the native
writer), and fencedlake p99 at 4 <= 3 x native p99 at 4 + the solo overhead.
The commit records of each fencedlake table (``ops.commit_stats``, what
``fencedlake status`` shows) give the helper commits (goal: 0), the writes a
peer's commit applied and why committers waited. Every table's row count is
verified. A missed goal is a ``WARN`` line, never a failure.

``FENCEDLAKE_GC_FREEZE=0`` in the environment of the run turns off the sink's
``gc.freeze()`` in its Python workers (``spark.workers``): run the suite with
and without it to see what the freeze buys.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult, median, percentile, ratio

__all__ = ["GOAL_CONTENTION_RATIO", "MODES", "run"]

NATIVE, ANONYMOUS, IDEMPOTENT = "native", "anonymous", "idempotent"
MODES = (NATIVE, ANONYMOUS, IDEMPOTENT)
#: Issue 31: (fencedlake p50 at 4 / native p50 at 4) / (fencedlake p50 alone / native p50 alone) at most this.
GOAL_CONTENTION_RATIO = 1.5
#: Issue 31: fencedlake p99 at 4 at most this times native's p99 at 4, plus the solo overhead.
GOAL_P99_FACTOR = 3.0


def _frame(spark: Any, start: int, rows: int) -> Any:
    """``rows`` rows of the benchmark schema with ids ``start ..``, in 2 partitions (not cached)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    h = F.xxhash64("id")
    return spark.range(start, start + rows, 1, 2).select(
        F.col("id"),
        F.timestamp_seconds(F.lit(1_767_225_600) + F.pmod(F.col("id") * 7919, 86_400 * 30)).alias("ts"),
        F.pmod(h, 1_000_000).cast("int").alias("user_id"),
        F.concat(F.lit("c"), F.pmod(h, 500).cast("string")).alias("code"),
        (F.pmod(h, 10_000_000) / 100.0).alias("value"),
    )


class _Target:
    """One writer mode at one thread count: its table (or directory), its ids, its writer identities."""

    def __init__(
        self, spark: Any, mode: str, threads: int, tmp: Path, rows: int, trace: Path | None, app: int = 0
    ) -> None:
        self.spark, self.mode, self.threads, self.rows, self.trace, self.app = spark, mode, threads, rows, trace, app
        self.wh = str(tmp / "wh")
        self.table = f"bench.cc_{mode}_t{threads}"
        self.path = str(tmp / f"native_t{threads}_app{app}")
        self.samples: list[float] = []
        self.by_id: dict[str, float] = {}  # trace id -> seconds of the measured writes
        self.began: dict[str, float] = {}  # trace id -> epoch seconds its save() was called
        self.failures: list[str] = []
        self.written = 0
        self._next_id = app * 10**12  # apps sharing a warehouse write disjoint ids
        self._batch: dict[int, int] = {}
        self._lock = threading.Lock()

    def _claim(self, thread: int) -> tuple[int, int]:
        with self._lock:
            start, self._next_id = self._next_id, self._next_id + self.rows
            self._batch[thread] = batch = self._batch.get(thread, -1) + 1
        return start, batch

    def write(self, thread: int, record: bool) -> float:
        """One append from pool thread ``thread``; returns its seconds (failures are recorded, not raised)."""
        start, batch = self._claim(thread)
        write_id = f"{self.mode}-t{self.threads}-{start}"
        frame = _frame(self.spark, start, self.rows)
        began, t0 = time.time(), time.perf_counter()
        try:
            if self.mode == NATIVE:
                frame.write.mode("append").option("compression", "zstd").parquet(f"{self.path}/thread-{thread}")
            else:
                fmt = "fencedlake" if self.trace is None else "fencedlake_bench_traced"
                writer = frame.write.format(fmt).mode("append").option("warehouse", self.wh)
                if self.trace is not None:
                    writer = writer.option("trace.dir", str(self.trace)).option("trace.id", write_id)
                if self.mode == IDEMPOTENT:
                    writer = writer.option("writer.id", f"job-a{self.app}-t{self.threads}-{thread}")
                    writer = writer.option("writer.batch-id", str(batch))
                writer.save(self.table)
        except Exception as e:  # noqa: BLE001 - a surfaced error is a result of the run (counted, reported)
            with self._lock:
                self.failures.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            return time.perf_counter() - t0
        seconds = time.perf_counter() - t0
        with self._lock:
            self.written += self.rows
            if record:
                self.by_id[write_id], self.began[write_id] = seconds, began
        return seconds

    def rows_out(self) -> int:
        """Rows the table (directory) holds now."""
        if self.mode == NATIVE:
            if not Path(self.path).exists():
                return 0
            return int(self.spark.read.option("recursiveFileLookup", "true").parquet(self.path).count())
        from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

        snapshot = embedded_catalog(self.wh).load_table(self.table).current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        return int(summary.get("total-records", 0))

    def commit_stats(self) -> dict[str, Any]:
        """``ops.commit_stats`` over every commit of the table (``fencedlake status``)."""
        from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
        from pyspark_fenced_sink.ops.commit_stats import commit_stats

        return commit_stats(embedded_catalog(self.wh).load_table(self.table), 1_000_000)


def _round(targets: Sequence[_Target], threads: int, writes: int, record: bool, spark: Any) -> float:
    """``threads`` threads each doing ``writes`` appends through each target in turn; wall seconds."""
    from pyspark_fenced_sink import activate_session

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads, initializer=activate_session, initargs=(spark,)) as pool:
        for target in targets:
            seconds = list(pool.map(lambda i, t=target: [t.write(i, record) for _ in range(writes)], range(threads)))
            if record:
                target.samples.extend(s for per_thread in seconds for s in per_thread)
    return time.perf_counter() - t0


def _stats(samples: Sequence[float]) -> dict[str, float]:
    return {
        "p50": median(samples),
        "p90": percentile(samples, 90),
        "p99": percentile(samples, 99),
        "max": max(samples, default=float("nan")),
    }


def run(
    *,
    spark: Any,
    threads: Sequence[int] = (1, 4),
    writes: int = 2,
    rounds: int = 1,
    rows: int = 5_000,
    app: int | None = None,
    warehouse: str | None = None,
    trace: bool = False,
    warm: bool = True,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Measure every mode at every thread count, ``rounds`` interleaved rounds of ``writes`` appends per thread.

    ``trace``: fencedlake writes go through ``benchmarks.traced_sink`` (the same sink, each Python
    worker step timed) and the result gets the per-write breakdown of ``traced_sink.breakdown``.
    ``warm``: after the warm-up round, start the Python workers ``max(threads)`` concurrent writes
    need (``pyspark_fenced_sink.warm_workers``, what ``tune_session(spark, writers=N)`` does);
    false: the pools grow when the writes first overlap (in the unmeasured overlapping round, or
    in a measured one if that round did not reach a step ``max(threads)`` at once).
    ``app`` and ``warehouse``: one of several applications run at once against one warehouse
    (their ids disjoint; each checks that the tables hold at least its own rows, the caller
    checks the sum).
    """
    from pyspark_fenced_sink.spark.workers import GC_FREEZE_ENV

    freeze = os.environ.get(GC_FREEZE_ENV, "1")
    result = SuiteResult(
        "spark-concurrency",
        f"Concurrent Spark appends of {rows:,} rows, fencedlake vs native Parquet (local[2], "
        f"{writes} writes per thread x {rounds} rounds; {GC_FREEZE_ENV}={freeze}"
        + (f", worker pools warmed for {max(threads)} writes" if warm else ", worker pools not warmed")
        + ")",
        columns=["writer", "threads", "writes", "p50 s", "p90 s", "p99 s", "max s", "p50 vs native", "failed"],
    )
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-cc-", dir=workdir) as tmp_name:
        tmp = Path(warehouse) if warehouse else Path(tmp_name)
        trace_dir = tmp / "trace" if trace else None
        source = "fencedlake"  # the format the fencedlake writes name (the traced one gets pools of its own)
        if trace_dir is not None:
            from benchmarks.traced_sink import TracedFencedLake

            trace_dir.mkdir(parents=True, exist_ok=True)
            spark.dataSource.register(TracedFencedLake)
            source = TracedFencedLake.name()
        targets = {(m, t): _Target(spark, m, t, tmp, rows, trace_dir, app or 0) for t in threads for m in MODES}
        first = [_Target(spark, m, 0, tmp, rows, trace_dir, app or 0) for m in MODES]
        log(f"  warm-up: one write per writer ({_round(first, 1, 1, False, spark):.1f}s)")
        if warm:
            from pyspark_fenced_sink import warm_workers

            warmed = warm_workers(spark, max(threads), source=source)
            result.data["warm_up"] = warmed
            log(f"  Python workers warmed for {max(threads)} writes: {warmed['seconds']:.1f}s, met {warmed['met']}")
        many = max(threads)
        if many > 1:  # the first overlapping writes: Spark forks more Python workers; reported apart
            log(f"  first overlapping writes, T={many}: {_round(first, many, 1, True, spark):.1f}s")
            growth = {x.mode: max(x.samples, default=math.nan) for x in first}
            result.data["pool_growth_max_s"] = growth
            result.notes.append(
                f"first {many} overlapping writes per writer (before the measured rounds; Spark starts more Python "
                "workers for them): max " + ", ".join(f"{m} {v:.2f}s" for m, v in growth.items())
            )
        for r in range(rounds):
            for t in threads:
                order = [targets[(m, t)] for m in (MODES if (r + t) % 2 == 0 else reversed(MODES))]
                seconds = _round(order, t, writes, True, spark)
                log(f"  round {r + 1}/{rounds} T={t}: {seconds:.1f}s ({', '.join(x.mode for x in order)})")
            load.append(os.getloadavg()[0])
        for target in targets.values():
            expected, found = target.written, target.rows_out()
            if found != expected and not (warehouse and found >= expected):
                raise BenchmarkError(f"{target.mode} T={target.threads}: {found} rows, expected {expected}")
        stats = {k: _stats(v.samples) for k, v in targets.items()}
        for (mode, t), target in targets.items():
            s = stats[(mode, t)]
            result.rows.append(
                {
                    "writer": mode,
                    "threads": t,
                    "writes": len(target.samples),
                    "p50 s": s["p50"],
                    "p90 s": s["p90"],
                    "p99 s": s["p99"],
                    "max s": s["max"],
                    "p50 vs native": ratio(s["p50"], stats[(NATIVE, t)]["p50"]),
                    "failed": len(target.failures),
                }
            )
            if target.failures:
                result.notes.append(f"{mode} T={t}: {len(target.failures)} failed writes, e.g. {target.failures[0]}")
        _goals(result, stats, threads)
        for (mode, t), target in targets.items():
            if mode == NATIVE:
                continue
            cs = target.commit_stats()
            helpers = cs.get("helper_commits", 0)
            result.data.setdefault("commit_stats", {})[f"{mode}/{t}"] = cs
            result.notes.append(
                f"{mode} T={t}: {cs.get('commits', 0)} commits, {helpers} helper commits, "
                f"{cs.get('writes_by_peer_commit', 0)} writes applied by a peer's commit, waits "
                f"{cs.get('committer_waits') or 'none'}"
            )
            if helpers:
                result.warnings.append(f"{mode} T={t}: {helpers} helper commits (goal 0)")
        result.data["samples"] = {f"{m}/{t}": v.samples for (m, t), v in targets.items()}
        if trace_dir is not None:
            from benchmarks.traced_sink import breakdown

            fenced = {(m, t): (x.by_id, x.began) for (m, t), x in targets.items() if m != NATIVE}
            breakdown(result, fenced, trace_dir)
        result.data["gc_freeze"] = freeze
        result.notes.append(
            "load average (1 min) " + " -> ".join(f"{x:.1f}" for x in load) + "; each write timed from save() to return"
        )
        result.data["written"] = {f"{m}/{t}": v.written for (m, t), v in targets.items()}
        if not warehouse:
            shutil.rmtree(tmp / "wh", ignore_errors=True)
    return result


def _goals(result: SuiteResult, stats: dict[tuple[str, int], dict[str, float]], threads: Sequence[int]) -> None:
    """The contention ratio and p99 goals of issue 31, per fencedlake mode, for the largest T against T=1."""
    if 1 not in threads or max(threads) == 1:
        return
    many = max(threads)
    nat1, natn = stats[(NATIVE, 1)], stats[(NATIVE, many)]
    for mode in (ANONYMOUS, IDEMPOTENT):
        fl1, fln = stats[(mode, 1)], stats[(mode, many)]
        contention = ratio(ratio(fln["p50"], natn["p50"]), ratio(fl1["p50"], nat1["p50"]))
        p99_bound = GOAL_P99_FACTOR * natn["p99"] + max(0.0, fl1["p50"] - nat1["p50"])
        result.data.setdefault("goals", {})[mode] = {"contention_ratio": contention, "p99_bound_s": p99_bound}
        result.notes.append(
            f"{mode}: contention ratio (fl/native p50 at {many}) / (fl/native p50 alone) = {contention:.2f} "
            f"(goal <= {GOAL_CONTENTION_RATIO}); p99 at {many} {fln['p99']:.2f}s vs bound {p99_bound:.2f}s"
        )
        if not contention <= GOAL_CONTENTION_RATIO:
            result.warnings.append(
                f"{mode}: contention ratio {contention:.2f} > {GOAL_CONTENTION_RATIO} "
                f"(fl p50 {fl1['p50']:.2f}s alone, {fln['p50']:.2f}s at {many}; native {nat1['p50']:.2f}s, "
                f"{natn['p50']:.2f}s)"
            )
        if not fln["p99"] <= p99_bound:
            result.warnings.append(
                f"{mode}: p99 at {many} {fln['p99']:.2f}s > {GOAL_P99_FACTOR:g} x native p99 + solo overhead "
                f"= {p99_bound:.2f}s"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.spark_concurrency [--threads 1,4] [--writes 4] [--rounds 3] [--trace] [--no-warm]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_concurrency", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,4", help="comma-separated thread counts [1,4]")
    p.add_argument("--writes", type=int, default=4, help="appends per thread per round [4]")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds [3]")
    p.add_argument("--rows", type=int, default=5_000, help="rows per append [5000]")
    p.add_argument("--trace", action="store_true", help="time each Python worker step (the breakdown table)")
    p.add_argument("--no-warm", action="store_true", help="do not warm the Python worker pools for max(threads) writes")
    p.add_argument("--app", type=int, help="this application's index when several share --warehouse")
    p.add_argument("--warehouse", help="a directory several applications share (kept after the run)")
    p.add_argument("--json", help="also write the result as JSON to this file")
    args = p.parse_args(argv)
    from benchmarks.throughput import spark_session

    spark = spark_session()
    try:
        res = run(
            spark=spark,
            threads=[int(t) for t in args.threads.split(",")],
            writes=args.writes,
            rounds=args.rounds,
            rows=args.rows,
            trace=args.trace,
            warm=not args.no_warm,
            app=args.app,
            warehouse=args.warehouse,
        )
    finally:
        spark.stop()
    print(res.markdown())
    if args.json:
        import json

        Path(args.json).write_text(json.dumps(res.to_json(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
