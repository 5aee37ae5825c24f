"""The commit loop (PROTOCOL.md §3-§6, steps 3-6; driver).

:func:`commit_entry` puts one entry into the WAL and returns only when its
outcome is known: it reconciles the pending entries from the committed upper,
makes one catalog commit that applies every entry it can (group commit; peers'
entries too), and learns peers' decisions from their commit records. It is the
only retry loop: after a conflict it re-reads and re-plans, after an unknown
outcome it re-reads and decides from what it finds — never a blind retry.
:func:`recover` commits every pending entry (what the next writer would do).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    FencedLakeError,
    TableStateError,
)
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitContext, CommitResult, CommitUnknown
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, EntryKind, WalEntry, encoded_path
from pyspark_fenced_sink.protocol.reconcile import Outcome, Position, ReconcilePlan, position, reconcile
from pyspark_fenced_sink.protocol.replace import EntryRefused, Refusals
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView

__all__ = ["commit_entry", "recorded_token", "recover"]

logger = logging.getLogger(__name__)

#: A commit that waits (helping peers, behind a missing position, riding out a catalog outage) logs a line
#: at INFO this often.
PROGRESS_EVERY_S = 5.0


class _Progress:
    """What one ``commit_entry`` call has done so far (the counters of its :class:`CommitResult`)."""

    def __init__(self, t0: float) -> None:
        self.t0 = self.noted = t0
        self.attempts = self.conflicts = self.unknowns = self.catalog_commits = self.helped = self.group = 0
        #: Commits sent whose outcome was unknown: (record, entries of peers it applied, its group size).
        self.unsure: list[tuple[CommitRecord, int, int]] = []

    def landed_unsure(self, record: CommitRecord) -> bool:
        """Count ``record`` as this writer's commit if it is one sent with an unknown outcome."""
        for sent, helped, group in self.unsure:
            if _as_read(sent) == _as_read(record):
                self.catalog_commits += 1
                self.helped += helped
                self.group = group
                return True
        return False

    def note(self, ctx: CommitContext, what: str) -> None:
        """Log a progress line at INFO if the commit has been waiting for another PROGRESS_EVERY_S."""
        now = ctx.now()
        if now - self.noted < PROGRESS_EVERY_S:
            return
        self.noted = now
        logger.info(
            "fencedlake: commit on %s still %s after %.0fs (catalog attempts %d, conflicts absorbed %d, "
            "unknown outcomes %d)",
            ctx.port.name,
            what,
            now - self.t0,
            self.attempts,
            self.conflicts,
            self.unknowns,
        )


def _as_read(record: CommitRecord) -> tuple[int, tuple[tuple[str, str], ...], dict[str, str]]:
    """A record as read back from a snapshot summary (token prefixes, metric values as text)."""
    outcomes = tuple((token[:TOKEN_CHARS], code) for token, code in record.outcomes)
    return record.first, outcomes, {k: str(v) for k, v in record.metrics.items()}


def _fenced_before_put(state: CommittedState, entry: WalEntry) -> str | None:
    """Why ``entry`` is already fenced by the committed state (epochs only grow), or None."""
    if entry.ephemeral or entry.epoch is None or entry.kind is not EntryKind.DATA:
        return None
    current = state.writers.get(entry.writer)
    if current is not None and current.epoch > entry.epoch:
        return (
            f"writer {entry.writer!r} epoch {entry.epoch} was fenced by epoch {current.epoch} "
            f"at WAL seq {current.epoch}"
        )
    return None


def _put(ctx: CommitContext, entry: WalEntry, start: int) -> int:
    """Put ``entry`` at the WAL's tail after ``start``; returns its seq.

    A position that said "exists" and was gone when read is resolved by the commit loop when it is below the
    upper (reconciled and truncated: the commit record says whose it was, PROTOCOL.md §6). At or above the
    upper it was moved aside by an operator (``gc`` deletes only below it): never reconciled, never ours, so
    the entry is put there again.
    """
    while True:
        seq, vanished = ctx.wal.append_claim(entry, start)
        if not vanished or seq < ctx.load().state.upper:
            return seq
        start = seq


def commit_entry(ctx: CommitContext, entry: WalEntry, *, view: TableView | None = None) -> CommitResult:
    """Write ``entry`` to the WAL and return once its outcome is known (steps 3-6).

    ``view`` is a committed version the caller has just read (saves one catalog read).
    """
    progress = _Progress(t0=ctx.now())
    view = view or ctx.load()
    fenced = _fenced_before_put(view.state, entry)
    if fenced is not None:
        return _finish(ctx, progress, None, Outcome.FENCED, fenced, by_peer=True)
    failpoints.hit("commit.before-wal-put")
    seq = _put(ctx, entry, view.state.upper)
    failpoints.hit("commit.after-wal-put")
    try:
        return _drive(ctx, entry, seq, view, progress)
    except TableStateError as e:  # the state went bad after our put: our entry waits for the repair
        raise _unknown(ctx, seq, f"is durable but the table's state cannot be trusted now: {e}") from e
    except CorruptControlDataError as e:  # a damaged entry blocks the table: ours waits behind it
        raise _unknown(ctx, seq, f"is durable but waits behind damaged control data: {e}") from e
    except (CommitOutcomeUnknownError, failpoints.FailPointError):
        raise  # FailPointError: tests inject it to see exactly that exception arrive
    except Exception as e:  # the entry is durable: any failure now leaves its outcome open (I1)
        raise _unknown(
            ctx,
            seq,
            f"is durable but its commit failed ({type(e).__name__}: {e}); the next commit on the table applies it "
            f"exactly once: do not re-run the write blindly, look it up with "
            f"`fencedlake wal {ctx.port.name} --from {seq} --limit 1`",
        ) from e


