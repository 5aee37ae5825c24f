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

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.protocol.commit import commit_entry, recover
from pyspark_fenced_sink.protocol.committer import Committer
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


def test_waiting_writer_reads_the_entry_before_its_own_and_learns_its_outcome_from_the_heads_commit() -> None:
    """B reads A's entry before its own (a data entry: A commits it), then only the table until A's commit
    (which took B along) passes it."""
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
    assert b_requests == {"LIST": 1, "PUT_IF_ABSENT": 1, "GET": 1}  # its claim, A's entry; no second LIST
    assert result.waited_for == "commit"
    assert _files(table) == ["data/a.parquet", "data/b.parquet"]


def test_head_candidate_lists_first_and_waits_behind_an_entry_it_had_not_seen() -> None:
    """Our claim saw an empty WAL and took position 1 (a spread claim); a peer took 0 after our LIST. We believe
    we are the head, so we list before committing, see the peer's entry, read it (a data entry: its writer
    commits it) and wait: no CAS of ours."""
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
    result = Committer(ctx, claimed, view, Progress(t0=clock.now())).run()
    assert (result.outcome, result.by_peer, result.catalog_commits, result.attempts) == (Outcome.APPLIED, True, 0, 0)
    assert counted.counts == {"LIST": 1, "GET": 1}  # the head check, and the entry it found before ours
    assert _files(table) == ["data/mine.parquet", "data/peer.parquet"]


def test_dead_head_is_helped_after_the_patience() -> None:
    """The entry at the upper belongs to a writer that died after its put: the writer behind commits both."""
    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    dead_ctx = _ctx(table, store, Clock())
    dead_ctx.wal.claim(_entry(dead_ctx, "dead"), 0)  # put, then the process died
    ctx = _ctx(table, store, clock, patience_s=0.5)
    result = commit_entry(ctx, _entry(ctx, "alive"))
    assert (result.outcome, result.catalog_commits, result.for_peers, result.helper) == (Outcome.APPLIED, 1, 1, True)
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


def _barrier_over_a_lower_one(store: MemoryStore) -> tuple[Wal, Claimed]:
    """A WAL with a lower barrier at 3 that declares 0-2 (its writer listed from 0) and ours at 5, declaring 4."""
    wal = Wal(store, parallel_reads=False)
    lower = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="a", run="r1", floor=0)
    store.objects[wal_key(3)] = encode_entry(lower)
    ours = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="b", run="r2", floor=4)
    store.objects[wal_key(5)] = encode_entry(ours)
    return wal, Claimed(5, False, ours, (3,))


def _sealed(store: MemoryStore) -> list[int]:
    found = {seq_of(k): decode_entry(v) for k, v in store.objects.items()}
    return sorted(s for s, e in found.items() if s is not None and e.writer == SEAL_WRITER)


def test_a_seal_leaves_the_holes_below_a_lower_barrier_to_its_seal_and_fills_only_its_own() -> None:
    """Two barriers opened together: ours fills the hole above the lower barrier; the holes below it, which the
    lower barrier's seal fills meanwhile, cost ours one LIST and no put (not one "exists" answer per hole)."""
    inner = MemoryStore()
    wal, claimed = _barrier_over_a_lower_one(inner)
    store = CountingStore(inner)
    wal.store = store

    def lower_seals(key: str) -> None:
        if key == wal_key(4):  # while ours fills its own hole, the lower barrier's seal fills 0-2
            for seq in range(3):
                inner.objects.setdefault(wal_key(seq), encode_entry(_seal_entry()))

    inner.before_put = lower_seals  # type: ignore[assignment]
    assert wal.seal(0, claimed) == []
    assert store.counts["PUT_IF_ABSENT"] == 1 and store.counts["LIST"] == 2
    assert all(wal_key(seq) in inner.objects for seq in range(5))


def test_a_seal_fills_the_holes_a_lower_barrier_never_sealed() -> None:
    """The lower barrier's writer died before its seal: ours lists again and fills every hole below it itself."""
    store = MemoryStore()
    wal, claimed = _barrier_over_a_lower_one(store)
    filled: list[int | None] = []

    def note(key: str) -> None:
        filled.append(seq_of(key))

    store.before_put = note  # type: ignore[assignment]
    wal.seal(0, claimed)
    assert _sealed(store) == [0, 1, 2, 4]
    assert filled == [4, 2, 1, 0]  # its own hole first, then the lower barrier's from the top down


def _seal_entry() -> WalEntry:
    return WalEntry(kind=EntryKind.SKIP, token=new_token(), writer=SEAL_WRITER, reason=SEAL_REASON)


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


