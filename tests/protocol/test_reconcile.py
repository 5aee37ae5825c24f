"""Three-way reconciliation, pure (PROTOCOL.md §5; invariants I3, I4)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pyspark_fenced_sink.protocol.batches import BatchIds
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.reconcile import (
    Outcome,
    Position,
    ReconcilePlan,
    _decide,
    position,
    reconcile,
    transition,
)
from pyspark_fenced_sink.protocol.state import CommittedState, WriterState
from pyspark_fenced_sink.protocol.wal import holes

A, D, F, G, Q, X, S, B, M, K, L, STALE = (
    Outcome.APPLIED,
    Outcome.DUPLICATE,
    Outcome.FENCED,
    Outcome.GAP,
    Outcome.QUERY_MISMATCH,
    Outcome.EXPIRED,
    Outcome.SPEC_CHANGED,
    Outcome.BARRIER,
    Outcome.MARK,
    Outcome.SKIPPED,
    Outcome.MISSING_FILES,
    Outcome.STALE_BATCH,
)


def ids(*spans: tuple[int, int], floor: int = 0) -> BatchIds:
    """Applied batch ids from closed intervals."""
    return BatchIds(tuple(spans), floor)


def data(
    token: str,
    writer: str = "w",
    *,
    epoch: int | None = None,
    batch: int | None = None,
    strict: bool = False,
    mode: str = "append",
    files: int = 1,
    query: str | None = None,
    run: str | None = None,
    spec_id: int | None = None,
) -> WalEntry:
    return WalEntry(
        kind=EntryKind.DATA,
        token=token,
        writer=writer,
        epoch=epoch,
        run=run,
        query=query,
        batch=batch,
        strict=strict,
        mode=mode,
        files=tuple({"p": f"{token}-{i}.parquet", "s": 0} for i in range(files)),
        spec_id=spec_id,
        created_ms=0,
    )


def anon(token: str, *, opened: int = 0, mode: str = "append", files: int = 1) -> WalEntry:
    return WalEntry(
        kind=EntryKind.DATA,
        token=token,
        writer=f"anon-{token}",
        ephemeral=True,
        mode=mode,
        opened=opened,
        files=tuple({"p": f"{token}-{i}.parquet", "s": 0} for i in range(files)),
        created_ms=0,
    )


def fence(
    token: str, writer: str = "w", *, run: str | None = None, query: str | None = None, strict: bool = False
) -> WalEntry:
    return WalEntry(kind=EntryKind.FENCE, token=token, writer=writer, run=run, query=query, strict=strict, created_ms=0)


def skip(token: str, reason: str = "object lost") -> WalEntry:
    return WalEntry(kind=EntryKind.SKIP, token=token, writer="operator", reason=reason, created_ms=0)


def expire(token: str, before: int) -> WalEntry:
    return WalEntry(kind=EntryKind.EXPIRE, token=token, writer="gc", expire_before=before, created_ms=0)


def shape(plan: ReconcilePlan) -> tuple[list[tuple[int, str]], tuple[int, ...], bool, str, int]:
    """(decisions as (seq, code), applied seqs, overwrite, stop, new upper)."""
    return [(d.seq, d.outcome.value) for d in plan.decisions], plan.apply, plan.overwrite, plan.stop, plan.state.upper


# ---------------------------------------------------------------------------------------------- basics


@pytest.mark.parametrize(
    ("seq", "upper", "expected"),
    [(2, 3, Position.BELOW), (0, 3, Position.BELOW), (3, 3, Position.AT), (0, 0, Position.AT), (4, 3, Position.ABOVE)],
)
def test_position_is_three_way(seq: int, upper: int, expected: Position) -> None:
    """Below, at or above the committed upper."""
    assert position(seq, upper) is expected


def test_outcome_codes_and_success() -> None:
    """One letter per outcome in commit records; applied, duplicate, barrier and mark count as success."""
    assert {o.name: o.value for o in Outcome} == {
        "APPLIED": "A",
        "DUPLICATE": "D",
        "FENCED": "F",
        "GAP": "G",
        "QUERY_MISMATCH": "Q",
        "EXPIRED": "X",
        "SPEC_CHANGED": "S",
        "MISSING_FILES": "L",
        "STALE_BATCH": "O",
        "REFUSED": "R",
        "BARRIER": "B",
        "MARK": "M",
        "SKIPPED": "K",
        "VOID": "V",
    }
    assert {o for o in Outcome if o.succeeded} == {A, D, B, M, K}
    assert {o for o in Outcome if o.external} == {S, L, Outcome.REFUSED}


# ---------------------------------------------------------------------------------------------- per-entry rules

W = WriterState
# fmt: off
RULES: list[Any] = [
    # id, writers before, expired_before, seq, entry, outcome, detail, writers after, expired_before after
    ("expire-raises-mark", {}, 3, 9, expire("e", 7), M, "anonymous writes opened before upper 7 expire", {}, 7),
    ("expire-never-lowers-mark", {}, 9, 9, expire("e", 7), M, "anonymous writes opened before upper 7 expire", {}, 9),
    ("skip-changes-nothing", {"w": W(2)}, 0, 9, skip("k"), K, "skipped by an operator: object lost", {"w": W(2)}, 0),
    ("fence-opens-epoch", {}, 0, 5, fence("f", run="r5"), B, "writer 'w' epoch 5 opened", {"w": W(5, "r5")}, 0),
    (
        "fence-keeps-query-and-batch-ids",
        {"w": W(2, "r2", "q", ids((0, 4)))}, 0, 8, fence("f", run="r8"),
        B, "writer 'w' epoch 8 opened", {"w": W(8, "r8", "q", ids((0, 4)))}, 0,
    ),
    (
        "registration-of-another-query-mismatch",
        {"w": W(2, "r2", "q1", ids((0, 4)))}, 0, 9, fence("f", run="r9", query="q2", strict=True),
        Q, "writer 'w' belongs to streaming query q1, not q2", {"w": W(2, "r2", "q1", ids((0, 4)))}, 0,
    ),
    (
        "registration-of-the-same-query-opens-epoch",
        {"w": W(2, "r2", "q1", ids((0, 4)))}, 0, 9, fence("f", run="r9", query="q1", strict=True),
        B, "writer 'w' epoch 9 opened", {"w": W(9, "r9", "q1", ids((0, 4)))}, 0,
    ),
    (
        "first-registration-records-the-query",
        {}, 0, 3, fence("f", run="r3", query="q", strict=True),
        B, "writer 'w' epoch 3 opened", {"w": W(3, "r3", "q")}, 0,
    ),
    (
        "anonymous-opened-before-mark-expired",
        {}, 5, 9, anon("a", opened=4),
        X, "write opened at upper 4; gc expired writes opened before 5", {}, 5,
    ),
    ("anonymous-opened-at-mark-applied", {}, 5, 9, anon("a", opened=5), A, "", {}, 5),
    (
        "strict-entry-of-another-query-mismatch",
        {"w": W(2, "r2", "q1", ids((0, 4)))}, 0, 9, data("d", epoch=2, strict=True, query="q2", batch=5),
        Q, "writer 'w' belongs to streaming query q1, not q2", {"w": W(2, "r2", "q1", ids((0, 4)))}, 0,
    ),
    ("live-epoch-applied", {"w": W(4)}, 0, 9, data("d", epoch=4), A, "", {"w": W(4)}, 0),
    (
        "older-epoch-fenced",
        {"w": W(5, "r5")}, 0, 9, data("d", epoch=2, batch=1),
        F, "writer 'w' epoch 2 was fenced by epoch 5 at WAL seq 9", {"w": W(5, "r5")}, 0,
    ),
    (
        "unknown-epoch-fenced",
        {"w": W(5)}, 0, 9, data("d", epoch=7),
        F, "writer 'w' epoch 7 was fenced by epoch 5 at WAL seq 9", {"w": W(5)}, 0,
    ),
    (
        "epoch-without-writer-state-fenced",
        {}, 0, 9, data("d", epoch=2),
        F, "writer 'w' epoch 2 was fenced by no open epoch at WAL seq 9", {}, 0,
    ),
    (
        "entry-without-epoch-fenced",
        {"w": W(5)}, 0, 9, data("d", batch=1),
        F, "writer 'w' epoch None was fenced by epoch 5 at WAL seq 9", {"w": W(5)}, 0,
    ),
    (
        "applied-batch-id-duplicate",
        {"w": W(4, batches=ids((0, 10)))}, 0, 9, data("d", epoch=4, batch=3),
        D, "batch 3 of writer 'w' was applied before (0-10)", {"w": W(4, batches=ids((0, 10)))}, 0,
    ),
    (
        "never-applied-lower-batch-id-is-applied-not-duplicate",
        {"w": W(4, batches=ids((0, 4), (6, 10)))}, 0, 9, data("d", epoch=4, batch=5),
        A, "", {"w": W(4, batches=ids((0, 10)))}, 0,
    ),
    (
        "batch-id-below-the-floor-is-stale",
        {"w": W(4, batches=ids((20, 30), floor=20))}, 0, 9, data("d", epoch=4, batch=7),
        STALE, "batch 7 of writer 'w' is older than the oldest batch id still tracked (20): whether it landed cannot "
        "be told", {"w": W(4, batches=ids((20, 30), floor=20))}, 0,
    ),
    (
        "strict-applied-batch-duplicate",
        {"w": W(4, batches=ids((0, 10)))}, 0, 9, data("d", epoch=4, batch=10, strict=True),
        D, "batch 10 of writer 'w' was applied before (0-10)", {"w": W(4, batches=ids((0, 10)))}, 0,
    ),
    (
        "strict-batch-skipping-is-gap",
        {"w": W(4, batches=ids((0, 10)))}, 0, 9, data("d", epoch=4, batch=12, strict=True),
        G, "batch 12 of writer 'w' skips batches after its last applied batch 10", {"w": W(4, batches=ids((0, 10)))}, 0,
    ),
    (
        "strict-batch-below-last-never-applied-is-gap",
        {"w": W(4, batches=ids((0, 4), (6, 10)))}, 0, 9, data("d", epoch=4, batch=5, strict=True),
        G, "batch 5 of writer 'w' is out of order below its last applied batch 10",
        {"w": W(4, batches=ids((0, 4), (6, 10)))}, 0,
    ),
    (
        "non-strict-batch-may-skip",
        {"w": W(4, batches=ids((0, 10)))}, 0, 9, data("d", epoch=4, batch=12),
        A, "", {"w": W(4, batches=ids((0, 10), (12, 12)))}, 0,
    ),
    (
        "strict-next-batch-applied",
        {"w": W(4, batches=ids((0, 10)))}, 0, 9, data("d", epoch=4, batch=11, strict=True),
        A, "", {"w": W(4, batches=ids((0, 11)))}, 0,
    ),
    (
        "first-batch-applied",
        {"w": W(4)}, 0, 9, data("d", epoch=4, batch=7, strict=True),
        A, "", {"w": W(4, batches=ids((7, 7)))}, 0,
    ),
    (
        "no-batch-keeps-batch-ids",
        {"w": W(4, batches=ids((0, 3)))}, 0, 9, data("d", epoch=4),
        A, "", {"w": W(4, batches=ids((0, 3)))}, 0,
    ),
]
# fmt: on


@pytest.mark.parametrize(
    ("writers", "expired", "seq", "entry", "outcome", "detail", "writers_after", "expired_after"),
    [pytest.param(*row[1:], id=row[0]) for row in RULES],
)
def test_decide_rule_table(
    writers: dict[str, WriterState],
    expired: int,
    seq: int,
    entry: WalEntry,
    outcome: Outcome,
    detail: str,
    writers_after: dict[str, WriterState],
    expired_after: int,
) -> None:
    """Each row of PROTOCOL.md §5's per-entry table: outcome, message and state change."""
    state = dict(writers)
    assert _decide(seq, entry, state, expired, None, ()) == (outcome, detail)
    assert state == writers  # deciding changes nothing
    assert transition(state, expired, seq, entry, outcome) == expired_after
    assert state == writers_after


