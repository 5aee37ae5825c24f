"""Writer identities, epochs and fence barriers (PROTOCOL.md step 1, §7; invariant I4).

Most tests run the production ``fencing``/``writes``/``commit`` code over the
in-memory store and the model's in-memory catalog register; the last one runs
a zombie batch job end to end through the real ``IcebergTablePort`` on a
SQLite catalog.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from pyspark_fenced_sink.errors import FencedWriterError, InvalidOptionsError
from pyspark_fenced_sink.protocol.batches import BatchIds
from pyspark_fenced_sink.protocol.commit import commit_entry
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import EntryKind, decode_entry
from pyspark_fenced_sink.protocol.fencing import WriterIdentity, fence_writer, open_writer, stream_epoch
from pyspark_fenced_sink.protocol.layout import wal_key
from pyspark_fenced_sink.protocol.outcome import data_entry, finish_write
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import CommittedState, WriterState
from pyspark_fenced_sink.protocol.wal import Wal
from pyspark_fenced_sink.store.base import CountingStore
from pyspark_fenced_sink.store.memory import MemoryStore
from tests.model.memory_port import MemoryTable, MemoryTablePort


def _no_sleep(_: float) -> None:
    return None


class World:
    """One table: a shared control store and catalog register; each ``ctx()`` is one process's view."""

    def __init__(self) -> None:
        self.store = CountingStore(MemoryStore())
        self.table = MemoryTable()
        self.removed: list[str] = []

    def ctx(self) -> CommitContext:
        return CommitContext(
            port=MemoryTablePort(self.table), wal=Wal(self.store, label="t", sleep=_no_sleep), sleep=_no_sleep
        )

    def remove(self, paths: Sequence[str]) -> None:
        self.removed.extend(paths)

    def wal(self) -> dict[int, tuple[str, str, int | None]]:
        """seq -> (kind, writer, epoch) of every WAL entry present."""
        out = {}
        for key, raw in self.store.inner.objects.items():  # type: ignore[attr-defined]
            if key.startswith("wal/"):
                e = decode_entry(raw)
                out[int(key[4:24])] = (e.kind.value, e.writer, e.epoch)
        return out

    def live_paths(self) -> list[str]:
        return sorted(str(f["p"]) for f in self.table.files)


def _files(name: str, n: int = 1) -> list[dict[str, str]]:
    return [{"p": f"data/{name}-{i}.parquet", "s": 0} for i in range(n)]


@pytest.fixture
def world() -> World:
    return World()


# ---------------------------------------------------------------------------------------------- batch writers


def test_opening_with_writer_id_puts_one_fence_barrier_claiming_the_epoch(world: World) -> None:
    """open_writer with writer.id: one conditional PUT of a fence barrier; its seq is the new epoch. The writer's
    first barrier marks it first (one put more); once an epoch of it is committed, no open marks it again."""
    ident = open_writer(world.ctx(), "orders", run="run-a")
    assert ident == WriterIdentity("orders", False, 0, 0, "run-a", ident.barrier_token)
    assert world.wal() == {0: ("fence", "orders", None)}
    barrier = decode_entry(world.store.inner.objects[wal_key(0)])  # type: ignore[attr-defined]
    assert (barrier.kind, barrier.run, barrier.epoch) == (EntryKind.FENCE, "run-a", None)
    assert ident.barrier_token == barrier.token
    assert world.store.counts["PUT_IF_ABSENT"] == 2
    assert sorted(k for k in world.store.inner.objects if k.startswith("runs/")) == ["runs/orders/_barriers.json"]  # type: ignore[attr-defined]
    assert world.table.version == 0  # opening commits nothing to the catalog
    finish_write(world.ctx(), data_entry(ident, _files("a")), world.remove)  # commits the barrier: epoch 0
    puts = world.store.counts["PUT_IF_ABSENT"]
    assert open_writer(world.ctx(), "orders", run="run-b").epoch == 2
    assert world.store.counts["PUT_IF_ABSENT"] == puts + 1


def test_each_open_claims_a_newer_epoch(world: World) -> None:
    """Every incarnation of a writer id gets the next free WAL position as its epoch."""
    epochs = [open_writer(world.ctx(), "orders").epoch for _ in range(3)]
    assert epochs == [0, 1, 2]


def test_open_after_commits_claims_above_the_committed_upper(world: World) -> None:
    """With 2 positions committed, the next open's epoch is 2 and it records the upper it opened at."""
    ctx = world.ctx()
    for name in ("a", "b"):
        finish_write(ctx, data_entry(open_writer(ctx, None), _files(name)), world.remove)
    ident = open_writer(ctx, "orders", run="r")
    assert (ident.epoch, ident.opened) == (2, 2)


