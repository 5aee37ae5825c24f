"""The waiting policy alone (``protocol.waiting``), on a fake clock: who commits, who waits, when help comes.

Pure policy, no I/O: each test feeds a :class:`Waiting` the table reads and entries a writer would see and
checks its role and its sleeps (PROTOCOL.md §3, "one committer at a time").
"""

from __future__ import annotations

import random

import pytest

from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.waiting import (
    CANDIDATE_SPAN,
    PATIENCE_MAX_S,
    POLL_MAX_S,
    POLL_MIN_S,
    SLOW_PATIENCES,
    Ahead,
    Role,
    WaitCause,
    Waiting,
    WaitLog,
    commits_own_entry,
)


def _entry(kind: EntryKind, writer: str = "w") -> WalEntry:
    return WalEntry(kind=kind, token=f"{kind.value}-{writer}", writer=writer)


def _waiting(
    seq: int, taken: set[int], *, upper: int = 0, own: int | None = None, cadence: float | None = None
) -> Waiting:
    return Waiting(Ahead(seq, own, set(taken)), upper, 0.0, patience_s=0.5, poll_s=0.05, cadence=cadence)


@pytest.mark.parametrize(
    ("kind", "commits"),
    [
        (EntryKind.DATA, True),
        (EntryKind.PUBLISH, True),
        (EntryKind.EXPIRE, True),
        (EntryKind.FENCE, False),
        (EntryKind.SKIP, False),
    ],
)
def test_only_entries_whose_writer_commits_them_hold_up_the_writers_behind(kind: EntryKind, commits: bool) -> None:
    """A data entry, a publish or a gc mark has a writer that commits it; a barrier or a skip has none."""
    assert commits_own_entry(_entry(kind)) is commits


def test_a_writer_behind_peers_barriers_becomes_the_head_once_it_has_read_them() -> None:
    """Two peers opened (barriers at 0 and 1, their tasks still running): the data entry at 2 commits at once."""
    w = _waiting(2, {0, 1})
    assert w.decide(0, 0.0, 0.0) is Role.WAITER
    assert w.to_read() == [1, 0]  # nearest first
    assert w.read({1: _entry(EntryKind.FENCE, "b"), 0: _entry(EntryKind.FENCE, "a")}) is Role.HEAD
    assert w.decide(0, 0.0, 0.0) is Role.HEAD
    assert w.log.polls == 0 and w.log.cause is None


def test_reading_stops_at_the_nearest_entry_whose_writer_commits_it() -> None:
    """Below a data entry nothing can make this writer the head: those positions are never read."""
    w = _waiting(5, {0, 1, 2, 3, 4})
    w.decide(0, 0.0, 0.0)
    assert w.read({4: _entry(EntryKind.FENCE), 3: _entry(EntryKind.DATA, "peer")}) is Role.WAITER
    assert w.to_read() == []
    assert w.ahead.blocker(0) == 3
    w.decide(4, 0.1, 0.0)  # the peer's commit moved the upper past its entry: only barriers remain before ours
    assert w.role is Role.HEAD


def test_own_barrier_never_stands_before_the_writers_entry() -> None:
    """A writer.id job's own barrier (its epoch) is no one else's work: it does not make the job wait."""
    w = _waiting(1, {0}, own=0)
    assert w.to_read() == [] and w.decide(0, 0.0, 0.0) is Role.HEAD


def test_a_far_writer_reads_nothing_and_waits() -> None:
    """Beyond the candidate span the head is almost surely nearer: no GETs, just table reads."""
    seq = CANDIDATE_SPAN + 10
    w = _waiting(seq, set(range(seq)))
    assert w.decide(0, 0.0, 0.0) is Role.WAITER and w.to_read() == []


def test_a_waiter_behind_a_dead_writers_entry_helps_after_its_patience() -> None:
    """The upper stands still behind a data entry whose writer died: help comes after the patience, not before."""
    w = _waiting(1, {0})
    w.read({0: _entry(EntryKind.DATA, "dead")})
    patience = w.patience()
    assert patience == pytest.approx(0.5)
    assert w.decide(0, patience - 0.01, 0.0) is Role.WAITER
    assert w.decide(0, patience, 0.0) is Role.HELPER
    assert w.log.cause is WaitCause.STALLED and w.log.waited_s == pytest.approx(patience)


def test_patience_grows_with_the_distance_to_the_upper_and_the_table_cadence() -> None:
    """The nearest waiter helps first; a slow table's cadence lengthens patience, up to its cap."""
    near, far = _waiting(1, {0}), _waiting(9, set(range(9)))
    assert far.patience() > near.patience()
    slow = _waiting(1, {0}, cadence=100.0)
    assert slow.patience() == pytest.approx(PATIENCE_MAX_S)


