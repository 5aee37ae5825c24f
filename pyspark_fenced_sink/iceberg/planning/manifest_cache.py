"""Read planning that decodes each manifest once per process (driver; PROTOCOL.md §14).

Every batch read plans its files with pyiceberg, which opens and decodes every
manifest of the snapshot that its partition summaries do not rule out, on every
plan: a table fed by many small appends has one manifest per append (until the
commits merge them, §5.3), and decoding them is most of a warm plan (measured:
32 manifests, 57 ms of the 63 ms ``partitions()`` takes). Spark runs planning
in Python workers it reuses, so the same manifests come back query after query.

A manifest file is immutable (Iceberg writes a new one for any change), so its
decoded entries can be kept by path: :func:`planning_scan` returns a pyiceberg
``DataScan`` whose planner takes the entries of a manifest from this process's
cache, decoding each manifest at most once, then applies the scan's partition
and metrics filters to them as pyiceberg does. The cache is bounded by entries
(least recently used manifests go first); nothing in it can be stale.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.table import DataScan, ManifestGroupPlanner
from pyiceberg.utils.concurrent import ExecutorFactory

__all__ = ["MAX_CACHED_ENTRIES", "manifest_entries", "planning_scan"]

#: At most this many manifest entries are kept decoded (about 1-2 KB each with their column statistics).
MAX_CACHED_ENTRIES = 200_000

_lock = threading.Lock()
_entries: OrderedDict[str, tuple[ManifestEntry, ...]] = OrderedDict()
_held = 0


def manifest_entries(manifest: ManifestFile, io: FileIO) -> tuple[ManifestEntry, ...]:
    """The live (not deleted) entries of ``manifest``, decoded once per process and then served from memory."""
    global _held
    path = manifest.manifest_path
    with _lock:
        found = _entries.get(path)
        if found is not None:
            _entries.move_to_end(path)
            return found
    decoded = tuple(manifest.fetch_manifest_entry(io, discard_deleted=True))
    with _lock:
        if path not in _entries:
            _entries[path] = decoded
            _held += len(decoded)
        while _held > MAX_CACHED_ENTRIES and len(_entries) > 1:
            _, evicted = _entries.popitem(last=False)
            _held -= len(evicted)
    return decoded


class _CachedManifestPlanner(ManifestGroupPlanner):
    """pyiceberg's manifest planner with the entries of each manifest taken from :func:`manifest_entries`."""

    def plan_manifest_entries(self, manifests: Iterable[ManifestFile]) -> Iterator[list[ManifestEntry]]:
        by_spec: dict[int, Any] = {}
        candidates = []
        for manifest in manifests:  # manifests whose partition summaries may hold a match
            spec_id = manifest.partition_spec_id
            if spec_id not in by_spec:
                by_spec[spec_id] = (self._build_manifest_evaluator(spec_id), self._build_partition_evaluator(spec_id))
            if by_spec[spec_id][0](manifest):
                candidates.append(manifest)
        metrics = self._build_metrics_evaluator()
        data = [m.min_sequence_number or 0 for m in candidates if m.content == ManifestContent.DATA]
        lowest = min(data, default=0)  # as pyiceberg: delete manifests older than every data manifest are skipped
        wanted = [m for m in candidates if self._check_sequence_number(lowest, m)]

        def matching(manifest: ManifestFile) -> list[ManifestEntry]:
            in_partition = by_spec[manifest.partition_spec_id][1]
            entries = manifest_entries(manifest, self.io)
            return [e for e in entries if in_partition(e.data_file) and metrics(e.data_file)]

        return ExecutorFactory.get_or_create().map(matching, wanted)


class _CachedScan(DataScan):
    @cached_property
    def _manifest_planner(self) -> ManifestGroupPlanner:
        return _CachedManifestPlanner(
            table_metadata=self.table_metadata,
            io=self.io,
            row_filter=self.row_filter,
            case_sensitive=self.case_sensitive,
            options=self.options,
        )


def planning_scan(metadata: Any, io: FileIO, **kwargs: Any) -> DataScan:
    """A pyiceberg ``DataScan`` of ``metadata`` (``row_filter``, ``snapshot_id``, ...) planning through the cache."""
    return _CachedScan(metadata, io, **kwargs)