def test_opening_without_writer_id_is_anonymous_and_writes_nothing(world: World) -> None:
    """No writer.id: an anonymous, ephemeral identity with no epoch and nothing written to the store."""
    ident = open_writer(world.ctx(), None, run="0123456789abcdef0123")
    assert ident == WriterIdentity("anon-0123456789abcdef", True, None, 0, "0123456789abcdef0123")
    assert world.store.counts["PUT_IF_ABSENT"] == 0


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".x"])
def test_opening_with_an_invalid_writer_id_writes_nothing(world: World, bad: str) -> None:
    """An invalid writer.id is refused before any WAL put."""
    with pytest.raises(InvalidOptionsError, match=r"writer\.id"):
        open_writer(world.ctx(), bad)
    assert world.store.counts["PUT_IF_ABSENT"] == 0


def test_zombie_with_the_older_epoch_is_fenced_naming_epoch_and_seq(world: World) -> None:
    """Two incarnations of one writer id: the older one's write is FENCED, its files removed, never applied."""
    zombie = open_writer(world.ctx(), "orders", run="old")
    newer = open_writer(world.ctx(), "orders", run="new")
    assert (zombie.epoch, newer.epoch) == (0, 1)
    with pytest.raises(FencedWriterError) as err:
        finish_write(world.ctx(), data_entry(zombie, _files("zombie", 2)), world.remove)
    assert str(err.value) == (
        "table model.table: writer 'orders' epoch 0 was fenced by epoch 1 at WAL seq 2; "
        "stop this incarnation (not retryable)"
    )
    assert err.value.retryable is False
    assert world.removed == ["data/zombie-0.parquet", "data/zombie-1.parquet"]
    result = finish_write(world.ctx(), data_entry(newer, _files("newer")), world.remove)
    assert (result.seq, result.outcome) == (3, Outcome.APPLIED)
    assert world.live_paths() == ["data/newer-0.parquet"]
    assert world.table.state.writers == {"orders": WriterState(1, "new")}
    # The zombie's answer rested on the newer barrier, pending then: it was committed before it was reported.
    assert [[o for _, o in r.outcomes] for _, r in world.table.records[-2:]] == [["B", "B", "F"], ["A"]]


def test_fenced_writer_fails_fast_without_a_wal_put(world: World) -> None:
    """Once the newer epoch is committed, the zombie fails from the committed state alone: no WAL request."""
    zombie = open_writer(world.ctx(), "orders", run="old")
    newer = open_writer(world.ctx(), "orders", run="new")
    finish_write(world.ctx(), data_entry(newer, _files("newer")), world.remove)
    wal_before, puts_before = world.wal(), world.store.counts["PUT_IF_ABSENT"]
    result = commit_entry(world.ctx(), data_entry(zombie, _files("zombie")))
    assert (result.seq, result.outcome, result.by_peer) == (None, Outcome.FENCED, True)
    assert result.detail == "writer 'orders' epoch 0 was fenced by epoch 1 at WAL seq 1"
    with pytest.raises(
        FencedWriterError,
        match=r"^table model\.table: writer 'orders' epoch 0 was fenced by epoch 1 "
        r"at WAL seq 1; stop this incarnation \(not retryable\)$",
    ):
        finish_write(world.ctx(), data_entry(zombie, _files("zombie")), world.remove)
    assert world.wal() == wal_before
    assert world.store.counts["PUT_IF_ABSENT"] == puts_before
    assert world.removed == ["data/zombie-0.parquet"]
    assert world.live_paths() == ["data/newer-0.parquet"]


def test_entries_put_before_the_barrier_still_apply(world: World) -> None:
    """Fencing is positional: the old incarnation's entry put before the newer barrier applies (I4 wording)."""
    old = open_writer(world.ctx(), "orders", run="old")
    ctx = world.ctx()
    ctx.wal.append(data_entry(old, _files("early")), start=0)  # durable, not yet reconciled (driver died)
    newer = open_writer(world.ctx(), "orders", run="new")
    assert newer.epoch == 2
    finish_write(world.ctx(), data_entry(newer, _files("newer")), world.remove)
    assert world.live_paths() == ["data/early-0.parquet", "data/newer-0.parquet"]


