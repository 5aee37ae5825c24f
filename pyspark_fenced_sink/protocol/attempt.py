"""One catalog commit attempt and the record it carries (PROTOCOL.md §3 step 5, §4, §10; driver).

:func:`attempt_commit` sends one plan to the catalog with its commit record
(outcomes, and the metrics of ``protocol.metrics``) and tells the loop where it
stands after: landed, refused before anything was sent, conflicted (back off and
re-read), or unknown (re-read and decide from what is there; never a blind retry).
Both loops use it: the committer of one entry (``protocol.committer``) and
``protocol.commit.recover``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitContext, CommitUnknown
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, WalEntry
from pyspark_fenced_sink.protocol.metrics import Metric
from pyspark_fenced_sink.protocol.progress import Progress, backoff, reload
from pyspark_fenced_sink.protocol.reconcile import Outcome, ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused, Refusals
from pyspark_fenced_sink.protocol.state import CommitRecord
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.waiting import Role, WaitCause

__all__ = ["attempt_commit"]


def _metrics(
    ctx: CommitContext, plan: ReconcilePlan, pending: Mapping[int, WalEntry], for_peers: int, progress: Progress
) -> dict[str, Any]:
    """The commit record's metrics (``protocol.metrics.Metric``)."""
    metrics: dict[Metric, Any] = {
        Metric.LATENCY_MS: int((ctx.now() - progress.t0) * 1000),
        Metric.ATTEMPTS: progress.attempts,
        Metric.CONFLICTS: progress.conflicts,
        Metric.GROUP: len(plan.decisions),
        Metric.APPLIED: len(plan.apply),
        Metric.FOR_PEERS: for_peers,
    }
    slow = sum(1 for s in plan.apply if pending[s].untuned)
    if slow:  # applied writes that ran with Spark's per-row Arrow batch check on (spark.tuning)
        metrics[Metric.UNTUNED] = slow
    ages = sorted(int(ctx.wall() * 1000) - pending[s].created_ms for s in plan.apply if pending[s].created_ms)
    if ages:  # time-to-commit of the applied writes, from their entries' creation
        metrics[Metric.AGE_MAX_MS] = max(0, ages[-1])
        metrics[Metric.AGE_P50_MS] = max(0, ages[len(ages) // 2])
    voided = sum(1 for d in plan.decisions if d.outcome is Outcome.VOID)
    if voided:  # holes the commit passed over (PROTOCOL.md §3 step 3)
        metrics[Metric.VOIDED] = voided
    waiting = progress.waiting
    if waiting is not None:  # how this committer came to commit
        metrics[Metric.WAITED_MS] = int(waiting.log.waited_s * 1000)
        metrics[Metric.POLLS] = waiting.log.polls
        if waiting.role is Role.HELPER:
            metrics[Metric.HELPER] = 1
        if waiting.log.cause is not None:
            metrics[Metric.WAITED_FOR] = waiting.log.cause.value
    return {m.value: v for m, v in metrics.items()}


def attempt_commit(
    ctx: CommitContext,
    view: TableView,
    plan: ReconcilePlan,
    pending: Mapping[int, WalEntry],
    token: str,
    progress: Progress,
    refusals: Refusals,
) -> tuple[TableView, CommitRecord | None]:
    """One catalog commit attempt of ``plan`` on ``view``: the view to continue from, and the record if it landed.

    ``token`` is the committer's own entry's (entries with another token count as peers'). A refusal
    of the plan's lead entry (nothing was sent) is remembered for ``view``: the next plan on it decides
    the entry REFUSED and commits that decision.
    """
    progress.attempts += 1
    for_peers = sum(1 for s in plan.apply if pending[s].token != token)
    record = CommitRecord(
        first=plan.base.upper,
        outcomes=tuple((d.token[:TOKEN_CHARS], d.outcome.value) for d in plan.decisions),
        metrics=_metrics(ctx, plan, pending, for_peers, progress),
    )
    try:
        failpoints.hit("commit.before-catalog-commit")
        new_view = ctx.port.commit(view, plan, pending, record)
    except EntryRefused as e:
        refusals.add(view.version, plan.lead, e)
        return view, None
    except CommitConflict:
        progress.conflicts += 1
        progress.saw(WaitCause.CATALOG)
        ctx.sleep(backoff(ctx, progress.conflicts))
        return reload(ctx, progress), None
    except CommitUnknown:
        progress.unknowns += 1
        progress.saw(WaitCause.CATALOG)
        progress.unsure.append((record, for_peers, len(plan.decisions)))
        return reload(ctx, progress), None
    failpoints.hit("commit.after-catalog-commit")
    progress.catalog_commits += 1
    progress.for_peers += for_peers
    progress.group = len(plan.decisions)
    return new_view, record
