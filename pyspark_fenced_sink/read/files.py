"""Iceberg data files -> Arrow batches in a table schema: the one executor-side file reader (PROTOCOL.md §14, §5.2).

Batch and streaming reads (``read.task``) and compaction's rewrite
(``ops.compact_task``) read data files here, one Arrow batch at a time,
through pyiceberg's ``ArrowScan`` machinery: columns matched by field id
(renamed, dropped and added columns read right; files without field ids
through the table's name mapping), identity partition values filled in, type
promotions applied, positional delete files applied, an optional row filter
applied while decoding.

pyiceberg 0.12 rebuilds a list whose elements are structs, and a map whose
values are structs, without the null mask, so a null reads back as empty
(apache/iceberg-python#3833). :func:`file_batches` first installs
:class:`_NullKeepingProjection` in its place — a subclass that restores the
mask of the array the file holds — once per process; it changes nothing else.

No catalog code here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyiceberg.io.pyarrow as iceberg_arrow
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io.pyarrow import ArrowProjectionVisitor, ArrowScan, _read_all_delete_files
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from pyspark_fenced_sink.iceberg.codec.fileio import cached_file_io

__all__ = ["file_batches"]


def _with_nulls_of(result: pa.Array | None, source: pa.Array | None) -> pa.Array | None:
    """``result`` (a list or map pyiceberg rebuilt from ``source``'s offsets) with ``source``'s nulls."""
    if result is None or source is None or result.null_count == source.null_count:
        return result
    mask = source.is_null()
    if isinstance(result, pa.MapArray):
        return pa.MapArray.from_arrays(result.offsets, result.keys, result.items, type=result.type, mask=mask)
    cls = pa.LargeListArray if isinstance(result, pa.LargeListArray) else pa.ListArray
    return cls.from_arrays(result.offsets, result.values, type=result.type, mask=mask)


class _NullKeepingProjection(ArrowProjectionVisitor):
    """pyiceberg's file-to-table projection, keeping null lists and maps null (see the module docstring)."""

    def list(self, list_type: Any, list_array: pa.Array | None, value_array: pa.Array | None) -> pa.Array | None:
        return _with_nulls_of(super().list(list_type, list_array, value_array), list_array)

    def map(
        self, map_type: Any, map_array: pa.Array | None, key_result: pa.Array | None, value_result: pa.Array | None
    ) -> pa.Array | None:
        return _with_nulls_of(super().map(map_type, map_array, key_result, value_result), map_array)


_install_lock = threading.Lock()


def _install_null_keeping_projection() -> None:
    """Make pyiceberg's per-batch projection (``_to_requested_schema``) use :class:`_NullKeepingProjection`."""
    with _install_lock:
        if iceberg_arrow.ArrowProjectionVisitor is ArrowProjectionVisitor:
            iceberg_arrow.ArrowProjectionVisitor = _NullKeepingProjection  # type: ignore[misc]


def file_batches(
    metadata: TableMetadata,
    io_properties: Mapping[str, str],
    tasks: Sequence[FileScanTask],
    *,
    projection: Schema | None = None,
    row_filter: BooleanExpression | None = None,
    before_file: Callable[[], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``tasks`` (data files with their delete files), one Arrow batch at a time.

    Args:
        metadata: The (executor copy of the) table metadata.
        io_properties: The table's FileIO properties.
        tasks: The files to read, in order.
        projection: The columns to read (default: the table's current schema).
        row_filter: Rows to keep while decoding (default: all).
        before_file: Called before each file is opened (a read's fail point).
    """
    _install_null_keeping_projection()
    io = cached_file_io(io_properties, metadata.location)
    scan = ArrowScan(metadata, io, projection or metadata.schema(), row_filter or AlwaysTrue())
    for task in tasks:
        if before_file is not None:
            before_file()
        # pyiceberg 0.12's per-file generator: ArrowScan.to_record_batches would hold a whole file's
        # batches in memory before yielding the first (see setup.cfg, "pyiceberg internals").
        deletes: dict[str, Any] = _read_all_delete_files(io, [task]) if task.delete_files else {}
        yield from scan._record_batches_from_scan_tasks_and_deletes([task], deletes)
