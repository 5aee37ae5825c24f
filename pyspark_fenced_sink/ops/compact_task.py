"""Rewrite one compaction group: read its small files, write them again at the target size (executor side).

PROTOCOL.md §5.2. Runs in a Spark task (one per group, ``ops.compact``). The
input files are decoded with pyiceberg's ``ArrowScan`` in the table's own Arrow
schema (columns by field id, renamed and added columns, promotions) — not
through Spark rows: no round trip through Spark types (uuid, nanosecond
timestamps, unsigned ints) and no JVM copy. The batches go through the sink's
own data path (``write.task.write_task``): Iceberg field ids, the table's codec,
statistics from the writer's footer, files rolled at the target size, named by
the compaction's ``FileTag``. If the table has a sort order, the group's rows are
sorted by its identity-transform fields first (other transforms are skipped).

No catalog code here (only pyiceberg's file I/O and Arrow readers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _read_all_delete_files
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import IdentityTransform

from pyspark_fenced_sink.iceberg.fileio import cached_file_io
from pyspark_fenced_sink.write.task import TaskInfo, WriteResult, WriteSpec, write_task

__all__ = ["rewrite_group", "sort_columns"]


def sort_columns(metadata: TableMetadata) -> list[tuple[str, str]]:
    """(column, "ascending"/"descending") for the identity fields of the table's default sort order."""
    order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    if order is None:
        return []
    schema = metadata.schema()
    out = []
    for field in order.fields:
        if not isinstance(field.transform, IdentityTransform):
            continue
        name = schema.find_column_name(field.source_id)
        if name is None or "." in name:
            continue
        out.append((name, "ascending" if field.direction.value == "asc" else "descending"))
    return out


def _batches(metadata: TableMetadata, io_properties: dict[str, str], tasks: Sequence[FileScanTask]) -> Iterator[Any]:
    io = cached_file_io(io_properties, metadata.location)
    scan = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue())
    for task in tasks:
        # pyiceberg 0.12's per-file generator (as read.task uses it): one batch at a time, the file's
        # position deletes applied (the compaction folds them, PROTOCOL.md §5.2).
        deletes: dict[str, Any] = _read_all_delete_files(io, [task]) if task.delete_files else {}
        yield from scan._record_batches_from_scan_tasks_and_deletes([task], deletes)


def rewrite_group(
    spec: WriteSpec,
    metadata: TableMetadata,
    tasks: Sequence[FileScanTask],
    task: TaskInfo,
    sort: Sequence[tuple[str, str]] = (),
) -> WriteResult:
    """Read ``tasks``' rows and write them into new files of ``spec``'s table; the encoded files written.

    ``metadata`` is the executor copy of the table metadata (``iceberg.scan.executor_metadata``).
    """
    batches: Iterator[Any] = _batches(metadata, dict(spec.io_properties), tasks)
    if sort:
        read = list(batches)
        batches = iter(pa.Table.from_batches(read).sort_by(list(sort)).to_batches() if read else ())
    spec = dataclasses.replace(spec, streaming=False)
    return write_task(spec, batches, task)