# ------------------------------------------------------------------------------------------------------------
# Who commits (issue 31): a present entry nobody commits for its own sake (a barrier, a skip) never makes a
# writer wait for a timer; only an entry whose writer commits it, or a missing position, can.


def _job(ctx: CommitContext, writer: str, batch: int, name: str) -> tuple[Any, WalEntry]:
    """A writer.id job: its open puts a barrier (its epoch); the data entry comes later, at its commit."""
    ident = open_writer(ctx, writer)
    return ident, data_entry(ident, [{"p": f"data/{name}.parquet", "s": 0}], batch=batch)


def test_idempotent_job_behind_peers_open_barriers_commits_at_once() -> None:
    """Jobs B and C opened after A (their barriers lie before A's data entry, their tasks still run): A reads
    them, sees barriers, and commits at once — no sleep, no helper, one catalog commit that takes the
    barriers along."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    a_ctx = _ctx(table, shared, clock, patience_s=5.0)
    _, a_entry = _job(a_ctx, "job-a", 1, "a")
    _job(_ctx(table, shared, Clock()), "job-b", 1, "b")
    _job(_ctx(table, shared, Clock()), "job-c", 1, "c")
    result = commit_entry(a_ctx, a_entry)
    assert (result.outcome, result.catalog_commits, result.helper, result.waits) == (Outcome.APPLIED, 1, False, 0)
    assert clock.t == 0.0  # no timer
    assert [code for _, code in table.records[-1][1].outcomes] == ["B", "B", "B", "A"]
    assert "hlp" not in table.records[-1][1].metrics and "why" not in table.records[-1][1].metrics


def test_writer_killed_between_its_barrier_and_its_commit_costs_the_others_nothing() -> None:
    """A job died after its open: its barrier lies before our entry forever. We commit it along, at once."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    _job(_ctx(table, shared, Clock()), "dead-job", 1, "never")  # its driver was killed after open
    ctx = _ctx(table, shared, clock, patience_s=5.0)
    result = commit_entry(ctx, _entry(ctx, "alive"))
    assert (result.outcome, result.helper, clock.t) == (Outcome.APPLIED, False, 0.0)
    assert table.state.writers["dead-job"].epoch == 1  # its barrier is reconciled: a re-run fences nothing new


def test_paused_writer_after_its_put_costs_one_patience_then_learns_its_outcome() -> None:
    """A writer paused (GC, SIGSTOP) right after its data put: the writer behind it helps after one patience,
    applying both; the paused writer, resuming, learns its outcome from the commit record."""
    shared = MemoryStore()
    table = _table(shared)
    paused_ctx = _ctx(table, shared, Clock())
    paused_entry = _entry(paused_ctx, "paused")
    claimed = paused_ctx.wal.claim(paused_entry, 1)  # put, then the process stopped
    clock = Clock()
    ctx = _ctx(table, shared, clock, patience_s=0.5)
    result = commit_entry(ctx, _entry(ctx, "behind"))
    assert (result.outcome, result.helper, result.waited_for, result.for_peers) == (
        Outcome.APPLIED,
        True,
        "stalled",
        1,
    )
    assert 0.5 <= clock.t < 1.5  # one patience, not more
    resumed = Committer(paused_ctx, claimed, paused_ctx.load(), Progress(t0=0.0)).run()
    assert (resumed.outcome, resumed.by_peer, resumed.catalog_commits) == (Outcome.APPLIED, True, 0)
    assert _files(table) == ["data/behind.parquet", "data/paused.parquet"]


