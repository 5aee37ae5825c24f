"""Suite "latency": the commit path at cloud latency, W concurrent writers (issue 26).

W writer threads, spread over a few worker processes
(:mod:`benchmarks.latency_worker`), append 5-row batches in a loop through the
sink's real plan / task / commit path (``testing.harness``: no Spark) to one
table of the embedded SQLite catalog, warehouse on ``/dev/shm`` when present.
Latency is injected at the real seams (:mod:`benchmarks.latency_seams`: the
control store's factory in ``store.registry.SCHEMES``, the catalog's
``load_table`` and ``commit_table``), by default 20 ms per object-store request,
20 ms per table read and 100 ms per catalog compare-and-swap, each ±25 %; the
package's own code is unchanged.

Reported per W: landed writes/s in the measured window (after a warm-up),
p50 / p99 / max write latency, group factor (landed writes per catalog
commit), catalog commits/s, CAS attempts per successful catalog commit,
requests per landed write (control-store GET / PUT tries / LIST, table reads,
CAS attempts; noise-free: the headline), CPU per landed write (the workers'
user+system seconds) and the machine's load (busy share of all CPUs over the
round, every process on the host included), the share of writes a peer's commit
decided, errors that reached a writer, and the exactly-once check (every row of
every landed write once, none of a failed write). Where the requests come from
(the protocol function that made each) is kept per W in the JSON and printed
for the largest W. With ``FENCEDLAKE_IT_PG_URI`` / ``FENCEDLAKE_IT_REST_URI``
set (``integration/run.sh``), the same round runs at one W on PostgreSQL and on
the REST test catalog. Nothing is asserted on time: missed request budgets are
``WARN`` lines.

``python -m benchmarks.latency --writers 8,32,128 --seconds 30`` runs it alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import BenchmarkError, SuiteResult, percentile, ratio
from benchmarks.latency_worker import SPAN
from benchmarks.worker_process import WorkerProcess

__all__ = ["BUDGET", "run"]

ROOT = Path(__file__).resolve().parents[1]
ROWS = 5
#: Requests per landed write the issue allows, independent of W (control data), and CAS per catalog commit.
BUDGET = {"GET": 5.0, "PUT": 2.0, "LIST": 2.0, "CAS/commit": 2.0}


#: Tells apart the stderr files of pools started in one run (the same index, other code or ablations).
_SERIAL = itertools.count()


def _start_worker(index: int, logdir: Path, ablate: Sequence[str] = (), code: Path | None = None) -> WorkerProcess:
    """A latency worker process running ``code``'s checkout (this one by default)."""
    return _LatencyWorker(
        index,
        logdir / f"latency-worker-{index}-{os.getpid()}-{next(_SERIAL)}.stderr",
        ["benchmarks.latency_worker"],
        _code_home(code, logdir) if code is not None else ROOT,
        {"FENCEDLAKE_BENCH_ABLATE": ",".join(ablate)},
    )


class _LatencyWorker(WorkerProcess):
    """A worker whose error replies raise."""

    def receive(self, *, raise_on_error: bool = True) -> dict[str, Any]:
        return super().receive(raise_on_error=raise_on_error)


def _code_home(code: Path, scratch: Path) -> Path:
    """A directory whose ``pyspark_fenced_sink`` is ``code``'s and whose ``benchmarks`` are these (the seams)."""
    home = scratch / f"code-{abs(hash(str(code))):x}"
    if not home.exists():
        home.mkdir()
        (home / "pyspark_fenced_sink").symlink_to(Path(code).resolve() / "pyspark_fenced_sink")
        (home / "benchmarks").symlink_to(ROOT / "benchmarks")
    return home


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot (/proc/stat); (0, 0) where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _commits(target: Any, table: str, seed_snapshot: int) -> list[dict[str, Any]]:
    """The fencedlake commits after the seed's: time and commit-record metrics, oldest first."""
    from pyspark_fenced_sink.protocol.state import decode_record
    from pyspark_fenced_sink.testing import harness

    metadata = harness.open_catalog(target).load_table(table).metadata
    out, after = [], False
    for snapshot in metadata.snapshots:
        if after:
            record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
            if record is not None:
                numbers = {k: int(v) for k, v in record.metrics.items() if str(v).lstrip("-").isdigit()}
                out.append({"t": snapshot.timestamp_ms / 1000, **numbers})
        after = after or snapshot.snapshot_id == seed_snapshot
    return out