def test_a_writer_helps_when_the_upper_moves_too_slowly_for_too_long() -> None:
    """The upper moves a little at a time (a slow committer): after SLOW_PATIENCES patiences it helps anyway."""
    w = _waiting(20, set(range(20)))
    w.read({19: _entry(EntryKind.DATA)})
    t, upper = 0.0, 0
    while w.decide(upper, t, 0.0) is Role.WAITER:
        t += 0.4  # under the patience each time
        upper += 1
        assert t < 100
    assert w.role is Role.HELPER and w.log.cause is WaitCause.SLOW
    assert t >= SLOW_PATIENCES * 0.5


def test_a_head_whose_list_shows_an_unread_entry_before_it_waits_until_it_has_read_it() -> None:
    """A peer put below us after our claim: the head's LIST shows it, and we are a waiter until it is read."""
    w = _waiting(3, {0})
    w.read({0: _entry(EntryKind.FENCE)})
    assert w.decide(0, 0.0, 0.0) is Role.HEAD
    assert w.listed([0, 2, 3]) is Role.WAITER
    assert w.to_read() == [2]
    assert w.read({2: _entry(EntryKind.SKIP)}) is Role.HEAD


def test_after_a_lost_race_a_writer_is_the_head_only_if_nothing_committing_lies_before_it() -> None:
    """A peer's commit landed first: the writer stays a committer only if the new upper leaves it the head."""
    w = _waiting(3, {0, 1, 2})
    w.read({2: _entry(EntryKind.DATA), 1: _entry(EntryKind.FENCE), 0: _entry(EntryKind.FENCE)})
    w.role = Role.HELPER
    w.conflicted(2, 1.0)
    assert w.role is Role.WAITER
    w.conflicted(3, 2.0)
    assert w.role is Role.HEAD


def test_a_writer_carrying_on_commits_whatever_lies_before_it() -> None:
    """Its own commit landed without its entry: it keeps committing even behind a live writer's entry."""
    w = _waiting(2, {1})
    w.read({1: _entry(EntryKind.DATA)})
    w.landed_short()
    assert w.decide(0, 0.0, 0.0) is Role.CARRY_ON and w.listed([1, 2]) is Role.CARRY_ON


def test_pauses_stay_within_the_poll_bounds_and_count_as_waiting_for_a_commit() -> None:
    """However slow or fast the table, a waiter sleeps between POLL_MIN_S and POLL_MAX_S (with jitter)."""
    rng = random.Random(7)
    for cadence in (None, 0.001, 0.5, 50.0):
        w = _waiting(40, set(range(40)), cadence=cadence)
        w.pace = 100.0 if cadence else None
        pause = w.pause(rng)
        assert POLL_MIN_S * 0.75 <= pause <= POLL_MAX_S * 1.25
        assert w.log.polls == 1 and w.log.cause is WaitCause.COMMIT


def test_the_wait_log_keeps_the_most_telling_cause() -> None:
    """A writer that waited for a commit, then hit a conflict, then helped a stalled table reports "stalled"."""
    log = WaitLog()
    log.note(WaitCause.COMMIT)
    log.note(WaitCause.CATALOG)
    assert log.cause is WaitCause.CATALOG
    log.note(WaitCause.STALLED)
    log.note(WaitCause.COMMIT)
    assert log.cause is WaitCause.STALLED


def test_a_waiter_near_the_upper_polls_soon_even_on_a_table_with_rare_commits() -> None:
    """The commit it waits for is in flight now: its first pauses start at POLL_MIN_S and double while the
    upper stands still, capped by the cadence; a move of the upper starts them short again."""
    rng = random.Random(3)
    w = _waiting(1, {0}, cadence=10.0)
    pauses = [w.pause(rng) for _ in range(4)]
    assert pauses[0] <= POLL_MIN_S * 1.25 and pauses[3] >= POLL_MIN_S * 8 * 0.75
    assert max(pauses) <= 0.3 * 10.0 * 1.25
    w.observe(1, 5.0)
    assert w.pause(rng) <= POLL_MIN_S * 1.25


def test_a_waiter_far_behind_sleeps_toward_the_commit_predicted_to_reach_it() -> None:
    """Ten commits' worth of positions away, it sleeps a whole cadence (capped), not POLL_MIN_S."""
    rng = random.Random(5)
    w = _waiting(50, set(range(50)), cadence=1.0)
    w.pace = 5.0  # five positions per commit: fifty positions are ten commits away
    assert w.pause(rng) >= 0.75
