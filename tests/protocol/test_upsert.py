"""The pure upsert decision, the upsert entry and state codecs, and upserts in reconciliation (PROTOCOL.md §5.5)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome, reconcile
from pyspark_fenced_sink.protocol.replace import EntryRefused, check_folded
from pyspark_fenced_sink.protocol.state import CommittedState, WriterState
from pyspark_fenced_sink.protocol.upsert import (
    TOMBSTONE_KEYS_KEY,
    TOMBSTONE_MS_KEY,
    TOMBSTONE_ORDER_KEY,
    Resolution,
    Source,
    UpsertSpec,
    remember_deletes,
    resolve,
)

L, T, R, D = Source.LIVE, Source.TOMBSTONE, Source.ROW, Source.DELETE
ORDERED = UpsertSpec(keys=((1, "id"),), order=(3, "ts"), delete_where="op = 'D'")
UNORDERED = UpsertSpec(keys=((1, "id"), (2, "region")))


class _Out:
    """A resolution with Python values: sorted loser indices, the duplicate key itself."""

    def __init__(self, res: Resolution, keys: list[Any]) -> None:
        self.losers = sorted(int(i) for i in res.losers)
        self.duplicate = None if res.duplicate is None else keys[res.duplicate]
        self.inserted, self.updated, self.deleted, self.unchanged = (
            res.inserted,
            res.updated,
            res.deleted,
            res.unchanged,
        )


def _resolve(rows: list[tuple[Any, Any, Source, int]], *, ordered: bool = True) -> _Out:
    """Keys mapped to group numbers and orders to ranks (null lowest), as the catalog side maps them."""
    keys, orders, sources, ranks = zip(*rows, strict=True) if rows else ((), (), (), ())
    distinct = list(dict.fromkeys(keys))
    values = sorted({v for v in orders if v is not None})
    order_rank = [0 if v is None else values.index(v) + 1 for v in orders]
    groups = [distinct.index(k) for k in keys]
    return _Out(resolve(groups, order_rank, sources, ranks, ordered=ordered), distinct)


# ---------------------------------------------------------------------------------------------- the decision


def test_a_newer_row_replaces_the_live_row() -> None:
    """With an order column, an entry row with a greater order value deletes the live row and stays."""
    out = _resolve([(1, 5, L, 0), (1, 7, R, 0)])
    assert (out.losers, out.updated) == ([0], 1)


def test_an_older_row_loses_and_the_live_row_stays() -> None:
    """An update with a lower order than the live row changes nothing: the entry's own row is deleted."""
    out = _resolve([(1, 9, L, 0), (1, 7, R, 0)])
    assert (out.losers, out.unchanged) == ([1], 1)


def test_ties_go_to_the_later_wal_position() -> None:
    """An equal order value: the entry, later in the WAL than every live row, wins."""
    assert _resolve([(1, 5, L, 0), (1, 5, R, 0)]).losers == [0]


def test_null_order_is_lowest() -> None:
    """A null order loses to any value and ties with a null (the later WAL position wins)."""
    assert _resolve([(1, 1, L, 0), (1, None, R, 0)]).losers == [1]
    assert _resolve([(1, None, L, 0), (1, 1, R, 0)]).losers == [0]
    assert _resolve([(1, None, L, 0), (1, None, R, 0)]).losers == [0]


def test_a_remembered_delete_beats_a_lower_row() -> None:
    """A tombstone with a greater order keeps a late, lower-order row of a deleted key out."""
    out = _resolve([(1, 9, T, 0), (1, 7, R, 0)])
    assert (out.losers, out.unchanged) == ([1], 1)


def test_a_row_above_the_remembered_delete_brings_the_key_back() -> None:
    """A row with an order above the tombstone's is inserted."""
    out = _resolve([(1, 9, T, 0), (1, 10, R, 0)])
    assert (out.losers, out.inserted) == ([], 1)


def test_a_winning_delete_removes_every_live_row_and_the_entrys_rows() -> None:
    """A delete row with the greatest order removes the live rows (duplicates too) and the entry's own rows."""
    out = _resolve([(1, 3, L, 0), (1, 4, L, 0), (1, 5, R, 0), (1, 6, D, 1)])
    assert (sorted(out.losers), out.deleted) == ([0, 1, 2], 1)


