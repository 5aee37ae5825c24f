"""The ``compact`` WAL entry: codec, what applying it removes, how it groups (PROTOCOL.md §5.2; pure)."""

from __future__ import annotations

import pytest

from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.reconcile import reconcile
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, removals
from pyspark_fenced_sink.protocol.state import CommittedState

LIVE = [LiveFile("a1", 0, ()), LiveFile("a2", 0, ()), LiveFile("b1", 0, ())]


def entry(mode: WriteMode = WriteMode.COMPACT, token: str = "t", **kwargs: object) -> WalEntry:
    return WalEntry(  # type: ignore[arg-type]
        kind=EntryKind.DATA, token=token, writer="anon-x", ephemeral=True, mode=mode, created_ms=0, **kwargs
    )


def test_a_compact_entry_round_trips_as_format_3_with_its_inputs() -> None:
    """The inputs survive encoding; the entry is format 3 (a format-2 reader refuses it, never misreads it)."""
    e = entry(inputs=("a1", "a2"), files=({"p": "out", "s": 0},))
    raw = encode_entry(e)
    assert b'"v":3' in raw.replace(b" ", b"")
    assert decode_entry(raw) == e


def test_applying_a_compaction_removes_exactly_its_live_inputs() -> None:
    """Both inputs live: they, and nothing else, are removed."""
    assert [f.path for f in removals(entry(inputs=("a1", "a2")), LIVE)] == ["a1", "a2"]


@pytest.mark.parametrize("inputs", [("a1", "gone"), ()], ids=["an-input-removed", "no-inputs"])
def test_a_compaction_whose_input_is_not_live_is_refused(inputs: tuple[str, ...]) -> None:
    """An input removed since the compaction read it (or none named): EntryRefused, nothing removed."""
    with pytest.raises(EntryRefused, match="no longer live"):
        removals(entry(inputs=inputs), LIVE)


def test_a_compaction_starts_a_commit_and_takes_no_appends() -> None:
    """append, compact, append pending: three commits (the compaction alone), in WAL order."""
    entries = {0: entry(WriteMode.APPEND, "a"), 1: entry(inputs=("x",), token="c"), 2: entry(WriteMode.APPEND, "b")}
    state = CommittedState()
    plans = []
    while state.upper < 3:
        plan = reconcile(state, entries)
        plans.append((plan.apply, plan.mode))
        state = plan.state
    assert plans == [((0,), WriteMode.APPEND), ((1,), WriteMode.COMPACT), ((2,), WriteMode.APPEND)]