def test_lost_put_below_ours_is_voided_as_a_declared_hole_without_waiting() -> None:
    """A peer claimed past position 1 and its put there never landed (the hole is declared by our entry's floor):
    we are the head, void it in our commit and wait for no timer."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    ctx = _ctx(table, shared, clock, patience_s=5.0)
    mine = replace(_entry(ctx, "mine"), floor=1)
    shared.objects[wal_key(2)] = encode_entry(mine)
    claimed = Claimed(2, False, mine, ahead=())
    result = Committer(ctx, claimed, ctx.load(), Progress(t0=clock.now())).run()
    assert (result.outcome, result.helper, clock.t) == (Outcome.APPLIED, False, 0.0)
    assert [code for _, code in table.records[-1][1].outcomes] == ["V", "A"]


def test_duplicate_rerun_behind_a_peers_pending_barrier_is_committed_not_reported_from_a_plan() -> None:
    """A re-run of an applied batch finds a peer's barrier before its entry: the DUPLICATE answer rests on a
    barrier nobody committed yet (an operator could still skip it), so the answer is committed first."""
    shared = MemoryStore()
    table = _table(shared)
    ctx = _ctx(table, shared, Clock())
    _, first = _job(ctx, "nightly", 7, "first")
    assert commit_entry(ctx, first).outcome is Outcome.APPLIED
    _, rerun = _job(ctx, "nightly", 7, "rerun")
    _job(_ctx(table, shared, Clock()), "other-job", 1, "other")  # a peer opens between our open and our commit
    before = len(table.records)
    result = commit_entry(ctx, rerun)
    assert result.outcome is Outcome.DUPLICATE and result.catalog_commits == 1
    assert [code for _, code in table.records[before][1].outcomes] == ["B", "B", "D"]


def test_four_idempotent_jobs_in_threads_never_wait_out_a_patience() -> None:
    """Four threads, each a writer.id job that opens, runs its tasks, then commits, five batches each, with a
    patience far longer than the run: no commit is a helper's, every batch applied exactly once."""
    import threading
    import time

    shared = MemoryStore()
    table = _table(shared)
    lock = threading.Lock()
    errors: list[BaseException] = []
    results: list[Any] = []

    def job(i: int) -> None:
        try:
            for batch in range(5):
                ctx = CommitContext(port=MemoryTablePort(table), wal=Wal(shared), patience_s=30.0, poll_s=0.005)
                _, entry = _job(ctx, f"job{i}", batch, f"j{i}-b{batch}")
                time.sleep(0.02)  # its tasks run while the others commit
                result = commit_entry(ctx, entry)
                with lock:
                    results.append(result)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 20
    assert all(r.outcome is Outcome.APPLIED for r in results)
    assert not any(r.helper for r in results)
    assert not any(r.metrics.get("hlp") for _, r in table.records)
    assert len(_files(table)) == 20


def test_head_never_plans_on_a_claim_listing_with_a_hole_a_barrier_may_have_filled() -> None:
    """Our claim listed a skip at 1 and a barrier at 3 that declares 2 a hole, and put at 4. A peer's barrier lands
    at 2 right after our LIST. Our plan must not rest on that old listing (it would void the new barrier, whose
    writer would use a voided epoch): we list again and reconcile the barrier at 2."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    ctx = _ctx(table, shared, clock)
    skip = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer=SEAL_WRITER, reason=SEAL_REASON)
    shared.objects[wal_key(1)] = encode_entry(skip)
    declaring = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w3", run="r", floor=2)
    shared.objects[wal_key(3)] = encode_entry(declaring)
    late = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w2", run="r")

    def barrier_after_our_list(key: str) -> None:
        if key == wal_key(4) and wal_key(2) not in shared.objects:
            shared.objects[wal_key(2)] = encode_entry(late)

    shared.before_put = barrier_after_our_list  # type: ignore[assignment]
    result = commit_entry(ctx, _entry(ctx, "mine"))
    assert (result.outcome, result.seq) == (Outcome.APPLIED, 4)
    assert [code for _, code in table.records[-1][1].outcomes] == ["K", "B", "B", "A"]
    assert table.state.writers["w2"].epoch == 2


class _ReadsFailAfterPut(CountingStore):
    """After the first conditional PUT, the next ``n`` reads (GET and LIST) fail as a cut response would."""

    def __init__(self, inner: Any, n: int) -> None:
        super().__init__(inner)
        self.armed, self.left = False, n

    def _maybe_fail(self) -> None:
        if self.armed and self.left > 0:
            self.left -= 1
            raise StoreError("GET failed: Connection was closed before we received a valid response (injected)")

    def get(self, key: str) -> bytes | None:
        self._maybe_fail()
        return super().get(key)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        self._maybe_fail()
        return super().list(prefix, start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        created = super().put_if_absent(key, data)
        self.armed = True
        return created


def test_a_failed_read_of_the_wal_after_the_put_is_made_again_not_left_unknown() -> None:
    """The entry is durable; the store cuts the committer's next reads (a pending job's barrier before it):
    the committer backs off, reads the table and the WAL again, and commits — no unknown outcome."""
    shared, clock = MemoryStore(), Clock()
    table = _table(shared)
    _job(_ctx(table, shared, Clock()), "job-b", 1, "b")  # its barrier lies before our entry: read, then passed
    flaky = _ReadsFailAfterPut(shared, 3)
    ctx = _ctx(table, flaky, clock)
    result = commit_entry(ctx, _entry(ctx, "a"))
    assert flaky.left == 0, "the injected failures were not reached"
    assert (result.outcome, result.unknowns, result.waited_for) == (Outcome.APPLIED, 0, "store")
    assert _files(table) == ["data/a.parquet"]