def test_operator_fence_commits_a_barrier(world: World) -> None:
    """``fencedlake fence``: the barrier is committed at once, so a running incarnation fails fast."""
    running = open_writer(world.ctx(), "orders", run="running")
    epoch = fence_writer(world.ctx(), "orders")
    assert epoch == 1
    assert world.table.state.writers == {"orders": WriterState(1, "operator-fence")}
    assert world.table.state.upper == 2
    result = commit_entry(world.ctx(), data_entry(running, _files("late")))
    assert (result.seq, result.outcome) == (None, Outcome.FENCED)


# ---------------------------------------------------------------------------------------------- streaming runs


def test_stream_epoch_new_run_registers_with_a_barrier_then_the_registry(world: World) -> None:
    """A run the table has not seen puts a fence barrier (its epoch) and records it in the run registry."""
    assert stream_epoch(world.ctx(), CommittedState(), "s", "run-1", "q") == 0
    assert world.wal() == {0: ("fence", "s", None)}
    barrier = decode_entry(world.store.inner.objects[wal_key(0)])  # type: ignore[attr-defined]
    assert (barrier.run, barrier.query, barrier.strict) == ("run-1", "q", True)
    registration = json.loads(world.store.inner.objects["runs/s/run-1.json"])  # type: ignore[attr-defined]
    assert (registration["writer"], registration["run"], registration["epoch"]) == ("s", "run-1", 0)


def test_stream_epoch_same_run_uses_its_epoch_without_requests(world: World) -> None:
    """The committed state says this run is current: use its epoch; no store request at all."""
    state = CommittedState(upper=10, writers={"s": WriterState(epoch=4, run="run-1", query="q")})
    assert stream_epoch(world.ctx(), state, "s", "run-1", "q") == 4
    assert world.store.counts["PUT_IF_ABSENT"] == world.store.counts["GET"] == 0


def test_stream_epoch_new_run_registers_over_a_current_one(world: World) -> None:
    """A new run while another run is current registers a newer barrier: it fences the older run."""
    state = CommittedState(upper=3, writers={"s": WriterState(epoch=1, run="run-1")})
    assert stream_epoch(world.ctx(), state, "s", "run-2", "q") == 3


def test_stream_epoch_fenced_run_raises_naming_the_newer_epoch(world: World) -> None:
    """A run that registered before and is older than the current epoch was fenced: it never registers again."""
    assert stream_epoch(world.ctx(), CommittedState(), "s", "run-1", "q") == 0
    later = CommittedState(upper=12, writers={"s": WriterState(epoch=9, run="run-2", query="q")})
    with pytest.raises(FencedWriterError) as err:
        stream_epoch(world.ctx(), later, "s", "run-1", "q")
    assert str(err.value) == (
        "writer 's' run run-1 (epoch 0) was fenced by epoch 9 (run run-2) at WAL seq 9; stop this incarnation"
    )
    assert sorted(world.wal()) == [0]  # no second barrier


def test_stream_epoch_registered_run_whose_barrier_is_pending_keeps_its_epoch(world: World) -> None:
    """Registered, barrier not committed yet (the first commit's outcome was unknown): the same epoch, no new put."""
    assert stream_epoch(world.ctx(), CommittedState(), "s", "run-1", "q") == 0
    puts = world.store.counts["PUT_IF_ABSENT"]
    assert stream_epoch(world.ctx(), CommittedState(), "s", "run-1", "q") == 0
    assert world.store.counts["PUT_IF_ABSENT"] == puts


def test_stream_run_ids_that_are_not_key_safe_are_hashed(world: World) -> None:
    """A run id with other characters is registered under a stable uuid5 name, so a second call finds it."""
    run = "spark/run:1"
    stream_epoch(world.ctx(), CommittedState(), "s", run, "q")
    key = f"runs/s/{uuid.uuid5(uuid.NAMESPACE_URL, run).hex}.json"
    assert sorted(k for k in world.store.inner.objects if k.startswith("runs/")) == ["runs/s/_barriers.json", key]  # type: ignore[attr-defined]
    with pytest.raises(FencedWriterError):
        stream_epoch(world.ctx(), CommittedState(writers={"s": WriterState(epoch=3, run="other")}), "s", run, "q")


def _stream_batch(world: World, run: str, batch: int) -> Outcome:
    ctx = world.ctx()
    view = ctx.load()
    epoch = stream_epoch(ctx, view.state, "s", run, "q")
    ident = WriterIdentity("s", False, epoch, view.state.upper, run)
    entry = data_entry(ident, _files(f"{run}-b{batch}"), batch=batch, query="q", strict=True)
    return finish_write(ctx, entry, world.remove, view=view).outcome


