"""Exact applied batch ids per writer (PROTOCOL.md §5; invariant I9)."""

from __future__ import annotations

import random

import pytest

from pyspark_fenced_sink.protocol.batches import MAX_INTERVALS, BatchIds


def _of(ids: list[int]) -> BatchIds:
    out = BatchIds()
    for b in ids:
        out = out.add(b)
    return out


def test_increasing_ids_stay_one_interval() -> None:
    """The common case, ids 0, 1, 2, ...: one interval however many batches."""
    ids = _of(list(range(10_000)))
    assert ids.intervals == ((0, 9_999),)
    assert ids.last == 9_999


def test_membership_is_exact_across_holes() -> None:
    """An id is applied only if it was added: holes stay holes, neighbours merge."""
    ids = _of([1, 2, 3, 7, 9, 8, 20])
    assert ids.intervals == ((1, 3), (7, 9), (20, 20))
    assert [b for b in range(25) if b in ids] == [1, 2, 3, 7, 8, 9, 20]
    assert "4" not in ids  # type: ignore[operator]  # only ints are ids


def test_adding_an_applied_id_changes_nothing() -> None:
    """add() of a member returns the same set."""
    ids = _of([3, 4])
    assert ids.add(4) is ids


@pytest.mark.parametrize("seed", range(20))
def test_random_ids_match_a_plain_set(seed: int) -> None:
    """Against a Python set: the same members, sorted disjoint non-adjacent intervals, while under the bound."""
    rng = random.Random(seed)
    chosen = [rng.randint(0, 200) for _ in range(60)]
    ids = _of(chosen)
    assert len(ids.intervals) <= MAX_INTERVALS and ids.floor == 0
    assert {b for b in range(-5, 210) if b in ids} == set(chosen)
    assert all(a[1] + 1 < b[0] for a, b in zip(ids.intervals, ids.intervals[1:], strict=False))


def test_beyond_the_bound_the_oldest_are_forgotten_and_the_floor_rises() -> None:
    """More than MAX_INTERVALS disjoint runs: the oldest are dropped; ids below the floor are not known."""
    ids = _of([2 * i for i in range(MAX_INTERVALS + 5)])
    assert len(ids.intervals) == MAX_INTERVALS
    assert ids.floor == 10
    assert not ids.known(8) and ids.known(10)
    assert 8 not in ids and 10 in ids


def test_encoding_round_trips_and_is_compact() -> None:
    """{"ids": [[lo, hi], ...], "floor": n}; floor left out when 0."""
    ids = BatchIds(((0, 41), (45, 45)), floor=0)
    assert ids.encode() == {"ids": [[0, 41], [45, 45]]}
    assert BatchIds.decode(ids.encode()) == ids
    floored = BatchIds(((500, 510),), floor=500)
    assert BatchIds.decode(floored.encode()) == floored
    assert ids.describe() == "0-41,45" and floored.describe() == "500-510 (below 500 unknown)"
