"""Who commits next, and how the others wait (PROTOCOL.md §3 steps 4-5, "one committer at a time"; driver).

A catalog commit applies every pending entry it can (group commit), so one
committer at a time suffices and more only conflict. Pure policy, no I/O: the
committer (``protocol.committer``) feeds it what it saw and asks it what to do.

* **Present entries never make a writer wait.** A barrier (a ``fence`` put when
  a writer opened, its tasks still running) and a ``skip`` are work any
  committer applies; no writer waits to commit them. So the *head* is the
  writer of the lowest pending entry whose writer commits it (a data entry, a
  publish, a ``gc`` mark): a writer whose pending predecessors are all barriers,
  skips, its own barrier or holes is the head and commits at once.
  :class:`Ahead` keeps what a writer knows of the positions before its own.
* **Waiters** learn their outcome from the commit record of the table they
  re-read (PROTOCOL.md §6); they poll at a fraction of the commit cadence.
* **Helpers.** Nothing waits on a live leader (I5): a waiter that sees the upper
  stand still for its *patience* commits itself, whatever holds the head up
  (a writer that died or paused after its put, a missing position). Patience
  grows with the distance to the upper, so the nearest waiter helps first.

Timing is a performance matter only, never a safety one: two committers at once
are resolved by the catalog's compare-and-swap as always.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum

from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry

__all__ = ["CANDIDATE_SPAN", "Ahead", "Role", "WaitCause", "Waiting", "commits_own_entry"]

#: Poll interval bounds (seconds): the cadence estimate is clamped into them.
POLL_MIN_S = 0.02
POLL_MAX_S = 2.0
#: Fraction of the observed commit cadence between two polls.
POLL_FRACTION = 0.3
#: A helper waits at least this many commit cadences of a standing upper, but never longer than
#: ``PATIENCE_MAX_S`` (times its distance factor): a cadence measured across stalls must not put help off.
PATIENCE_CADENCES = 4.0
PATIENCE_MAX_S = 10.0
#: A writer that has waited this many patiences in all (or a quarter of its deadline) helps even if the
#: upper moves: progress must not hang on one slow committer (a paused process, an overloaded host) that
#: moves it a little at a time.
SLOW_PATIENCES = 4.0
SLOW_DEADLINE_SHARE = 0.25
#: A writer this close to the upper looks at the entries before its own (farther writers wait: the head is
#: almost always within two claim spreads).
CANDIDATE_SPAN = 64


def commits_own_entry(entry: WalEntry) -> bool:
    """True if the writer of ``entry`` commits it itself: a writer behind it waits for that commit.

    A ``fence`` barrier is put when a writer opens (its commit comes later, with its data entry) and a
    ``skip`` seals a hole or records an operator's decision: nobody commits either for its own sake, so
    they never stand before another writer's entry.
    """
    return entry.kind not in (EntryKind.FENCE, EntryKind.SKIP)


class Role(Enum):
    """What a writer with a pending entry does next."""

    #: Another writer's commit will decide its entry: it re-reads the table.
    WAITER = "waiter"
    #: Its entry is the lowest pending one whose writer commits it: it commits.
    HEAD = "head"
    #: The upper stood still for its patience (or moved too slowly): it commits whatever holds the head up.
    HELPER = "helper"
    #: Its own commit landed without its entry (the plan stopped before it): it commits on until its entry
    #: is decided, whatever lies before it.
    CARRY_ON = "carry-on"


class WaitCause(Enum):
    """Why a writer waited before its entry was decided (the commit record's ``why``; PROTOCOL.md §10)."""

    #: A live writer's commit was in flight ahead of it (the normal case; no timer).
    COMMIT = "commit"
    #: The upper stood still for a patience: a writer died or paused after its put (it then helped).
    STALLED = "stalled"
    #: The upper moved, but too slowly for too long (it then helped).
    SLOW = "slow"
    #: A missing position before its entry: a claim in flight, or a lost control object.
    POSITION = "position"
    #: The catalog refused (a concurrent commit) or could not be read (an outage).
    CATALOG = "catalog"
    #: The object store failed a read of the WAL (a reset, a cut response, an outage): read again.
    STORE = "store"


#: Which cause a wait log keeps when a writer waited for several: the one that says most about the table.
_RANK = {
    WaitCause.COMMIT: 0,
    WaitCause.CATALOG: 1,
    WaitCause.STORE: 1,
    WaitCause.POSITION: 2,
    WaitCause.SLOW: 3,
    WaitCause.STALLED: 4,
}


@dataclass
class Ahead:
    """What a writer knows of the positions before its own entry at ``seq``.

    Attributes:
        seq: The writer's WAL position.
        own: The position of its own barrier (its epoch), if any.
        taken: Positions below ``seq`` it saw taken (its claim's LIST, races it lost, later LISTs).
        commits: Of those, the ones whose entry it has read: True if that entry's writer commits it
            (:func:`commits_own_entry`), False for a barrier or a skip.
    """

    seq: int
    own: int | None = None
    taken: set[int] = field(default_factory=set)
    commits: dict[int, bool] = field(default_factory=dict)

    def saw(self, positions: list[int] | tuple[int, ...]) -> None:
        """Note positions found taken (entries at or above the upper never change: what was read stays true)."""
        self.taken.update(p for p in positions if p < self.seq)

    def learn(self, seq: int, entry: WalEntry | None) -> None:
        """Note the entry read at ``seq`` (None: the position was empty when read)."""
        if entry is None:
            self.taken.discard(seq)
        else:
            self.commits[seq] = commits_own_entry(entry)

    def before(self, upper: int) -> list[int]:
        """Pending positions before ``seq`` that may hold an entry whose writer commits it, nearest first."""
        return sorted(
            (p for p in self.taken if upper <= p < self.seq and p != self.own and self.commits.get(p, True)),
            reverse=True,
        )

    def blocker(self, upper: int) -> int | None:
        """The nearest pending position before ours whose entry is known to be committed by its writer."""
        return next((p for p in self.before(upper) if p in self.commits), None)

    def unread(self, upper: int) -> list[int]:
        """The pending positions to read to tell whether a committing entry lies before ours, nearest first.

        Only those above the nearest known committing entry: below it, nothing can make this writer the head.
        """
        stop = self.blocker(upper)
        return [p for p in self.before(upper) if p not in self.commits and (stop is None or p > stop)]

    def clear(self, upper: int) -> bool:
        """True if no pending position before ours may hold an entry whose writer commits it."""
        return not self.before(upper)


@dataclass
class WaitLog:
    """What one writer's waiting cost.

    Attributes:
        since: When it first asked whether to commit.
        polls: Table reads it made while waiting.
        waited_s: Seconds from the start of its write until it first committed.
        cause: Why it waited (None: it did not).
    """

    since: float | None = None
    polls: int = 0
    waited_s: float = 0.0
    cause: WaitCause | None = None

    def note(self, cause: WaitCause) -> None:
        """Record that it waited for ``cause``; the most telling cause seen is kept (``WaitCause`` order)."""
        if self.cause is None or _RANK[cause] > _RANK[self.cause]:
            self.cause = cause


@dataclass
class Waiting:
    """One writer's policy while its entry is pending: whether it commits now, how long it sleeps.

    Attributes:
        ahead: What it knows of the positions before its entry.
        upper: The committed upper it saw last.
        moved_at: When it saw the upper move last (or started waiting).
        patience_s: The least time the upper must stand still before it helps.
        poll_s: Seconds between table reads until it knows the table's commit cadence.
        deadline_s: How long it may wait in all (``commit.max-wait-ms``).
        cadence: Seconds between the table's commits (None: not known).
        pace: Positions reconciled per second lately (None: not known).
        role: What it does next.
        log: What its waiting cost (reported in its commit record and result).
    """

    ahead: Ahead
    upper: int
    moved_at: float
    patience_s: float
    poll_s: float
    deadline_s: float = float("inf")
    cadence: float | None = None
    pace: float | None = None
    role: Role = Role.WAITER
    log: WaitLog = field(default_factory=WaitLog)
    #: Polls since it last saw the upper move (its pauses grow from POLL_MIN_S while the upper stands still).
    streak: int = 0

    @property
    def seq(self) -> int:
        """The writer's WAL position."""
        return self.ahead.seq

    def observe(self, upper: int, now: float, cadence: float | None = None) -> None:
        """Note the upper of a table read made at ``now`` (and the table's commit cadence, if known).

        Without the table's cadence, the intervals between the upper moves this writer sees stand in.
        """
        if cadence is not None:
            self.cadence = cadence
        if upper == self.upper:
            return
        self.streak = 0
        if upper > self.upper and cadence is None:
            seen = now - self.moved_at
            self.cadence = seen if self.cadence is None else 0.5 * self.cadence + 0.5 * seen
        self.upper, self.moved_at = upper, now

    def near(self) -> bool:
        """True if its entry is close enough to the upper for it to look at the entries before it."""
        return self.seq - self.upper <= CANDIDATE_SPAN

    def head(self) -> bool:
        """True if its entry is the lowest pending one whose writer commits it, as far as it knows."""
        return self.seq <= self.upper or (self.near() and self.ahead.clear(self.upper))

    def to_read(self) -> list[int]:
        """Positions whose entries it should read before it decides (empty when far from the upper)."""
        return self.ahead.unread(self.upper) if self.near() and self.role is Role.WAITER else []

    def patience(self) -> float:
        """How long the upper may stand still before this writer helps (nearer the head: sooner)."""
        base = max(self.patience_s, min(PATIENCE_MAX_S, PATIENCE_CADENCES * (self.cadence or 0.0)))
        distance = max(0, self.seq - self.upper - 1)
        return base * (1.0 + min(distance, 8) / 4.0)

    def decide(self, upper: int, now: float, started: float, cadence: float | None = None) -> Role:
        """Its role after a table read at ``now`` showing ``upper`` (``started``: when its write began)."""
        self.observe(upper, now, cadence)
        log = self.log
        if log.since is None:
            log.since = now
        if self.role is not Role.WAITER:
            return self.role
        patience = self.patience()
        slow = min(SLOW_PATIENCES * patience, SLOW_DEADLINE_SHARE * self.deadline_s)
        if self.head():
            self.role = Role.HEAD
        elif now - self.moved_at >= patience:
            self.role = Role.HELPER
            log.note(WaitCause.STALLED)
        elif now - log.since >= slow:
            self.role = Role.HELPER
            log.note(WaitCause.SLOW)
        else:
            return self.role
        log.waited_s = now - started
        return self.role

    def listed(self, present: list[int]) -> Role:
        """Note the positions a LIST from the upper found; the role it then has (a head may become a waiter)."""
        self.ahead.saw(present)
        if self.role is Role.HEAD and not self.head():
            self.role = Role.WAITER
        return self.role

    def read(self, found: dict[int, WalEntry | None]) -> Role:
        """Note entries read before its own; a waiter with nothing committing before it becomes the head."""
        for seq, entry in found.items():
            self.ahead.learn(seq, entry)
        if self.role is Role.WAITER and self.head():
            self.role = Role.HEAD
        return self.role

    def landed_short(self) -> None:
        """Its own commit landed without its entry: it commits on until the entry is decided."""
        self.role = Role.CARRY_ON

    def conflicted(self, upper: int, now: float) -> None:
        """A peer committed first: wait again unless this writer is the head of the new upper."""
        self.observe(upper, now)
        self.role = Role.HEAD if self.head() else Role.WAITER

    def pause(self, rng: random.Random) -> float:
        """Seconds to sleep before the next table read (jittered, so waiters do not poll in step).

        A fraction of the commit cadence; a writer more than a commit's worth of positions away
        from the upper sleeps up to one whole cadence (the commit predicted to reach it is later
        still). So a write reads the table a few times per commit it waits through, however long
        the queue ahead of it is — and never sleeps through more than one commit: the entries
        before it may all be applied by the next one, and then it is the head. A writer within a
        commit's worth of the upper starts short (POLL_MIN_S, doubling while the upper stands
        still): the commit it waits for is in flight now, and a table whose commits are rare
        (a long cadence) must not make it sleep long past that commit.
        """
        self.log.polls += 1
        self.log.note(WaitCause.COMMIT)
        self.streak += 1
        if self.cadence is None:
            return min(POLL_MAX_S, max(POLL_MIN_S, self.poll_s)) * rng.uniform(0.75, 1.25)
        base = POLL_FRACTION * self.cadence
        per_commit = max(1.0, self.pace * self.cadence) if self.pace else float("inf")
        if self.seq - self.upper > per_commit:  # the next commit will not reach it: sleep toward the one that will
            ahead = (self.seq - self.upper) / per_commit * self.cadence - self.cadence
            base = max(base, min(self.cadence, ahead))
        else:
            base = min(base, POLL_MIN_S * 2 ** (self.streak - 1))
        return min(POLL_MAX_S, max(POLL_MIN_S, base)) * rng.uniform(0.75, 1.25)
