"""Which small data files a compaction rewrites, and into how many groups (PROTOCOL.md §5.2; driver).

:func:`plan_compaction` plans main's live data files with pyiceberg (an optional
row filter prunes by partition and statistics, as a read does) and keeps the
*small* ones — smaller than ``MIN_SIZE_RATIO`` of the target file size
(Iceberg's ``min-file-size-bytes`` default) — written under the table's default
partition spec (a file of an older spec would change partition when rewritten).
A file whose delete files are all *file-scoped* position deletes (they name
it: upserts write them, PROTOCOL.md §5.5) is an input whatever its size: its
rewrite applies them (*folds* them) and the commit removes them; a file with any
other delete file attached is left alone. A snapshot with equality deletes is
refused, as a read refuses it. Per partition, at least ``min_input_files`` small
files (or any file with deletes to fold) make a partition worth compacting; its
files are packed, in path order, into groups of at most ``group_bytes`` input
bytes, each rewritten by one Spark task into files rolled at the target size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import FileScanTask, TableProperties

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.codec.datafiles import encode_partition
from pyspark_fenced_sink.iceberg.codec.row_filter import bind_row_filter, file_matcher
from pyspark_fenced_sink.iceberg.codec.write_properties import size_property
from pyspark_fenced_sink.iceberg.commit.key_index import Reads, delete_positions
from pyspark_fenced_sink.iceberg.commit.row_delta import named_data_file
from pyspark_fenced_sink.iceberg.planning.scan import ReadPoint, executor_task, plan_files
from pyspark_fenced_sink.protocol.replace import Match

__all__ = ["MIN_INPUT_FILES_DEFAULT", "MIN_SIZE_RATIO", "CompactionGroup", "CompactionPlan", "plan_compaction"]

#: A file smaller than this fraction of the target file size is "small" (Iceberg's min-file-size-bytes: 75%).
MIN_SIZE_RATIO = 0.75
#: A partition is compacted only if it has at least this many small files.
MIN_INPUT_FILES_DEFAULT = 5
#: One group (one Spark task) reads at most this many target-file-sizes of input.
GROUP_TARGETS = 8


@dataclass(frozen=True)
class CompactionGroup:
    """Small files of one partition rewritten by one task.

    Attributes:
        partition: The encoded partition values (``()`` for an unpartitioned table).
        tasks: The input files, as executor scan tasks (no statistics; the delete files they fold).
        input_bytes: Their total size.
        input_rows: Their live rows (rows the folded deletes delete are not counted).
        folded: The position delete files the group's rewrite applies (each names one of its inputs).
    """

    partition: tuple[str | None, ...]
    tasks: tuple[FileScanTask, ...]
    input_bytes: int
    input_rows: int
    folded: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """The input files' paths."""
        return tuple(t.file.file_path for t in self.tasks)


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will rewrite.

    Attributes:
        snapshot_id: Main's snapshot the plan was made from (None: an empty table).
        target_file_size: Output files roll at this many bytes.
        groups: The groups to rewrite.
        live_files: Data files planned (matching the filter).
        skipped_with_deletes: Small files left alone because delete files apply to them.
        skipped_other_spec: Small files left alone because they are under another partition spec.
        small_files: Small files that could be rewritten (default spec, no delete files).
        below_min_input_files: Those of them left alone because their partition has fewer than
            ``min_input_files`` small files.
        partitions_below_min_input_files: How many partitions that is.
    """

    snapshot_id: int | None
    target_file_size: int
    groups: tuple[CompactionGroup, ...]
    live_files: int
    skipped_with_deletes: int = 0
    skipped_other_spec: int = 0
    small_files: int = 0
    below_min_input_files: int = 0
    partitions_below_min_input_files: int = 0

    @property
    def input_files(self) -> int:
        """How many files the compaction rewrites."""
        return sum(len(g.tasks) for g in self.groups)

    @property
    def input_bytes(self) -> int:
        """Their total size."""
        return sum(g.input_bytes for g in self.groups)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every input path, sorted (the WAL entry's ``inputs``)."""
        return tuple(sorted(p for g in self.groups for p in g.paths))

    @property
    def folded(self) -> tuple[str, ...]:
        """Every delete file the rewrite folds, sorted (the WAL entry's ``folded``)."""
        return tuple(sorted(p for g in self.groups for p in g.folded))


