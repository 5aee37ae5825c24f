"""One committer at a time: the head commits, waiters learn from the committed state, helpers step in.

The commit loop's new rules (PROTOCOL.md §3 steps 3-5, §6, §7), each in one
deterministic scenario over the in-memory store and catalog with an injected
clock: a waiting writer reads no WAL entry; a head candidate lists before it
commits; a dead head is helped after the patience; a claim whose "exists"
answer vanished is never taken as ours; barriers seal the holes below them and
are committed before use when something lies above them; a committer with a
small group limit passes a run of skips in one commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyspark_fenced_sink.protocol.commit import _drive, commit_entry, recover
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.fencing import new_token, open_writer, put_barrier
from pyspark_fenced_sink.protocol.layout import seq_of, wal_key
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.pending import PLAN_READS_MAX
from pyspark_fenced_sink.protocol.progress import Progress
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.wal import SEAL_REASON, SEAL_WRITER, Claimed, Wal
from pyspark_fenced_sink.store.base import CountingStore
from pyspark_fenced_sink.store.memory import MemoryStore
from tests.model.memory_port import MemoryTable, MemoryTablePort


class Clock:
    """A virtual clock whose sleeps can run something (what other processes do meanwhile)."""

    def __init__(self) -> None:
        self.t = 0.0
        self.on_sleep: list[Callable[[], None]] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        if self.on_sleep:
            self.on_sleep.pop(0)()


def _ctx(table: MemoryTable, store: Any, clock: Clock, **kw: Any) -> CommitContext:
    return CommitContext(
        port=MemoryTablePort(table),
        wal=Wal(store, sleep=clock.sleep, parallel_reads=False, clock=clock.now),
        sleep=clock.sleep,
        now=clock.now,
        **kw,
    )


def _entry(ctx: CommitContext, name: str) -> WalEntry:
    return data_entry(open_writer(ctx, None), [{"p": f"data/{name}.parquet", "s": 0}])


def _files(table: MemoryTable) -> list[str]:
    return sorted(str(f["p"]) for f in table.files if str(f["p"]) != "data/seed.parquet")


def _table(store: MemoryStore) -> MemoryTable:
    """A table in use: one commit made (position 0), so reading it lists no checkpoints."""
    table = MemoryTable()
    ctx = _ctx(table, store, Clock())
    commit_entry(ctx, _entry(ctx, "seed"))
    return table


def test_waiting_writer_reads_no_entry_and_learns_its_outcome_from_the_heads_commit() -> None:
    """B, behind A's entry, only reads the table until A's commit (which took B along) passes it."""
    shared = MemoryStore()
    table = _table(shared)
    a_ctx = _ctx(table, shared, Clock())
    b_clock = Clock()
    b_store = CountingStore(shared)
    b_ctx = _ctx(table, b_store, b_clock)
    a = _entry(a_ctx, "a")
    a_ctx.wal.claim(a, 1)  # A's entry is at the upper; A has not committed yet
    b_clock.on_sleep.append(lambda: recover(a_ctx))  # while B waits, A commits (its group includes B's entry)
    before = dict(b_store.counts)
    result = commit_entry(b_ctx, _entry(b_ctx, "b"))
    b_requests = {k: v - before.get(k, 0) for k, v in b_store.counts.items()}
    assert (result.outcome, result.seq, result.by_peer, result.catalog_commits) == (Outcome.APPLIED, 2, True, 0)
    assert result.waits >= 1 and not result.helper
    assert b_requests == {"LIST": 1, "PUT_IF_ABSENT": 1}  # its claim; no GET, no second LIST
    assert _files(table) == ["data/a.parquet", "data/b.parquet"]


def test_head_candidate_lists_first_and_waits_behind_an_entry_it_had_not_seen() -> None:
    """Our claim saw an empty WAL and took position 1 (a spread claim); a peer took 0 after our LIST. We believe
    we are the head, so we list before committing, see the peer's entry, and wait: no GET, no CAS of ours."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    counted = CountingStore(shared)
    ctx = _ctx(table, counted, clock)
    peer_ctx = _ctx(table, shared, Clock())
    mine = replace(_entry(ctx, "mine"), floor=1)
    shared.objects[wal_key(2)] = encode_entry(mine)
    shared.objects[wal_key(1)] = encode_entry(_entry(peer_ctx, "peer"))  # the peer's put at 1, after our LIST
    clock.on_sleep.append(lambda: recover(peer_ctx))  # the peer (the real head) commits while we wait
    claimed = Claimed(2, False, mine, ahead=())
    view = ctx.load()
    counted.counts.clear()
    result = _drive(ctx, claimed, view, Progress(t0=clock.now()))
    assert (result.outcome, result.by_peer, result.catalog_commits, result.attempts) == (Outcome.APPLIED, True, 0, 0)
    assert counted.counts == {"LIST": 1}  # the head check; no entry read
    assert _files(table) == ["data/mine.parquet", "data/peer.parquet"]


