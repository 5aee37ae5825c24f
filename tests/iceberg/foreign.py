"""Another engine on the same table: plain pyiceberg, no fencedlake (tests of docs/PROTOCOL.md §5.4).

Every function here changes a table the way another writer legitimately may
between a fencedlake writer's WAL put and the commit that applies it: schema
and partition-spec evolution, appends with the minimal snapshot summary the
Iceberg spec allows (only ``operation``), appends of files without column
metrics, row deletes, rollbacks and ref moves. None of them knows about the
WAL, the state property or the serial tag.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.types import IcebergType

__all__ = [
    "append",
    "append_files",
    "append_minimal_summary",
    "delete_rows",
    "drop_column",
    "promote_column",
    "reload",
    "rename_column",
    "rollback_main",
    "set_main",
]


def reload(table: Table) -> Table:
    """The table as the catalog has it now."""
    return table.catalog.load_table(table.name())


def rename_column(table: Table, old: str, new: str) -> Table:
    """``ALTER TABLE RENAME COLUMN`` (the field id stays)."""
    with table.update_schema() as update:
        update.rename_column(old, new)
    return reload(table)


def drop_column(table: Table, name: str) -> Table:
    """``ALTER TABLE DROP COLUMN``."""
    with table.update_schema() as update:
        update.delete_column(name)
    return reload(table)


def promote_column(table: Table, name: str, to: IcebergType) -> Table:
    """A legal type promotion (``int -> long``, ``float -> double``)."""
    with table.update_schema() as update:
        update.update_column(name, field_type=to)
    return reload(table)


def append(table: Table, data: pa.Table, **properties: str) -> Table:
    """pyiceberg's own append (its writer, its full summary), optionally after setting table properties."""
    if properties:
        with table.transaction() as tx:
            tx.set_properties(properties)
        table = reload(table)
    table.append(data)
    return reload(table)


class _MinimalSummaryAppend(_FastAppendFiles):
    """A fast append whose summary holds only ``operation`` (all the Iceberg spec requires)."""

    def _summary(self, snapshot_properties: Any = None) -> Summary:
        return Summary(Operation.APPEND)


def append_minimal_summary(table: Table, data: pa.Table, branch: str = "main") -> Table:
    """Append ``data`` on ``branch`` as a snapshot whose summary says nothing but ``operation=append``."""
    with table.transaction() as tx:
        files = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=data, io=table.io, write_uuid=None))
        producer = _MinimalSummaryAppend(operation=Operation.APPEND, transaction=tx, io=table.io, branch=branch)
        for data_file in files:
            producer.append_data_file(data_file)
        producer.commit()
    return reload(table)


def delete_rows(table: Table, row_filter: str) -> Table:
    """``DELETE FROM t WHERE ...`` (pyiceberg's copy-on-write delete)."""
    table.delete(row_filter)
    return reload(table)


def rollback_main(table: Table, snapshot_id: int) -> Table:
    """Roll main back to an ancestor (``CALL rollback_to_snapshot``)."""
    table.manage_snapshots().rollback_to_snapshot(snapshot_id).commit()
    return reload(table)


def set_main(table: Table, snapshot_id: int) -> Table:
    """Point main at any snapshot (``CALL set_current_snapshot``; replacing the ref with a branch's head)."""
    table.manage_snapshots().set_current_snapshot(snapshot_id).commit()
    return reload(table)


def append_files(table: Table, files: list[Any], branch: str = "main", data: pa.Table | None = None) -> Table:
    """Append existing data files (a cherry-pick re-adds the same files) and ``data``'s new ones on ``branch``."""
    with table.transaction() as tx:
        producer = tx.update_snapshot(branch=branch).fast_append()
        for data_file in files:
            producer.append_data_file(data_file)
        if data is not None:
            for data_file in _dataframe_to_data_files(
                table_metadata=tx.table_metadata, df=data, io=table.io, write_uuid=None
            ):
                producer.append_data_file(data_file)
        producer.commit()
    return reload(table)
