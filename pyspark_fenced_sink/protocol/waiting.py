"""Who commits next, and how the others wait (PROTOCOL.md §3 steps 4-5, "one committer at a time"; driver).

A catalog commit applies every pending entry it can (group commit), so one
committer at a time suffices and more only conflict. The writer whose entry
is the lowest pending one (the *head*: at the committed upper, or above it
with only holes before it as far as it saw) commits; every other writer waits for
the committed state to pass its entry and then reads its outcome from the
commit record in the metadata it has just loaded (PROTOCOL.md §6) — it reads
no WAL entry. Nothing waits on a live leader (I5): a waiter that sees the
upper stand still for its *patience* commits itself (it *helps*), whatever
holds the head up (a crashed or paused writer, an entry whose writer has
returned, a barrier, a missing position). Patience grows with the distance to
the head, so the nearest waiter helps first and the others see the upper move.

Timing is only a performance matter here, never a safety one: two committers
at once are resolved by the catalog's compare-and-swap as always. Waiters
poll at a fraction of the commit cadence they observe, so a write makes a few
table reads while it waits, however many writers there are.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Waiting"]

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
#: A writer this close to the upper, with no entry it knows of in between, lists the WAL to see
#: whether it is the head (farther writers wait: the head is almost always within two claim spreads).
CANDIDATE_SPAN = 64


@dataclass
class Waiting:
    """One writer's view of the commit pipeline while its entry at ``seq`` is pending.

    Attributes:
        seq: The writer's WAL position.
        ahead: Positions below ``seq`` it saw taken when it claimed ``seq``.
        own: The position of its own barrier (its epoch), if any: an entry of its own, which no
            other writer waits to commit, so it does not stand before it.
        upper: The committed upper it saw last.
        moved_at: When it saw the upper move last (or started waiting).
        cadence: Seconds between upper moves it has seen (None: none seen yet).
        pace: Positions reconciled per second lately (from the table's commits; None: not known).
        deadline_s: How long the writer may wait in all (``commit.max-wait-ms``).
        committing: It commits (the head, a helper, or a committer whose last commit landed
            without its own entry); it keeps committing until its entry is decided.
        polls: Table reads it made while waiting.
        since: When it started waiting (the first :meth:`should_commit`).
        helped: True if it started committing as a helper (the upper stood still).
        carry_on: Its own commit landed without its entry (the plan stopped before it): it
            commits on until its entry is decided, whatever lies before it.
        waited_s: Seconds it waited before it first committed.
    """

    seq: int
    ahead: tuple[int, ...]
    upper: int
    own: int | None
    moved_at: float
    patience_s: float
    poll_s: float
    deadline_s: float = float("inf")
    cadence: float | None = None
    pace: float | None = None
    committing: bool = False
    polls: int = 0
    since: float | None = None
    helped: bool = False
    carry_on: bool = False
    waited_s: float = 0.0

    def observe(self, upper: int, now: float, cadence: float | None = None) -> None:
        """Note the upper of a table read made at ``now`` (and the table's commit cadence, if known).

        Without the table's cadence, the intervals between the upper moves this writer sees stand in.
        """
        if cadence is not None:
            self.cadence = cadence
        if upper == self.upper:
            return
        if upper > self.upper and cadence is None:
            seen = now - self.moved_at
            self.cadence = seen if self.cadence is None else 0.5 * self.cadence + 0.5 * seen
        self.upper, self.moved_at = upper, now

    def head(self) -> bool:
        """True if no entry this writer knows of lies between the upper and its own, and it is near the upper."""
        if self.seq == self.upper:
            return True
        near = self.seq - self.upper <= CANDIDATE_SPAN
        return near and not any(self.upper <= p < self.seq and p != self.own for p in self.ahead)

    def listed(self, present: list[int]) -> bool:
        """Note the positions a LIST from the upper found; True if this writer is the head (or helps)."""
        self.ahead = tuple(sorted({*self.ahead, *(p for p in present if p < self.seq)}))
        if self.helped or self.carry_on or self.head():
            return True
        self.committing = False
        return False

    def patience(self) -> float:
        """How long the upper may stand still before this writer helps (nearer the head: sooner)."""
        base = max(self.patience_s, min(PATIENCE_MAX_S, PATIENCE_CADENCES * (self.cadence or 0.0)))
        distance = max(0, self.seq - self.upper - 1)
        return base * (1.0 + min(distance, 8) / 4.0)

    def should_commit(self, upper: int, now: float, started: float, cadence: float | None = None) -> bool:
        """True if this writer commits now: it is the head, already committing, or out of patience."""
        self.observe(upper, now, cadence)
        if self.since is None:
            self.since = now
        if self.committing:
            return True
        patience = self.patience()
        slow = min(SLOW_PATIENCES * patience, SLOW_DEADLINE_SHARE * self.deadline_s)
        if self.head() or now - self.moved_at >= patience or now - self.since >= slow:
            self.helped = not self.head()
            self.committing = True
            self.waited_s = now - started
            return True
        return False

    def conflicted(self, upper: int, now: float) -> None:
        """A peer committed first: wait again unless this writer is the head of the new upper."""
        self.observe(upper, now)
        self.committing = self.head()
        self.carry_on = False

    def pause(self, rng: random.Random) -> float:
        """Seconds to sleep before the next table read (jittered, so waiters do not poll in step).

        A fraction of the commit cadence; a writer more than a commit's worth of positions away
        from the upper sleeps up to one whole cadence (the commit predicted to reach it is later
        still). So a write reads the table a few times per commit it waits through, however long
        the queue ahead of it is — and never sleeps through more than one commit: the entries
        before it may all be applied by the next one, and then it is the head.
        """
        self.polls += 1
        if self.cadence is None:
            return min(POLL_MAX_S, max(POLL_MIN_S, self.poll_s)) * rng.uniform(0.75, 1.25)
        base = POLL_FRACTION * self.cadence
        if self.pace:
            per_commit = max(1.0, self.pace * self.cadence)
            ahead = (self.seq - self.upper) / per_commit * self.cadence - self.cadence
            base = max(base, min(self.cadence, ahead))
        return min(POLL_MAX_S, max(POLL_MIN_S, base)) * rng.uniform(0.75, 1.25)
