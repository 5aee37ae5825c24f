"""The real-table invariant checker must see violations (else the crash tests prove nothing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import rows, sink_write
from pyspark_fenced_sink.testing.invariants import check_table

TABLE = "db.inv"


def _check(wh: str) -> list[str]:
    opened = open_table(catalog_config(warehouse=wh), TABLE)
    return check_table(opened.table, opened.ctx.wal, lambda p: Path(p.removeprefix("file://")).exists())


def _table(wh: str) -> Any:
    return embedded_catalog(wh).load_table(TABLE)


def test_clean_table_has_no_violations(tmp_path: Path) -> None:
    sink_write(str(tmp_path), TABLE, rows("a", 0, 5))
    sink_write(str(tmp_path), TABLE, rows("b", 5, 5))
    assert _check(str(tmp_path)) == []


def test_deleted_live_file_is_an_i6_violation(tmp_path: Path) -> None:
    sink_write(str(tmp_path), TABLE, rows("a", 0, 5))
    path = next(iter(_table(str(tmp_path)).inspect.files().column("file_path").to_pylist()))
    Path(path.removeprefix("file://")).unlink()
    assert [v[:3] for v in _check(str(tmp_path))] == ["I6:"]


def test_upper_ahead_of_the_records_is_an_i2_violation(tmp_path: Path) -> None:
    sink_write(str(tmp_path), TABLE, rows("a", 0, 5))
    table = _table(str(tmp_path))
    state = CommittedState.decode(table.metadata.properties[STATE_PROPERTY])
    with table.transaction() as tx:
        tx.set_properties({STATE_PROPERTY: replace(state, upper=state.upper + 1).encode()})
    assert any(v.startswith("I2:") for v in _check(str(tmp_path)))


def test_files_appended_twice_are_an_i1_violation(tmp_path: Path) -> None:
    sink_write(str(tmp_path), TABLE, rows("a", 0, 5))
    table = _table(str(tmp_path))
    path = table.inspect.files().column("file_path").to_pylist()[0]
    table.add_files([path], check_duplicate_files=False)
    assert any(v.startswith("I1: data files referenced twice") for v in _check(str(tmp_path)))


def _void_position_1(wh: str) -> Any:
    """A table whose WAL position 1 was voided as a hole (an entry at 2 declared it); returns the context."""
    from pyspark_fenced_sink.protocol.commit import recover
    from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, encode_entry
    from pyspark_fenced_sink.protocol.fencing import new_token

    sink_write(wh, TABLE, rows("a", 0, 5))  # position 0
    ctx = open_table(catalog_config(warehouse=wh), TABLE).ctx
    jumper = WalEntry(kind=EntryKind.DATA, token=new_token(), writer="anon-j", ephemeral=True, opened=1, floor=1)
    ctx.wal.store.put_if_absent("wal/00000000000000000002.json", encode_entry(jumper))
    assert [o for r in recover(ctx) for _, o in r.outcomes] == ["V", "A"]
    return ctx


def test_an_object_put_late_into_a_voided_hole_is_inert(tmp_path: Path) -> None:
    """Write a's own entry again at the voided position (its writer's late put, same token): not a violation."""
    from pyspark_fenced_sink.protocol.entry import encode_entry

    ctx = _void_position_1(str(tmp_path))
    ctx.wal.store.put_if_absent("wal/00000000000000000001.json", encode_entry(ctx.wal.read(0)))
    assert _check(str(tmp_path)) == []


def test_live_files_of_an_object_in_a_voided_hole_are_an_i1_violation(tmp_path: Path) -> None:
    """An entry at a voided position whose files are live although no applied entry carries its token: I1."""
    from pyspark_fenced_sink.protocol.entry import encode_entry
    from pyspark_fenced_sink.protocol.fencing import new_token

    ctx = _void_position_1(str(tmp_path))
    impostor = replace(ctx.wal.read(0), token=new_token())  # a's files, another write's token
    ctx.wal.store.put_if_absent("wal/00000000000000000001.json", encode_entry(impostor))
    assert _check(str(tmp_path)) == [f"I1: entry 1 ({impostor.writer}) landed in a voided hole but its files are live"]
