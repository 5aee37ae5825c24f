"""A table's control data belongs to its identity (I8), and catalog-dependent decisions are committed (I9).

Real SQLite catalog, public APIs only: pyiceberg catalog operations (what any
other engine or tool does: DROP, RENAME, purge, property rewrites, a location
change, a partition spec change and revert) between writes made through the
sink's own driver and executor steps (``testing.harness``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table.update import SetLocationUpdate

from pyspark_fenced_sink.errors import TableStateError, WriteRejectedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import (
    commit,
    open_target,
    plan,
    rows,
    sink_write,
    table_ids,
    write_tasks,
)
from pyspark_fenced_sink.testing.invariants import check_table

TABLE = "db.t"


def _catalog(wh: str) -> Any:
    return embedded_catalog(wh)


def _exists(path: str) -> bool:
    return Path(path.removeprefix("file://")).exists()


def _violations(wh: str, table: str = TABLE) -> list[str]:
    opened = open_target(wh, table)
    return check_table(opened.table, opened.ctx.wal, _exists)


def _history(wh: str) -> None:
    """100 rows in 10 writes, batch ids 0-9 of writer ``etl``."""
    for b in range(10):
        sink_write(wh, TABLE, rows("old", b * 10, 10), writer_id="etl", writer_batch_id=b)


def test_drop_and_recreate_starts_clean_and_old_batch_ids_are_new(wh: str) -> None:
    """DROP TABLE (files kept), then write again: only the new rows; a batch id used before the drop applies."""
    _history(wh)
    _catalog(wh).drop_table(TABLE)
    sink_write(wh, TABLE, rows("new", 1000, 8))
    assert table_ids(wh, TABLE) == list(range(1000, 1008))
    again = sink_write(wh, TABLE, rows("new", 2000, 2), writer_id="etl", writer_batch_id=3)
    assert again.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == [*range(1000, 1008), 2000, 2001]
    assert _violations(wh) == []


def test_drop_after_gc_truncated_the_old_wal_does_not_block_the_new_table(wh: str) -> None:
    """gc truncated the dropped table's WAL: the new table's writes still commit (never outcome unknown)."""
    from pyspark_fenced_sink.ops.gc import gc

    _history(wh)
    report = gc(open_target(wh, TABLE).ctx, grace_s=0)
    assert report.wal_truncated > 0
    _catalog(wh).drop_table(TABLE)
    assert sink_write(wh, TABLE, rows("new", 500, 5)).outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == list(range(500, 505))


def test_rename_keeps_the_log_and_a_new_table_under_the_old_name_has_its_own(wh: str) -> None:
    """RENAME t -> t_old, then write t again: two tables at one location, neither sees the other's rows."""
    _history(wh)
    _catalog(wh).rename_table(TABLE, "db.t_old")
    sink_write(wh, TABLE, rows("new", 1000, 3))
    sink_write(wh, "db.t_old", rows("older", 5000, 2), writer_id="etl", writer_batch_id=10)
    assert sink_write(wh, "db.t_old", rows("old", 0, 10), writer_id="etl", writer_batch_id=0).outcome is (
        Outcome.DUPLICATE
    )
    assert table_ids(wh, TABLE) == [1000, 1001, 1002]
    assert table_ids(wh, "db.t_old") == [*range(100), 5000, 5001]
    assert _catalog(wh).load_table(TABLE).location() == _catalog(wh).load_table("db.t_old").location()
    assert _violations(wh) == [] and _violations(wh, "db.t_old") == []


def test_gc_of_one_table_never_collects_the_other_tables_files_at_a_shared_location(wh: str) -> None:
    """After a rename, both tables' data files share a directory; gc judges only files tagged with its table."""
    from pyspark_fenced_sink.ops.gc import gc

    _history(wh)
    _catalog(wh).rename_table(TABLE, "db.t_old")
    sink_write(wh, TABLE, rows("new", 1000, 3))
    for name in (TABLE, "db.t_old"):
        report = gc(open_target(wh, name).ctx, grace_s=0, snapshots_older_than_s=0, retain_last=1)
        assert report.orphans == []
    assert table_ids(wh, "db.t_old") == list(range(100))
    assert table_ids(wh, TABLE) == [1000, 1001, 1002]


