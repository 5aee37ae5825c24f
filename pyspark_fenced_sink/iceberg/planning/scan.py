"""Batch read planning: snapshot, schema, files, splits (PROTOCOL.md §14; driver).

:func:`resolve_point` picks the snapshot and schema a read sees (time travel by
id, timestamp, branch or tag); :func:`plan_files` plans its data files with
pyiceberg (equality deletes refused by name; each manifest decoded once per process:
``iceberg.planning.manifest_cache``); :func:`pack` packs them into
splits of about ``split-size`` bytes; :func:`executor_task` and
:func:`executor_metadata` slim what is pickled to executors.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import BooleanExpression
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.iceberg.planning.manifest_cache import planning_scan
from pyspark_fenced_sink.options.read import ReadOptions

__all__ = [
    "ReadPoint",
    "SplitSizing",
    "executor_metadata",
    "executor_task",
    "open_read_table",
    "pack",
    "plan_files",
    "plan_incremental",
    "resolve_point",
    "split_sizing",
]

logger = logging.getLogger(__name__)

SPLIT_SIZE_PROPERTY = "read.split.target-size"
SPLIT_SIZE_DEFAULT = 128 * 1024 * 1024
OPEN_COST_PROPERTY = "read.split.open-file-cost"
OPEN_COST_DEFAULT = 4 * 1024 * 1024
ADAPTIVE_PROPERTY = "read.split.adaptive-size.enabled"
#: The smallest split the adaptive size goes down to (Iceberg's: 16 MiB).
ADAPTIVE_MIN_SPLIT = 16 * 1024 * 1024
_STAT_POSITIONS = range(6, 12)  # DataFile column_sizes .. upper_bounds: planning only


def open_read_table(opts: ReadOptions) -> Any:
    """The table ``opts`` names, loaded once from its catalog.

    Raises:
        InvalidOptionsError: the catalog cannot be loaded or the table does not exist.
        ServiceError: the catalog or its storage failed (endpoint named, secrets masked).
    """
    from pyiceberg.exceptions import NoSuchTableError

    from pyspark_fenced_sink.iceberg.catalogs import load_catalog
    from pyspark_fenced_sink.iceberg.service_errors import service_errors

    try:
        with service_errors(opts.catalog, opts.table):
            return load_catalog(opts.catalog).load_table(opts.table)
    except NoSuchTableError:
        raise InvalidOptionsError(
            f"table {opts.table} does not exist in {opts.catalog.describe()}: check the name and the catalog "
            "options (a SQL view of a table no write has created yet declares its columns, CREATE TEMPORARY VIEW "
            f"<name> (id BIGINT, ...) USING fencedlake OPTIONS (table '{opts.table}', ...), and its first INSERT "
            "creates the table)"
        ) from None


@dataclass(frozen=True)
class ReadPoint:
    """What a batch read sees.

    Attributes:
        snapshot: The snapshot read, or None (an empty table).
        schema: The Iceberg schema of the rows (the snapshot's, or the table's for a branch).
        label: The read point in words, for messages and logs.
    """

    snapshot: Snapshot | None
    schema: Schema
    label: str


def _snapshot_schema(metadata: TableMetadata, snapshot: Snapshot) -> Schema:
    return next((s for s in metadata.schemas if s.schema_id == snapshot.schema_id), metadata.schema())


def _ref(metadata: TableMetadata, name: str, kind: SnapshotRefType, table: str) -> Snapshot:
    ref = metadata.refs.get(name)
    if ref is None or ref.snapshot_ref_type != kind:
        names = sorted(n for n, r in metadata.refs.items() if r.snapshot_ref_type == kind)
        raise InvalidOptionsError(
            f"{kind.value} {name!r}: expected a {kind.value} of table {table}, found none "
            f"(its {'branches' if kind == SnapshotRefType.BRANCH else 'tags'}: {', '.join(names) or 'none'})"
        )
    snapshot = metadata.snapshot_by_id(ref.snapshot_id)
    if snapshot is None:
        raise InvalidOptionsError(
            f"{kind.value} {name!r} of table {table} points at missing snapshot {ref.snapshot_id}"
        )
    return snapshot


def resolve_point(table: Any, opts: ReadOptions) -> ReadPoint:
    """The snapshot and schema a batch read of ``table`` with ``opts`` sees (time travel options).

    Raises:
        InvalidOptionsError: the snapshot, timestamp, branch or tag names nothing in the table.
    """
    metadata: TableMetadata = table.metadata
    if opts.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(opts.snapshot_id)
        if snapshot is None:
            recent = ", ".join(str(s.snapshot_id) for s in metadata.snapshots[-5:]) or "none"
            raise InvalidOptionsError(
                f"snapshot-id {opts.snapshot_id}: table {opts.table} has no such snapshot (expired or never "
                f"existed); its newest snapshots: {recent}"
            )
        return ReadPoint(snapshot, _snapshot_schema(metadata, snapshot), f"snapshot {snapshot.snapshot_id}")
    if opts.as_of_timestamp_ms is not None:
        snapshot = table.snapshot_as_of_timestamp(opts.as_of_timestamp_ms)
        if snapshot is None:
            raise InvalidOptionsError(
                f"as-of-timestamp {opts.as_of_timestamp_ms}: table {opts.table} has no snapshot of its main "
                "branch at or before that time (milliseconds since the epoch)"
            )
        label = f"snapshot {snapshot.snapshot_id} (as of {opts.as_of_timestamp_ms})"
        return ReadPoint(snapshot, _snapshot_schema(metadata, snapshot), label)
    if opts.branch is not None:
        snapshot = _ref(metadata, opts.branch, SnapshotRefType.BRANCH, opts.table)
        return ReadPoint(snapshot, metadata.schema(), f"branch {opts.branch!r} at snapshot {snapshot.snapshot_id}")
    if opts.tag is not None:
        snapshot = _ref(metadata, opts.tag, SnapshotRefType.TAG, opts.table)
        label = f"tag {opts.tag!r} (snapshot {snapshot.snapshot_id})"
        return ReadPoint(snapshot, _snapshot_schema(metadata, snapshot), label)
    current = metadata.current_snapshot()
    label = f"snapshot {current.snapshot_id}" if current is not None else "no snapshot (empty table)"
    return ReadPoint(current, metadata.schema(), label)


def _equality_deletes_refused(table: str, where: str, cause: BaseException | None = None) -> ReadRefusedError:
    return ReadRefusedError(
        f"table {table} has equality delete files in {where}: this reader (pyiceberg 0.12) cannot apply "
        "equality deletes, and reading without them would return deleted rows; rewrite the table's data files "
        "with an engine that can (e.g. Iceberg's rewrite_data_files) or read another snapshot",
        table=table,
    )


def _planned(scan: Any, table: str, where: str) -> list[FileScanTask]:
    try:
        return list(scan.plan_files())
    except ValueError as e:
        if "equality delete" in str(e).lower():
            raise _equality_deletes_refused(table, where) from e
        raise


def plan_files(table: Any, point: ReadPoint, row_filter: BooleanExpression, name: str) -> list[FileScanTask]:
    """The data files of ``point`` that may hold rows matching ``row_filter``, with their delete files.

    Raises:
        ReadRefusedError: the snapshot has equality delete files.
    """
    if point.snapshot is None:
        return []
    summary = point.snapshot.summary
    if summary is not None and int(summary.additional_properties.get("total-equality-deletes", "0") or 0) > 0:
        raise _equality_deletes_refused(name, point.label)
    # Bind the filter to the schema read (a time-traveled snapshot may use older column names).
    metadata = table.metadata.model_copy(update={"current_schema_id": point.schema.schema_id})
    scan = planning_scan(metadata, table.io, row_filter=row_filter, snapshot_id=point.snapshot.snapshot_id)
    return _planned(scan, name, point.label)


def plan_incremental(
    table: Any, opts: ReadOptions, row_filter: BooleanExpression
) -> tuple[list[FileScanTask], ReadPoint]:
    """The data files appended by the append snapshots after ``start-snapshot-id`` up to ``end-snapshot-id``.

    Raises:
        InvalidOptionsError: the range is not a piece of one snapshot lineage.
    """
    metadata: TableMetadata = table.metadata
    end = opts.end_snapshot_id
    if end is None:
        end = getattr(metadata.current_snapshot(), "snapshot_id", None)
    label = f"appends after snapshot {opts.start_snapshot_id} up to snapshot {end}"
    point = ReadPoint(metadata.snapshot_by_id(end) if end is not None else None, metadata.schema(), label)
    if end is None or end == opts.start_snapshot_id:
        return [], point
    scan = table.incremental_append_scan(
        from_snapshot_id_exclusive=opts.start_snapshot_id, to_snapshot_id_inclusive=end, row_filter=row_filter
    )
    try:
        return _planned(scan, opts.table, label), point
    except ValueError as e:  # pyiceberg's lineage checks
        raise InvalidOptionsError(f"start-snapshot-id/end-snapshot-id of table {opts.table}: {e}") from e


@dataclass(frozen=True)
class SplitSizing:
    """How data files are packed into input splits.

    Attributes:
        target: About this many bytes per split (a larger file is a split of its own).
        open_cost: The least weight a file counts for (small files are not free to open).
    """

    target: int
    open_cost: int


def _weight(task: FileScanTask, open_cost: int) -> int:
    size = task.file.file_size_in_bytes + sum(d.file_size_in_bytes for d in task.delete_files)
    return max(size, (1 + len(task.delete_files)) * open_cost)


def _parallelism() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def split_sizing(properties: Mapping[str, str], opts: ReadOptions, tasks: Sequence[FileScanTask]) -> SplitSizing:
    """Options first, then the table's ``read.split.*`` properties, then Iceberg's defaults.

    Without a ``split-size`` option the target adapts to small scans as Iceberg's does
    (``read.split.adaptive-size.enabled``, default true): it shrinks, down to 16 MiB, until the
    scan has at least one split per core of this host (Spark's planner sees no executor count).
    """

    def prop(key: str, default: int) -> int:
        try:
            return max(int(properties.get(key, default)), 0)
        except ValueError:
            return default

    open_cost = opts.file_open_cost if opts.file_open_cost is not None else prop(OPEN_COST_PROPERTY, OPEN_COST_DEFAULT)
    if opts.split_size is not None:
        return SplitSizing(opts.split_size, open_cost)
    target = max(prop(SPLIT_SIZE_PROPERTY, SPLIT_SIZE_DEFAULT), 1)
    if str(properties.get(ADAPTIVE_PROPERTY, "true")).lower() != "false":
        total = sum(_weight(t, open_cost) for t in tasks)
        parallelism = _parallelism()
        if -(-total // target) < parallelism:
            target = min(target, max(-(-total // parallelism), min(ADAPTIVE_MIN_SPLIT, target)))
    return SplitSizing(max(target, 1), open_cost)


def pack(tasks: Sequence[FileScanTask], sizing: SplitSizing) -> list[list[FileScanTask]]:
    """Spread ``tasks`` over ``ceil(total weight / target)`` splits of even weight.

    Heaviest file first, each to the lightest split so far (ties: the earlier split); within a split
    files keep their planned order. Even splits matter most for small scans, where one more split
    than Spark has cores leaves a task running alone. Deterministic: the same tasks in the same order
    always make the same splits (a stream re-plans a batch after a restart).
    """
    if not tasks:
        return []
    weights = [_weight(t, sizing.open_cost) for t in tasks]
    count = min(len(tasks), max(1, -(-sum(weights) // sizing.target)))
    loads = [0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for index in sorted(range(len(tasks)), key=lambda i: (-weights[i], i)):
        lightest = min(range(count), key=lambda b: (loads[b], b))
        loads[lightest] += weights[index]
        members[lightest].append(index)
    return [[tasks[i] for i in sorted(group)] for group in members if group]


def _slim(data_file: DataFile) -> DataFile:
    copy = DataFile(*(data_file[i] for i in range(len(data_file))))
    for position in _STAT_POSITIONS:
        copy[position] = None
    spec_id = getattr(data_file, "spec_id", None)
    if spec_id is not None:
        copy.spec_id = spec_id
    return copy


def executor_task(task: FileScanTask) -> FileScanTask:
    """``task`` without column statistics (planning used them; executors only open the files)."""
    return FileScanTask(_slim(task.file), delete_files={_slim(d) for d in task.delete_files})


def executor_metadata(metadata: TableMetadata, schema: Schema) -> TableMetadata:
    """The metadata executors read with: ``schema`` current, every partition spec, no snapshot history."""
    return metadata.model_copy(
        update={
            "schemas": [schema],
            "current_schema_id": schema.schema_id,
            "snapshots": [],
            "snapshot_log": [],
            "metadata_log": [],
            "refs": {},
            "current_snapshot_id": None,
            "statistics": [],
            "partition_statistics": [],
        }
    )