def test_streaming_restart_fences_the_old_run(world: World) -> None:
    """Run 1 commits batches 0-1; run 2 registers and replays batch 1 (duplicate); run 1 is then fenced."""
    assert [_stream_batch(world, "run-1", b) for b in (0, 1)] == [Outcome.APPLIED, Outcome.APPLIED]
    assert world.table.state.writers["s"] == WriterState(0, "run-1", "q", BatchIds(((0, 1),)))
    assert _stream_batch(world, "run-2", 1) is Outcome.DUPLICATE
    # Run 2's replayed batch was a duplicate behind its own registration barrier, pending then: the answer and
    # the barrier were committed together, so run 1 fails fast from the committed state, without a WAL put.
    with pytest.raises(FencedWriterError, match=r"writer 's' run run-1 \(epoch 0\) was fenced by epoch 3"):
        _stream_batch(world, "run-1", 2)
    assert _stream_batch(world, "run-2", 2) is Outcome.APPLIED
    assert world.table.state.writers["s"] == WriterState(3, "run-2", "q", BatchIds(((0, 2),)))
    assert world.live_paths() == ["data/run-1-b0-0.parquet", "data/run-1-b1-0.parquet", "data/run-2-b2-0.parquet"]
    assert world.removed == ["data/run-2-b1-0.parquet"]  # run 1's batch 2 never got as far as its files


def test_a_zombie_run_registering_late_never_fences_the_newer_run(world: World) -> None:
    """Run 0 registered first; run 1 registered later. Run 0's late entries are fenced; run 1 is never fenced."""
    ctx0 = world.ctx()
    view0 = ctx0.load()
    epoch0 = stream_epoch(ctx0, view0.state, "s", "run-0", "q")  # registered, then delayed
    assert _stream_batch(world, "run-1", 0) is Outcome.APPLIED
    late = data_entry(WriterIdentity("s", False, epoch0, 0, "run-0"), _files("late"), batch=1, query="q", strict=True)
    with pytest.raises(FencedWriterError):
        finish_write(ctx0, late, world.remove, view=view0)
    assert _stream_batch(world, "run-1", 1) is Outcome.APPLIED
    assert world.table.state.writers["s"].run == "run-1"


# ---------------------------------------------------------------------------------------------- real catalog


def test_zombie_batch_job_is_fenced_on_a_real_iceberg_table(tmp_path: Path) -> None:
    """Two jobs with one writer.id on a SQLite catalog: the first-opened one is fenced, its rows never land."""
    from pyspark_fenced_sink.testing.harness import commit, plan, rows, table_ids, write_tasks

    wh = str(tmp_path / "wh")
    zombie_plan = plan(wh, "db.events", writer_id="orders")
    newer_plan = plan(wh, "db.events", writer_id="orders")
    assert zombie_plan.identity is not None
    assert newer_plan.identity is not None
    assert (zombie_plan.identity.epoch, newer_plan.identity.epoch) == (0, 1)
    zombie_messages = write_tasks(zombie_plan, rows("zombie", 0, 10))
    zombie_files = [Path(str(f["p"]).removeprefix("file://")) for m in zombie_messages for f in m.files]
    assert zombie_files
    assert all(p.exists() for p in zombie_files)
    with pytest.raises(FencedWriterError, match="writer 'orders' epoch 0 was fenced by epoch 1 at WAL seq 2"):
        commit(zombie_plan, zombie_messages, abort=False)
    assert [p for p in zombie_files if p.exists()] == []
    commit(newer_plan, write_tasks(newer_plan, rows("newer", 100, 10)), abort=False)
    assert table_ids(wh, "db.events") == list(range(100, 110))


