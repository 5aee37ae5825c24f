"""What applying an entry removes, and when a publish may move main (PROTOCOL.md §5.1; pure)."""

from __future__ import annotations

import pytest

from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.replace import (
    EntryRefused,
    LiveFile,
    Match,
    Refusals,
    changed_data,
    check_fast_forward,
    removals,
)

LIVE = [
    LiveFile("a1", 0, ("a",)),
    LiveFile("a2", 0, ("a",)),
    LiveFile("b1", 0, ("b",)),
    LiveFile("n1", 0, (None,)),
    LiveFile("old-spec-a", 1, ("a",)),
]


def entry(mode: WriteMode, **kwargs: object) -> WalEntry:
    return WalEntry(kind=EntryKind.DATA, token="t", writer="w", mode=mode, spec_id=0, **kwargs)  # type: ignore[arg-type]


def paths(files: list[LiveFile]) -> list[str]:
    return [f.path for f in files]


@pytest.mark.parametrize(
    ("mode", "partitions", "expected"),
    [
        (WriteMode.APPEND, (), []),
        (WriteMode.OVERWRITE, (), ["a1", "a2", "b1", "n1", "old-spec-a"]),
        (WriteMode.DYNAMIC, (("a",),), ["a1", "a2"]),
        (WriteMode.DYNAMIC, (("b",), (None,)), ["b1", "n1"]),
        (WriteMode.DYNAMIC, (("zz",),), []),
        (WriteMode.DYNAMIC, (), []),
    ],
    ids=["append", "static", "one-partition", "null-partition", "absent-partition", "empty-write"],
)
def test_removals_by_mode(mode: WriteMode, partitions: tuple[tuple[str | None, ...], ...], expected: list[str]) -> None:
    """Append removes nothing, static everything, dynamic exactly its partitions under its own spec."""
    assert paths(removals(entry(mode, partitions=partitions), LIVE)) == expected


def test_dynamic_overwrite_removes_what_is_live_now_not_what_was_live_when_written() -> None:
    """The selection is over the files passed in (the commit's base): a file added since the write goes too."""
    dyn = entry(WriteMode.DYNAMIC, partitions=(("a",),))
    assert paths(removals(dyn, LIVE[:1])) == ["a1"]
    assert paths(removals(dyn, [*LIVE, LiveFile("a3-added-later", 0, ("a",))])) == ["a1", "a2", "a3-added-later"]


def test_replace_where_removes_whole_matching_files_and_keeps_the_rest() -> None:
    """Files whose rows all match go, files none of whose rows can match stay."""
    verdicts = {"a1": Match.ALL, "a2": Match.ALL, "b1": Match.NONE, "n1": Match.NONE, "old-spec-a": Match.ALL}
    rw = entry(WriteMode.REPLACE_WHERE, row_filter="region = 'a'")
    assert paths(removals(rw, LIVE, lambda f: verdicts[f.path])) == ["a1", "a2", "old-spec-a"]


def test_replace_where_over_a_straddling_file_is_refused() -> None:
    """A file with rows on both sides of the filter is never removed whole nor kept: the entry is refused."""
    rw = entry(WriteMode.REPLACE_WHERE, row_filter="id >= 5", branch="audit")
    with pytest.raises(EntryRefused, match=r"replace-where 'id >= 5' is refused: live file b1 on branch audit"):
        removals(rw, LIVE, lambda f: Match.SOME if f.path == "b1" else Match.NONE)


def test_replace_where_needs_a_classifier() -> None:
    """Deciding a replace-where without a classifier is a programming error, not a silent no-op."""
    with pytest.raises(ValueError, match="classifier"):
        removals(entry(WriteMode.REPLACE_WHERE, row_filter="x = 1"), LIVE)


# history: id -> (parent, changed data).  main: 1 -> 2(data) ; branch: 2 -> 3(data) -> 4(data)
HISTORY = {1: (None, True), 2: (1, True), 3: (2, True), 4: (3, True), 5: (2, False), 6: (5, False), 7: (5, True)}


@pytest.mark.parametrize(
    ("main", "branch", "expected"),
    [(2, 4, 4), (None, 4, 4), (4, 4, 4), (5, 4, 4), (6, 4, 4)],
    ids=["ancestor", "empty-main", "same-head", "bookkeeping-commit-since", "two-bookkeeping-commits"],
)
def test_publish_moves_main_when_no_data_of_main_is_lost(main: int | None, branch: int, expected: int) -> None:
    """Main's head is an ancestor of the branch, or main only made commits without data since the fork."""
    assert check_fast_forward("audit", main, branch, HISTORY) == expected


@pytest.mark.parametrize(
    ("main", "branch", "history", "match"),
    [
        (7, 4, HISTORY, "snapshot 7 changed data after the branch forked"),
        (2, None, HISTORY, "branch 'audit' does not exist"),
        (6, 4, {k: v for k, v in HISTORY.items() if k != 5}, "snapshot 5 expired"),
    ],
    ids=["main-changed-data", "missing-branch", "history-expired"],
)
def test_publish_is_refused_when_it_could_lose_data(
    main: int, branch: int | None, history: dict[int, tuple[int | None, bool]], match: str
) -> None:
    """Not a fast-forward, no such branch, or history that cannot tell: refused with the reason."""
    with pytest.raises(EntryRefused, match=match):
        check_fast_forward("audit", main, branch, history)


def test_publishing_main_is_refused() -> None:
    """There is nothing to publish main to itself."""
    with pytest.raises(EntryRefused, match="other than main"):
        check_fast_forward("main", 1, 1, HISTORY)


def test_refusals_hold_for_one_table_version_only() -> None:
    """A refusal is a fact about one version: a new version forgets it; the same entry twice is a bug."""
    refusals = Refusals()
    refusals.add("v1", 4, EntryRefused("straddles"))
    assert refusals.at("v1") == {4: "straddles"}
    with pytest.raises(RuntimeError, match="refused WAL seq 4 twice"):
        refusals.add("v1", 4, EntryRefused("again"))
    assert refusals.at("v2") == {}
    refusals.add("v2", 9, EntryRefused("not a fast-forward", seq=7))
    assert refusals.at("v2") == {7: "not a fast-forward"}


@pytest.mark.parametrize(
    ("counters", "own", "changed"),
    [
        ({"operation": "append", "added-data-files": "2"}, None, True),  # a counter says so: no manifest read
        ({"operation": "append"}, [(1, 0)], True),  # a minimal summary: its own manifest added a file
        ({"operation": "append"}, [], False),  # fencedlake's bookkeeping commit: no manifest of its own
        ({"operation": "append", "added-data-files": "0"}, [(0, 0)], False),  # a merged manifest, nothing added
        ({"operation": "delete"}, [(0, 3)], True),
        ({"operation": "overwrite"}, [(None, 0)], True),  # a manifest list that does not say: changed
        (None, [(0, 1)], True),
        ({"added-data-files": "many"}, [(1, 0)], True),  # an unreadable counter: the manifests decide
    ],
    ids=["counter", "minimal-summary", "bookkeeping", "merged", "delete", "unknown-count", "no-summary", "garbled"],
)
def test_changed_data_never_reads_absent_facts_as_no_change(
    counters: dict[str, str] | None, own: list[tuple[int | None, int | None]] | None, changed: bool
) -> None:
    """Summary counters are a shortcut; without a positive one the snapshot's own manifests decide."""

    def manifests() -> list[tuple[int | None, int | None]]:
        if own is None:
            raise AssertionError("a positive counter must answer without reading manifests")
        return own

    assert changed_data(counters, manifests) is changed