def test_purge_then_recreate_starts_clean_and_scans(wh: str) -> None:
    """purge_table deletes the data; the control data survives but belongs to the purged table's UUID."""
    _history(wh)
    _catalog(wh).purge_table(TABLE)
    sink_write(wh, TABLE, rows("new", 7, 1))
    assert table_ids(wh, TABLE) == [7]
    assert _violations(wh) == []


def test_a_removed_state_property_is_never_read_as_fresh(wh: str) -> None:
    """The property rewritten away by another tool: writes refuse (naming repair-state) instead of replaying."""
    from pyspark_fenced_sink.protocol.repair import repair_state

    _history(wh)
    table = _catalog(wh).load_table(TABLE)
    with table.transaction() as tx:
        tx.remove_properties(STATE_PROPERTY)
    with pytest.raises(TableStateError, match=r"repair-state db\.t"):
        sink_write(wh, TABLE, rows("x", 900, 1))
    assert table_ids(wh, TABLE) == list(range(100))
    with pytest.raises(TableStateError):
        open_target(wh, TABLE)  # operator tools refuse it too, except repair-state
    unchecked = open_target(wh, TABLE, check=False)
    assert unchecked.ctx.identity is not None
    repair_state(unchecked.ctx, unchecked.ctx.identity.uuid, unchecked.ctx.identity.root)
    assert sink_write(wh, TABLE, rows("old", 90, 10), writer_id="etl", writer_batch_id=9).outcome is (Outcome.DUPLICATE)
    assert table_ids(wh, TABLE) == list(range(100))


def test_a_state_copied_from_another_table_is_refused(wh: str) -> None:
    """A property carried over from another table (its UUID inside) is foreign: refused, nothing written."""
    _history(wh)
    other = CommittedState.decode(_catalog(wh).load_table(TABLE).properties[STATE_PROPERTY])
    sink_write(wh, "db.copy", rows("c", 0, 1))
    copy = _catalog(wh).load_table("db.copy")
    with copy.transaction() as tx:
        tx.set_properties({STATE_PROPERTY: other.encode()})
    with pytest.raises(TableStateError, match="copied from another table"):
        sink_write(wh, "db.copy", rows("c", 1, 1))
    assert table_ids(wh, "db.copy") == [0]


def test_an_edited_state_behind_the_commit_records_is_refused(wh: str) -> None:
    """A property restored from old metadata (upper below the newest record) is refused, not trusted."""
    _history(wh)
    table = _catalog(wh).load_table(TABLE)
    state = CommittedState.decode(table.properties[STATE_PROPERTY])
    with table.transaction() as tx:
        tx.set_properties({STATE_PROPERTY: replace(state, upper=state.upper - 4).encode()})
    with pytest.raises(TableStateError, match="edited or restored"):
        sink_write(wh, TABLE, rows("x", 900, 1))


def test_a_location_change_does_not_strand_pending_entries(wh: str) -> None:
    """A durable entry whose driver died, then the table's location changes: the next write still applies it."""
    sink_write(wh, TABLE, rows("a", 0, 5))
    dead = plan(wh, TABLE)
    opened = open_target(wh, TABLE)
    from pyspark_fenced_sink.protocol.outcome import data_entry

    files = [f for m in write_tasks(dead, rows("dead", 100, 3)) for f in m.files]
    assert dead.identity is not None
    opened.ctx.wal.append(data_entry(dead.identity, files, rows=3), start=opened.view.state.upper)
    table = _catalog(wh).load_table(TABLE)
    # pyiceberg 0.12's Transaction.update_location is not implemented; Spark's ALTER TABLE ... SET LOCATION
    # sends this same metadata update.
    with table.transaction() as tx:
        tx._apply((SetLocationUpdate(location=f"{table.location()}-moved"),))
    sink_write(wh, TABLE, rows("b", 200, 2))
    assert table_ids(wh, TABLE) == [0, 1, 2, 3, 4, 100, 101, 102, 200, 201]


