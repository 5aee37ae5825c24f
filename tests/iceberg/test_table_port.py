"""The one catalog commit over a real SQLite catalog (PROTOCOL.md steps 3-6, §4; I1, I2, I7)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from pyspark_fenced_sink.errors import WriteRejectedError
from pyspark_fenced_sink.iceberg import catalogs
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.protocol.commit import commit_entry, recover
from pyspark_fenced_sink.protocol.context import CommitConflict
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import new_token, open_writer
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome, reconcile
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommitRecord, CommittedState
from pyspark_fenced_sink.store.base import CountingStore
from pyspark_fenced_sink.testing.harness import open_target, plan, rows, sink_write, table_ids, write_tasks
from tests.iceberg.faults import fail_next_commits

TABLE = "db.events"


def _ctx(wh: str) -> Any:
    return open_target(wh, TABLE).ctx


def _prepared_entry(wh: str, writer: str, start: int, count: int) -> WalEntry:
    """A data entry whose files are written, not yet in the WAL."""
    p = plan(wh, TABLE)
    files = [f for m in write_tasks(p, rows(writer, start, count)) for f in m.files]
    assert p.identity is not None
    return data_entry(p.identity, files, rows=count)


def test_commit_lands_files_state_and_record_in_one_snapshot(wh: str) -> None:
    """A write adds one snapshot carrying its files, the commit record and the new committed state."""
    result = sink_write(wh, TABLE, rows("a", 0, 100))
    table = embedded_catalog(wh).load_table(TABLE)
    assert result.outcome is Outcome.APPLIED and result.catalog_commits == 1
    assert len(table.metadata.snapshots) == 1
    summary = table.current_snapshot().summary.additional_properties
    assert summary["fencedlake.seqs"] == "0-0"
    assert summary["fencedlake.outcomes"].endswith(":A")
    assert CommittedState.decode(table.properties[STATE_PROPERTY]).upper == 1
    assert table_ids(wh, TABLE) == list(range(100))


def test_stale_view_commit_is_rejected_not_rebased(wh: str) -> None:
    """A plan computed on an old version fails the compare-and-swap and changes nothing."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    stale_ctx, fresh_ctx = _ctx(wh), _ctx(wh)
    stale = stale_ctx.port.load()
    mine = _prepared_entry(wh, "b", 10, 10)
    seq = stale_ctx.wal.append(mine, start=stale.state.upper)
    sink_write(wh, TABLE, rows("c", 20, 10))  # a peer commits first (and applies b's entry too)
    plan_ = reconcile(stale.state, {seq: mine})
    record = CommitRecord(first=plan_.base.upper, outcomes=(("x" * 12, "A"),))
    with pytest.raises(CommitConflict):
        stale_ctx.port.commit(stale, plan_, {seq: mine}, record)
    fresh = fresh_ctx.port.load()
    assert fresh.state.upper == seq + 2
    assert table_ids(wh, TABLE) == list(range(30))


def test_pyiceberg_own_retry_would_land_a_stale_commit(wh: str) -> None:
    """Why the retry must stay off: pyiceberg's commit_transaction rebases a stale commit and the upper goes back."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    stale = catalog.load_table(TABLE)
    sink_write(wh, TABLE, rows("b", 10, 10))
    sink_write(wh, TABLE, rows("c", 20, 10))
    before = CommittedState.decode(catalog.load_table(TABLE).properties[STATE_PROPERTY]).upper
    tx = stale.transaction()
    tx.set_properties({STATE_PROPERTY: CommittedState(upper=1).encode()})
    with tx.update_snapshot().fast_append():
        pass
    tx.commit_transaction()  # pyiceberg retries the CommitFailedException by rebasing
    after = CommittedState.decode(catalog.load_table(TABLE).properties[STATE_PROPERTY]).upper
    assert (before, after) == (3, 1), "pyiceberg's retry no longer rebases: re-check PROTOCOL.md §12"


def test_committed_state_survives_snapshot_expiry(wh: str) -> None:
    """Expiring every old snapshot keeps the committed upper and writer state (a table property)."""
    for i in range(3):
        sink_write(wh, TABLE, rows("a", i * 10, 10), writer_id="w", writer_batch_id=i)
    table = embedded_catalog(wh).load_table(TABLE)
    current = table.current_snapshot().snapshot_id
    old = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table = embedded_catalog(wh).load_table(TABLE)
    assert len(table.metadata.snapshots) == 1
    state = CommittedState.decode(table.properties[STATE_PROPERTY])
    assert state.writers["w"].batches.intervals == ((0, 2),)
    replay = sink_write(wh, TABLE, rows("a", 20, 10), writer_id="w", writer_batch_id=2)
    assert replay.outcome is Outcome.DUPLICATE
    assert table_ids(wh, TABLE) == list(range(30))


def test_other_engine_commit_keeps_the_committed_state(wh: str) -> None:
    """A plain pyiceberg append between fencedlake writes keeps the state; the next write absorbs it."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    table = embedded_catalog(wh).load_table(TABLE)
    table.append(rows("other", 100, 5))
    state = CommittedState.decode(embedded_catalog(wh).load_table(TABLE).properties[STATE_PROPERTY])
    assert state.upper == 1
    result = sink_write(wh, TABLE, rows("b", 10, 10))
    assert result.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == list(range(20)) + list(range(100, 105))