def test_dead_head_is_helped_after_the_patience() -> None:
    """The entry at the upper belongs to a writer that died after its put: the writer behind commits both."""
    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    dead_ctx = _ctx(table, store, Clock())
    dead_ctx.wal.claim(_entry(dead_ctx, "dead"), 0)  # put, then the process died
    ctx = _ctx(table, store, clock, patience_s=0.5)
    result = commit_entry(ctx, _entry(ctx, "alive"))
    assert (result.outcome, result.catalog_commits, result.helped, result.helper) == (Outcome.APPLIED, 1, 1, True)
    assert 0.5 <= clock.t < 5.0  # it waited its patience, not its deadline
    record = table.records[-1][1]
    assert record.metrics["hlp"] == 1 and record.metrics["apl"] == 2
    assert _files(table) == ["data/alive.parquet", "data/dead.parquet"]


def test_claim_whose_exists_answer_vanished_is_not_taken_as_ours() -> None:
    """Our put at 0 met an object that vanished before its token was read, and an operator's skip took 0:
    the position is read, not assumed ours; our entry is put again and applied exactly once, elsewhere."""
    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    ctx = _ctx(table, store, clock)
    peer = encode_entry(WalEntry(kind=EntryKind.DATA, token="peer-token", writer="peer"))
    skip = WalEntry(kind=EntryKind.SKIP, token="skip-token", writer="operator", reason="moved aside")
    phase = ["armed"]

    def before_put(key: str) -> None:
        if key == wal_key(0) and phase == ["armed"]:
            store.objects[key] = peer  # a peer's object answers our put "exists"
            phase[0] = "exists"

    def before_op(kind: str, key: str) -> None:
        if kind == "get" and key == wal_key(0) and phase == ["exists"]:
            del store.objects[key]  # moved aside before our token read: the claim vanished
            phase[0] = "vanished"
        elif kind == "list" and phase == ["vanished"]:
            store.objects[wal_key(0)] = encode_entry(skip)  # the operator's skip
            phase[0] = "skipped"

    store.before_put = before_put  # type: ignore[assignment]
    store.before_op = before_op
    mine = _entry(ctx, "mine")
    result = commit_entry(ctx, mine)
    assert phase == ["skipped"]
    assert result.outcome is Outcome.APPLIED and result.seq == 1
    outcomes = [pair for _, r in table.records for pair in r.outcomes]
    assert outcomes == [("skip-token"[:12], "K"), (mine.token[:12], "A")]
    assert _files(table) == ["data/mine.parquet"]


def test_barrier_seals_a_declared_hole_below_it_and_leaves_a_lost_position_alone() -> None:
    """Holes an entry declares below a barrier are filled with skip entries; an undeclared gap is not."""
    table, store = MemoryTable(), MemoryStore()
    ctx = _ctx(table, store, Clock())
    jumper = _entry(ctx, "jumper")
    store.objects[wal_key(3)] = encode_entry(replace(jumper, floor=2))  # its writer claimed past 2
    store.objects[wal_key(1)] = encode_entry(_entry(ctx, "one"))  # position 0 is missing, nobody declares it
    barrier = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w", run="r")
    seq = put_barrier(ctx, barrier, 0)
    wal = {seq_of(k): decode_entry(v) for k, v in store.objects.items() if seq_of(k) is not None}
    assert seq == 4 and 0 not in wal
    assert wal[2].kind is EntryKind.SKIP and wal[2].reason == "hole below a barrier, sealed"
    assert table.records == []  # nothing above the barrier: it was not committed


