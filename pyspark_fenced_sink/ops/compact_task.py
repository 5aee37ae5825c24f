"""Rewrite one compaction group: read its small files, write them again at the target size (executor side).

PROTOCOL.md §5.2. Runs in a Spark task (one per group, ``ops.compact``). The
input files are decoded by the executor-side file reader (``read.files``) in the
table's own Arrow schema (columns by field id, renamed and added columns,
promotions, null lists kept null) — not through Spark rows: no round trip through Spark types (uuid, nanosecond
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
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import IdentityTransform

from pyspark_fenced_sink.read.files import file_batches
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


def rewrite_group(
    spec: WriteSpec,
    metadata: TableMetadata,
    tasks: Sequence[FileScanTask],
    task: TaskInfo,
    sort: Sequence[tuple[str, str]] = (),
) -> WriteResult:
    """Read ``tasks``' rows and write them into new files of ``spec``'s table; the encoded files written.

    ``metadata`` is the executor copy of the table metadata (``iceberg.planning.scan.executor_metadata``).
    """
    batches: Iterator[Any] = file_batches(metadata, spec.io_properties, tasks)
    if sort:
        read = list(batches)
        batches = iter(pa.Table.from_batches(read).sort_by(list(sort)).to_batches() if read else ())
    spec = dataclasses.replace(spec, streaming=False)
    return write_task(spec, batches, task)