def test_a_barrier_put_into_a_truncated_position_is_put_again(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that listed before positions 0-4 were reconciled and truncated puts its barrier at a freed
    position; the barrier is never reconciled there, so open_writer appends it again and takes that epoch."""
    late = world.ctx()
    stale_view = late.load()  # upper 0: read before anything was written
    ctx = world.ctx()
    for name in "abcde":
        finish_write(ctx, data_entry(open_writer(ctx, None), _files(name)), world.remove)
    assert ctx.wal.truncate(world.table.state.upper) == 4  # positions 0-3 gone, 4 kept
    stale_scans: list[list[int]] = [[]]  # and its LIST happened then too: it puts at position 0, freed by truncation
    real_scan = Wal.scan
    monkeypatch.setattr(Wal, "scan", lambda self, start: stale_scans.pop() if stale_scans else real_scan(self, start))
    ident = open_writer(late, "orders", run="late", view=stale_view)
    assert ident.epoch == 5
    result = finish_write(world.ctx(), data_entry(ident, _files("late")), world.remove)
    assert result.outcome is Outcome.APPLIED
    assert world.table.state.writers["orders"].epoch == 5


def test_operator_fence_behind_a_missing_position_reports_not_done(world: World) -> None:
    """A fence whose barrier waits behind a lost position is not committed: fence_writer says so (not success)."""
    from pyspark_fenced_sink.errors import CommitOutcomeUnknownError

    ctx = world.ctx()
    ctx.wal.append(data_entry(open_writer(ctx, None), _files("a")), start=0)
    ctx.wal.append(data_entry(open_writer(ctx, None), _files("b")), start=0)
    world.store.inner.objects.pop(wal_key(0))  # type: ignore[attr-defined]  # lost
    with pytest.raises(CommitOutcomeUnknownError, match="NOT fenced yet"):
        fence_writer(ctx, "orders")
    assert world.table.state.upper == 0


class _MovedAside(MemoryStore):
    """A buggy writer's damaged object lands at ``key`` between a writer's LIST and its PUT; the operator moves
    it aside just after that PUT found it there, before the writer reads it back."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key: str | None = key

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key == self.key:
            self.key = None
            return False  # "exists" — and it is gone (moved aside) when read
        return super().put_if_absent(key, data)


@pytest.mark.parametrize("kind", ["barrier", "data"])
def test_an_object_moved_aside_while_a_writer_claims_its_position_is_not_taken_for_ours(kind: str) -> None:
    """Gone between "exists" and the read, at or above the upper: an operator moved it aside (gc deletes only
    below the upper), so it was never ours nor reconciled; the writer puts its entry there again."""
    world = World()
    world.store = CountingStore(_MovedAside(wal_key(0)))
    ctx = world.ctx()
    if kind == "barrier":
        ident = open_writer(ctx, "orders", run="r")
        assert ident.epoch == 0 and world.wal() == {0: ("fence", "orders", None)}
    else:
        ident = open_writer(ctx, None)
    result = finish_write(ctx, data_entry(ident, _files("a")), world.remove)
    assert result.outcome is Outcome.APPLIED
    assert world.live_paths() == ["data/a-0.parquet"]
    assert world.wal()[result.seq][0] == "data"


# ----------------------------------------------------------------------- idempotent jobs (no barrier, §7)


def test_an_idempotent_job_opens_with_one_get_no_list_and_no_put(world: World) -> None:
    """writer.id + writer.batch-id, a writer that never put a barrier: the open reads the writer's barrier mark
    (absent) and carries the committed upper as its tail, even with an entry pending above it; nothing is put."""
    anon = open_writer(world.ctx(), None)
    finish_write(world.ctx(), data_entry(anon, _files("a")), world.remove)  # seq 0
    pending = world.ctx().wal.claim(data_entry(open_writer(world.ctx(), None), _files("p")), 1).seq  # not committed
    ctx = world.ctx()
    view = ctx.load()
    before = dict(world.store.counts)
    job = open_writer(ctx, "orders", run="r1", view=view, idempotent=True)
    assert (pending, job.epoch, job.tail, job.barrier_token) == (1, None, 1, None)
    assert world.store.counts["PUT_IF_ABSENT"] == before.get("PUT_IF_ABSENT", 0)
    assert world.store.counts["LIST"] == before.get("LIST", 0)
    assert world.store.counts["GET"] == before.get("GET", 0) + 1
    result = finish_write(world.ctx(), data_entry(job, _files("job"), batch=7), world.remove)
    assert (result.seq, result.outcome) == (2, Outcome.APPLIED)
    assert world.table.state.writers == {"orders": WriterState(None, "r1", batches=BatchIds().add(7), tail=1)}


def test_an_idempotent_job_of_a_writer_that_put_a_barrier_lists_the_tail_above_its_pending_barrier(
    world: World,
) -> None:
    """A barrier of the writer put before the job opened, not reconciled yet: the job's tail lies above it (one
    LIST), so the older barrier never fences the job, and the job's entry fences the barrier's."""
    barrier = open_writer(world.ctx(), "orders", run="plain")  # epoch 0, pending: the committed upper stays 0
    ctx = world.ctx()
    view = ctx.load()
    before = dict(world.store.counts)
    job = open_writer(ctx, "orders", run="job", view=view, idempotent=True)
    assert (barrier.epoch, job.tail, world.table.state.upper) == (0, 1, 0)
    assert world.store.counts["LIST"] == before.get("LIST", 0) + 1
    assert finish_write(world.ctx(), data_entry(job, _files("job"), batch=1), world.remove).outcome is (Outcome.APPLIED)
    with pytest.raises(FencedWriterError, match=r"epoch 0 was fenced by a job of the writer opened later"):
        finish_write(world.ctx(), data_entry(barrier, _files("plain")), world.remove)
    assert world.live_paths() == ["data/job-0.parquet"]


def test_a_job_that_opened_later_fences_an_older_idempotent_job(world: World) -> None:
    """The older job (lower tail) lands after the newer one: FENCED, its files removed, never applied."""
    zombie = open_writer(world.ctx(), "orders", run="old", idempotent=True)  # tail 0
    finish_write(world.ctx(), data_entry(open_writer(world.ctx(), None), _files("a")), world.remove)  # seq 0
    newer = open_writer(world.ctx(), "orders", run="new", idempotent=True)  # tail 1
    assert (zombie.tail, newer.tail) == (0, 1)
    assert finish_write(world.ctx(), data_entry(newer, _files("newer"), batch=2), world.remove).outcome is (
        Outcome.APPLIED
    )
    with pytest.raises(FencedWriterError, match=r"opened at WAL tail 0 was fenced by a job of the writer opened later"):
        finish_write(world.ctx(), data_entry(zombie, _files("zombie"), batch=1), world.remove)
    assert world.removed == ["data/zombie-0.parquet"]
    assert world.live_paths() == ["data/a-0.parquet", "data/newer-0.parquet"]


def test_idempotent_jobs_that_listed_the_same_tail_are_not_ordered_and_their_batch_ids_decide(world: World) -> None:
    """Equal tails: neither fences the other; a second copy of a batch is a duplicate, another batch applies."""
    first = open_writer(world.ctx(), "orders", run="r1", idempotent=True)
    second = open_writer(world.ctx(), "orders", run="r2", idempotent=True)
    third = open_writer(world.ctx(), "orders", run="r3", idempotent=True)
    assert first.tail == second.tail == third.tail == 0
    outcomes = [
        finish_write(world.ctx(), data_entry(job, _files(f"j{i}"), batch=b), world.remove).outcome
        for i, (job, b) in enumerate(((second, 5), (first, 5), (third, 6)))
    ]
    assert outcomes == [Outcome.APPLIED, Outcome.DUPLICATE, Outcome.APPLIED]
    assert world.live_paths() == ["data/j0-0.parquet", "data/j2-0.parquet"]


def test_a_barrier_fences_a_running_idempotent_job_and_a_later_job_fences_the_barriers_entries(world: World) -> None:
    """One scale of positions: a fence put after a job's open fences it; a job opened after a barrier fences that
    barrier's incarnation."""
    job = open_writer(world.ctx(), "orders", run="job", idempotent=True)  # tail 0
    assert fence_writer(world.ctx(), "orders") == 0  # the CLI's fence: a barrier at the tail the job listed
    with pytest.raises(FencedWriterError, match=r"opened at WAL tail 0 was fenced by epoch 0"):
        finish_write(world.ctx(), data_entry(job, _files("job"), batch=1), world.remove)
    barrier = open_writer(world.ctx(), "orders", run="plain")  # writer.id without a batch id: a barrier at 1
    later = open_writer(world.ctx(), "orders", run="later", idempotent=True)  # lists the barrier: tail 2
    assert (barrier.epoch, later.tail) == (1, 2)
    assert finish_write(world.ctx(), data_entry(later, _files("later"), batch=2), world.remove).outcome is (
        Outcome.APPLIED
    )
    with pytest.raises(
        FencedWriterError, match=r"epoch 1 was fenced by a job of the writer opened later, at WAL tail 2"
    ):
        finish_write(world.ctx(), data_entry(barrier, _files("plain")), world.remove)
    assert world.live_paths() == ["data/later-0.parquet"]


def test_a_writer_state_with_a_tail_and_no_epoch_round_trips() -> None:
    """The committed state keeps an idempotent-only writer as a tail without an epoch; a writer needs one of them."""
    state = WriterState(None, "r1", batches=BatchIds().add(3), tail=9)
    assert WriterState.decode(json.loads(json.dumps(state.encode()))) == state
    assert "epoch" not in state.encode()
    with pytest.raises(KeyError):
        WriterState.decode({"batches": {}})