def test_barrier_with_an_entry_above_it_is_committed_before_use() -> None:
    """An entry above a barrier may declare its position a hole: the entries through the barrier are committed
    before its epoch is used (nothing above it is read: it cannot block this)."""
    table, store = MemoryTable(), MemoryStore()
    ctx = _ctx(table, store, Clock())
    above = _entry(ctx, "above")
    barrier = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w", run="r")

    def put_above(key: str) -> None:
        if key == wal_key(0) and wal_key(1) not in store.objects:
            store.objects[wal_key(1)] = encode_entry(replace(above, floor=0))  # claimed past 0, before our put

    store.before_put = put_above  # type: ignore[assignment]
    seq = put_barrier(ctx, barrier, 0)
    assert seq == 0
    assert [pair for _, r in table.records for pair in r.outcomes] == [(barrier.token[:12], "B")]
    assert table.state.writers["w"].epoch == 0 and table.state.upper == 1  # the entry above still waits


def test_small_group_limit_passes_a_run_of_skips_in_one_commit() -> None:
    """Forty seal skips lie before our entry; our group limit is 2. Skips add nothing to a commit, so they do
    not count toward the limit and the plan reads on past them: one catalog commit reconciles all of them and
    applies our entry (counted, two positions per commit took 21 commits while peers' waits ran out: I5)."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    for seq in range(1, 41):
        skip = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer=SEAL_WRITER, reason=SEAL_REASON)
        shared.objects[wal_key(seq)] = encode_entry(skip)
    ctx = _ctx(table, shared, clock, max_group=2)
    result = commit_entry(ctx, _entry(ctx, "mine"))
    assert (result.outcome, result.seq, result.catalog_commits) == (Outcome.APPLIED, 41, 1)
    outcomes = [code for _, code in table.records[-1][1].outcomes]
    assert outcomes == ["K"] * 40 + ["A"] and table.state.upper == 42
    assert _files(table) == ["data/mine.parquet"]


def test_group_limit_still_bounds_the_entries_a_commit_applies() -> None:
    """Skips before three data entries, limit 2: the first commit passes the skips and applies two entries,
    the next applies the third."""
    shared = MemoryStore()
    table = _table(shared)
    ctx = _ctx(table, shared, Clock(), max_group=2)
    for seq in range(1, 6):
        skip = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer=SEAL_WRITER, reason=SEAL_REASON)
        shared.objects[wal_key(seq)] = encode_entry(skip)
    for seq, name in enumerate(("a", "b", "c"), start=6):
        shared.objects[wal_key(seq)] = encode_entry(_entry(ctx, name))
    records = recover(ctx)
    assert [[code for _, code in r.outcomes] for r in records] == [["K"] * 5 + ["A", "A"], ["A"]]
    assert _files(table) == ["data/a.parquet", "data/b.parquet", "data/c.parquet"]


def test_a_plan_reads_at_most_plan_reads_max_positions() -> None:
    """A run of skips longer than a plan reads: the first commit stops at the read bound ("limit", not the
    tail: entries behind it wait for the next commit), the next one passes the rest and applies the entry."""
    shared = MemoryStore()
    table = _table(shared)
    ctx = _ctx(table, shared, Clock(), max_group=2)
    run = PLAN_READS_MAX + 10
    for seq in range(1, run + 1):
        skip = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer=SEAL_WRITER, reason=SEAL_REASON)
        shared.objects[wal_key(seq)] = encode_entry(skip)
    shared.objects[wal_key(run + 1)] = encode_entry(_entry(ctx, "last"))
    records = recover(ctx)
    assert [len(r.outcomes) for r in records] == [PLAN_READS_MAX, 11]
    assert records[-1].outcomes[-1][1] == "A" and table.state.upper == run + 2