def test_old_entries_with_missing_files_are_rejected_not_applied() -> None:
    """A position listed as having missing files is MISSING_FILES and adds nothing; its batch id stays unused."""
    state = CommittedState(writers={"w": W(0)})
    entries = {0: data("gone", epoch=0, batch=3), 1: data("here", epoch=0, batch=4)}
    plan = reconcile(state, entries, missing={0})
    assert shape(plan) == ([(0, "L"), (1, "A")], (1,), False, "tail", 2)
    assert plan.state.writers["w"].batches == ids((4, 4))


# ---------------------------------------------------------------------------------------------- positions


def test_entries_below_the_upper_are_dropped_and_the_rest_applied() -> None:
    """BELOW entries are ignored (never applied again); the run from the upper on is applied."""
    entries = {s: anon(f"t{s}") for s in range(5)}
    plan = reconcile(CommittedState(upper=3), entries)
    assert shape(plan) == ([(3, "A"), (4, "A")], (3, 4), False, "tail", 5)
    assert [d.token for d in plan.decisions] == ["t3", "t4"]


def test_only_entries_below_the_upper_decide_nothing() -> None:
    """Entries all below the upper: an empty plan that ends at the tail and does not pin anything."""
    base = CommittedState(upper=3)
    plan = reconcile(base, {1: anon("a"), 2: anon("b")})
    assert shape(plan) == ([], (), False, "tail", 3)
    assert plan.state == base


