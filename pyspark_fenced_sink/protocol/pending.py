"""Reading the pending entries a commit needs, and planning on them (PROTOCOL.md §3 step 4, §5; driver).

The committer reads the listed entries it has not read yet in parallel and keeps
them across attempts (an object at or above the upper never changes). Only the
entries a commit applies count toward ``commit.max-group-size``, so a plan that
reaches the end of what was read — a run of skips, barriers, rejected entries —
reads on in growing rounds (:func:`read_and_plan`); the plan itself is
``protocol.reconcile.reconcile`` with the facts outside the committed state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan, reconcile
from pyspark_fenced_sink.protocol.replace import Refusals
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.wal import holes

__all__ = ["PLAN_READS_MAX", "plan", "read_and_plan"]

#: A plan reads on past entries that add nothing to the commit up to this many positions (when the group
#: limit is smaller), so a run of skips or rejected entries never takes one commit per few positions.
PLAN_READS_MAX = 1024
#: Positions read in the first extra round of a plan (at least the parallel read fan-out).
READ_ROUND_MIN = 16


def _read_pending(ctx: CommitContext, upper: int, cache: dict[int, WalEntry], listed: list[int]) -> dict[int, WalEntry]:
    """The entries at ``listed`` (a LIST from ``upper``), reading in parallel only those not in ``cache``.

    WAL objects are immutable while at or above the upper, so ``cache`` stays valid across attempts.
    """
    for s in [s for s in cache if s < upper]:
        del cache[s]
    unread = [s for s in listed if s not in cache]
    for s, found in zip(unread, ctx.wal.read_many(unread), strict=True):
        if found is not None:
            cache[s] = found
    pending: dict[int, WalEntry] = {}
    for s in listed:
        entry = cache.get(s)
        if entry is None:  # listed, then gone (reconciled and truncated meanwhile)
            break
        pending[s] = entry
    return pending


def read_and_plan(
    ctx: CommitContext, view: TableView, cache: dict[int, WalEntry], listed: list[int], refusals: Refusals
) -> tuple[dict[int, WalEntry], ReconcilePlan]:
    """The pending entries a plan needs, and the plan (PROTOCOL.md §5: what the group limit counts).

    The first read covers one more listed position than the group limit. Only entries the commit
    applies count toward the limit, so a plan that reaches the end of what was read (a run of
    skips, barriers, rejected entries) reads on, in growing rounds, up to :data:`PLAN_READS_MAX`
    positions: a committer with a small limit still passes such a run in one commit.
    """
    count, most = ctx.max_group + 1, max(PLAN_READS_MAX, ctx.max_group + 1)
    while True:
        pending = _read_pending(ctx, view.state.upper, cache, listed[:count])
        planned = plan(ctx, view, pending, refusals)
        read_all = len(pending) < count or count >= len(listed)  # the tail, or an entry listed then gone
        if planned.stop not in ("tail", "gap") or read_all:
            return pending, planned
        if count >= most:  # more is listed than a plan reads: not the tail (entries behind wait for this commit)
            return pending, replace(planned, stop="limit") if planned.stop == "tail" else planned
        count = min(most, 2 * max(count, READ_ROUND_MIN))


def _missing_files(ctx: CommitContext, pending: Mapping[int, WalEntry]) -> set[int]:
    """Positions of data entries pending longer than ``verify_files_after_s`` whose files are gone.

    One existence check per file, only for such old entries: a fresh entry's
    files were written moments ago (PROTOCOL.md §8, external orphan removal).
    """
    if ctx.file_exists is None:
        return set()
    cutoff_ms = (ctx.wall() - ctx.verify_files_after_s) * 1000
    old = {s: e for s, e in pending.items() if e.kind is EntryKind.DATA and e.files and e.created_ms < cutoff_ms}
    return {s for s, e in old.items() if not all(ctx.file_exists(encoded_path(f)) for f in e.files)}


def plan(ctx: CommitContext, view: TableView, pending: Mapping[int, WalEntry], refusals: Refusals) -> ReconcilePlan:
    """Reconcile ``pending`` on ``view`` with the facts outside the state: spec, missing files, refusals."""
    return reconcile(
        view.state,
        pending,
        max_group=ctx.max_group,
        spec_id=view.spec_id,
        missing=_missing_files(ctx, pending),
        refused=refusals.at(view.version),
        voids=holes(pending, view.state.upper),
    )