def test_overwrite_replaces_all_rows_in_one_snapshot(wh: str) -> None:
    """Overwrite deletes every live file and adds the new ones in a single snapshot."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    sink_write(wh, TABLE, rows("b", 10, 10))
    snapshots_before = len(embedded_catalog(wh).load_table(TABLE).metadata.snapshots)
    sink_write(wh, TABLE, rows("c", 50, 3), overwrite=True)
    table = embedded_catalog(wh).load_table(TABLE)
    assert len(table.metadata.snapshots) == snapshots_before + 1
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert table_ids(wh, TABLE) == [50, 51, 52]


def test_group_commit_applies_every_pending_entry_at_once(wh: str) -> None:
    """Entries of dead writers are applied by the next committer in its one catalog commit."""
    sink_write(wh, TABLE, rows("a", 0, 1))
    ctx = _ctx(wh)
    for i in range(5):  # five drivers put their entries and die before committing
        ctx.wal.append(_prepared_entry(wh, f"dead{i}", 100 + i * 10, 10), start=0)
    result = sink_write(wh, TABLE, rows("b", 1, 1))
    assert result.catalog_commits == 1 and result.group == 6 and result.for_peers == 5
    assert table_ids(wh, TABLE) == [0, 1, *range(100, 150)]


def test_unknown_commit_outcome_is_resolved_by_reading_back(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit that lands but whose response is lost is found again, not repeated (I7)."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    real = type(catalog).commit_table
    calls = []

    def lossy(self: Any, table: Any, requirements: Any, updates: Any) -> Any:
        response = real(self, table, requirements, updates)
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("COMMIT", {}, Exception("connection reset after commit"))
        return response

    monkeypatch.setattr(type(catalog), "commit_table", lossy)
    _ctx(wh).wal.append(_prepared_entry(wh, "dead", 100, 10), start=0)  # a dead driver's entry: ours applies it too
    result = sink_write(wh, TABLE, rows("b", 10, 10))
    assert result.outcome is Outcome.APPLIED and result.unknowns == 1
    # the commit that landed was this writer's own: counted as such, not as a peer's
    assert (result.by_peer, result.catalog_commits, result.for_peers, result.group) == (False, 1, 1, 2)
    assert table_ids(wh, TABLE) == [*range(20), *range(100, 110)]


def test_conflicting_commit_removes_its_manifests_and_retries(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CommitFailedException is a conflict: nothing landed, the loop re-reads and commits once."""
    catalog = embedded_catalog(wh)
    sink_write(wh, TABLE, rows("a", 0, 5))
    fail_next_commits(monkeypatch, catalog)
    result = sink_write(wh, TABLE, rows("b", 5, 5))
    assert (result.outcome, result.conflicts, result.catalog_commits) == (Outcome.APPLIED, 1, 1)
    assert table_ids(wh, TABLE) == list(range(10))