def test_entry_at_the_upper_is_applied() -> None:
    """AT: the entry at the upper is reconciled now and the upper moves past it."""
    plan = reconcile(CommittedState(upper=7), {7: anon("a")})
    assert shape(plan) == ([(7, "A")], (7,), False, "tail", 8)


def test_entries_above_a_missing_position_wait() -> None:
    """ABOVE: with the upper's position missing, nothing is decided and the plan says ``gap``."""
    base = CommittedState(upper=0)
    plan = reconcile(base, {1: anon("a"), 2: anon("b")})
    assert shape(plan) == ([], (), False, "gap", 0)
    assert plan.state == base


def test_a_missing_position_stops_the_group() -> None:
    """The group is the contiguous run from the upper; it stops before a hole."""
    plan = reconcile(CommittedState(), {0: anon("a"), 1: anon("b"), 3: anon("d")})
    assert shape(plan) == ([(0, "A"), (1, "A")], (0, 1), False, "gap", 2)


def test_a_reconciled_group_is_never_applied_again() -> None:
    """Reconciling again from the new state with the same entries decides nothing (I3)."""
    entries = {0: anon("a"), 1: anon("b"), 2: fence("f")}
    plan = reconcile(CommittedState(), entries)
    again = reconcile(plan.state, entries)
    assert shape(again) == ([], (), False, "tail", 3)