def test_a_losing_delete_changes_nothing() -> None:
    """A delete row below the live row's order is not applied to the newer row."""
    out = _resolve([(1, 9, L, 0), (1, 6, D, 0)])
    assert (out.losers, out.unchanged, out.deleted) == ([], 1, 0)


def test_inside_one_write_the_greatest_wins_then_deletes_then_the_later_row() -> None:
    """Duplicate keys in one ordered write: greatest order; on a tie a delete, then the later row."""
    assert sorted(_resolve([(1, 5, R, 0), (1, 7, R, 1), (1, 6, R, 2)]).losers) == [0, 2]
    assert sorted(_resolve([(1, 5, R, 0), (1, 5, R, 1)]).losers) == [0]
    assert sorted(_resolve([(1, 5, R, 3), (1, 5, D, 0)]).losers) == [0]


def test_without_order_the_entry_replaces_the_key_and_ignores_tombstones() -> None:
    """Without an order column the later WAL position wins, whatever order values say."""
    out = _resolve([(1, 9, L, 0), (1, 99, T, 0), (1, 1, R, 0)], ordered=False)
    assert (out.losers, out.updated) == ([0], 1)


def test_without_order_a_duplicate_key_refuses_the_whole_entry() -> None:
    """Two rows of one key in an unordered entry: nothing of it applies, the key is named."""
    out = _resolve([(1, None, R, 0), (2, None, L, 0), (2, None, R, 1), (2, None, D, 2)], ordered=False)
    assert (out.duplicate, out.losers) == (2, [])


def test_keys_the_entry_does_not_name_are_left_alone() -> None:
    """Candidates of a key without an entry row are never losers."""
    assert _resolve([(1, 1, L, 0), (2, 1, R, 0)]).losers == []


def test_composite_keys_match_as_tuples() -> None:
    """A composite key is one tuple: rows match only on every key column."""
    out = _resolve([((1, "eu"), 1, L, 0), ((1, "us"), 1, L, 0), ((1, "eu"), 2, R, 0)])
    assert out.losers == [0]


# ---------------------------------------------------------------------------------------------- codecs


def _upsert(**kw: Any) -> WalEntry:
    base: dict[str, Any] = {
        "kind": EntryKind.DATA,
        "token": "t" * 32,
        "writer": "w",
        "ephemeral": True,
        "mode": WriteMode.UPSERT,
        "upsert": ORDERED,
        "files": ({"p": "f1", "s": 0},),
        "deletes": ({"p": "k1", "n": 2},),
        "created_ms": 1000,
    }
    base.update(kw)
    return WalEntry(**base)


def test_upsert_entries_are_format_4_and_round_trip() -> None:
    """An upsert entry encodes as version 4 (older readers refuse it) and decodes equal."""
    entry = _upsert()
    body = json.loads(encode_entry(entry))
    assert body["v"] == 4 and body["mode"] == "upsert"
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_entry(encode_entry(_upsert(upsert=UNORDERED, deletes=()))) == _upsert(upsert=UNORDERED, deletes=())


@pytest.mark.parametrize("upsert", [{"k": []}, {"k": [["x", "id"]]}, {"k": [[1, "id"]], "o": [None]}, "id"])
def test_a_malformed_upsert_spec_is_corrupt(upsert: object) -> None:
    """A damaged key spec makes the WAL object corrupt (operator action), never a guess."""
    body = {"v": 4, "kind": "data", "token": "t", "writer": "w", "mode": "upsert", "upsert": upsert}
    with pytest.raises(CorruptControlDataError):
        decode_entry(json.dumps(body).encode())


def test_a_state_with_tombstones_is_version_3_and_round_trips() -> None:
    """Tombstones make the state version 3 (a fencedlake that would drop them refuses it); without, version 2."""
    state = CommittedState(upper=4, tombstones=({"p": "k1", "ms": 5, "o": 3},))
    assert json.loads(state.encode())["v"] == 3
    assert CommittedState.decode(state.encode()) == state
    assert json.loads(CommittedState(upper=4).encode())["v"] == 2


def test_remember_deletes_only_for_ordered_upserts_on_main() -> None:
    """Tombstones come from ordered upserts' delete-key files on main, stamped with time and order column."""
    deletes = ({"p": "k1"},)
    got = remember_deletes((), ORDERED, deletes, on_main=True, created_ms=7)
    assert got == ({"p": "k1", TOMBSTONE_MS_KEY: 7, TOMBSTONE_ORDER_KEY: 3, TOMBSTONE_KEYS_KEY: [1]},)
    assert remember_deletes((), UNORDERED, deletes, on_main=True, created_ms=7) == ()
    assert remember_deletes((), ORDERED, deletes, on_main=False, created_ms=7) == ()
    assert remember_deletes((), ORDERED, (), on_main=True, created_ms=7) == ()


