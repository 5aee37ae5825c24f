"""The commit loop of one entry as a state machine (PROTOCOL.md §3 steps 3-6, §6; driver).

A :class:`Committer` owns one entry from its WAL put to its known outcome. Each
step does one thing and returns the next step (or the result):

``locate``   below the upper → ``decided``; else → ``wait``
``decided``  the commit record of our position: our token → the outcome; another → ``claim``
``wait``     ask the waiting policy (``protocol.waiting``): the head, a helper or a writer carrying on
             → ``list``; a waiter near the upper first reads the entries before its own
             (``read_ahead``), then → ``sleep``
``read_ahead`` read the pending entries before ours that may hold up the head (barriers and skips don't)
``sleep``    a committing entry lies before ours: sleep a fraction of the commit cadence, re-read the
             table → ``locate``
``list``     one LIST from the upper (or what a quiet claim saw) → ``plan``, or back to ``wait``
``plan``     read the pending entries and reconcile; decided without a commit → the outcome; a missing
             position → back off (→ ``locate``); else → ``commit``
``commit``   one catalog attempt (``protocol.attempt``): landed with ours → the outcome; else → ``locate``
``claim``    put the entry again (its position held another object) → ``locate``

Every path that sleeps checks the deadline (``commit.max-wait-ms``) first: past it, the entry stays durable
and the write raises ``CommitOutcomeUnknownError``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from functools import partial
from typing import Union

from pyspark_fenced_sink.errors import CorruptControlDataError, StoreError
from pyspark_fenced_sink.protocol.attempt import attempt_commit
from pyspark_fenced_sink.protocol.context import CommitContext, CommitResult
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, EntryKind, WalEntry
from pyspark_fenced_sink.protocol.pending import read_and_plan
from pyspark_fenced_sink.protocol.progress import Progress, backoff, finish, reload, unknown_error
from pyspark_fenced_sink.protocol.reconcile import Decision, Outcome, Position, ReconcilePlan, position
from pyspark_fenced_sink.protocol.replace import Refusals
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.waiting import Ahead, Role, WaitCause, Waiting
from pyspark_fenced_sink.protocol.wal import Claimed

__all__ = ["Committer"]

Step = Callable[[], Union["Step", CommitResult]]

#: A waiter reads the entries before its own nearest first, this many in its first round (then doubling).
READ_AHEAD_FIRST = 1


class Committer:
    """One entry's way from its WAL position to its known outcome (see the module docstring)."""

    def __init__(self, ctx: CommitContext, claimed: Claimed, view: TableView, progress: Progress) -> None:
        self.ctx = ctx
        self.view = view
        self.progress = progress
        self.deadline = progress.t0 + ctx.max_wait_s
        self.refusals = Refusals()
        self.gaps = 0
        self._adopt(claimed)
        self.known = _quiet(claimed, view)  # a first attempt that needs no LIST
        self.listed: builtins.list[int] = []
        self.pending: dict[int, WalEntry] = {}

    @property
    def seq(self) -> int:
        """Our entry's WAL position."""
        return self.claimed.seq

    @property
    def entry(self) -> WalEntry:
        """Our entry, as put."""
        return self.claimed.entry

    def run(self) -> CommitResult:
        """Run the steps until the entry's outcome is known.

        A step whose read of the WAL fails (``StoreError``: nothing was written, the entry is durable)
        starts again from a fresh read of the table after a backoff, until the deadline.
        """
        step: Step = self.locate
        failures = 0
        while True:
            try:
                nxt = step()
            except StoreError as e:
                failures += 1
                nxt = self._store_failed(e, failures)
            if isinstance(nxt, CommitResult):
                return nxt
            step = nxt

    def _store_failed(self, error: StoreError, failures: int) -> Step:
        ctx = self.ctx
        self.progress.saw(WaitCause.STORE)
        if ctx.now() > self.deadline:
            raise error
        self.progress.note(ctx, f"reading the WAL again after a store failure ({type(error).__name__})")
        ctx.sleep(backoff(ctx, failures))
        self.view = reload(ctx, self.progress)
        self.known = None
        return self.locate

    # ------------------------------------------------------------------------------------------------ steps

    def locate(self) -> Step | CommitResult:
        """Below the upper the outcome is recorded; at or above it, the waiting policy decides."""
        if position(self.seq, self.view.state.upper) is Position.BELOW:
            return self.decided
        return self.wait

    def decided(self) -> Step | CommitResult:
        """Our position was reconciled: its commit record says by whom, and whether it held our entry."""
        ctx, progress = self.ctx, self.progress
        record = ctx.port.find_record(self.view, self.seq)
        found = record.find(self.seq) if record is not None else None
        if record is None or found is None:
            raise unknown_error(
                ctx,
                self.seq,
                "was reconciled but no commit record for it remains (snapshots expired); look it up with "
                f"`fencedlake wal {ctx.port.name} --from {self.seq} --limit 1`",
            )
        token, code = found
        if token != self.entry.token[:TOKEN_CHARS]:
            # Another object held our position (a put that landed in a truncated position or a voided hole,
            # or an operator skipped our damaged entry): ours was never reconciled. Put it again.
            return self.claim
        if progress.landed_unsure(record):
            return self._finish(Outcome(code), "decided by our commit (its answer was lost)", by_peer=False)
        return self._finish(Outcome(code), "decided by a peer's commit", by_peer=progress.unknowns == 0)

    def wait(self) -> Step | CommitResult:
        """Commit now (head, helper, carrying on), or look at the entries before ours, or sleep and re-read."""
        ctx, waiting = self.ctx, self.waiting
        role = waiting.decide(self.view.state.upper, ctx.now(), self.progress.t0, self.view.cadence)
        if role is not Role.WAITER:
            return self.list
        if waiting.to_read():
            return self.read_ahead
        return self.sleep

    def sleep(self) -> Step | CommitResult:
        """A waiter: an entry whose writer commits it lies before ours. Sleep a while, then re-read the table."""
        ctx, upper = self.ctx, self.view.state.upper
        self._before_sleep(f"waiting for the commits before WAL seq {self.seq} (committed upper {upper})")
        ctx.sleep(self.waiting.pause(ctx.rng))
        self.view = reload(ctx, self.progress)
        return self.locate

    def read_ahead(self) -> Step | CommitResult:
        """Read the pending entries before ours, nearest first, until one whose writer commits it is found.

        A barrier or a skip holds nobody up: a writer with only those before it is the head. Entries at
        or above the upper never change, so what is read here is kept for the plan (no second GET).
        """
        count = READ_AHEAD_FIRST
        while unread := self.waiting.to_read():
            batch = unread[:count]
            self.waiting.read(dict(zip(batch, self._read(batch), strict=True)))
            count *= 2
        return self.wait if self.waiting.role is Role.WAITER else self.list

    def list(self) -> Step | CommitResult:
        """The head's check: one LIST from the upper; an entry before ours whose writer commits it → wait."""
        ctx = self.ctx
        listed = self.known if self.known is not None else ctx.wal.scan(self.view.state.upper)
        self.known = None
        if self.claimed.vanished and self.seq not in listed:
            # Our put was answered "exists" by an object that vanished, and the position is empty. Read after
            # the LIST, an upper still at or below it means it was never reconciled: an operator moved the
            # object aside (gc deletes only below the upper), so ours is not there. Put our entry again.
            self.view = reload(ctx, self.progress)
            return self.claim if self.seq >= self.view.state.upper else self.locate
        self.listed = listed
        if self.waiting.listed(listed) is Role.WAITER:
            if not self.waiting.to_read():
                return self.wait  # a known committing entry lies before ours: its writer commits first
            self.read_ahead()
            if self.waiting.role is Role.WAITER:
                return self.wait
        return self.plan

    def plan(self) -> Step | CommitResult:
        """Read what the plan needs and reconcile; some outcomes are final without a commit."""
        ctx = self.ctx
        self.pending, plan = read_and_plan(ctx, self.view, self.cache, self.listed, self.refusals)
        held = self.pending.get(self.seq)
        if held is not None and held.token != self.entry.token:
            # Our put was answered "exists" by an object that vanished before we could read it (a vanished
            # claim); what holds the position now is not ours. Put our entry again.
            return self.claim
        mine = plan.decision_for(self.seq)
        if mine is not None and self._final_without_commit(plan, mine):
            fresh = reload(ctx, self.progress)
            if fresh.version == self.view.version:
                return self._finish(mine.outcome, mine.detail, by_peer=False)
            self.view = fresh
            return self.locate
        if not plan.decisions:
            # A position below ours is missing although later ones exist, or our view is stale.
            self.gaps += 1
            self.progress.saw(WaitCause.POSITION)
            self._before_sleep(
                f"waiting for missing WAL position {plan.state.upper} (ours: {self.seq})",
                f"is durable but position {plan.state.upper} is missing; it will be applied once the gap is "
                f"resolved (see `fencedlake status {ctx.port.name}`)",
            )
            ctx.sleep(backoff(ctx, self.gaps))
            self.view = reload(ctx, self.progress)
            return self.locate
        return partial(self.commit, plan)

    def commit(self, plan: ReconcilePlan) -> Step | CommitResult:
        """One catalog attempt of ``plan``."""
        ctx = self.ctx
        mine = plan.decision_for(self.seq)
        self.view, landed = attempt_commit(
            ctx, self.view, plan, self.pending, self.entry.token, self.progress, self.refusals
        )
        if landed is not None and mine is not None:
            return self._finish(mine.outcome, mine.detail, by_peer=False)
        if landed is not None:
            self.waiting.landed_short()  # our commit stopped before our entry: commit on until it is decided
        elif self.view.state.upper != self.waiting.upper:
            self.waiting.conflicted(self.view.state.upper, ctx.now())  # a peer committed: it may have decided ours
        self._before_sleep(
            f"committing WAL seq {self.seq} behind concurrent commits",
            f"is durable but was not applied within {ctx.max_wait_s:.0f}s; the next commit on the table "
            "applies it exactly once",
        )
        return self.locate

    def claim(self) -> Step | CommitResult:
        """Put our entry again (its position held another object), above the tail of the upper we last read."""
        view = self.view
        self._adopt(self.ctx.wal.claim(self.entry, view.state.upper, pace=view.pace))
        return self.locate

    # ---------------------------------------------------------------------------------------------- helpers

    def _adopt(self, claimed: Claimed) -> None:
        """Take ``claimed`` as our position: what we know of it, and a fresh waiting policy."""
        self.claimed = claimed
        # The entries known without a read: our own, unless the claim vanished (then the position is read).
        self.cache: dict[int, WalEntry] = {} if claimed.vanished else {claimed.seq: claimed.entry}
        entry = claimed.entry
        own = entry.epoch if entry.kind is EntryKind.DATA else None
        ctx, view = self.ctx, self.view
        self.waiting = self.progress.waiting = Waiting(
            Ahead(claimed.seq, own, set(claimed.ahead)),
            view.state.upper,
            ctx.now(),
            patience_s=ctx.patience_s,
            poll_s=ctx.poll_s,
            deadline_s=ctx.max_wait_s,
            cadence=view.cadence,
            pace=view.pace,
        )

    def _read(self, seqs: builtins.list[int]) -> builtins.list[WalEntry | None]:
        """The entries at ``seqs``, read in parallel and kept for the plan.

        A damaged one counts as an entry its writer commits: the committer that reaches it reports it.
        """
        unread = [s for s in seqs if s not in self.cache]
        try:
            found = self.ctx.wal.read_many(unread)
        except CorruptControlDataError:  # one of them is damaged: tell which, one by one
            found = [self._read_one(s) for s in unread]
        fresh = dict(zip(unread, found, strict=True))
        for s, entry in fresh.items():
            if entry is not None and entry is not _DAMAGED:
                self.cache[s] = entry
        return [self.cache.get(s) or fresh.get(s) for s in seqs]

    def _read_one(self, seq: int) -> WalEntry | None:
        """The entry at ``seq``; :data:`_DAMAGED` if the object cannot be decoded."""
        try:
            return self.ctx.wal.read(seq)
        except CorruptControlDataError:
            return _DAMAGED

    def _final_without_commit(self, plan: ReconcilePlan, mine: Decision) -> bool:
        """True if our data entry's decision is final at this version without a commit.

        Decided from the committed state alone: our entry is at the upper (the plan's first decision),
        with nothing pending after it. Any decision before it would be one the plan makes but nobody
        commits: a barrier a peer put (its epoch fences ours only once it is reconciled, and an operator
        may yet skip it as damaged), or a hole a late put may still fill. A decision that used facts
        outside the state (the partition spec, missing files) is committed first: those facts can change
        back (I9). Barriers change the state, so a barrier is always committed; so is a decision with
        entries behind it, whose writers wait for this commit.
        """
        return (
            self.entry.kind is EntryKind.DATA
            and plan.decisions[0].seq == self.seq
            and mine.outcome is not Outcome.APPLIED
            and not mine.outcome.external
            and not plan.applied_before(self.seq)
            and plan.decisions[-1].seq == self.seq
            and plan.stop == "tail"
        )

    def _before_sleep(self, doing: str, late: str | None = None) -> None:
        """Log progress, and raise the outcome-unknown error if the deadline has passed."""
        ctx = self.ctx
        if ctx.now() > self.deadline:
            raise unknown_error(
                ctx,
                self.seq,
                late
                or f"is durable but was not applied within {ctx.max_wait_s:.0f}s (committed upper "
                f"{self.view.state.upper}); the next commit on the table applies it exactly once",
            )
        self.progress.note(ctx, doing)

    def _finish(self, outcome: Outcome, detail: str, *, by_peer: bool) -> CommitResult:
        return finish(self.ctx, self.progress, self.seq, outcome, detail, by_peer=by_peer)


#: What :meth:`Committer._read` reports for a damaged entry: a data entry (its writer commits it).
_DAMAGED = WalEntry(kind=EntryKind.DATA, token="", writer="")


def _quiet(claimed: Claimed, view: TableView) -> list[int] | None:
    """The pending positions up to ours, if the claim saw every one of them taken (no LIST needed to commit).

    Quiet: the claim took the first free position after the tail it listed (no ``floor``: it jumped
    over nothing), did not vanish, and every position from the upper up to ours held an object. Every
    position up to ours is then known and present (objects at or above the upper never change), so a
    plan on them voids nothing: a missing position in an old listing could since hold a barrier, which
    a plan on that listing would void (PROTOCOL.md §7). Entries put after our claim wait for this commit
    and lead the next. Whether we commit on it is the waiting policy's call.
    """
    if claimed.vanished or claimed.entry.floor is not None:
        return None
    upper = view.state.upper
    known = sorted({p for p in claimed.ahead if p >= upper})
    if known != list(range(upper, claimed.seq)):
        return None
    return [*known, claimed.seq]