@pytest.mark.parametrize(
    ("count", "max_group", "expected"),
    [
        (5, 2, ([(0, "A"), (1, "A")], (0, 1), False, "limit", 2)),
        (5, 5, ([(s, "A") for s in range(5)], (0, 1, 2, 3, 4), False, "tail", 5)),
        (5, 1, ([(0, "A")], (0,), False, "limit", 1)),
    ],
)
def test_max_group_bounds_a_plan(count: int, max_group: int, expected: Any) -> None:
    """At most ``max_group`` positions per plan; exactly ``max_group`` pending ends at the tail."""
    entries = {s: anon(f"t{s}") for s in range(count)}
    assert shape(reconcile(CommittedState(), entries, max_group=max_group)) == expected


def test_max_group_counts_only_the_entries_a_commit_applies() -> None:
    """Barriers, skips and rejected entries add nothing to the commit: they take no slot in the group
    (PROTOCOL.md §5), so a small limit never makes a run of them take one commit per few positions."""
    entries = {0: fence("f0"), 1: fence("f1"), 2: anon("a"), 3: skip("k"), 4: anon("b"), 5: anon("c")}
    assert shape(reconcile(CommittedState(), entries, max_group=2)) == (
        [(0, "B"), (1, "B"), (2, "A"), (3, "K"), (4, "A")],
        (2, 4),
        False,
        "limit",
        5,
    )


