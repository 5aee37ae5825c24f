"""Scaling suite, series "manifest merge": commit latency and scan planning vs history, merge on vs off.

Each point builds two tables with S one-write fencedlake commits each, built
interleaved (one commit on each in turn): one with the default (manifest
merging on: ``commit.manifest-merge.enabled`` unset, min-count 100) and one
with ``table.commit.manifest-merge.enabled=false`` (a fast append per commit,
the behaviour before merging). Then ``commits`` more commits on each,
interleaved. Reported per variant: commit p50 of the measured commits, p50,
p99 and max over the last 100 build commits (the merging commits are among
them), the current snapshot's manifest count, and the full-scan planning time
(``table.scan().plan_files()``, what the fencedlake reader's planning runs;
the median of 3, table load excluded).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import BenchmarkError, median
from benchmarks.data import SPARK_SCHEMA, arrow_rows
from pyspark_fenced_sink.testing import harness

__all__ = ["VARIANTS", "point"]

ROWS = 10
#: Variant -> extra write options (the table properties of the created table).
VARIANTS: dict[str, dict[str, str]] = {
    "merge on": {},
    "merge off": {"table.commit.manifest-merge.enabled": "false"},
    "merge on + gc": {},
}
#: The variant that runs ``fencedlake gc --expire-snapshots-older-than 0s --retain-last`` every few commits.
EXPIRING = "merge on + gc"
EXPIRE_EVERY = RETAIN = 100
TAIL = 100  # build commits whose latencies are summarized (the newest: history is largest there)


def _expire(wh: str, table: str) -> float:
    """``fencedlake gc`` keeping the newest :data:`RETAIN` snapshots (grace 1 day: no file is young enough)."""
    from pyspark_fenced_sink.ops.gc import gc

    t = time.perf_counter()
    gc(harness.open_target(wh, table).ctx, grace_s=86400, snapshots_older_than_s=0, retain_last=RETAIN)
    return (time.perf_counter() - t) * 1000


def _commit_ms(wh: str, table: str, options: dict[str, str], start: int) -> float:
    p = harness.plan(wh, table, options, schema=SPARK_SCHEMA)
    messages = harness.write_tasks(p, arrow_rows(start, ROWS, total=10**12), tasks=1)
    t = time.perf_counter()
    result = harness.commit(p, messages)
    elapsed = (time.perf_counter() - t) * 1000
    if result.outcome.name != "APPLIED":
        raise BenchmarkError(f"{table}: outcome {result.outcome.name}, expected APPLIED")
    return elapsed


def _plan_ms(catalog: Any, table: str, expected_files: int) -> float:
    times = []
    for _ in range(3):
        loaded = catalog.load_table(table)
        t = time.perf_counter()
        files = list(loaded.scan().plan_files())
        times.append((time.perf_counter() - t) * 1000)
        if len(files) != expected_files:
            raise BenchmarkError(f"{table}: planned {len(files)} files, expected {expected_files}")
    return median(times)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def point(wh: str, size: int, commits: int, log: Callable[[str], None], min_count: int | None = None) -> dict[str, Any]:
    """Build every variant to ``size`` commits, then measure ``commits`` more on each (interleaved).

    ``min_count`` sets ``commit.manifest.min-count-to-merge`` (and the gc period) for a quick run; None keeps
    the default (100).
    """
    tables = {name: f"bench.manifests_{''.join(c if c.isalnum() else '_' for c in name)}_{size}" for name in VARIANTS}
    extra = {"table.commit.manifest.min-count-to-merge": str(min_count)} if min_count else {}
    every = min_count or EXPIRE_EVERY
    build: dict[str, list[float]] = {name: [] for name in VARIANTS}
    measured: dict[str, list[float]] = {name: [] for name in VARIANTS}
    gc_ms: list[float] = []
    t0 = time.perf_counter()
    for i in range(size + commits):
        order = list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]
        for name in order:
            ms = _commit_ms(wh, tables[name], {**VARIANTS[name], **extra}, i * ROWS)
            (build if i < size else measured)[name].append(ms)
            if name == EXPIRING and (i + 1) % every == 0:
                gc_ms.append(_expire(wh, tables[name]))
    catalog = harness.open_catalog(wh)
    out: dict[str, Any] = {"size": size, "variants": {}, "gc_ms": gc_ms}
    for name, table in tables.items():
        loaded = catalog.load_table(table)
        snapshot = loaded.current_snapshot()
        total = size + commits
        rows = int(snapshot.summary.additional_properties["total-records"])
        if rows != total * ROWS:
            raise BenchmarkError(f"{table}: {rows} rows, expected {total * ROWS}")
        tail = build[name][-TAIL:]
        out["variants"][name] = {
            "snapshots": len(loaded.metadata.snapshots),
            "commits": total,
            "manifests": len(snapshot.manifests(loaded.io)),
            "plan_ms": _plan_ms(catalog, table, total),
            "commit_p50": median(measured[name]),
            "build_p50": median(tail),
            "build_p99": _p99(tail),
            "build_max": max(tail),
            "measured_ms": measured[name],
        }
    log(
        f"    manifests={size:,}: built and measured in {time.perf_counter() - t0:.1f}s; "
        + "; ".join(
            f"{n}: {v['manifests']} manifests, commit p50 {v['commit_p50']:.1f} ms, max {v['build_max']:.0f} ms, "
            f"plan {v['plan_ms']:.1f} ms"
            for n, v in out["variants"].items()
        )
    )
    return out


def rows_and_notes(
    points: list[dict[str, Any]], min_count: int | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Table rows (series "manifest merge on/off") and the notes comparing the variants."""
    rows = []
    for pt in points:
        for name, v in pt["variants"].items():
            rows.append(
                {
                    "series": f"manifest {name}",
                    "commits": v["commits"],
                    "snapshots": v["snapshots"],
                    "fencedlake commit p50 ms": v["commit_p50"],
                    "commit p99 / max ms": f"{v['build_p99']:.0f} / {v['build_max']:.0f}",
                    "manifests": v["manifests"],
                    "full-scan plan ms": v["plan_ms"],
                }
            )
    notes = []
    if len(points) >= 2:
        lo, hi = points[0], points[-1]
        parts = []
        for name in VARIANTS:
            a, b = lo["variants"][name], hi["variants"][name]
            parts.append(
                f"{name}: commit p50 {a['commit_p50']:.1f} -> {b['commit_p50']:.1f} ms, manifests "
                f"{a['manifests']} -> {b['manifests']}, full-scan planning {a['plan_ms']:.1f} -> {b['plan_ms']:.1f} ms"
            )
        notes.append(f"Manifest merge, {lo['size']:,} -> {hi['size']:,} commits: " + "; ".join(parts))
    gc_all = [ms for pt in points for ms in pt["gc_ms"]]
    notes.append(
        "Manifest merge rows: three tables built interleaved to S one-write commits: merge on ("
        + (f"min-count-to-merge {min_count}" if min_count else "the default, min-count 100")
        + "), `commit.manifest-merge.enabled=false`, and merge on with `fencedlake gc` expiring all but "
        f"the newest {RETAIN} snapshots every {min_count or EXPIRE_EVERY} commits"
        + (f" (gc p50 {median(gc_all):.0f} ms, not in the commit figures)" if gc_all else "")
        + f"; commit p50 over the measured commits; p99 / max over the last {TAIL} build commits (the commits "
        "that merge are among them); manifests and full-scan planning (`scan().plan_files()`, median of 3) "
        "after the measured commits."
    )
    return rows, notes
