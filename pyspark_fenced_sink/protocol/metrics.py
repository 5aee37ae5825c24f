"""The metrics of a commit record, each key declared once (PROTOCOL.md §10; pure).

Every fencedlake catalog commit carries ``fencedlake.commit`` in its snapshot
summary: ``key=value`` pairs written by ``protocol.attempt`` and read by
``ops.commit_stats`` (``fencedlake status``) and ``ops.inspect`` (``fencedlake
commits``). Keys are short because every summary carries them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

__all__ = ["Metric", "metric_int", "metric_text"]


class Metric(str, Enum):
    """One commit-record metric: its key in the summary, and what it counts."""

    #: Milliseconds from the start of the committer's write to this attempt.
    LATENCY_MS = "lat"
    #: Catalog commit attempts the committer made (this one included).
    ATTEMPTS = "att"
    #: Attempts the catalog refused because a peer committed first.
    CONFLICTS = "conf"
    #: WAL positions this commit reconciled (its group).
    GROUP = "grp"
    #: Entries this commit applied (files or properties added to the table).
    APPLIED = "apl"
    #: Applied entries of other writers than the committer (writes a peer's commit decided).
    FOR_PEERS = "help"
    #: Applied writes that ran with Spark's per-row Arrow batch check on (an untuned session).
    UNTUNED = "slow"
    #: Milliseconds from the oldest applied entry's creation to this commit (its time-to-commit).
    AGE_MAX_MS = "age"
    #: The median of the applied entries' time-to-commit.
    AGE_P50_MS = "age50"
    #: Holes (declared empty positions) this commit voided.
    VOIDED = "void"
    #: Milliseconds the committer waited before it first committed.
    WAITED_MS = "wait"
    #: Table reads the committer made while it waited.
    POLLS = "poll"
    #: 1 if the committer committed as a helper (the upper stood still, or moved too slowly).
    HELPER = "hlp"
    #: Why the committer waited (``protocol.waiting.WaitCause``): ``commit``, ``stalled``, ``slow``,
    #: ``position`` or ``catalog``; absent if it did not wait.
    WAITED_FOR = "why"


def metric_text(metrics: Mapping[str, Any], metric: Metric) -> str | None:
    """The value of ``metric`` as text, or None if the record does not carry it."""
    value = metrics.get(metric.value)
    return None if value is None else str(value)


def metric_int(metrics: Mapping[str, Any], metric: Metric) -> int | None:
    """The integer value of ``metric``, or None if absent or not an integer (records of other versions)."""
    text = metric_text(metrics, metric)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None