# ---------------------------------------------------------------------------------------------- overwrite


def test_an_overwrite_after_applied_entries_starts_the_next_plan() -> None:
    """A plan holds one overwrite, only alone: append, overwrite, append -> three commits."""
    entries = {0: anon("a"), 1: anon("o", mode="overwrite"), 2: anon("c")}
    first = reconcile(CommittedState(), entries)
    assert shape(first) == ([(0, "A")], (0,), False, "next-commit", 1)
    second = reconcile(first.state, entries)
    assert shape(second) == ([(1, "A")], (1,), True, "next-commit", 2)
    third = reconcile(second.state, entries)
    assert shape(third) == ([(2, "A")], (2,), False, "tail", 3)


def test_two_overwrites_go_to_two_commits() -> None:
    """Each overwrite is its own catalog commit."""
    entries = {0: anon("o1", mode="overwrite"), 1: anon("o2", mode="overwrite")}
    assert shape(reconcile(CommittedState(), entries)) == ([(0, "A")], (0,), True, "next-commit", 1)


def test_an_overwrite_after_only_non_applied_entries_leads_the_plan() -> None:
    """Barriers and rejected entries before an overwrite do not split the plan."""
    state = CommittedState(writers={"w": W(0, batches=ids((0, 5)))})
    entries = {0: fence("f", writer="v"), 1: data("dup", epoch=0, batch=5), 2: anon("o", mode="overwrite")}
    assert shape(reconcile(state, entries)) == ([(0, "B"), (1, "D"), (2, "A")], (2,), True, "tail", 3)


def test_a_rejected_overwrite_does_not_stop_the_group() -> None:
    """Only an overwrite that would apply splits the plan; a duplicate overwrite is decided in line."""
    state = CommittedState(writers={"w": W(0, batches=ids((0, 5)))})
    entries = {0: anon("a"), 1: data("dup", epoch=0, batch=5, mode="overwrite"), 2: anon("c")}
    assert shape(reconcile(state, entries)) == ([(0, "A"), (1, "D"), (2, "A")], (0, 2), False, "tail", 3)


# ---------------------------------------------------------------------------------------------- one commit, one branch


def on(entry: WalEntry, *, branch: str | None = None, props: dict[str, str] | None = None) -> WalEntry:
    """``entry`` written to ``branch`` with snapshot properties ``props``."""
    return replace(entry, branch=branch, properties=tuple(sorted((props or {}).items())))


def publish(token: str, branch: str = "audit") -> WalEntry:
    return WalEntry(kind=EntryKind.PUBLISH, token=token, writer="publish", mode="publish", branch=branch, created_ms=0)


@pytest.mark.parametrize("mode", ["overwrite", "dynamic", "filter"])
def test_every_replacing_mode_commits_alone(mode: str) -> None:
    """Static, dynamic and filter overwrites split from earlier appends and take no later ones.

    An append inside an ``overwrite`` snapshot would be skipped with it by a stream that skips overwrites.
    """
    entries = {0: anon("a"), 1: anon("r", mode=mode), 2: anon("c")}
    first = reconcile(CommittedState(), entries)
    second = reconcile(first.state, entries)
    third = reconcile(second.state, entries)
    assert (first.apply, second.apply, second.mode.value, second.stop, third.apply, third.mode.value) == (
        (0,),
        (1,),
        mode,
        "next-commit",
        (2,),
        "append",
    )