def _read_pending(ctx: CommitContext, upper: int, last: int | None, cache: dict[int, WalEntry]) -> dict[int, WalEntry]:
    """Entries from ``upper`` on (to ``last``, or to the listed tail), reusing ``cache``."""
    for s in [s for s in cache if s < upper]:
        del cache[s]
    seqs = range(upper, last + 1) if last is not None else ctx.wal.scan(upper)
    pending: dict[int, WalEntry] = {}
    for s in seqs:
        if len(pending) > ctx.max_group:
            break
        entry = cache.get(s)
        if entry is None:
            entry = ctx.wal.read(s)
            if entry is None:
                break
            cache[s] = entry
        pending[s] = entry
    return pending


def recorded_token(ctx: CommitContext, view: TableView, seq: int) -> str | None:
    """The token prefix the commit record of ``seq`` holds at ``view`` (None: no record remains)."""
    record = ctx.port.find_record(view, seq)
    found = record.find(seq) if record is not None else None
    return None if found is None else found[0]


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


def _drive(ctx: CommitContext, entry: WalEntry, seq: int, view: TableView, progress: _Progress) -> CommitResult:
    cache: dict[int, WalEntry] = {seq: entry}
    known_last: int | None = seq  # first attempt: our own scan already covered [upper, seq]
    deadline = progress.t0 + ctx.max_wait_s
    refusals = Refusals()
    waits = 0
    while True:
        if position(seq, view.state.upper) is Position.BELOW:
            record = ctx.port.find_record(view, seq)
            found = record.find(seq) if record is not None else None
            if record is None or found is None:
                raise _unknown(
                    ctx,
                    seq,
                    "was reconciled but no commit record for it remains (snapshots expired); look it up with "
                    f"`fencedlake wal {ctx.port.name} --from {seq} --limit 1`",
                )
            token, code = found
            if token == entry.token[:TOKEN_CHARS]:
                if progress.landed_unsure(record):
                    return _finish(
                        ctx, progress, seq, Outcome(code), "decided by our commit (its answer was lost)", by_peer=False
                    )
                return _finish(
                    ctx, progress, seq, Outcome(code), "decided by a peer's commit", by_peer=progress.unknowns == 0
                )
            # Another object holds our position (an operator skipped it after our entry was damaged and moved
            # aside): ours was never reconciled. Put it again.
            seq = _put(ctx, entry, view.state.upper)
            cache, known_last = {seq: entry}, seq
            continue
        pending = _read_pending(ctx, view.state.upper, known_last, cache)
        known_last = None
        plan = _plan(ctx, view, pending, refusals)
        mine = plan.decision_for(seq)
        # A data entry decided without applying anything up to it, from the committed state alone: the outcome
        # is final at this version, so no commit is needed. A decision that used facts outside the state (the
        # partition spec, missing files) is committed first: those facts can change back (I9). Barriers change
        # the state, so a barrier is always committed.
        if (
            mine is not None
            and entry.kind is EntryKind.DATA
            and mine.outcome is not Outcome.APPLIED
            and not mine.outcome.external
            and not plan.applied_before(seq)
        ):
            fresh = _reload(ctx, progress)
            if fresh.version == view.version:
                return _finish(ctx, progress, seq, mine.outcome, mine.detail, by_peer=False)
            view = fresh
            continue
        if not plan.decisions:
            # A position below ours is missing although later ones exist, or our view is stale.
            waits += 1
            if ctx.now() > deadline:
                raise _unknown(
                    ctx,
                    seq,
                    f"is durable but position {plan.state.upper} is missing; it will be applied once the gap is "
                    f"resolved (see `fencedlake status {ctx.port.name}`)",
                )
            progress.note(ctx, f"waiting for missing WAL position {plan.state.upper} (ours: {seq})")
            ctx.sleep(_backoff(ctx, waits))
            view = _reload(ctx, progress)
            continue
        view, landed = _commit_plan(ctx, view, plan, pending, entry, progress, refusals)
        if landed is not None and mine is not None:
            return _finish(ctx, progress, seq, mine.outcome, mine.detail, by_peer=False)
        progress.note(ctx, f"committing WAL seq {seq} behind concurrent commits")
        if ctx.now() > deadline:
            raise _unknown(
                ctx,
                seq,
                f"is durable but was not applied within {ctx.max_wait_s:.0f}s; the next commit on the table "
                "applies it exactly once",
            )