def test_a_spec_decision_is_committed_before_it_is_reported(wh: str) -> None:
    """Spec changes under a running write, the write is rejected; after a revert the rejected entry stays rejected."""
    sink_write(wh, TABLE, rows("a", 0, 5))
    running = plan(wh, TABLE)
    messages = write_tasks(running, rows("late", 50, 5))
    table = _catalog(wh).load_table(TABLE)
    with table.update_spec() as update:
        update.add_identity("writer")
    with pytest.raises(WriteRejectedError, match="partition spec"):
        commit(running, messages)
    table = _catalog(wh).load_table(TABLE)
    with table.update_spec() as update:
        update.remove_field("writer")
    assert _catalog(wh).load_table(TABLE).metadata.default_spec_id == 0  # Iceberg reused the old spec id
    sink_write(wh, TABLE, rows("b", 10, 5))
    assert table_ids(wh, TABLE) == list(range(5)) + list(range(10, 15))
    assert _violations(wh) == []


def test_a_fenced_batch_id_retried_lands_instead_of_being_called_a_duplicate(wh: str) -> None:
    """Jobs X (batch 5) and Y (batch 6) share a writer.id; Y, opened after a write moved the WAL tail past X's
    open, fences X; X's retry of batch 5 lands its rows. (Jobs whose opens listed the same tail are not ordered:
    PROTOCOL.md §7.)"""
    from pyspark_fenced_sink.errors import FencedWriterError

    x = plan(wh, TABLE, writer_id="nightly", writer_batch_id=5)
    x_messages = write_tasks(x, rows("x", 500, 5))
    sink_write(wh, TABLE, rows("between", 700, 1))
    y = plan(wh, TABLE, writer_id="nightly", writer_batch_id=6)
    commit(y, write_tasks(y, rows("y", 600, 5)))
    with pytest.raises(FencedWriterError):
        commit(x, x_messages)
    retried = sink_write(wh, TABLE, rows("x", 500, 5), writer_id="nightly", writer_batch_id=5)
    assert retried.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == [*range(500, 505), *range(600, 605), 700]
    again = sink_write(wh, TABLE, rows("x", 500, 5), writer_id="nightly", writer_batch_id=5)
    assert again.outcome is Outcome.DUPLICATE


def test_an_old_pending_entry_whose_files_were_removed_is_rejected_not_committed(wh: str) -> None:
    """An external orphan remover deleted a long-pending entry's files: the next commit never references them."""
    from pyspark_fenced_sink.protocol.outcome import data_entry

    sink_write(wh, TABLE, rows("a", 0, 5))
    dead = plan(wh, TABLE)
    files = [f for m in write_tasks(dead, rows("dead", 100, 3)) for f in m.files]
    assert dead.identity is not None
    day_old = data_entry(dead.identity, files, rows=3)
    day_old = replace(day_old, created_ms=day_old.created_ms - 86_400_000)
    opened = open_target(wh, TABLE)
    seq = opened.ctx.wal.append(day_old, start=opened.view.state.upper)
    for f in files:
        Path(str(f["p"]).removeprefix("file://")).unlink()
    sink_write(wh, TABLE, rows("b", 200, 2))
    assert table_ids(wh, TABLE) == [0, 1, 2, 3, 4, 200, 201]
    record = open_target(wh, TABLE)
    found = record.port.find_record(record.view, seq)
    assert found is not None and found.find(seq)[1] == Outcome.MISSING_FILES.value
    assert _violations(wh) == []