def test_a_commit_never_mixes_branches() -> None:
    """Appends to main, then to a branch, then to main again: three commits, each on one branch."""
    entries = {0: anon("m1"), 1: on(anon("b1"), branch="audit"), 2: on(anon("b2"), branch="audit"), 3: anon("m2")}
    plans = []
    state = CommittedState()
    while state.upper < len(entries):
        plan = reconcile(state, entries)
        plans.append((plan.branch, plan.apply))
        state = plan.state
    assert plans == [("main", (0,)), ("audit", (1, 2)), ("main", (3,))]


def test_entries_with_other_snapshot_properties_go_to_another_commit() -> None:
    """Each commit carries exactly its applied entries' snapshot properties: differing sets never share one."""
    entries = {
        0: on(anon("a"), props={"job": "1"}),
        1: on(anon("b"), props={"job": "1"}),
        2: on(anon("c"), props={"job": "2"}),
        3: anon("d"),
    }
    first = reconcile(CommittedState(), entries)
    second = reconcile(first.state, entries)
    third = reconcile(second.state, entries)
    assert [(p.apply, p.properties) for p in (first, second, third)] == [
        ((0, 1), (("job", "1"),)),
        ((2,), (("job", "2"),)),
        ((3,), ()),
    ]


def test_non_applied_entries_ride_along_whatever_their_branch_or_properties() -> None:
    """A duplicate to another branch with other properties adds nothing, so it does not split the commit."""
    state = CommittedState(writers={"w": W(0, batches=ids((0, 5)))})
    dup = on(data("dup", epoch=0, batch=5), branch="audit", props={"k": "v"})
    plan = reconcile(state, {0: anon("a"), 1: dup, 2: anon("c")})
    assert (shape(plan), plan.branch) == (([(0, "A"), (1, "D"), (2, "A")], (0, 2), False, "tail", 3), "main")


def test_a_publish_is_a_commit_of_its_own_on_main() -> None:
    """A publish splits from the appends before it and takes no appends after it."""
    entries = {0: on(anon("b"), branch="audit"), 1: publish("p"), 2: anon("m")}
    plans, state = [], CommittedState()
    while state.upper < 3:
        plan = reconcile(state, entries)
        plans.append((plan.apply, plan.mode.value, plan.branch, plan.stop))
        state = plan.state
    assert plans == [
        ((0,), "append", "audit", "next-commit"),
        ((1,), "publish", "main", "next-commit"),
        ((2,), "append", "main", "tail"),
    ]


@pytest.mark.parametrize("entry", [anon("r", mode="filter"), publish("p")], ids=["replace-where", "publish"])
def test_a_refused_entry_is_decided_refused_and_does_not_split_the_commit(entry: WalEntry) -> None:
    """The catalog side's refusal (on this version) makes the entry REFUSED: external, adds nothing."""
    plan = reconcile(CommittedState(), {0: anon("a"), 1: entry, 2: anon("c")}, refused={1: "straddles"})
    assert shape(plan) == ([(0, "A"), (1, "R"), (2, "A")], (0, 2), False, "tail", 3)
    assert plan.decisions[1].detail == "straddles" and Outcome.REFUSED.external


def test_a_refused_batch_id_is_not_recorded_as_applied() -> None:
    """A refused batch's re-run is applied later, never answered "duplicate"."""
    state = CommittedState(writers={"w": W(0, batches=ids((0, 3)))})
    entry = replace(data("rw", epoch=0, batch=4), mode=WriteMode.REPLACE_WHERE, row_filter="x > 1")
    plan = reconcile(state, {0: entry}, refused={0: "straddles"})
    assert plan.state.writers == {"w": W(0, batches=ids((0, 3)))}


# ---------------------------------------------------------------------------------------------- spec changes


