"""File and metadata health of a table for ``fencedlake status`` (PROTOCOL.md §10; read-only).

Small data files per partition, the manifest count, the live delete files
(upserts write position deletes until compaction folds them, PROTOCOL.md §5.5)
and the last compaction, all from metadata: the current snapshot's manifest list and manifests (the
live data files with their sizes and partitions) and the snapshot log. No
data file is opened, so the cost grows with the number of files and
manifests, not with the bytes in the table.

A *small* file is a live data file below the threshold: by default a quarter
of the table's ``write.target-file-size-bytes`` (Iceberg's default 512 MiB,
so 128 MiB), the size below which a file is worth compacting. The last
compaction is the newest snapshot with operation ``replace`` (what
compaction commits; Iceberg's ``rewrite_data_files`` writes the same) on main's
ancestry among the snapshots the table still has: one older than the oldest
retained snapshot cannot be seen, and the output says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestFile
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.utils.concurrent import ExecutorFactory

from pyspark_fenced_sink.iceberg.codec.write_properties import size_property

__all__ = ["SMALL_FILE_FRACTION", "file_health", "last_compaction_text", "small_file_threshold"]

#: A file below this fraction of ``write.target-file-size-bytes`` counts as small.
SMALL_FILE_FRACTION = 0.25
#: The partition label of an unpartitioned table's files.
UNPARTITIONED = "(unpartitioned)"


def small_file_threshold(properties: dict[str, str]) -> int:
    """The default small-file threshold of a table: :data:`SMALL_FILE_FRACTION` of its target file size."""
    tp = TableProperties
    target = size_property(properties, tp.WRITE_TARGET_FILE_SIZE_BYTES, tp.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)
    return max(1, int(target * SMALL_FILE_FRACTION))


def _ancestry(table: Any) -> Iterator[Snapshot]:
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None


def _partition_label(table: Any, spec_id: int, partition: Any, several_specs: bool) -> str:
    spec = table.metadata.specs()[spec_id]
    schema = table.metadata.schema()
    label = UNPARTITIONED if spec.is_unpartitioned() else spec.partition_to_path(partition, schema)
    return f"spec {spec_id}: {label}" if several_specs else label


def _partitions(table: Any, manifests: list[ManifestFile], threshold: int) -> list[dict[str, Any]]:
    """Live data files per partition in ``manifests``: files, bytes, small files, small bytes."""
    counts: dict[tuple[int, Any], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    keys: dict[tuple[int, Any], Any] = {}
    data_manifests = [m for m in manifests if m.content == ManifestContent.DATA]
    # Manifests are read in parallel on pyiceberg's shared pool, as its own scan planning does.
    fetched = ExecutorFactory.get_or_create().map(
        lambda m: m.fetch_manifest_entry(table.io, discard_deleted=True), data_manifests
    )
    for entries in fetched:
        for entry in entries:
            data_file = entry.data_file
            if data_file.content != DataFileContent.DATA:
                continue
            partition = data_file.partition
            key = (data_file.spec_id, tuple(partition[i] for i in range(len(partition))))
            keys.setdefault(key, partition)
            row = counts[key]
            size = data_file.file_size_in_bytes
            row[0], row[1] = row[0] + 1, row[1] + size
            if size < threshold:
                row[2], row[3] = row[2] + 1, row[3] + size
    several = len({spec_id for spec_id, _ in counts}) > 1
    rows: list[dict[str, Any]] = [
        {
            "partition": _partition_label(table, key[0], keys[key], several),
            "files": files,
            "bytes": size,
            "small_files": small,
            "small_bytes": small_size,
        }
        for key, (files, size, small, small_size) in counts.items()
    ]
    rows.sort(key=lambda r: (-r["small_files"], -r["files"], r["partition"]))
    return rows


def _delete_files(table: Any, manifests: list[ManifestFile]) -> dict[str, int]:
    """Live delete files in ``manifests``: how many, their bytes, the rows (positions) they delete."""
    files = size = rows = 0
    for manifest in manifests:
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            files += 1
            size += entry.data_file.file_size_in_bytes
            rows += entry.data_file.record_count
    return {"delete_files": files, "delete_file_bytes": size, "deleted_rows": rows}


def _last_compaction(table: Any, now_ms: int) -> dict[str, Any] | None:
    for snapshot in _ancestry(table):
        if snapshot.summary is not None and snapshot.summary.operation == Operation.REPLACE:
            return {
                "snapshot_id": snapshot.snapshot_id,
                "timestamp_ms": snapshot.timestamp_ms,
                "age_s": round((now_ms - snapshot.timestamp_ms) / 1000, 1),
            }
    return None


def file_health(table: Any, now_ms: int, threshold: int | None = None) -> dict[str, Any]:
    """Small files per partition (most small files first), manifest count and the last compaction of ``table``.

    Args:
        table: a loaded pyiceberg table.
        now_ms: the current time (ages are relative to it).
        threshold: the small-file size in bytes (default :func:`small_file_threshold`).
    """
    threshold = small_file_threshold(table.properties) if threshold is None else threshold
    snapshot = table.current_snapshot()
    manifests = [] if snapshot is None else list(snapshot.manifests(table.io))
    partitions = _partitions(table, manifests, threshold)
    oldest = min((s.timestamp_ms for s in table.metadata.snapshots), default=None)
    return {
        "manifests": len(manifests),
        "delete_manifests": sum(1 for m in manifests if m.content == ManifestContent.DELETES),
        "data_files": sum(p["files"] for p in partitions),
        "small_file_threshold_bytes": threshold,
        "small_files": sum(p["small_files"] for p in partitions),
        "partitions_with_small_files": sum(1 for p in partitions if p["small_files"]),
        **_delete_files(table, manifests),
        "last_compaction": _last_compaction(table, now_ms),
        "history_since_ms": oldest,
        "small_files_by_partition": partitions,
    }


def last_compaction_text(found: dict[str, Any] | None, history_since_ms: int | None) -> str:
    """The last compaction in words: when, how long ago, which snapshot; or "never" and how far back was looked."""
    if found is None:
        if history_since_ms is None:
            return "never (the table has no snapshots)"
        return f"never (no replace snapshot in the history kept, since {_utc(history_since_ms)})"
    return f"{_utc(found['timestamp_ms'])} ({_age(found['age_s'])} ago), snapshot {found['snapshot_id']}"


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