def _verify(target: Any, table: str, writes: Sequence[dict[str, Any]], seed: int) -> tuple[bool, str]:
    """Exactly once: every row of every landed write once, no row of a write that failed."""
    from pyspark_fenced_sink.testing import harness

    ids = harness.table_ids(target, table)
    expected = {seed}
    for w in writes:
        if w["ok"]:
            expected.update(range(w["lo"], w["lo"] + w["n"]))
    dup = len(ids) - len(set(ids))
    missing, extra = len(expected - set(ids)), len(set(ids) - expected)
    if dup or missing or extra:
        return False, f"{dup} duplicated, {missing} missing, {extra} of failed writes"
    return True, f"{len(ids)} rows exactly once"


def _round(
    pool: Sequence[WorkerProcess],
    target: Any,
    table: str,
    w: int,
    seconds: float,
    warmup: float,
    lat: dict[str, float],
    shape: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One round of ``w`` writers on a fresh table; measured, verified, summarized.

    ``shape``: ``{"shape": "spark", "task_s": ...}`` for idempotent jobs (``latency_worker``), else long-lived
    anonymous writers.
    """
    from pyspark_fenced_sink.testing import harness

    seed = 10**15
    harness.sink_write(target, table, harness.rows("seed", seed, 1), tasks=1)  # creates the table
    seed_snapshot = harness.open_catalog(target).load_table(table).metadata.current_snapshot_id
    busy_pool = pool[: min(len(pool), w)]
    for i, worker in enumerate(busy_pool):
        bases = [j * SPAN for j in range(i, w, len(busy_pool))]
        cmd = {"cmd": "run", "target": target, "table": table, "rows": ROWS, "bases": bases, **lat, **(shape or {})}
        worker.send(cmd)
    for worker in busy_pool:
        worker.receive()  # ready
    start = time.time() + 0.5
    stop = start + warmup + seconds
    ticks0, load0 = _cpu_ticks(), os.getloadavg()[0]
    for worker in busy_pool:
        worker.send({"start": start, "stop": stop})
    replies = [worker.receive() for worker in busy_pool]
    ticks1 = _cpu_ticks()
    writes = [x for r in replies for x in r["writes"]]
    counts: dict[str, Counter[str]] = {
        "store": Counter(),
        "origins": Counter(),
        "catalog": Counter(),
        "wall_ms": Counter(),
    }
    for r in replies:
        for key, counter in counts.items():
            counter.update(r["counts"].get(key, {}))
    commits = _commits(target, table, seed_snapshot)
    exact, detail = _verify(target, table, writes, seed)
    landed = [x for x in writes if x["ok"]]
    w0, w1 = start + warmup, stop
    window = [x for x in landed if w0 <= x["t2"] <= w1]
    lat_s = [x["t2"] - x["t0"] for x in window]
    n = len(landed) or 1
    return {
        "W": w,
        "procs": len(busy_pool),
        "writes": len(writes),
        "landed": len(landed),
        "errors": dict(Counter(x.get("error") or x.get("outcome") for x in writes if not x["ok"])),
        "writes_per_s": len(window) / seconds,
        "p50_s": percentile(lat_s, 50),
        "p99_s": percentile(lat_s, 99),
        "max_s": max(lat_s, default=float("nan")),
        "commit_p50_s": percentile([x["t2"] - x["t1"] for x in window], 50),
        "catalog_commits": len(commits),
        "catalog_commits_per_s": sum(1 for c in commits if w0 <= c["t"] <= w1) / seconds,
        "group_factor": ratio(len(landed), len(commits)),
        "cas_per_commit": ratio(counts["catalog"]["CAS attempts"], len(commits)),
        "per_write": {k: v / n for k, v in (counts["store"] + counts["catalog"]).items()},
        "origins": {k: v / n for k, v in counts["origins"].most_common()},
        "request_wall_ms": {k: ratio(v, counts["store"][k]) for k, v in counts["wall_ms"].items()},
        "cpu_ms_per_write": 1000 * sum(r["cpu_s"] for r in replies) / n,
        "machine_busy": ratio(ticks1[0] - ticks0[0], ticks1[1] - ticks0[1]),
        "loadavg": [load0, os.getloadavg()[0]],
        "by_peer": ratio(sum(1 for x in landed if x.get("by_peer")), len(landed)),
        "waits_per_write": ratio(sum(x.get("waits", 0) for x in landed), len(landed)),
        "helpers": sum(1 for x in landed if x.get("helper")),
        "waited_for": dict(Counter(x.get("waited_for") or "none" for x in landed)),
        "cas_outcomes": {
            "landed": sum(x.get("catalog_commits", 0) for x in writes),
            "conflicts": sum(x.get("conflicts", 0) for x in writes),
            "attempts": sum(x.get("attempts", 0) for x in writes),
        },
        "commit_metrics": commits,
        "exact": exact,
        "exact_detail": detail,
        "latencies_s": lat_s,
    }


def _targets(tmp: Path) -> dict[str, Any]:
    """The embedded SQLite catalog, and PostgreSQL / the REST test catalog when their URIs are set."""
    from benchmarks.group_commit import PG_URI_ENV, REST_URI_ENV, _rest_target
    from pyspark_fenced_sink.testing import harness

    out: dict[str, Any] = {"sqlite": str(tmp / "wh")}
    pg_uri, rest_uri = os.environ.get(PG_URI_ENV), os.environ.get(REST_URI_ENV)
    if pg_uri:
        out["postgres"] = harness.postgres_target(pg_uri, str(tmp / "wh-pg"))
    if rest_uri:
        out["rest"] = _rest_target(rest_uri)
    return out


def _scratch(workdir: str | None) -> str | None:
    """Where tables go: ``workdir``, else tmpfs (``/dev/shm``) when present, else the system temp."""
    if workdir:
        return workdir
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run(
    *,
    writers: Sequence[int],
    seconds: float,
    warmup: float,
    procs: int = 4,
    store_ms: float = 20.0,
    table_ms: float = 20.0,
    cas_ms: float = 100.0,
    jitter: float = 0.25,
    other_catalogs_at: int | None = None,
    ablations: Sequence[Sequence[str]] = (),
    baseline_code: str | None = None,
    catalogs: Sequence[str] | None = None,
    workdir: str | None = None,
    shapes: Sequence[str] = ("long",),
    task_ms: float = 200.0,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """One round per W (and per other catalog at ``other_catalogs_at``); see the module docstring.

    ``ablations``: more variants, each with some mechanisms of the commit path turned off
    (``latency_worker.ABLATIONS``), measured at the largest W. ``baseline_code``: a checkout of
    an earlier version whose package the ``before`` variant's workers import, measured at every
    W interleaved with this version's rounds (so both see the same machine). ``shapes``: ``long``
    (long-lived anonymous writers) and/or ``spark`` (an idempotent job per write: a barrier at open,
    ``task_ms`` of executor time — four times that on every other writer — then the commit), each at
    every W on SQLite.
    """
    result = SuiteResult("latency", "The commit path at cloud latency: W concurrent writers (issue 26)")
    lat = {"store_s": store_ms / 1000, "table_s": table_ms / 1000, "cas_s": cas_ms / 1000, "jitter": jitter}
    params = {"writers": list(writers), "seconds": seconds, "warmup": warmup, "procs": procs, **lat, "rows": ROWS}
    params.update(ablations=[list(a) for a in ablations], baseline_code=bool(baseline_code))
    params.update(shapes=list(shapes), task_ms=task_ms)
    result.data["params"] = params
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-latency-", dir=_scratch(workdir)) as tmp:
        result.data["params"]["scratch"] = "tmpfs" if tmp.startswith("/dev/shm") else "disk"
        at = other_catalogs_at or max(writers)
        targets = {k: v for k, v in _targets(Path(tmp)).items() if catalogs is None or k in catalogs}
        variants: dict[str, tuple[tuple[str, ...], Path | None]] = {"all": ((), None)}
        if baseline_code:
            variants["before"] = ((), Path(baseline_code))
        variants.update({"-".join(a): (tuple(a), None) for a in ablations})
        plan: list[tuple[str, str, int, str]] = []
        first = shapes[0]
        for shape in shapes:
            for i, w in enumerate(writers if "sqlite" in targets else ()):
                both = [v for v in ("all", "before") if v in variants]
                plan += [("sqlite", v, w, shape) for v in (both if i % 2 == 0 else both[::-1])]
        plan += [
            (label, v, at, first) for label in targets if label != "sqlite" for v in variants if v in ("all", "before")
        ]
        plan += [
            ("sqlite", v, max(writers), first) for v in variants if v not in ("all", "before") and "sqlite" in targets
        ]
        pools: dict[str, list[WorkerProcess]] = {}
        try:
            for v, (ablate, code) in variants.items():
                pools[v] = [_start_worker(i, Path(tmp), ablate, code) for i in range(procs)]
            for pool in pools.values():
                for worker in pool:
                    worker.receive()
            for label, v, w, shape in plan:
                table = f"bench_{uuid.uuid4().hex[:8]}.lat_w{w}"
                how = {"shape": shape, "task_s": task_ms / 1000} if shape == "spark" else None
                r = _round(pools[v], targets[label], table, w, seconds, warmup, lat, how)
                r["catalog"], r["variant"], r["shape"] = label, v, shape
                rounds.append(r)
                log(f"  {label} {v} {shape} W={w}: {_summary(r)}")
        finally:
            for pool in pools.values():
                for worker in pool:
                    worker.close()
    _report(result, rounds)
    return result


def _summary(r: dict[str, Any]) -> str:
    """One progress line of a round."""
    wall = r["request_wall_ms"]
    return (
        f"{r['writes_per_s']:.1f} writes/s, p50 {r['p50_s']:.2f} s p99 {r['p99_s']:.2f} s, "
        f"group {r['group_factor']:.1f}, {r['catalog_commits_per_s']:.2f} commits/s, "
        f"CAS/commit {r['cas_per_commit']:.2f}, per write {_fmt_counts(r['per_write'])}, "
        f"CPU {r['cpu_ms_per_write']:.0f} ms/write, busy {r['machine_busy']:.0%}, "
        f"wall LIST {wall.get('LIST', float('nan')):.0f} ms PUT {wall.get('PUT', float('nan')):.0f} ms, "
        f"helpers {r['helpers']}, waited for {r['waited_for']}, {r['exact_detail']}"
    )


def _fmt_counts(per_write: dict[str, float]) -> str:
    keys = ("GET", "PUT", "LIST", "table reads", "CAS attempts")
    return " ".join(f"{k}={per_write.get(k, 0.0):.2f}" for k in keys)


COLUMNS = [
    "catalog",
    "variant",
    "shape",
    "W",
    "writes/s",
    "vs first W",
    "p50 s",
    "p99 s",
    "max s",
    "group factor",
    "commits/s",
    "CAS/commit",
    "GET/write",
    "PUT/write",
    "LIST/write",
    "table reads/write",
    "CPU ms/write",
    "machine busy",
    "by peer",
    "helpers",
    "waited for",
    "errors",
    "exactly once",
]


def _report(result: SuiteResult, rounds: list[dict[str, Any]]) -> None:
    result.columns = COLUMNS
    firsts: dict[tuple[str, str], float] = {}
    for r in rounds:  # each variant's (and shape's) smallest W on SQLite (the rounds run W ascending)
        if r["catalog"] == "sqlite":
            firsts.setdefault((r.get("variant", "all"), r.get("shape", "long")), r["writes_per_s"])
    for r in rounds:
        per = r["per_write"]
        result.rows.append(
            {
                "catalog": r["catalog"],
                "variant": r.get("variant", "all"),
                "shape": r.get("shape", "long"),
                "W": r["W"],
                "writes/s": r["writes_per_s"],
                "vs first W": ratio(
                    r["writes_per_s"], firsts.get((r.get("variant", "all"), r.get("shape", "long")), float("nan"))
                ),
                "p50 s": r["p50_s"],
                "p99 s": r["p99_s"],
                "max s": r["max_s"],
                "group factor": r["group_factor"],
                "commits/s": r["catalog_commits_per_s"],
                "CAS/commit": r["cas_per_commit"],
                "GET/write": per.get("GET", 0.0),
                "PUT/write": per.get("PUT", 0.0),
                "LIST/write": per.get("LIST", 0.0),
                "table reads/write": per.get("table reads", 0.0),
                "CPU ms/write": r["cpu_ms_per_write"],
                "machine busy": f"{r['machine_busy']:.0%}",
                "by peer": f"{r['by_peer']:.0%}",
                "helpers": r.get("helpers", 0),
                "waited for": ", ".join(f"{k} {v}" for k, v in sorted(r.get("waited_for", {}).items())),
                "errors": sum(r["errors"].values()),
                "exactly once": "yes" if r["exact"] else f"NO: {r['exact_detail']}",
            }
        )
        if r.get("variant", "all") != "all":
            continue  # the budgets are this version's; 'before' and ablations are there to be compared
        for kind in ("GET", "PUT", "LIST"):
            if per.get(kind, 0.0) > BUDGET[kind]:
                result.warnings.append(
                    f"{r['catalog']} W={r['W']}: {per[kind]:.2f} {kind}s per landed write (budget {BUDGET[kind]:.0f})"
                )
        if r["cas_per_commit"] > BUDGET["CAS/commit"]:
            result.warnings.append(
                f"{r['catalog']} W={r['W']}: {r['cas_per_commit']:.2f} CAS attempts per catalog commit (budget 2)"
            )
        if r["errors"]:
            result.warnings.append(f"{r['catalog']} W={r['W']}: errors reached writers: {r['errors']}")
        if r.get("shape") == "spark" and r.get("helpers"):
            result.warnings.append(
                f"{r['catalog']} spark W={r['W']}: {r['helpers']} writes waited out a patience and helped "
                "(a healthy run should have none)"
            )
    result.data["rounds"] = rounds
    full = [r for r in rounds if r["catalog"] == "sqlite" and r.get("variant", "all") == "all"]
    top = max(full, key=lambda r: r["W"], default=None)
    if top is not None:
        origins = ", ".join(f"{k} {v:.2f}" for k, v in list(top["origins"].items())[:12])
        result.notes.append(f"Where the control requests of W={top['W']} come from (per landed write): {origins}.")
        cas = top["cas_outcomes"]
        result.notes.append(
            f"CAS attempts of W={top['W']}: {cas['attempts']} sent by writers, {cas['landed']} landed, "
            f"{cas['conflicts']} conflicts ({ratio(cas['conflicts'], cas['attempts']):.0%}); "
            f"{top['by_peer']:.0%} of landed writes were applied by a peer's commit."
        )
    p = result.data["params"]
    result.notes.append(
        f"Injected: object store {p['store_s'] * 1000:.0f} ms per request, table read {p['table_s'] * 1000:.0f} ms, "
        f"catalog CAS {p['cas_s'] * 1000:.0f} ms, each ±{p['jitter']:.0%}; {ROWS}-row appends in a loop, "
        f"{p['warmup']:.0f} s warm-up then {p['seconds']:.0f} s measured, W threads over up to {p['procs']} "
        f"processes, warehouse on {p.get('scratch', '?')}. Requests per landed write count the whole round; "
        "writes/s, latencies and catalog commits/s the measured window. CPU = the workers' user+system seconds "
        "per landed write; machine busy = all CPUs of the host over the round (neighbours included)."
    )
    if any(not r["exact"] for r in rounds):
        raise BenchmarkError(
            "exactly-once check failed: " + "; ".join(r["exact_detail"] for r in rounds if not r["exact"])
        )


def main(argv: list[str] | None = None) -> int:
    """Run the suite alone and print it (``--json`` also saves the result)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", default="8,32,128", help="comma-separated W [8,32,128]")
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per round [30]")
    p.add_argument("--warmup", type=float, default=5.0, help="warm-up seconds per round [5]")
    p.add_argument("--procs", type=int, default=4, help="worker processes [4]")
    p.add_argument("--store-ms", type=float, default=20.0)
    p.add_argument("--table-ms", type=float, default=20.0)
    p.add_argument("--cas-ms", type=float, default=100.0)
    p.add_argument("--jitter", type=float, default=0.25)
    p.add_argument("--other-catalogs-at", type=int, help="W of the PostgreSQL / REST rounds [the largest W]")
    p.add_argument(
        "--ablate",
        action="append",
        default=[],
        metavar="A[,B]",
        help="also measure, at the largest W, a variant with these mechanisms off (repeatable): "
        "no-spread, serial-reads, no-head",
    )
    p.add_argument(
        "--baseline-code",
        metavar="DIR",
        help="a checkout of an earlier version: its package runs as the 'before' variant, interleaved",
    )
    p.add_argument("--catalogs", help="comma-separated subset of sqlite,postgres,rest to run [every one configured]")
    p.add_argument("--shapes", default="long", help="comma-separated writer shapes: long, spark [long]")
    p.add_argument("--task-ms", type=float, default=200.0, help="spark shape: executor time per job [200]")
    p.add_argument("--json", help="write the suite result here")
    p.add_argument("--plot-dir", help="draw bench-latency.png (writes/s and p99 vs W) here")
    p.add_argument("--workdir", help="scratch directory [/dev/shm when present]")
    args = p.parse_args(argv)
    res = run(
        writers=[int(x) for x in args.writers.split(",")],
        seconds=args.seconds,
        warmup=args.warmup,
        procs=args.procs,
        store_ms=args.store_ms,
        table_ms=args.table_ms,
        cas_ms=args.cas_ms,
        jitter=args.jitter,
        other_catalogs_at=args.other_catalogs_at,
        ablations=[a.split(",") for a in args.ablate],
        baseline_code=args.baseline_code,
        catalogs=args.catalogs.split(",") if args.catalogs else None,
        workdir=args.workdir,
        shapes=args.shapes.split(","),
        task_ms=args.task_ms,
    )
    print(res.markdown())
    if args.json:
        Path(args.json).write_text(json.dumps(res.to_json(), indent=1, default=str))
    if args.plot_dir:
        from benchmarks.plot import plot_all

        caption = f"{os.cpu_count()} CPUs shared, load average {os.getloadavg()[0]:.0f} at the end"
        for chart in plot_all({"latency": res}, Path(args.plot_dir), caption):
            print(f"wrote {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