@pytest.mark.parametrize(
    ("entry_spec", "files", "table_spec", "expected"),
    [
        (1, 1, 2, S),
        (1, 0, 2, A),
        (None, 1, 2, A),
        (1, 1, None, A),
        (2, 1, 2, A),
        (0, 1, 1, S),
    ],
    ids=["other-spec", "no-files", "entry-spec-unknown", "table-spec-untracked", "same-spec", "spec-zero"],
)
def test_files_of_another_partition_spec_are_rejected(
    entry_spec: int | None, files: int, table_spec: int | None, expected: Outcome
) -> None:
    """Data files written with a spec other than the table's default are SPEC_CHANGED; nothing else is."""
    state = CommittedState(writers={"w": W(0)})
    plan = reconcile(state, {0: data("d", epoch=0, files=files, spec_id=entry_spec)}, spec_id=table_spec)
    assert [d.outcome for d in plan.decisions] == [expected]
    assert plan.apply == (() if expected is S else (0,))


def test_spec_changed_entry_records_no_batch_id() -> None:
    """A rejected batch is not recorded as applied: its re-run is applied, not answered "duplicate"."""
    state = CommittedState(writers={"w": W(0, batches=ids((0, 3)))})
    plan = reconcile(state, {0: data("d", epoch=0, batch=4, spec_id=1)}, spec_id=2)
    assert [d.outcome for d in plan.decisions] == [S]
    assert plan.decisions[0].detail == "files were written with partition spec 1; the table's is 2"
    assert plan.state.writers == {"w": W(0, batches=ids((0, 3)))}


# ---------------------------------------------------------------------------------------------- whole plans


def test_zombie_entries_after_a_newer_barrier_are_fenced() -> None:
    """Epoch 0's entry before the barrier of epoch 2 applies; its entry after the barrier is fenced (I4)."""
    entries = {
        0: fence("f0", run="rA"),
        1: data("z-before", epoch=0),
        2: fence("f2", run="rB"),
        3: data("z-after", epoch=0),
        4: data("live", epoch=2),
    }
    plan = reconcile(CommittedState(), entries)
    assert shape(plan) == ([(0, "B"), (1, "A"), (2, "B"), (3, "F"), (4, "A")], (1, 4), False, "tail", 5)
    assert plan.decisions[3].detail == "writer 'w' epoch 0 was fenced by epoch 2 at WAL seq 3"
    assert plan.state.writers == {"w": W(2, "rB")}


def test_one_plan_with_every_outcome() -> None:
    """A WAL holding every kind of entry: the exact decisions, applied positions and resulting state."""
    entries = {
        0: fence("f-w-a", run="rA"),
        1: data("w-b1", epoch=0, batch=1),
        2: fence("f-w-b", run="rB"),
        3: data("zombie", epoch=0, batch=2),
        4: data("w-b1-rerun", epoch=2, batch=1),
        5: expire("gc", 3),
        6: anon("old", opened=2),
        7: anon("new", opened=3),
        8: fence("s-reg", "s", run="r1", query="q1", strict=True),
        9: data("s-b0", "s", epoch=8, strict=True, query="q1", batch=0, run="r1"),
        10: data("s-b2", "s", epoch=8, strict=True, query="q1", batch=2, run="r1"),
        11: data("s-other-query", "s", epoch=8, strict=True, query="q2", batch=1, run="r2"),
        12: data("w-b2-old-spec", epoch=2, batch=2, spec_id=1),
        13: data("w-b3-gone", epoch=2, batch=3),
        14: skip("k"),
        15: data("s-b1", "s", epoch=8, strict=True, query="q1", batch=1, run="r1", spec_id=2),
    }
    state = CommittedState(writers={"t": W(99, batches=ids((50, 60), floor=50))})
    entries[16] = data("t-stale", "t", epoch=99, batch=7)
    entries[17] = replace(data("w-b9-straddles", epoch=2, batch=9), mode=WriteMode.REPLACE_WHERE, row_filter="x > 1")
    entries[19] = replace(anon("after-a-hole", opened=3), floor=18)  # its writer claimed past 18
    refused = {17: "a live file straddles x > 1"}
    plan = reconcile(state, entries, spec_id=2, missing={13}, refused=refused, voids=holes(entries, 0))
    codes = "".join(d.outcome.value for d in plan.decisions)
    assert codes == "BABFDMXABAGQSLKAORVA"
    assert {d.outcome for d in plan.decisions} == set(Outcome)
    assert plan.apply == (1, 7, 9, 15, 19)
    assert (plan.overwrite, plan.stop) == (False, "tail")
    assert plan.state == CommittedState(
        upper=20,
        writers={
            "w": W(2, "rB", None, ids((1, 1))),
            "s": W(8, "r1", "q1", ids((0, 1))),
            "t": W(99, batches=ids((50, 60), floor=50)),
        },
        expired_before=3,
    )
    assert [d.token for d in plan.decisions] == [*(entries[s].token for s in range(18)), "", "after-a-hole"]
    assert [d.writer for d in plan.decisions][:3] == ["w", "w", "w"]


