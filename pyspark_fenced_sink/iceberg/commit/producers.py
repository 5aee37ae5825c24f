"""What a catalog commit does to its branch, per write mode of its lead entry (PROTOCOL.md §5.1, step 5; driver).

``PRODUCERS`` maps each ``protocol.entry.WriteMode`` to the function that stages
the commit's snapshot on a :class:`~.branches.StagedCommit`: an append (manifests
merged, ``manifests``), a replace of what ``protocol.replace.removals`` selects among
the branch's files live on the commit's base (overwrite, dynamic overwrite,
replace-where), a publish (fast-forward), a compaction (``rewrite``), upserts in
WAL order (``upsert_apply``, PROTOCOL.md §5.5). A producer
that must not apply on this base raises ``protocol.replace.EntryRefused``; the
planning-time checks (:func:`check_replace_where`, :func:`check_publish`) take the
same decisions before a write starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType

from pyspark_fenced_sink.errors import CorruptControlDataError, WriteRejectedError
from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit, snapshot_history
from pyspark_fenced_sink.iceberg.commit.entry_files import doomed_files
from pyspark_fenced_sink.iceberg.commit.manifests import append_producer
from pyspark_fenced_sink.iceberg.commit.rewrite import compaction_producer
from pyspark_fenced_sink.iceberg.commit.upsert_apply import upsert_producer
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.replace import EntryRefused, check_fast_forward
from pyspark_fenced_sink.protocol.state import SUMMARY_PUBLISHED

__all__ = ["PRODUCERS", "check_publish", "check_replace_where"]


def _append(staged: StagedCommit, lead: WalEntry | None) -> Any:
    """An append on the branch: a new manifest, small ones merged if the table says so (``manifests``)."""
    return append_producer(staged.update(), staged.tx.table_metadata.properties)


def check_replace_where(table: Table, branch: str | None, row_filter: str, name: str) -> None:
    """Refuse a replace-where now (planning) if a file live on its branch straddles the filter.

    The same decision is taken again at apply time; this one fails the write before any task runs.

    Raises:
        WriteRejectedError: a live file has rows on both sides of the filter.
    """
    metadata = table.metadata
    snapshot = metadata.snapshot_by_name(branch or MAIN_BRANCH) or metadata.current_snapshot()
    if snapshot is None:
        return
    probe = WalEntry(kind=EntryKind.DATA, token="", writer="", mode=WriteMode.REPLACE_WHERE, row_filter=row_filter)
    try:
        doomed_files(table, metadata, snapshot, replace(probe, branch=branch))
    except EntryRefused as e:
        raise WriteRejectedError(f"table {name}: {e.reason}", table=name, outcome="REFUSED") from e


def _fast_forward_target(metadata: TableMetadata, io: FileIO, branch: str) -> int:
    """The tip of ``branch`` if main may be fast-forwarded to it (``protocol.replace.check_fast_forward``)."""
    ref = metadata.refs.get(branch)
    found = ref.snapshot_id if ref is not None and ref.snapshot_ref_type == SnapshotRefType.BRANCH else None
    return check_fast_forward(branch, metadata.current_snapshot_id, found, snapshot_history(metadata, io))


def check_publish(table: Table, branch: str, name: str) -> int:
    """The snapshot a publish of ``branch`` would move main to now; refused as the commit would refuse it.

    Raises:
        WriteRejectedError: the branch is missing, or main changed data since it forked.
    """
    try:
        return _fast_forward_target(table.metadata, table.io, branch)
    except EntryRefused as e:
        raise WriteRejectedError(f"table {name}: {e.reason}", table=name, outcome="REFUSED") from e


def _replace(staged: StagedCommit, lead: WalEntry | None) -> Any:
    """An overwrite snapshot removing what ``protocol.replace.removals`` selects among the branch's live files.

    The live files are read here, on the commit's base: a replace applies to what is live at apply
    time, whatever was live when its rows were written.
    """
    tip = staged.tip
    if tip is None or lead is None:
        return staged.update().fast_append()
    doomed = doomed_files(staged.table, staged.tx.table_metadata, tip, lead)
    producer = staged.update().overwrite()
    for data_file in doomed:
        producer.delete_data_file(data_file)
    return producer


def _publish(staged: StagedCommit, lead: WalEntry | None) -> Any:
    """Fast-forward main to the entry's branch, then an empty snapshot on main carrying the commit record."""
    source = lead.branch if lead is not None else None
    if source is None:
        raise CorruptControlDataError("a publish entry names no branch: the WAL object is damaged")
    metadata = staged.tx.table_metadata
    tip = _fast_forward_target(metadata, staged.table.io, source)
    staged.refs.add(source)
    if tip != metadata.current_snapshot_id:
        staged.move_ref(MAIN_BRANCH, tip)
    staged.summary[SUMMARY_PUBLISHED] = f"{source}@{tip}"
    return staged.update().fast_append()


#: Write mode -> the snapshot producer of a commit whose first applied entry has that mode.
PRODUCERS: dict[WriteMode, Callable[[StagedCommit, WalEntry | None], Any]] = {
    WriteMode.APPEND: _append,
    WriteMode.OVERWRITE: _replace,
    WriteMode.DYNAMIC: _replace,
    WriteMode.REPLACE_WHERE: _replace,
    WriteMode.PUBLISH: _publish,
    WriteMode.COMPACT: compaction_producer,
    WriteMode.UPSERT: upsert_producer,
}
