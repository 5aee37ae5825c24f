"""The snapshot producer of a compaction entry (PROTOCOL.md §5.2, step 5; driver).

A ``compact`` entry replaces its input files by its own files, rows unchanged.
Applied on the version being committed on (apply time), it is refused
(``EntryRefused`` -> REFUSED) unless

* every input file is still live on the branch (``protocol.replace.removals``):
  an input removed by an overwrite or replaced by another compaction since the
  compaction read it would otherwise come back, or twice;
* no live delete file applies to an input but those the compaction *folded*
  (``WalEntry.folded``: the file-scoped position deletes it applied while
  rewriting, ``protocol.replace.check_folded``): the rewritten rows were read
  without any other, so adding them would bring deleted rows back (Iceberg's
  ``RewriteFiles`` validates the same) — an upsert that deleted rows of an input
  meanwhile refuses it. The folded delete files are removed with the inputs
  (``iceberg.commit.row_delta.RowDelta``).

The snapshot's operation is ``replace`` (Iceberg: files rewritten, data
unchanged), so stream readers skip it (``iceberg.planning.incremental``); a replace
commit takes no appends (``WriteMode.takes_appends``, false for every mode that
replaces rows), since appended rows in a ``replace`` snapshot would be invisible to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit, live_data_files
from pyspark_fenced_sink.iceberg.commit.row_delta import RowDelta, named_data_file
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, check_folded, removals

__all__ = ["compaction_producer"]


def _partition_key(data_file: DataFile) -> tuple[int, tuple[Any, ...]]:
    record = data_file.partition
    return data_file.spec_id, tuple(record[i] for i in range(len(record)))


def _applying(table: Table, snapshot: Snapshot | None, inputs: Sequence[DataFile]) -> tuple[set[str], str | None]:
    """The live file-scoped delete files that name an input, and an input another delete file may apply to.

    A position delete file naming one data file applies to that file only; any other delete file
    applies to every file of its partition (an unpartitioned one: every file of its spec).
    """
    if snapshot is None:
        return set(), None
    by_path = {f.file_path: f for f in inputs}
    partitions = {_partition_key(f) for f in inputs}
    named_inputs: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            named = named_data_file(entry.data_file)
            if named is not None:
                if named in by_path:
                    named_inputs.add(entry.data_file.file_path)
            elif _partition_key(entry.data_file) in partitions:
                hit = next(f.file_path for f in inputs if _partition_key(f) == _partition_key(entry.data_file))
                return named_inputs, hit
    return named_inputs, None


def compaction_producer(staged: StagedCommit, lead: WalEntry | None) -> Any:
    """A ``replace`` snapshot removing the entry's inputs and the delete files it folds (the caller adds outputs).

    Raises:
        EntryRefused: an input is no longer live, or a live delete file it did not fold may apply to one.
    """
    tip = staged.tip
    if lead is None:
        raise EntryRefused("a compaction commit has no compaction entry")
    live = {f.file_path: f for f in live_data_files(staged.table, tip)} if tip is not None else {}
    doomed = removals(lead, [LiveFile(path, f.spec_id, ()) for path, f in live.items()])
    inputs = [live[f.path] for f in doomed]
    named, hit = _applying(staged.table, tip, inputs)
    if hit is not None:
        raise EntryRefused(
            f"compaction is refused: a live delete file may apply to its input {hit} (added after the "
            "compaction read it); its rewrite would bring deleted rows back. Nothing was changed; run it again"
        )
    check_folded(lead, named)
    producer = RowDelta(
        operation=Operation.REPLACE,
        transaction=staged.tx,
        io=staged.table.io,
        branch=staged.branch,
        snapshot_properties=staged.summary,
        replace=True,
    )
    for data_file in inputs:
        producer.delete_data_file(data_file)
    producer.remove_delete_files(named)
    return producer