def _plan(ctx: CommitContext, view: TableView, pending: Mapping[int, WalEntry], refusals: Refusals) -> ReconcilePlan:
    """Reconcile ``pending`` on ``view`` with the facts outside the state: spec, missing files, refusals."""
    return reconcile(
        view.state,
        pending,
        max_group=ctx.max_group,
        spec_id=view.spec_id,
        missing=_missing_files(ctx, pending),
        refused=refusals.at(view.version),
    )


def _commit_plan(
    ctx: CommitContext,
    view: TableView,
    plan: ReconcilePlan,
    pending: Mapping[int, WalEntry],
    entry: WalEntry,
    progress: _Progress,
    refusals: Refusals,
) -> tuple[TableView, CommitRecord | None]:
    """One catalog commit attempt: the view to continue from, and the record if it landed.

    A refusal of the plan's head (nothing was sent) is remembered for ``view``: the next plan on it
    decides the entry REFUSED and commits that decision.
    """
    progress.attempts += 1
    ours = {s for s in plan.apply if pending[s].token == entry.token}
    helped = len(plan.apply) - len(ours)
    metrics = {
        "lat": int((ctx.now() - progress.t0) * 1000),
        "att": progress.attempts,
        "conf": progress.conflicts,
        "grp": len(plan.decisions),
        "apl": len(plan.apply),
        "help": helped,
    }
    slow = sum(1 for s in plan.apply if pending[s].untuned)
    if slow:  # applied writes that ran with Spark's per-row Arrow batch check on (spark.tuning)
        metrics["slow"] = slow
    record = CommitRecord(
        first=plan.base.upper,
        outcomes=tuple((d.token[:TOKEN_CHARS], d.outcome.value) for d in plan.decisions),
        metrics=metrics,
    )
    try:
        failpoints.hit("commit.before-catalog-commit")
        new_view = ctx.port.commit(view, plan, pending, record)
    except EntryRefused as e:
        refusals.add(view.version, plan.head, e)
        return view, None
    except CommitConflict:
        progress.conflicts += 1
        ctx.sleep(_backoff(ctx, progress.conflicts))
        return _reload(ctx, progress), None
    except CommitUnknown:
        progress.unknowns += 1
        progress.unsure.append((record, helped, len(plan.decisions)))
        return _reload(ctx, progress), None
    failpoints.hit("commit.after-catalog-commit")
    progress.catalog_commits += 1
    progress.helped += helped
    progress.group = len(plan.decisions)
    return new_view, record


def _reload(ctx: CommitContext, progress: _Progress) -> TableView:
    """Re-read the committed version, riding out a catalog outage (e.g. a database restart) until the deadline."""
    failures = 0
    while True:
        try:
            return ctx.load()
        except FencedLakeError:
            raise
        except Exception as e:  # the catalog's database/transport errors: retry until the deadline
            failures += 1
            if ctx.now() > progress.t0 + ctx.max_wait_s:
                raise
            progress.note(ctx, f"re-reading the table through a catalog outage ({type(e).__name__})")
            ctx.sleep(_backoff(ctx, failures))


def _unknown(ctx: CommitContext, seq: int, why: str) -> CommitOutcomeUnknownError:
    """The outcome-unknown error of WAL entry ``seq``: ``why`` continues "table T: WAL seq S ..."."""
    return CommitOutcomeUnknownError(f"table {ctx.port.name}: WAL seq {seq} {why}", table=ctx.port.name, seq=seq)


def _backoff(ctx: CommitContext, n: int) -> float:
    """Exponential backoff with full jitter."""
    return ctx.rng.uniform(0, min(ctx.backoff_cap_s, ctx.backoff_base_s * 2 ** min(n, 16)))


def _finish(
    ctx: CommitContext, progress: _Progress, seq: int | None, outcome: Outcome, detail: str, *, by_peer: bool
) -> CommitResult:
    p = progress
    counts = (p.attempts, p.conflicts, p.unknowns, p.catalog_commits, p.group, p.helped)
    result = CommitResult(seq, outcome, detail, (ctx.now() - p.t0) * 1000, *counts, by_peer)
    logger.info("fencedlake commit table=%s %s", ctx.port.name, result.summary())
    return result


def recover(ctx: CommitContext) -> list[CommitRecord]:
    """Reconcile and commit every pending entry now (what the next writer would do).

    Returns the commit records of the commits this call landed, in order.
    """
    records: list[CommitRecord] = []
    progress = _Progress(t0=ctx.now())
    cache: dict[int, WalEntry] = {}
    nobody = WalEntry(kind=EntryKind.DATA, token="", writer="")
    refusals = Refusals()
    view = ctx.load()
    while ctx.now() <= progress.t0 + ctx.max_wait_s:
        pending = _read_pending(ctx, view.state.upper, None, cache)
        plan = _plan(ctx, view, pending, refusals)
        if not plan.decisions:
            return records
        view, landed = _commit_plan(ctx, view, plan, pending, nobody, progress, refusals)
        if landed is not None:
            records.append(landed)
    raise CommitOutcomeUnknownError(
        f"table {ctx.port.name}: recover could not commit within {ctx.max_wait_s:.0f}s "
        f"({progress.conflicts} conflicts); the pending entries stay durable",
        table=ctx.port.name,
    )