@pytest.mark.parametrize(
    "error",
    [
        OSError("When uploading part for key 'metadata/snap.avro': connection reset (injected)"),
        # A read of the parent's manifest list whose response was cut short: pyarrow hands back the bytes it
        # got and pyiceberg's Avro decoder runs out of them (seen through toxiproxy's limit_data).
        EOFError("EOF: read 1 bytes"),
    ],
    ids=["write-failed", "read-cut-short"],
)
def test_storage_failure_while_writing_manifests_is_retried_not_left_unknown(
    wh: str, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """Storage failing under the commit's manifests (nothing sent to the catalog) is retried: APPLIED, not unknown."""
    from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit

    sink_write(wh, TABLE, rows("a", 0, 5))
    real = StagedCommit.finish
    calls: list[int] = []

    def fails_once(self: StagedCommit, producer: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise error
        real(self, producer)

    monkeypatch.setattr(StagedCommit, "finish", fails_once)
    result = sink_write(wh, TABLE, rows("b", 5, 5))
    assert (result.outcome, result.unknowns, result.conflicts, result.catalog_commits) == (Outcome.APPLIED, 0, 1, 1)
    assert table_ids(wh, TABLE) == list(range(10))


def test_uncontended_commit_stays_within_the_request_budget(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most 1 conditional PUT and 3 control-store requests per uncontended commit (beyond Iceberg's own)."""
    sink_write(wh, TABLE, rows("a", 0, 5))
    stores: list[CountingStore] = []
    real_open = catalogs.open_store

    def counting(location: str, props: Any) -> CountingStore:
        stores.append(CountingStore(real_open(location, props)))
        return stores[-1]

    monkeypatch.setattr(catalogs, "open_store", counting)
    p = plan(wh, TABLE)
    messages = write_tasks(p, rows("b", 5, 5))
    stores.clear()
    from pyspark_fenced_sink.testing.harness import commit

    commit(p, messages, abort=False)
    counts = sum((s.counts for s in stores), start=CountingStore(None).counts)  # type: ignore[arg-type]
    assert counts["PUT_IF_ABSENT"] == 1
    assert sum(counts.values()) <= 3, counts


def test_lagging_writer_finds_its_outcome_in_a_peer_commit_record(wh: str) -> None:
    """A writer whose entry a peer applied long ago converges to APPLIED without committing (I3)."""
    sink_write(wh, TABLE, rows("a", 0, 1))
    ctx = _ctx(wh)
    view = ctx.port.load()
    mine = _prepared_entry(wh, "slow", 100, 10)
    claimed = ctx.wal.claim(mine, view.state.upper)
    for i in range(3):
        sink_write(wh, TABLE, rows("peer", 10 + i, 1))
    from pyspark_fenced_sink.protocol.committer import Committer
    from pyspark_fenced_sink.protocol.progress import Progress

    result = Committer(ctx, claimed, view, Progress(t0=ctx.now())).run()
    assert result.outcome is Outcome.APPLIED and result.by_peer and result.catalog_commits == 0
    assert table_ids(wh, TABLE).count(100) == 1


def test_changed_partition_spec_rejects_the_write(wh: str) -> None:
    """Files written under an old partition spec are rejected, never mislabeled (SPEC_CHANGED)."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    p = plan(wh, TABLE)
    messages = write_tasks(p, rows("b", 10, 10))
    table = embedded_catalog(wh).load_table(TABLE)
    with table.update_spec() as update:
        update.add_identity("writer")
    from pyspark_fenced_sink.testing.harness import commit

    with pytest.raises(WriteRejectedError, match="partition spec changed"):
        commit(p, messages, abort=False)
    assert table_ids(wh, TABLE) == list(range(10))


def test_recover_applies_pending_entries_and_reports_records(wh: str) -> None:
    """recover() commits what dead writers left, in bounded commits, and returns their records."""
    sink_write(wh, TABLE, rows("a", 0, 1))
    ctx = _ctx(wh)
    for i in range(3):
        ctx.wal.append(_prepared_entry(wh, f"dead{i}", 10 * (i + 1), 2), start=0)
    ctx.wal.append(WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w"), start=0)
    records = recover(ctx)
    assert len(records) == 1 and [o for _, o in records[0].outcomes] == ["A", "A", "A", "B"]
    assert recover(ctx) == []
    assert table_ids(wh, TABLE) == [0, 10, 11, 20, 21, 30, 31]


def test_barrier_only_commit_advances_upper_without_data(wh: str) -> None:
    """A plan with no data still commits a (file-less) snapshot so the state stays CAS-protected."""
    sink_write(wh, TABLE, rows("a", 0, 1))
    ctx = _ctx(wh)
    open_writer(ctx, "w")
    result = commit_entry(ctx, WalEntry(kind=EntryKind.FENCE, token=new_token(), writer="w2"))
    assert result.outcome is Outcome.BARRIER and result.catalog_commits == 1
    recover(ctx)
    table = embedded_catalog(wh).load_table(TABLE)
    assert CommittedState.decode(table.properties[STATE_PROPERTY]).upper == 3
    assert table_ids(wh, TABLE) == [0]


def _commits(times_ms: list[int], outcomes: str = "A") -> Any:
    """Metadata-like object: one fencedlake commit record per timestamp (each reconciles ``outcomes``)."""
    from types import SimpleNamespace

    from pyspark_fenced_sink.protocol.state import encode_record

    def snapshot(ms: int, first: int) -> Any:
        record = CommitRecord(first * len(outcomes), tuple((f"t{first:07d}", o) for o in outcomes))
        return SimpleNamespace(timestamp_ms=ms, summary=SimpleNamespace(additional_properties=encode_record(record)))

    return SimpleNamespace(snapshots=[snapshot(ms, i) for i, ms in enumerate(times_ms)])


def test_an_idle_spell_between_bursts_does_not_stretch_the_commit_cadence() -> None:
    """Commits 100 ms apart around a minute in which nobody wrote: the cadence is 0.1 s, not the mean 8.7 s
    (waiters would sleep, helpers wait, up to that long while the commits ahead land every 100 ms)."""
    from pyspark_fenced_sink.iceberg.commit.table_port import _pace

    pace, cadence = _pace(_commits([0, 100, 200, 300, 60_300, 60_400, 60_500, 60_600]))
    assert cadence == pytest.approx(0.1) and pace == pytest.approx(10.0)


def test_a_table_written_rarely_keeps_its_long_cadence_and_voided_holes_are_not_paced() -> None:
    from pyspark_fenced_sink.iceberg.commit.table_port import _pace

    pace, cadence = _pace(_commits([0, 30_000, 60_000, 90_000], outcomes="AV"))
    assert cadence == pytest.approx(30.0) and pace == pytest.approx(1 / 30)
    assert _pace(_commits([5_000])) == (None, None)
    same_ms = _pace(_commits([0, 0, 0, 0, 700]))  # most intervals zero: the mean over the span
    assert same_ms[1] == pytest.approx(0.175)
