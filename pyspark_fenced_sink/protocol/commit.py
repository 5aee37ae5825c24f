"""The commit loop (PROTOCOL.md §3-§6, steps 3-6; driver).

:func:`commit_entry` puts one entry into the WAL (a claim in a window above
the tail) and returns only when its outcome is known. One committer at a
time: the writer whose entry is the lowest pending one (the head) lists the
WAL, reads the pending entries it has not read (in parallel, cached across
attempts), reconciles them — voiding the holes entries declare — and makes one
catalog commit that applies every entry it can (group commit; peers' entries
too). Every other writer waits (``protocol.waiting``) and learns its outcome
from the commit record in the table it reloads, reading no entry; one that
sees the upper stand still for its patience helps. It is the only retry loop:
after a conflict it re-reads and re-plans, after an unknown outcome it
re-reads and decides from what it finds — never a blind retry. :func:`recover`
commits every pending entry (what the next writer would do).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    TableStateError,
)
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitContext, CommitResult, CommitUnknown
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, EntryKind, WalEntry
from pyspark_fenced_sink.protocol.pending import read_and_plan
from pyspark_fenced_sink.protocol.progress import Progress, backoff, finish, reload, unknown_error
from pyspark_fenced_sink.protocol.reconcile import Outcome, Position, ReconcilePlan, position
from pyspark_fenced_sink.protocol.replace import EntryRefused, Refusals
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.waiting import Waiting
from pyspark_fenced_sink.protocol.wal import Claimed

__all__ = ["commit_entry", "recorded_token", "recover"]


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


def commit_entry(ctx: CommitContext, entry: WalEntry, *, view: TableView | None = None) -> CommitResult:
    """Write ``entry`` to the WAL and return once its outcome is known (steps 3-6).

    ``view`` is a committed version the caller has just read (saves one catalog read).
    """
    progress = Progress(t0=ctx.now())
    view = view or ctx.load()
    fenced = _fenced_before_put(view.state, entry)
    if fenced is not None:
        return finish(ctx, progress, None, Outcome.FENCED, fenced, by_peer=True)
    failpoints.hit("commit.before-wal-put")
    claimed = ctx.wal.claim(entry, view.state.upper, pace=view.pace)
    failpoints.hit("commit.after-wal-put")
    seq = claimed.seq
    try:
        return _drive(ctx, claimed, view, progress)
    except TableStateError as e:  # the state went bad after our put: our entry waits for the repair
        raise unknown_error(ctx, seq, f"is durable but the table's state cannot be trusted now: {e}") from e
    except CorruptControlDataError as e:  # a damaged entry blocks the table: ours waits behind it
        raise unknown_error(ctx, seq, f"is durable but waits behind damaged control data: {e}") from e
    except (CommitOutcomeUnknownError, failpoints.FailPointError):
        raise  # FailPointError: tests inject it to see exactly that exception arrive
    except Exception as e:  # the entry is durable: any failure now leaves its outcome open (I1)
        raise unknown_error(
            ctx,
            seq,
            f"is durable but its commit failed ({type(e).__name__}: {e}); the next commit on the table applies it "
            f"exactly once: do not re-run the write blindly, look it up with "
            f"`fencedlake wal {ctx.port.name} --from {seq} --limit 1`",
        ) from e


def recorded_token(ctx: CommitContext, view: TableView, seq: int) -> str | None:
    """The token prefix the commit record of ``seq`` holds at ``view`` (None: no record remains)."""
    record = ctx.port.find_record(view, seq)
    found = record.find(seq) if record is not None else None
    return None if found is None else found[0]


def _drive(ctx: CommitContext, claimed: Claimed, view: TableView, progress: Progress) -> CommitResult:
    seq, entry = claimed.seq, claimed.entry
    cache = _own(claimed)
    deadline = progress.t0 + ctx.max_wait_s
    refusals = Refusals()
    waiting = progress.waiting = _waiting(ctx, claimed, view)
    known = _quiet(claimed, view)  # a first attempt that needs no LIST
    gaps = 0
    while True:
        if position(seq, view.state.upper) is Position.BELOW:
            record = ctx.port.find_record(view, seq)
            found = record.find(seq) if record is not None else None
            if record is None or found is None:
                raise unknown_error(
                    ctx,
                    seq,
                    "was reconciled but no commit record for it remains (snapshots expired); look it up with "
                    f"`fencedlake wal {ctx.port.name} --from {seq} --limit 1`",
                )
            token, code = found
            if token == entry.token[:TOKEN_CHARS]:
                if progress.landed_unsure(record):
                    return finish(
                        ctx, progress, seq, Outcome(code), "decided by our commit (its answer was lost)", by_peer=False
                    )
                return finish(
                    ctx, progress, seq, Outcome(code), "decided by a peer's commit", by_peer=progress.unknowns == 0
                )
            # Another object holds our position (an operator skipped it after our entry was damaged and moved
            # aside): ours was never reconciled. Put it again.
            claimed = ctx.wal.claim(entry, view.state.upper, pace=view.pace)
            seq, entry = claimed.seq, claimed.entry
            cache, waiting = _own(claimed), _waiting(ctx, claimed, view)
            progress.waiting = waiting
            continue
        if not waiting.should_commit(view.state.upper, ctx.now(), progress.t0, view.cadence):
            # Not the head: the head's commit (or a helper's) will decide our entry; read the table again.
            if ctx.now() > deadline:
                raise unknown_error(
                    ctx,
                    seq,
                    f"is durable but was not applied within {ctx.max_wait_s:.0f}s (committed upper "
                    f"{view.state.upper}); the next commit on the table applies it exactly once",
                )
            progress.note(ctx, f"waiting for the commits before WAL seq {seq} (committed upper {view.state.upper})")
            ctx.sleep(waiting.pause(ctx.rng))
            view = reload(ctx, progress)
            continue
        listed = known if known is not None else ctx.wal.scan(view.state.upper)
        known = None
        if claimed.vanished and seq not in listed:
            # Our put was answered "exists" by an object that vanished, and the position is empty. Read after
            # the LIST, an upper still at or below it means it was never reconciled: an operator moved the
            # object aside (gc deletes only below the upper), so ours is not there. Put our entry again.
            fresh = reload(ctx, progress)
            if seq >= fresh.state.upper:
                claimed = ctx.wal.claim(entry, fresh.state.upper, pace=fresh.pace)
                seq, entry = claimed.seq, claimed.entry
                cache, waiting = _own(claimed), _waiting(ctx, claimed, fresh)
                progress.waiting = waiting
            view = fresh  # else reconciled meanwhile: its commit record says whose it was
            continue
        if not waiting.listed(listed):  # an entry lies before ours: its writer commits first
            continue
        pending, plan = read_and_plan(ctx, view, cache, listed, refusals)
        held = pending.get(seq)
        if held is not None and held.token != entry.token:
            # Our put was answered "exists" by an object that vanished before we could read it (a vanished
            # claim); what holds the position now is not ours. Put our entry again.
            claimed = ctx.wal.claim(entry, view.state.upper, pace=view.pace)
            seq, entry = claimed.seq, claimed.entry
            cache, waiting = _own(claimed), _waiting(ctx, claimed, view)
            progress.waiting = waiting
            continue
        mine = plan.decision_for(seq)
        # A data entry decided without applying anything up to it, from the committed state alone, with
        # nothing pending after it: the outcome is final at this version, so no commit is needed. A
        # decision that used facts outside the state (the partition spec, missing files) is committed
        # first: those facts can change back (I9). Barriers change the state, so a barrier is always
        # committed; so is a decision with entries behind it, whose writers wait for this commit.
        if (
            mine is not None
            and entry.kind is EntryKind.DATA
            and mine.outcome is not Outcome.APPLIED
            and not mine.outcome.external
            and not plan.applied_before(seq)
            and plan.decisions[-1].seq == seq
            and plan.stop == "tail"
        ):
            fresh = reload(ctx, progress)
            if fresh.version == view.version:
                return finish(ctx, progress, seq, mine.outcome, mine.detail, by_peer=False)
            view = fresh
            continue
        if not plan.decisions:
            # A position below ours is missing although later ones exist, or our view is stale.
            gaps += 1
            if ctx.now() > deadline:
                raise unknown_error(
                    ctx,
                    seq,
                    f"is durable but position {plan.state.upper} is missing; it will be applied once the gap is "
                    f"resolved (see `fencedlake status {ctx.port.name}`)",
                )
            progress.note(ctx, f"waiting for missing WAL position {plan.state.upper} (ours: {seq})")
            ctx.sleep(backoff(ctx, gaps))
            view = reload(ctx, progress)
            continue
        view, landed = _commit_plan(ctx, view, plan, pending, entry, progress, refusals)
        if landed is not None and mine is not None:
            return finish(ctx, progress, seq, mine.outcome, mine.detail, by_peer=False)
        if landed is not None:
            waiting.carry_on = True  # our commit stopped before our entry: commit on until it is decided
        elif view.state.upper != waiting.upper:
            waiting.conflicted(view.state.upper, ctx.now())  # a peer committed: it may have decided ours
        progress.note(ctx, f"committing WAL seq {seq} behind concurrent commits")
        if ctx.now() > deadline:
            raise unknown_error(
                ctx,
                seq,
                f"is durable but was not applied within {ctx.max_wait_s:.0f}s; the next commit on the table "
                "applies it exactly once",
            )


def _quiet(claimed: Claimed, view: TableView) -> list[int] | None:
    """The pending positions up to ours, if the claim saw a quiet WAL (no LIST needed to commit them).

    Quiet: the claim took the first free position and saw nothing pending but the writer's own
    barrier (its epoch). Every position up to ours is then known; entries put after our claim wait
    for this commit and lead the next.
    """
    own = claimed.entry.epoch if claimed.entry.kind is EntryKind.DATA else None
    ahead = [p for p in claimed.ahead if p >= view.state.upper]
    if claimed.vanished or claimed.entry.floor is not None or any(p != own for p in ahead):
        return None
    return [*ahead, claimed.seq]


def _own(claimed: Claimed) -> dict[int, WalEntry]:
    """The entries known without a read: our own, unless the claim vanished (then the position is read)."""
    return {} if claimed.vanished else {claimed.seq: claimed.entry}


def _waiting(ctx: CommitContext, claimed: Claimed, view: TableView) -> Waiting:
    return Waiting(
        claimed.seq,
        claimed.ahead,
        view.state.upper,
        claimed.entry.epoch if claimed.entry.kind is EntryKind.DATA else None,
        ctx.now(),
        patience_s=ctx.patience_s,
        poll_s=ctx.poll_s,
        deadline_s=ctx.max_wait_s,
        cadence=view.cadence,
        pace=view.pace,
    )


def _commit_plan(
    ctx: CommitContext,
    view: TableView,
    plan: ReconcilePlan,
    pending: Mapping[int, WalEntry],
    entry: WalEntry,
    progress: Progress,
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
    ages = sorted(int(ctx.wall() * 1000) - pending[s].created_ms for s in plan.apply if pending[s].created_ms)
    if ages:  # time-to-commit of the applied writes, from their entries' creation (PROTOCOL.md §10)
        metrics["age"] = max(0, ages[-1])
        metrics["age50"] = max(0, ages[len(ages) // 2])
    voided = sum(1 for d in plan.decisions if d.outcome is Outcome.VOID)
    if voided:  # holes the commit passed over (PROTOCOL.md §3 step 3)
        metrics["void"] = voided
    waiting = progress.waiting
    if waiting is not None:  # how this committer came to commit (PROTOCOL.md §10)
        metrics["wait"] = int(waiting.waited_s * 1000)
        metrics["poll"] = waiting.polls
        if waiting.helped:
            metrics["hlp"] = 1
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
        ctx.sleep(backoff(ctx, progress.conflicts))
        return reload(ctx, progress), None
    except CommitUnknown:
        progress.unknowns += 1
        progress.unsure.append((record, helped, len(plan.decisions)))
        return reload(ctx, progress), None
    failpoints.hit("commit.after-catalog-commit")
    progress.catalog_commits += 1
    progress.helped += helped
    progress.group = len(plan.decisions)
    return new_view, record


def recover(ctx: CommitContext, *, through: int | None = None) -> list[CommitRecord]:
    """Reconcile and commit every pending entry now (what the next writer would do).

    With ``through``, only the entries up to that position (what lies above it is neither read nor
    waited for). Returns the commit records of the commits this call landed, in order.
    """
    records: list[CommitRecord] = []
    progress = Progress(t0=ctx.now())
    cache: dict[int, WalEntry] = {}
    nobody = WalEntry(kind=EntryKind.DATA, token="", writer="")
    refusals = Refusals()
    view = ctx.load()
    while ctx.now() <= progress.t0 + ctx.max_wait_s:
        if through is not None and view.state.upper > through:
            return records
        listed = ctx.wal.scan(view.state.upper)
        listed = [s for s in listed if s <= through] if through is not None else listed
        pending, plan = read_and_plan(ctx, view, cache, listed, refusals)
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
