"""Run the fencedlake benchmarks: ``python -m benchmarks.run --quick|--full [--suites a,b]``.

Suites (docs/benchmarks.md says what each measures and shows a run's numbers):

* ``requests``      object-store requests per uncontended commit, by kind, vs a plain pyiceberg append;
* ``latency``       the commit path at cloud latency: W writer threads, injected store / table-read /
                    catalog CAS latency; writes/s, p99, group factor, requests per landed write;
* ``group-commit``  contention: N concurrent committer processes, fencedlake vs naive pyiceberg
                    (default retries, retries off): landed/failed writes, rows landed/s, latency,
                    catalog commits, group-commit factor;
* ``scaling``       commit latency and requests vs WAL history and snapshot history; manifest merge
                    on vs off (commit latency, manifests, scan planning);
* ``executor``      the executor write path without Spark vs pyarrow's ParquetWriter;
* ``throughput``    Spark: native Parquet vs format("fencedlake") vs collect + pyiceberg append,
                    unpartitioned and by day;
* ``spark-concurrency`` Spark: T threads of one app (1 and 4) appending 5,000-row frames into one table,
                    native Parquet vs fencedlake anonymous vs idempotent (``writer.id`` + ``writer.batch-id``):
                    p50/p90/p99/max, the contention ratio of issue 31, helper commits;
* ``streaming``     Structured Streaming: per-batch overhead and sustained rows/s, fencedlake vs
                    the native Parquet file sink;
* ``overwrite``     a dynamic overwrite of 1 of 30 day partitions vs Spark's own
                    ``partitionOverwriteMode=dynamic`` Parquet write;
* ``read``          Spark reads: full scan and a selective filter, spark.read.format("fencedlake") vs
                    native Parquet on the same files vs pyiceberg to_arrow + createDataFrame;
* ``compaction``    a table of many small files from streaming-like appends: planning and full-scan
                    time (fencedlake reader, DuckDB) before and after ``compact``, and its time;
* ``upsert``        upserts by key into 1M/10M-row tables vs appending the same rows vs pyiceberg
                    ``Table.upsert``; files read per commit; executor and committer peak memory; read
                    cost with delete files before and after compaction; N concurrent upserters.

``--quick`` is CI's smoke run (small sizes, one repetition, a few minutes at
most); ``--full`` is the real measurement. Results go to
``.benchmarks-out/results-{quick,full}.json`` and ``.md`` plus PNG charts (and are
printed); ``--out docs/benchmarks`` publishes a run.
Every number is a ratio to a baseline measured in the same run; the run
fails (exit 1) only if a suite raised or verified a wrong row count, never
because a number is slow. Missed targets are printed as ``WARN`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import SuiteResult

ROOT = Path(__file__).resolve().parents[1]
SUITES = (
    "requests",
    "latency",
    "group-commit",
    "scaling",
    "executor",
    "throughput",
    "spark-concurrency",
    "streaming",
    "overwrite",
    "read",
    "compaction",
    "upsert",
)
SPARK_SUITES = ("throughput", "spark-concurrency", "streaming", "overwrite", "read", "compaction")

PROFILES: dict[str, dict[str, Any]] = {
    "quick": {
        "throughput_rows": [200_000],
        "throughput_reps": 1,
        "executor_rows": 300_000,
        "executor_reps": 1,
        "request_reps": 1,
        "writers": [8],
        "latency_writers": [8, 32],
        "latency_seconds": 5.0,
        "latency_warmup": 2.0,
        "latency_procs": 2,
        "latency_shapes": ["long", "spark"],
        "total_writes": 24,
        "min_commits": 3,
        "gc_reps": 1,
        "wal_sizes": [100, 1000],
        "snapshot_sizes": [10, 50],
        "merge_sizes": [10, 30],
        "merge_min_count": 10,
        "scaling_commits": 3,
        "cc_threads": [1, 4],
        "cc_writes": 1,
        "cc_rounds": 1,
        "cc_trace": False,
        "stream_small_rows": 1000,
        "stream_small_batches": 8,
        "stream_large_rows": 200_000,
        "stream_large_batches": 5,
        "stream_reps": 1,
        "overwrite_rows": 60_000,
        "overwrite_reps": 1,
        "read_rows": 200_000,
        "read_reps": 1,
        "compaction_commits": 20,
        "compaction_files_per_commit": 5,
        "compaction_rows_per_file": 200,
        "compaction_reps": 1,
        "upsert_sizes": [100_000, 300_000],
        "upsert_changes": 10_000,
        "upsert_reps": 1,
        "upsert_pyiceberg_max_rows": 300_000,
        "upsert_read_upserts": 3,
        "upsert_writers": [4],
        "upsert_contention_writes": 3,
        "upsert_contention_rows": 100,
    },
    "full": {
        "throughput_rows": [1_000_000, 10_000_000],
        "throughput_reps": 3,
        "executor_rows": 5_000_000,
        "executor_reps": 5,
        "request_reps": 3,
        "writers": [8, 32, 64],
        "latency_writers": [8, 32, 128, 512],
        "latency_seconds": 30.0,
        "latency_warmup": 5.0,
        "latency_procs": 4,
        "latency_shapes": ["long", "spark"],
        "total_writes": 256,
        "min_commits": 4,
        "gc_reps": 2,
        "wal_sizes": [100, 1000, 10_000],
        "snapshot_sizes": [10, 100, 1000],
        "merge_sizes": [10, 100, 1000],
        "merge_min_count": None,
        "scaling_commits": 10,
        "cc_threads": [1, 4],
        "cc_writes": 4,
        "cc_rounds": 3,
        "cc_trace": True,
        "stream_small_rows": 1000,
        "stream_small_batches": 20,
        "stream_large_rows": 1_000_000,
        "stream_large_batches": 10,
        "stream_reps": 2,
        "overwrite_rows": 3_000_000,
        "overwrite_reps": 5,
        "read_rows": 10_000_000,
        "read_reps": 3,
        "compaction_commits": 400,
        "compaction_files_per_commit": 5,
        "compaction_rows_per_file": 500,
        "compaction_reps": 3,
        "upsert_sizes": [1_000_000, 10_000_000],
        "upsert_changes": 100_000,
        "upsert_reps": 3,
        "upsert_pyiceberg_max_rows": 1_000_000,
        "upsert_read_upserts": 5,
        "upsert_writers": [8, 32],
        "upsert_contention_writes": 5,
        "upsert_contention_rows": 100,
    },
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="CI smoke run (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="the real measurement")
    p.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated subset of: {', '.join(SUITES)}")
    p.add_argument(
        "--rows", help="throughput: comma-separated frame sizes, e.g. 1000000,10000000 (overrides the mode's)"
    )
    p.add_argument("--executor-rows", type=int, help="rows of the executor suite")
    p.add_argument("--read-rows", type=int, help="rows of the read suite's table")
    p.add_argument("--reps", type=int, help="interleaved repetitions for every suite (overrides the mode's)")
    p.add_argument("--writers", help="comma-separated N for group-commit, e.g. 8,32,64 (N=1 is always the baseline)")
    p.add_argument("--latency-writers", help="comma-separated W for the latency suite, e.g. 8,32,128,512")
    p.add_argument("--latency-seconds", type=float, help="latency: measured seconds per round")
    p.add_argument("--total-writes", type=int, help="group-commit: about this many writes per round")
    p.add_argument("--wal-sizes", help="scaling: comma-separated WAL history sizes, e.g. 1000,10000")
    p.add_argument("--snapshot-sizes", help="scaling: comma-separated snapshot history sizes, e.g. 10,100,1000")
    p.add_argument("--merge-sizes", help="scaling: commits per manifest-merge point, e.g. 10,100,1000 ('' for none)")
    p.add_argument("--partitions", type=int, default=2, help="throughput: Spark tasks per write [2]")
    p.add_argument("--no-collect", action="store_true", help="throughput: leave out the collect+pyiceberg writers")
    p.add_argument(
        "--table-prop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="throughput: add a fencedlake writer whose table has these properties (repeatable; an experiment)",
    )
    p.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="throughput: Spark conf (repeatable)"
    )
    p.add_argument("--out", default=str(ROOT / ".benchmarks-out"), help="results directory [.benchmarks-out]")
    p.add_argument(
        "--merge",
        action="store_true",
        help="replace only the suites run in an existing results-<mode>.json of --out (keep the others)",
    )
    p.add_argument("--plot-dir", help="where the PNG charts go [the results directory]")
    p.add_argument("--workdir", help="scratch directory for tables and files [system temp]")
    p.set_defaults(mode="quick")
    args = p.parse_args(argv)
    args.suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = sorted(set(args.suites) - set(SUITES))
    if unknown:
        p.error(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)}")
    return args


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("pyspark", "pyarrow", "pyiceberg"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "?"
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the selected suites; print and save the results; 0 unless a suite failed."""
    args = _parse(argv)
    prof = dict(PROFILES[args.mode])
    if args.rows:
        prof["throughput_rows"] = [int(n) for n in args.rows.replace("_", "").split(",")]
    if args.executor_rows:
        prof["executor_rows"] = args.executor_rows
    if args.reps:
        prof.update(
            throughput_reps=args.reps,
            executor_reps=args.reps,
            request_reps=args.reps,
            gc_reps=args.reps,
            stream_reps=args.reps,
            overwrite_reps=args.reps,
            read_reps=args.reps,
            compaction_reps=args.reps,
            upsert_reps=args.reps,
        )
    if args.read_rows:
        prof["read_rows"] = args.read_rows
    if args.writers:
        prof["writers"] = [int(n) for n in args.writers.split(",")]
    if args.total_writes:
        prof["total_writes"] = args.total_writes
    if args.latency_writers:
        prof["latency_writers"] = [int(n) for n in args.latency_writers.split(",")]
    if args.latency_seconds:
        prof["latency_seconds"] = args.latency_seconds
    if args.wal_sizes:
        prof["wal_sizes"] = [int(n) for n in args.wal_sizes.split(",")]
    if args.snapshot_sizes:
        prof["snapshot_sizes"] = [int(n) for n in args.snapshot_sizes.split(",")]
    if args.merge_sizes is not None:
        prof["merge_sizes"] = [int(n) for n in args.merge_sizes.split(",") if n.strip()]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    sessions: list[Any] = []

    def spark() -> Any:
        """One local[2] session shared by the Spark suites (a cold start costs ~7 s)."""
        if not sessions:
            sessions.append(_import("throughput").spark_session(conf=_pairs(args.spark_conf)))
        return sessions[0]

    runners: dict[str, Callable[[], SuiteResult]] = {
        "requests": lambda: _import("request_budget").run(reps=prof["request_reps"], workdir=args.workdir, log=log),
        "latency": lambda: _import("latency").run(
            writers=prof["latency_writers"],
            seconds=prof["latency_seconds"],
            warmup=prof["latency_warmup"],
            procs=prof["latency_procs"],
            shapes=prof["latency_shapes"],
            workdir=args.workdir,
            log=log,
        ),
        "group-commit": lambda: _import("group_commit").run(
            writers=prof["writers"],
            total_writes=prof["total_writes"],
            min_commits=prof["min_commits"],
            reps=prof["gc_reps"],
            workdir=args.workdir,
            log=log,
        ),
        "executor": lambda: _import("executor_path").run(
            rows=prof["executor_rows"], reps=prof["executor_reps"], workdir=args.workdir, log=log
        ),
        "scaling": lambda: _import("scaling").run(
            wal_sizes=prof["wal_sizes"],
            snapshot_sizes=prof["snapshot_sizes"],
            merge_sizes=prof["merge_sizes"],
            merge_min_count=prof["merge_min_count"],
            commits=prof["scaling_commits"],
            workdir=args.workdir,
            log=log,
        ),
        "throughput": lambda: _import("throughput").run(
            rows=prof["throughput_rows"],
            reps=prof["throughput_reps"],
            partitions=args.partitions,
            extra_table_props=_pairs(args.table_prop),
            spark_conf=_pairs(args.spark_conf),
            spark=spark(),
            collect=not args.no_collect,
            workdir=args.workdir,
            log=log,
        ),
        "spark-concurrency": lambda: _import("spark_concurrency").run(
            spark=spark(),
            threads=prof["cc_threads"],
            writes=prof["cc_writes"],
            rounds=args.reps or prof["cc_rounds"],
            trace=prof["cc_trace"],
            workdir=args.workdir,
            log=log,
        ),
        "streaming": lambda: _import("streaming").run(
            spark=spark(),
            small_rows=prof["stream_small_rows"],
            small_batches=prof["stream_small_batches"],
            large_rows=prof["stream_large_rows"],
            large_batches=prof["stream_large_batches"],
            reps=prof["stream_reps"],
            workdir=args.workdir,
            log=log,
        ),
        "overwrite": lambda: _import("overwrite").run(
            spark=spark(), rows=prof["overwrite_rows"], reps=prof["overwrite_reps"], workdir=args.workdir, log=log
        ),
        "read": lambda: _import("read").run(
            spark=spark(),
            rows=prof["read_rows"],
            reps=prof["read_reps"],
            partitions=args.partitions,
            workdir=args.workdir,
            log=log,
        ),
        "compaction": lambda: _import("compaction").run(
            spark=spark(),
            commits=prof["compaction_commits"],
            files_per_commit=prof["compaction_files_per_commit"],
            rows_per_file=prof["compaction_rows_per_file"],
            reps=prof["compaction_reps"],
            workdir=args.workdir,
            log=log,
        ),
        "upsert": lambda: _import("upsert").run(
            sizes=prof["upsert_sizes"],
            changes_count=prof["upsert_changes"],
            reps=prof["upsert_reps"],
            pyiceberg_max_rows=prof["upsert_pyiceberg_max_rows"],
            read_upserts=prof["upsert_read_upserts"],
            writers=prof["upsert_writers"],
            contention_writes=prof["upsert_contention_writes"],
            contention_rows=prof["upsert_contention_rows"],
            workdir=args.workdir,
            log=log,
        ),
    }
    started = datetime.now(UTC)
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    results: dict[str, SuiteResult] = {}
    for name in [s for s in SUITES if s in args.suites]:
        log(f"[bench] ===== {name} ({args.mode}) =====")
        s0 = time.perf_counter()
        try:
            res = runners[name]()
        except Exception as e:  # noqa: BLE001 - a failed suite is reported and fails the run, others still run
            traceback.print_exc()
            res = SuiteResult(name, name, error=f"{type(e).__name__}: {e}")
        res.seconds = time.perf_counter() - s0
        results[name] = res
        log(f"[bench] {name}: {'FAILED' if res.error else 'ok'} in {res.seconds:.0f}s")
    for session in sessions:
        session.stop()

    total = time.perf_counter() - t0
    load_end = os.getloadavg()
    machine = f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}"
    caption = f"{args.mode}, {machine}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ran = dict(results)
    report: dict[str, Any] = {
        "mode": args.mode,
        "started": started.isoformat(),
        "seconds": total,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            **_versions(),
        },
        "params": prof,
        "reruns": [],
    }
    previous = out / f"results-{args.mode}.json"
    if args.merge and previous.exists():
        old = json.loads(previous.read_text())
        kept = {k: SuiteResult(**v) for k, v in old["suites"].items() if k not in results}
        results = {k: results.get(k) or kept[k] for k in SUITES if k in results or k in kept}
        rerun = {"started": started.isoformat(), "seconds": total, "suites": list(ran), "params": prof}
        report.update(
            {k: old[k] for k in ("started", "seconds", "machine", "params") if k in old},
            reruns=[*old.get("reruns", []), rerun],
        )
    header = [
        f"## fencedlake benchmarks ({args.mode})",
        "",
        f"{report['started'][:16].replace('T', ' ')} UTC, {report['seconds']:.0f} s; {machine}; load average "
        f"{report['machine']['loadavg_start'][0]:.1f} at start, {report['machine']['loadavg_end'][0]:.1f} at end; "
        + ", ".join(f"{k} {v}" for k, v in _versions().items()),
        "",
        *(
            f"Re-run {r['started'][:16].replace('T', ' ')} UTC ({r['seconds']:.0f} s): {', '.join(r['suites'])}.\n"
            for r in report["reruns"]
        ),
    ]
    report["suites"] = {k: v.to_json() for k, v in results.items()}
    markdown = "\n".join(header) + "\n" + "\n".join(r.markdown() for r in results.values())
    (out / f"results-{args.mode}.md").write_text(markdown)
    (out / f"results-{args.mode}.json").write_text(json.dumps(report, indent=1, default=str))
    try:
        charts = _import("plot").plot_all(results, Path(args.plot_dir or out), caption)
    except Exception as e:  # noqa: BLE001 - a chart is a convenience; never fail the run for it
        charts = []
        log(f"[bench] charts skipped: {type(e).__name__}: {e}")

    print()
    print(markdown)
    for path in [out / f"results-{args.mode}.md", out / f"results-{args.mode}.json", *charts]:
        log(f"[bench] wrote {path}")
    warnings = sum(len(r.warnings) for r in ran.values())
    failed = [k for k, r in ran.items() if r.error]
    log(
        f"[bench] {len(ran)} suite(s) in {total:.0f}s: "
        + (f"FAILED: {', '.join(failed)}" if failed else "none failed")
        + f"; {warnings} WARN line(s) (targets missed; never a failure)"
    )
    return 1 if failed else 0


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _import(module: str) -> Any:
    import importlib

    return importlib.import_module(f"benchmarks.{module}")


if __name__ == "__main__":
    sys.exit(main())
