"""Row-level deletes as another engine writes them (Spark/Flink merge-on-read), for reader tests.

pyiceberg 0.12 writes no delete files (its ``delete()`` rewrites data files),
so these helpers write what a Java engine's ``RowDelta`` commits: a Parquet
delete file (positional: ``file_path``, ``pos``; equality: the equality
columns), a delete manifest, and a ``delete`` snapshot on the main branch,
through pyiceberg's public metadata update types.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.typedef import Record

__all__ = ["commit_deletes", "equality_delete_file", "position_delete_file"]

_FILE_PATH_ID = 2147483546
_POS_ID = 2147483545


class _DeleteManifestWriter(ManifestWriterV2):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _write(table: Any, arrow: pa.Table) -> tuple[str, int]:
    path = f"{table.location()}/data/delete-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(arrow, out)
    return path, table.io.new_input(path).__len__()


def _delete_file(table: Any, content: DataFileContent, path: str, size: int, rows: int, **extra: Any) -> DataFile:
    data_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=size,
        **extra,
    )
    data_file.spec_id = table.spec().spec_id
    return data_file


def position_delete_file(table: Any, data_file_path: str, positions: Sequence[int], *, named: bool = True) -> DataFile:
    """A positional delete file removing rows ``positions`` (0-based) of ``data_file_path``.

    ``named=False`` leaves out the ``file_path`` bounds: readers then apply it to every file of its partition.
    """
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(_FILE_PATH_ID)}),
            pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(_POS_ID)}),
        ]
    )
    arrow = pa.table({"file_path": [data_file_path] * len(positions), "pos": list(positions)}, schema=schema)
    path, size = _write(table, arrow)
    bound = {_FILE_PATH_ID: data_file_path.encode()} if named else None  # as Java writes: names its one data file
    return _delete_file(
        table, DataFileContent.POSITION_DELETES, path, size, len(positions), lower_bounds=bound, upper_bounds=bound
    )


def equality_delete_file(table: Any, column: str, values: Sequence[Any]) -> DataFile:
    """An equality delete file removing the rows whose ``column`` is in ``values``."""
    field = table.schema().find_field(column)
    arrow_type = pa.int64() if str(field.field_type) == "long" else pa.string()
    schema = pa.schema([pa.field(column, arrow_type, metadata={"PARQUET:field_id": str(field.field_id)})])
    path, size = _write(table, pa.table({column: list(values)}, schema=schema))
    return _delete_file(table, DataFileContent.EQUALITY_DELETES, path, size, len(values), equality_ids=[field.field_id])


def commit_deletes(table: Any, delete_files: Sequence[DataFile], *, summary_totals: bool = True) -> Any:
    """Commit ``delete_files`` as one ``delete`` snapshot on main (a RowDelta); returns the reloaded table.

    ``summary_totals=False`` leaves the delete counts out of the summary (engines are not required to
    write them), so a reader must find the delete files in the manifests.
    """
    metadata = table.metadata
    parent = metadata.current_snapshot()
    snapshot_id = int(uuid.uuid4().int >> 65)
    sequence_number = metadata.next_sequence_number()
    manifest_path = f"{table.location()}/metadata/{uuid.uuid4().hex}-m0.avro"
    writer = _DeleteManifestWriter(
        table.spec(), table.schema(), table.io.new_output(manifest_path), snapshot_id, "deflate"
    )
    with writer:
        for data_file in delete_files:
            writer.add_entry(
                ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED,
                    snapshot_id=snapshot_id,
                    sequence_number=None,
                    file_sequence_number=None,
                    data_file=data_file,
                )
            )
    manifests = [*parent.manifests(table.io), writer.to_manifest_file()]
    list_path = f"{table.location()}/metadata/snap-{snapshot_id}-{uuid.uuid4().hex}.avro"
    output = table.io.new_output(list_path)
    with write_manifest_list(2, output, snapshot_id, parent.snapshot_id, sequence_number, "deflate") as lw:
        lw.add_manifests(manifests)
    totals: dict[str, str] = {}
    if summary_totals:
        kind = "equality" if any(f.content == DataFileContent.EQUALITY_DELETES for f in delete_files) else "position"
        totals = {
            f"total-{kind}-deletes": str(sum(f.record_count for f in delete_files)),
            "total-data-files": parent.summary.additional_properties.get("total-data-files", "0"),
        }
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence_number,
        timestamp_ms=max(int(time.time() * 1000), parent.timestamp_ms + 1),
        manifest_list=list_path,
        summary=Summary(Operation.DELETE, **totals),
        schema_id=metadata.current_schema_id,
    )
    with table.transaction() as tx:
        tx._apply(
            (
                AddSnapshotUpdate(snapshot=snapshot),
                SetSnapshotRefUpdate(
                    snapshot_id=snapshot_id, parent_snapshot_id=parent.snapshot_id, ref_name=MAIN_BRANCH, type="branch"
                ),
            ),
            (AssertRefSnapshotId(snapshot_id=parent.snapshot_id, ref=MAIN_BRANCH),),
        )
    return table.catalog.load_table(table.name())
