"""Commit statistics under load, from the commit records alone (PROTOCOL.md §10; CLI ``status``).

Every fencedlake commit's snapshot summary carries ``fencedlake.commit``
metrics (``protocol.commit``). :func:`commit_stats` aggregates the newest of
them — on every branch, since commits on branches reconcile positions too —
into what an operator asks of a table under load: how many commits and writes
per second, time-to-commit, catalog compare-and-swap attempts and conflicts,
group sizes, how many writes waited for (and were applied by) another
writer's commit, how many commits a helper made after the head stood still,
and how many holes were voided. Metadata only: no WAL object, no data file is
read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pyspark_fenced_sink.protocol.metrics import Metric, metric_int, metric_text
from pyspark_fenced_sink.protocol.state import decode_record
from pyspark_fenced_sink.protocol.waiting import WaitCause

__all__ = ["commit_stats", "describe_stats"]


def _percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def _weighted_median(pairs: Sequence[tuple[float, int]]) -> float | None:
    total = sum(w for _, w in pairs)
    if not total:
        return None
    seen = 0
    for value, weight in sorted(pairs):
        seen += weight
        if seen * 2 >= total:
            return value
    return None  # pragma: no cover - unreachable: seen reaches total


def commit_stats(table: Any, count: int) -> dict[str, Any]:
    """Statistics of the newest ``count`` fencedlake commits of ``table`` (a loaded pyiceberg Table)."""
    rows: list[tuple[float, dict[str, str], int]] = []
    for snapshot in reversed(table.metadata.snapshots):
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is None:
            continue
        rows.append(
            (snapshot.timestamp_ms / 1000.0, {k: str(v) for k, v in record.metrics.items()}, len(record.outcomes))
        )
        if len(rows) >= count:
            break
    if not rows:
        return {"commits": 0}
    metrics = [m for _, m, _ in rows]
    applied = [metric_int(m, Metric.APPLIED) or 0 for m in metrics]
    span = rows[0][0] - rows[-1][0]
    medians = [metric_int(m, Metric.AGE_P50_MS) for m in metrics]
    ages = [(float(a), n) for a, n in zip(medians, applied, strict=True) if a is not None]
    worst = [float(a) for m in metrics if (a := metric_int(m, Metric.AGE_MAX_MS)) is not None]
    lat = [float(a) for m in metrics if (a := metric_int(m, Metric.LATENCY_MS)) is not None]
    attempts = sum(metric_int(m, Metric.ATTEMPTS) or 1 for m in metrics)
    groups = [float(n) for _, _, n in rows]
    waited = [float(w) for m in metrics if (w := metric_int(m, Metric.WAITED_MS)) is not None]
    return {
        "commits": len(rows),
        "span_s": round(span, 3),
        "commits_per_s": round((len(rows) - 1) / span, 3) if span > 0 else None,
        "writes_applied": sum(applied),
        "writes_per_s": round(sum(applied[:-1]) / span, 3) if span > 0 else None,
        # Time-to-commit of the applied writes (entry created -> its commit): the median weighs each commit's
        # median by its writes; p99 and max are over each commit's slowest write (an upper bound of the p99).
        "time_to_commit_ms": {
            "p50": _weighted_median(ages),
            "p99": _percentile(worst, 99),
            "max": max(worst, default=None),
        },
        "committer_latency_ms": {
            "p50": _percentile(lat, 50),
            "p99": _percentile(lat, 99),
            "max": max(lat, default=None),
        },
        "cas_attempts": attempts,
        "cas_conflicts": sum(metric_int(m, Metric.CONFLICTS) or 0 for m in metrics),
        "cas_attempts_per_commit": round(attempts / len(rows), 3),
        "group_size": {"p50": _percentile(groups, 50), "max": max(groups), "mean_applied": sum(applied) / len(rows)},
        "writes_by_peer_commit": sum(metric_int(m, Metric.FOR_PEERS) or 0 for m in metrics),
        "helper_commits": sum(1 for m in metrics if metric_int(m, Metric.HELPER)),
        "committer_wait_ms_p50": _percentile(waited, 50),
        "committer_waits": _waits_by_cause(metrics),
        "holes_voided": sum(metric_int(m, Metric.VOIDED) or 0 for m in metrics),
    }


def _waits_by_cause(metrics: Sequence[dict[str, str]]) -> dict[str, dict[str, float]]:
    """Committers that waited, by why (``protocol.waiting.WaitCause``): how many, and their longest wait."""
    out: dict[str, dict[str, float]] = {}
    for m in metrics:
        cause = metric_text(m, Metric.WAITED_FOR)
        if cause is None:
            continue
        row = out.setdefault(cause, {"commits": 0, "max_wait_ms": 0.0})
        row["commits"] += 1
        row["max_wait_ms"] = max(row["max_wait_ms"], float(metric_int(m, Metric.WAITED_MS) or 0))
    return {c.value: out[c.value] for c in WaitCause if c.value in out} | {
        c: v for c, v in out.items() if c not in {w.value for w in WaitCause}
    }


def describe_stats(stats: dict[str, Any]) -> str:
    """One line of :func:`commit_stats` for the text view."""
    if not stats.get("commits"):
        return "no fencedlake commit yet"

    def s(ms: Any) -> str:
        return "n/a" if ms is None else f"{ms / 1000:.2f} s"

    ttc = stats["time_to_commit_ms"]
    rate = stats["commits_per_s"]
    writes = stats["writes_per_s"]
    return (
        f"{stats['commits']} commits over {stats['span_s']:.1f} s"
        + (f" ({rate:.2f}/s, {writes:.1f} writes/s)" if rate is not None and writes is not None else "")
        + f"; time-to-commit p50 {s(ttc['p50'])}, p99 {s(ttc['p99'])}, max {s(ttc['max'])}"
        + f"; group p50 {stats['group_size']['p50']:.0f}, max {stats['group_size']['max']:.0f}"
        + f"; {stats['cas_attempts_per_commit']:.2f} CAS attempts per commit ({stats['cas_conflicts']} conflicts)"
        + f"; {stats['writes_by_peer_commit']} writes applied by another writer's commit"
        + f"; {stats['helper_commits']} helper commits; {stats['holes_voided']} holes voided"
        + _describe_waits(stats.get("committer_waits") or {})
    )


#: What each wait cause means, for the text view.
_CAUSE_WORDS = {
    WaitCause.COMMIT.value: "a live writer's commit",
    WaitCause.STALLED.value: "a stalled position (a writer died or paused after its put)",
    WaitCause.SLOW.value: "a slow committer",
    WaitCause.POSITION.value: "a missing position",
    WaitCause.CATALOG.value: "the catalog (conflicts or an outage)",
    WaitCause.STORE.value: "the object store (a failed read of the WAL)",
}


def _describe_waits(waits: dict[str, dict[str, float]]) -> str:
    """``; committers waited for: a live writer's commit 3 (max 0.12 s), ...`` (empty if none waited)."""
    if not waits:
        return ""
    parts = [
        f"{_CAUSE_WORDS.get(cause, cause)} {int(row['commits'])} (max {row['max_wait_ms'] / 1000:.2f} s)"
        for cause, row in waits.items()
    ]
    return "; committers waited for: " + ", ".join(parts)