# ---------------------------------------------------------------------------------------------- reconcile


def _append(**kw: Any) -> WalEntry:
    base: dict[str, Any] = {"kind": EntryKind.DATA, "token": "a" * 32, "writer": "w", "ephemeral": True}
    return WalEntry(**{**base, "files": ({"p": "a"},), **kw})


def test_upserts_share_a_commit_and_appends_never_join_it() -> None:
    """Upserts to one branch with equal properties join one commit in WAL order; an append starts the next.

    An upsert commit that deletes rows is an ``overwrite`` snapshot, which stream readers may skip: appended
    rows inside it would be skipped with it (PROTOCOL.md §5, §5.5). Nor does an upsert join appends.
    """
    entries = {
        0: _append(),
        1: _upsert(token="b" * 32),
        2: _upsert(token="c" * 32),
        3: _append(token="d" * 32),
        4: _append(token="e" * 32),
    }
    plans = []
    state = CommittedState()
    while state.upper < len(entries):
        plan = reconcile(state, entries)
        plans.append((plan.apply, plan.mode))
        state = plan.state
    assert plans == [((0,), WriteMode.APPEND), ((1, 2), WriteMode.UPSERT), ((3, 4), WriteMode.APPEND)]


def test_an_upsert_never_joins_a_replace_and_an_overwrite_never_joins_upserts() -> None:
    """An overwrite starts its own commit; an upsert after it starts the next."""
    entries = {0: _upsert(), 1: _append(mode=WriteMode.OVERWRITE, token="o" * 32), 2: _upsert(token="x" * 32)}
    first = reconcile(CommittedState(), entries)
    assert (first.apply, first.mode, first.stop) == ((0,), WriteMode.UPSERT, "next-commit")
    second = reconcile(first.state, entries)
    assert (second.apply, second.mode, second.stop) == ((1,), WriteMode.OVERWRITE, "next-commit")


def test_an_upsert_to_another_branch_starts_another_commit() -> None:
    """Upserts join only commits of their own branch and snapshot properties."""
    entries = {0: _upsert(), 1: _upsert(token="b" * 32, branch="audit")}
    assert reconcile(CommittedState(), entries).apply == (0,)


def test_applied_ordered_upserts_add_their_delete_files_to_the_tombstones() -> None:
    """The state's tombstone list grows by an applied ordered upsert's delete-key files, and only then."""
    state = CommittedState(writers={"w": WriterState(epoch=0)})
    entries = {
        0: _upsert(),
        1: _upsert(token="b" * 32, upsert=UNORDERED, deletes=({"p": "k2"},)),
        2: _upsert(token="c" * 32, ephemeral=False, epoch=99, deletes=({"p": "k3"},)),  # fenced: not applied
    }
    plan = reconcile(state, entries)
    assert [d.outcome for d in plan.decisions] == [Outcome.APPLIED, Outcome.APPLIED, Outcome.FENCED]
    assert [t["p"] for t in plan.state.tombstones] == ["k1"]


# ---------------------------------------------------------------------------------------------- compaction


@pytest.mark.parametrize(
    ("applying", "refused"),
    [
        (("d1", "d2"), None),
        ((), None),
        (("d1", "d2", "d3"), "d3 applies"),  # added since the compaction read its inputs
        (("d1",), "d2, folded into its rewrite, no longer applies"),  # main rolled back past it
    ],
    ids=["exactly-folded", "nothing-folded", "a-delete-added", "a-folded-delete-gone"],
)
def test_a_compaction_applies_only_over_exactly_the_deletes_it_folded(
    applying: tuple[str, ...], refused: str | None
) -> None:
    """The delete files applying to a compaction's inputs at apply time must be exactly the ones it folded."""
    folded = ("d1", "d2") if applying != () else ()
    entry = WalEntry(kind=EntryKind.DATA, token="c", writer="w", mode="compact", inputs=("a",), folded=folded)
    if refused is None:
        check_folded(entry, applying)
    else:
        with pytest.raises(EntryRefused, match=refused):
            check_folded(entry, applying)
