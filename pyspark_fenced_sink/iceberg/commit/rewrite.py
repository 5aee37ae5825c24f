"""The snapshot producer of a compaction entry (PROTOCOL.md §5.2, step 5; driver).

A ``compact`` entry replaces its input files by its own files, rows unchanged.
Applied on the version being committed on (apply time), it is refused
(``EntryRefused`` -> REFUSED) unless

* every input file is still live on the branch (``protocol.replace.removals``):
  an input removed by an overwrite or replaced by another compaction since the
  compaction read it would otherwise come back, or twice;
* no live delete file can apply to an input: the rewritten rows were read
  without it, so adding them would bring deleted rows back (Iceberg's
  ``RewriteFiles`` validates the same). Planning skips files with deletes; this
  catches deletes another engine added meanwhile.

The snapshot's operation is ``replace`` (Iceberg: files rewritten, data
unchanged), so stream readers skip it (``iceberg.planning.incremental``); a replace
commit takes no appends (``WriteMode.takes_appends``, false for every mode that
replaces rows), since appended rows in a ``replace`` snapshot would be invisible to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles

from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit, live_data_files
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, removals

__all__ = ["compaction_producer"]

#: The reserved field id of a positional delete file's ``file_path`` column (Iceberg spec).
_FILE_PATH_ID = 2147483546


class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite producer, recording the snapshot as a ``replace``.

    pyiceberg 0.12 computes summaries only for append/overwrite/delete: the totals are
    computed as for an overwrite (the same file bookkeeping), then the operation is set.
    """

    def _summary(self, snapshot_properties: Any = None) -> Summary:
        self._operation = Operation.OVERWRITE
        try:
            summary = super()._summary(snapshot_properties or {})
        finally:
            self._operation = Operation.REPLACE
        return Summary(Operation.REPLACE, **summary.additional_properties)


def _partition_key(data_file: DataFile) -> tuple[int, tuple[Any, ...]]:
    record = data_file.partition
    return data_file.spec_id, tuple(record[i] for i in range(len(record)))


def _named_file(delete_file: DataFile) -> str | None:
    """The one data file a positional delete file applies to, if its ``file_path`` bounds name one (as Java writes)."""
    if delete_file.content != DataFileContent.POSITION_DELETES:
        return None
    lower = (delete_file.lower_bounds or {}).get(_FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(_FILE_PATH_ID)
    return lower.decode() if lower is not None and lower == upper else None


def _deletes_hit(table: Table, snapshot: Snapshot | None, inputs: Sequence[DataFile]) -> str | None:
    """An input a live delete file of ``snapshot`` may apply to, or None.

    A positional delete file naming one data file applies to that file only; any other delete file
    applies to every file of its partition (an unpartitioned one: every file of its spec).
    """
    if snapshot is None:
        return None
    by_path = {f.file_path: f for f in inputs}
    partitions = {_partition_key(f) for f in inputs}
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            named = _named_file(entry.data_file)
            if named is not None:
                if named in by_path:
                    return named
            elif _partition_key(entry.data_file) in partitions:
                return next(f.file_path for f in inputs if _partition_key(f) == _partition_key(entry.data_file))
    return None


def compaction_producer(staged: StagedCommit, head: WalEntry | None) -> Any:
    """A ``replace`` snapshot removing the entry's inputs (the added files are appended by the caller).

    Raises:
        EntryRefused: an input is no longer live, or a live delete file may apply to one.
    """
    branch_head = staged.head
    if head is None:
        raise EntryRefused("a compaction commit has no compaction entry")
    live = {f.file_path: f for f in live_data_files(staged.table, branch_head)} if branch_head is not None else {}
    doomed = removals(head, [LiveFile(path, f.spec_id, ()) for path, f in live.items()])
    inputs = [live[f.path] for f in doomed]
    hit = _deletes_hit(staged.table, branch_head, inputs)
    if hit is not None:
        raise EntryRefused(
            f"compaction is refused: a live delete file may apply to its input {hit} (added after the "
            "compaction read it); its rewrite would bring deleted rows back. Nothing was changed; run it again"
        )
    producer = _ReplaceFiles(
        operation=Operation.REPLACE,
        transaction=staged.tx,
        io=staged.table.io,
        branch=staged.branch,
        snapshot_properties=staged.summary,
    )
    for data_file in inputs:
        producer.delete_data_file(data_file)
    return producer
