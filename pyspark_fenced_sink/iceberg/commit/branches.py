"""One catalog commit's transaction on its target branch (PROTOCOL.md §5.1, step 5; driver).

:class:`StagedCommit` creates a missing branch from main's tip in the same
commit, moves the serial tag on commits to other branches, and asserts main's
tip, the serial tag and every ref the commit read, so any two fencedlake
commits from one base conflict whatever branches they write (I2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, TableRequirement
from pyiceberg.table.update.snapshot import ManageSnapshots, UpdateSnapshot

from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused, changed_data
from pyspark_fenced_sink.protocol.state import SERIAL_REF, CommittedState

__all__ = ["StagedCommit", "changes_data", "live_data_files", "snapshot_history"]


def live_data_files(table: Table, snapshot: Snapshot | None) -> Iterator[DataFile]:
    """Every live data file of ``snapshot`` (none for None)."""
    if snapshot is None:
        return
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                yield entry.data_file


def changes_data(snapshot: Snapshot, io: FileIO) -> bool:
    """True if the snapshot added or removed files (``protocol.replace.changed_data``).

    Summary counters when they say so, else the manifests the snapshot added: a summary of only
    ``operation`` is never read as "no change".
    """
    counters = snapshot.summary.additional_properties if snapshot.summary is not None else None

    def own_manifests() -> list[tuple[int | None, int | None]]:
        return [
            (m.added_files_count, m.deleted_files_count)
            for m in snapshot.manifests(io)
            if m.added_snapshot_id in (snapshot.snapshot_id, None)
        ]

    return changed_data(counters, own_manifests)


class _History(Mapping[int, tuple[int | None, bool]]):
    """Snapshot id -> (parent id, changed data), computed on first use (a manifest list read at most)."""

    def __init__(self, metadata: TableMetadata, io: FileIO) -> None:
        self._snapshots = {s.snapshot_id: s for s in metadata.snapshots}
        self._io = io
        self._known: dict[int, tuple[int | None, bool]] = {}

    def __getitem__(self, snapshot_id: int) -> tuple[int | None, bool]:
        known = self._known.get(snapshot_id)
        if known is None:
            snapshot = self._snapshots[snapshot_id]
            known = self._known[snapshot_id] = (snapshot.parent_snapshot_id, changes_data(snapshot, self._io))
        return known

    def __iter__(self) -> Iterator[int]:
        return iter(self._snapshots)

    def __len__(self) -> int:
        return len(self._snapshots)


def snapshot_history(metadata: TableMetadata, io: FileIO) -> Mapping[int, tuple[int | None, bool]]:
    """Snapshot id -> (parent id, changed data) for every snapshot the table still has (computed lazily)."""
    return _History(metadata, io)


def ref_requirements(metadata: TableMetadata, refs: set[str]) -> list[TableRequirement]:
    """Assertions that main, the serial tag and ``refs`` are as in ``metadata`` (the commit's base)."""
    out: list[TableRequirement] = [AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=metadata.current_snapshot_id)]  # type: ignore[call-arg]
    if metadata.snapshots:  # with no snapshot, pyiceberg rejects any ref but main; main's then covers all
        for ref in sorted((refs | {SERIAL_REF}) - {MAIN_BRANCH}):
            current = metadata.refs.get(ref)
            out.append(AssertRefSnapshotId(ref=ref, snapshot_id=None if current is None else current.snapshot_id))  # type: ignore[call-arg]
    return out


class StagedCommit:
    """A transaction that writes one branch, and the refs its requirements assert.

    Raises ``EntryRefused`` if the branch's name is a tag of the table.

    Attributes:
        tx: The transaction (its updates are what the commit sends).
        table: The table at the commit's base.
        branch: The branch the commit writes.
        summary: Snapshot summary properties of the commit's snapshot.
        refs: Refs (besides main and the serial tag) whose base value the commit asserts.
        plan: The plan being committed, and ``entries`` its WAL entries by position.
        state: The committed state the commit sets (the plan's; an upsert commit may merge its tombstones).
        cleanups: What to remove if the attempt does not land (files a producer wrote besides manifests).
    """

    def __init__(
        self,
        tx: Transaction,
        table: Table,
        plan: ReconcilePlan,
        entries: Mapping[int, WalEntry],
        summary: dict[str, str],
    ) -> None:
        self.tx, self.table, self.branch, self.summary = tx, table, plan.branch, summary
        self.plan, self.entries = plan, entries
        self.state: CommittedState = plan.state
        self.cleanups: list[Callable[[], None]] = []
        branch = plan.branch
        self.refs = {branch}
        self._producers: list[Any] = []
        ref = tx.table_metadata.refs.get(branch)
        if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
            raise EntryRefused(f"{branch!r} is a tag of this table, not a branch: a tag cannot be written to")
        if branch != MAIN_BRANCH and ref is None:
            self._create_branch()

    def _create_branch(self) -> None:
        main = self.tx.table_metadata.snapshot_by_name(MAIN_BRANCH)
        if main is None:  # an empty table: main gets an empty snapshot, the branch forks from it
            producer = self.tx.update_snapshot().fast_append()
            producer.commit()
            self._producers.append(producer)
            main_id = producer.snapshot_id
        else:
            main_id = main.snapshot_id
        ManageSnapshots(self.tx).create_branch(main_id, self.branch).commit()

    @property
    def tip(self) -> Snapshot | None:
        """The branch's tip as staged (after a branch creation: main's tip)."""
        return self.tx.table_metadata.snapshot_by_name(self.branch)

    def update(self) -> UpdateSnapshot:
        """A snapshot update on the branch carrying :attr:`summary`."""
        return self.tx.update_snapshot(snapshot_properties=self.summary, branch=self.branch)

    def move_ref(self, ref: str, snapshot_id: int, kind: str = SnapshotRefType.BRANCH) -> None:
        """Stage ``ref`` -> ``snapshot_id`` (its base value is asserted)."""
        self.refs.add(ref)
        self.tx._stage(*self.tx._set_ref_snapshot(snapshot_id=snapshot_id, ref_name=ref, type=kind))

    def finish(self, producer: Any) -> None:
        """Commit ``producer`` into the transaction; a branch commit moves the serial tag to its snapshot."""
        producer.commit()
        self._producers.append(producer)
        if self.branch != MAIN_BRANCH:
            self.move_ref(SERIAL_REF, producer.snapshot_id, SnapshotRefType.TAG)

    def requirements(self) -> list[TableRequirement]:
        """The transaction's requirements, with the ref assertions built from the base metadata."""
        kept = [r for r in self.tx._requirements if not isinstance(r, AssertRefSnapshotId)]
        return kept + ref_requirements(self.table.metadata, self.refs)

    def cleanup(self) -> None:
        """Remove the manifests, manifest lists and other files this attempt wrote (the commit was rejected)."""
        for producer in self._producers:
            producer._clean_all_uncommitted()
        for remove in self.cleanups:
            remove()