def test_declared_hole_is_voided_and_a_lost_position_waits() -> None:
    """A missing position an entry above declares jumped over is VOID; one nobody declares stops the plan."""
    entries = {0: anon("a"), 2: replace(anon("c"), floor=1), 5: anon("f")}
    assert holes(entries, 0) == frozenset({1})
    plan = reconcile(CommittedState(), entries, voids=holes(entries, 0))
    assert shape(plan) == ([(0, "A"), (1, "V"), (2, "A")], (0, 2), False, "gap", 3)
    assert plan.decisions[1].token == "" and plan.state.writers == {}
    assert shape(reconcile(CommittedState(), entries)) == ([(0, "A")], (0,), False, "gap", 1)


def test_hole_declarations_count_only_missing_positions_at_or_above_the_upper() -> None:
    """A floor reaching below the upper or over present entries declares only what is missing above the upper."""
    entries = {4: anon("e"), 7: replace(anon("h"), floor=2), 9: replace(anon("j"), floor=9)}
    assert holes(entries, 3) == frozenset({3, 5, 6})
    assert holes(entries, 6) == frozenset({6})
    assert holes({8: replace(anon("i"), floor=None)}, 0) == frozenset()


def test_a_hole_at_the_tail_is_never_voided() -> None:
    """Voids apply only below an entry: a declared position with nothing after it ends the plan (tail)."""
    plan = reconcile(CommittedState(), {0: anon("a")}, voids={1, 2})
    assert shape(plan) == ([(0, "A")], (0,), False, "tail", 1)


def test_reconcile_does_not_mutate_its_input_state() -> None:
    """The base state's writer map is left as it was; the plan carries the base unchanged."""
    writers = {"w": W(0, batches=ids((1, 1)))}
    base = CommittedState(upper=0, writers=writers)
    plan = reconcile(base, {0: fence("f"), 1: data("d", epoch=0, batch=9)})
    assert writers == {"w": W(0, batches=ids((1, 1)))}
    assert plan.base is base
    assert plan.state.writers == {"w": W(0, batches=ids((1, 1), (9, 9)))}


def test_decision_for_and_applied_before() -> None:
    """decision_for answers only inside the plan's range; applied_before looks at applied positions only."""
    state = CommittedState(upper=5, writers={"w": W(0)})
    plan = reconcile(state, {5: fence("f", writer="v"), 6: anon("a"), 7: data("z", epoch=9)})
    assert shape(plan) == ([(5, "B"), (6, "A"), (7, "F")], (6,), False, "tail", 8)
    assert plan.decision_for(4) is None
    assert plan.decision_for(8) is None
    decided = plan.decision_for(7)
    assert decided is not None
    assert (decided.token, decided.outcome) == ("z", F)
    assert (plan.applied_before(6), plan.applied_before(7), plan.applied_before(100)) == (False, True, True)