def target_size(table: Any, requested: int | None) -> int:
    """The target output file size: ``requested``, else the table's ``write.target-file-size-bytes``."""
    if requested is not None:
        if requested <= 0:
            raise InvalidOptionsError(f"target file size must be a positive number of bytes, found {requested}")
        return requested
    tp = TableProperties
    return size_property(
        dict(table.metadata.properties), tp.WRITE_TARGET_FILE_SIZE_BYTES, tp.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
    )


def _pack(tasks: Sequence[FileScanTask], limit: int) -> list[list[FileScanTask]]:
    groups: list[list[FileScanTask]] = [[]]
    used = 0
    for task in sorted(tasks, key=lambda t: t.file.file_path):
        size = task.file.file_size_in_bytes
        if groups[-1] and used + size > limit:
            groups.append([])
            used = 0
        groups[-1].append(task)
        used += size
    return groups


def _live_rows(table: Any, task: FileScanTask, reads: Reads) -> int:
    """A file's rows minus the distinct positions its (file-scoped) delete files delete."""
    dead: set[int] = set()
    for delete_file in task.delete_files:
        found = delete_positions(table.io, delete_file, reads).get(task.file.file_path)
        if found is not None:
            dead.update(int(p) for p in found if p < task.file.record_count)
    return int(task.file.record_count) - len(dead)


def plan_compaction(
    table: Any,
    name: str,
    *,
    where: str | None = None,
    target_file_size: int | None = None,
    min_input_files: int = MIN_INPUT_FILES_DEFAULT,
) -> CompactionPlan:
    """Plan the compaction of ``table``'s main branch (one catalog read already done: ``table`` is loaded).

    Raises:
        InvalidOptionsError: a bad filter, target size or ``min_input_files``.
        ReadRefusedError: the snapshot has equality delete files.
    """
    if min_input_files < 2:
        raise InvalidOptionsError(f"min-input-files must be at least 2, found {min_input_files}")
    metadata = table.metadata
    target = target_size(table, target_file_size)
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return CompactionPlan(None, target, (), 0)
    schema = metadata.schema()
    matcher = None
    if where:
        bind_row_filter(where, schema, "compaction filter where")  # a clear error for a bad filter
        matcher = file_matcher(where, schema, metadata.specs())
    planned = plan_files(table, ReadPoint(snapshot, schema, f"snapshot {snapshot.snapshot_id}"), AlwaysTrue(), name)
    if matcher is not None:  # files that may hold a matching row (by partition and statistics)
        planned = [t for t in planned if matcher(t.file) is not Match.NONE]
    spec = metadata.spec()
    partition_type = spec.partition_type(schema)
    small = int(target * MIN_SIZE_RATIO)
    by_partition: dict[tuple[str | None, ...], list[FileScanTask]] = defaultdict(list)
    with_deletes = other_spec = 0
    for task in planned:
        data_file = task.file
        foldable = bool(task.delete_files) and all(named_data_file(d) == data_file.file_path for d in task.delete_files)
        if data_file.file_size_in_bytes >= small and not foldable:
            continue
        if task.delete_files and not foldable:
            with_deletes += 1
        elif data_file.spec_id != spec.spec_id:
            other_spec += 1
        else:
            by_partition[encode_partition(data_file.partition, partition_type)].append(task)
    groups = []
    reads = Reads()
    for partition in sorted(by_partition, key=lambda p: tuple((v is None, v or "") for v in p)):
        tasks = by_partition[partition]
        if len(tasks) < min_input_files and not any(t.delete_files for t in tasks):
            continue
        for packed in _pack(tasks, target * GROUP_TARGETS):
            if len(packed) < 2 and not packed[0].delete_files:
                continue  # rewriting one file alone makes nothing smaller (unless it folds deletes)
            groups.append(
                CompactionGroup(
                    partition,
                    tuple(executor_task(t) for t in packed),
                    sum(t.file.file_size_in_bytes for t in packed),
                    sum(_live_rows(table, t, reads) for t in packed),
                    tuple(sorted(d.file_path for t in packed for d in t.delete_files)),
                )
            )
    below = [len(tasks) for tasks in by_partition.values() if len(tasks) < min_input_files]
    return CompactionPlan(
        snapshot.snapshot_id,
        target,
        tuple(groups),
        len(planned),
        with_deletes,
        other_spec,
        small_files=sum(len(tasks) for tasks in by_partition.values()),
        below_min_input_files=sum(below),
        partitions_below_min_input_files=len(below),
    )
