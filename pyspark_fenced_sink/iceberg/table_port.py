"""The one catalog commit, over pyiceberg (PROTOCOL.md step 5; driver).

:class:`IcebergTablePort` implements ``commit.TablePort`` for any pyiceberg
catalog (SQL on SQLite or PostgreSQL, REST, Glue, ...). ``commit`` is the only
place fencedlake changes a table's snapshots: one snapshot on the plan's
branch (an append, or a replace — all rows, the partitions of a dynamic
overwrite, the rows a replace-where filter matches — or a publish that
fast-forwards main) carrying the files of every applied entry, the commit
record and the entries' snapshot properties in its summary, and the new
committed state as a table property — all in one catalog commit whose
requirements assert the table UUID and the refs the commit read (a
compare-and-swap on the base view; ``iceberg.branches``). What a replacing
entry removes is decided at apply time, on this base, by
``protocol.replace``; a refusal raises ``EntryRefused`` before anything is sent.

pyiceberg's own retry is bypassed: ``Transaction.commit_transaction`` would
retry a ``CommitFailedException`` by rebasing the snapshot onto the new head
and dropping the snapshot-id requirement, so a stale plan would land and the
committed upper would go backwards (PROTOCOL.md §12). We call ``Table._do_commit``
once and map the result: ``CommitFailedException`` -> ``CommitConflict``
(nothing landed; the manifests written for the attempt are removed);
transport and database errors and ``CommitStateUnknownException`` ->
``CommitUnknown`` (files are never removed; the caller re-reads).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from pyiceberg.exceptions import (
    AuthorizationExpiredError,
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertDefaultSpecId, AssertTableUUID, update_table_metadata

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import CorruptControlDataError, InvalidOptionsError, WriteRejectedError
from pyspark_fenced_sink.iceberg.branches import StagedCommit, live_data_files, ref_requirements, snapshot_history
from pyspark_fenced_sink.iceberg.datafiles import decode_data_file, encode_partition
from pyspark_fenced_sink.iceberg.manifests import append_producer
from pyspark_fenced_sink.iceberg.rewrite import compaction_producer
from pyspark_fenced_sink.iceberg.row_filter import file_matcher
from pyspark_fenced_sink.iceberg.upsert_apply import upsert_producer
from pyspark_fenced_sink.protocol.commit import CommitConflict, CommitUnknown
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, check_fast_forward, removals
from pyspark_fenced_sink.protocol.state import (
    STATE_PROPERTY,
    SUMMARY_PUBLISHED,
    CommitRecord,
    CommittedState,
    decode_record,
    encode_record,
)
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.wal import MAIN_BRANCH, EntryKind, WalEntry, WriteMode, encoded_spec_id

__all__ = ["IcebergTablePort", "check_publish", "check_replace_where", "view_of"]

logger = logging.getLogger(__name__)

_UNKNOWN_ERRORS: tuple[type[BaseException], ...] = (CommitStateUnknownException, OSError, TimeoutError)
try:
    from sqlalchemy.exc import DBAPIError

    _UNKNOWN_ERRORS += (DBAPIError,)
except ImportError:  # pragma: no cover - sqlalchemy is a dependency
    pass
try:
    from requests.exceptions import RequestException

    _UNKNOWN_ERRORS += (RequestException,)
except ImportError:  # pragma: no cover
    pass
# A REST catalog answers 409 (CommitFailedException: a conflict) or 500/502/504 (CommitStateUnknownException)
# to a commit; pyiceberg maps 503 to ServiceUnavailableError, other 5xx to ServerError, 419 (an expired token)
# and 429 (throttled) to their own errors. The Iceberg REST spec says a commit's 5xx leaves its state unknown,
# and for a 419 or 429 re-reading is as safe: each of these is an unknown outcome, never a plain failure.
_UNKNOWN_ERRORS += (ServerError, ServiceUnavailableError, AuthorizationExpiredError, TooManyRequestsError)


class _LeanTransaction(Transaction):
    """A Transaction whose ``table_metadata`` is computed once per set of staged updates.

    pyiceberg recomputes (and deep-copies) the whole table metadata on every
    access, a dozen times per commit: O(snapshots) each time. Metadata objects
    are immutable, so caching per updates tuple is safe.
    """

    _cached: tuple[Any, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        updates = self._updates
        if self._cached is None or self._cached[0] is not updates:
            metadata = update_table_metadata(self._table.metadata, updates) if updates else self._table.metadata
            self._cached = (updates, metadata)
        return self._cached[1]


def view_of(table: Table) -> TableView:
    """The committed view of a loaded table (not yet checked: ``CommitContext.check`` binds it)."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    text = table.properties.get(STATE_PROPERTY)
    state, error = CommittedState(), None
    try:
        state = CommittedState.decode(text, where=".".join(table.name()))
    except CorruptControlDataError as e:
        error = str(e)
    newest = _newest_record(metadata)
    return TableView(
        state=state,
        version=str(table.metadata_location),
        snapshot_id=snapshot.snapshot_id if snapshot else None,
        spec_id=metadata.default_spec_id,
        table_uuid=str(metadata.table_uuid),
        location=metadata.location,
        fresh=text is None,
        recorded_upper=None if newest is None else newest.last + 1,
        state_error=error,
    )


def _records(metadata: TableMetadata) -> Iterator[CommitRecord]:
    """Commit records of every snapshot the table has, newest commit first.

    All snapshots, not main's ancestry: commits on branches reconcile WAL positions too
    (PROTOCOL.md §5.1). The metadata lists snapshots in commit order, and commits reconcile
    positions in WAL order, so records come in decreasing position order. A record copied by
    another tool (a cherry-pick) is yielded once.
    """
    seen: set[tuple[int, int]] = set()
    for snapshot in reversed(metadata.snapshots):
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is not None and (record.first, record.last) not in seen:
            seen.add((record.first, record.last))
            yield record


def _newest_record(metadata: TableMetadata) -> CommitRecord | None:
    return next(_records(metadata), None)


class IcebergTablePort:
    """``commit.TablePort`` over a pyiceberg catalog and one table identifier."""

    def __init__(self, catalog: Any, identifier: str, table: Table | None = None) -> None:
        self.catalog = catalog
        self.name = identifier
        self._tables: OrderedDict[str, Table] = OrderedDict()
        if table is not None:
            self.remember(table)

    def remember(self, table: Table) -> TableView:
        """The view of an already loaded ``table`` (no catalog read); ``table(view)`` returns it."""
        view = view_of(table)
        self._tables[view.version] = table
        self._tables.move_to_end(view.version)
        while len(self._tables) > 4:
            self._tables.popitem(last=False)
        return view

    def table(self, view: TableView) -> Table:
        """The loaded table object behind ``view``."""
        table = self._tables.get(view.version)
        if table is None:
            raise KeyError(f"view {view.version} was not loaded through this port")
        return table

    def load(self) -> TableView:
        try:
            return self.remember(self.catalog.load_table(self.name))
        except NoSuchTableError as e:
            raise InvalidOptionsError(f"table {self.name} does not exist (it was dropped?)") from e

    def find_record(self, view: TableView, seq: int) -> CommitRecord | None:
        for record in _records(self.table(view).metadata):
            if record.first <= seq <= record.last:
                return record
            if record.last < seq:
                return None
        return None

    def records(self, view: TableView) -> list[CommitRecord]:
        """Every commit record of the table's snapshots at ``view``, oldest first."""
        return list(_records(self.table(view).metadata))[::-1]

    def replace_state(self, base: TableView, state: CommittedState) -> TableView:
        """Set the ``fencedlake.state`` property alone (``fencedlake repair-state``), if the table is at ``base``.

        Raises:
            CommitConflict: the table moved since ``base`` (nothing changed).
            CommitUnknown: the outcome is unknown.
        """
        table = self.table(base)
        tx = Transaction(table)
        tx.set_properties({STATE_PROPERTY: state.encode()})
        requirements = (AssertTableUUID(uuid=table.metadata.table_uuid), *ref_requirements(table.metadata, set()))
        return self._commit_updates(base, table, tx, requirements, cleanup=None)

    def commit(
        self, base: TableView, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord
    ) -> TableView:
        table = self.table(base)
        metadata = table.metadata
        schema = metadata.schema()
        specs = metadata.specs()
        fv = metadata.format_version
        partition_types = {sid: spec.partition_type(schema) for sid, spec in specs.items()}
        added = [
            decode_data_file(f, partition_types[encoded_spec_id(f)], fv) for s in plan.apply for f in entries[s].files
        ]
        summary = {**dict(plan.properties), **encode_record(record)}
        head = entries[plan.head] if plan.head is not None else None
        staged = None
        try:
            staged = StagedCommit(_LeanTransaction(table), table, plan, entries, summary)
            producer = _PRODUCERS[plan.mode](staged, head)
        except EntryRefused as e:
            if staged is not None:
                staged.cleanup()
            raise EntryRefused(e.reason, plan.head if e.seq is None else e.seq) from e
        for data_file in added:
            producer.append_data_file(data_file)
        staged.finish(producer)
        staged.tx.set_properties({STATE_PROPERTY: staged.state.encode()})
        failpoints.hit("commit.after-manifests-written")
        requirements = (
            *staged.requirements(),
            AssertTableUUID(uuid=metadata.table_uuid),
            AssertDefaultSpecId(default_spec_id=metadata.default_spec_id),  # type: ignore[call-arg]  # pydantic: by name
        )
        return self._commit_updates(base, table, staged.tx, requirements, cleanup=staged.cleanup)

    def _commit_updates(
        self,
        base: TableView,
        table: Table,
        tx: Transaction,
        requirements: tuple[Any, ...],
        cleanup: Callable[[], None] | None,
    ) -> TableView:
        try:
            self._submit(table, tx, requirements)
        except CommitFailedException as e:
            if cleanup is not None:
                cleanup()
            raise CommitConflict(str(e)) from e
        except _UNKNOWN_ERRORS as e:
            logger.warning(
                "fencedlake: commit on %s has an unknown outcome (%s); re-reading", self.name, type(e).__name__
            )
            raise CommitUnknown(str(e)) from e
        # _do_commit moved this Table object to the new metadata: it no longer is ``base``.
        self._tables.pop(base.version, None)
        return self.remember(table)

    @staticmethod
    def _submit(table: Table, tx: Transaction, requirements: tuple[Any, ...]) -> None:
        """The one catalog request: the staged updates, if ``requirements`` still hold. No retry."""
        table._do_commit(updates=tx._updates, requirements=requirements)


def _append(staged: StagedCommit, head: WalEntry | None) -> Any:
    """An append on the branch: a new manifest, small ones merged if the table says so (``iceberg.manifests``)."""
    return append_producer(staged.update(), staged.tx.table_metadata.properties)


def _doomed(table: Table, metadata: TableMetadata, snapshot: Snapshot, head: WalEntry) -> list[DataFile]:
    """The live files of ``snapshot`` that applying ``head`` removes (``protocol.replace.removals``).

    Raises:
        EntryRefused: a replace-where finds a live file that straddles its filter.
    """
    live = {f.file_path: f for f in live_data_files(table, snapshot)}
    schema, specs = metadata.schema(), metadata.specs()
    types = {sid: spec.partition_type(schema) for sid, spec in specs.items()} if head.mode is WriteMode.DYNAMIC else {}
    described = [
        LiveFile(path, f.spec_id, encode_partition(f.partition, types[f.spec_id]) if types else ())
        for path, f in live.items()
    ]
    matcher = file_matcher(head.row_filter or "", schema, specs) if head.mode is WriteMode.REPLACE_WHERE else None
    doomed = removals(head, described, (lambda lf: matcher(live[lf.path])) if matcher is not None else None)
    return [live[f.path] for f in doomed]


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
        _doomed(table, metadata, snapshot, replace(probe, branch=branch))
    except EntryRefused as e:
        raise WriteRejectedError(f"table {name}: {e.reason}", table=name, outcome="REFUSED") from e


def _fast_forward_target(metadata: TableMetadata, branch: str) -> int:
    """The head of ``branch`` if main may be fast-forwarded to it (``protocol.replace.check_fast_forward``)."""
    ref = metadata.refs.get(branch)
    found = ref.snapshot_id if ref is not None and ref.snapshot_ref_type == SnapshotRefType.BRANCH else None
    return check_fast_forward(branch, metadata.current_snapshot_id, found, snapshot_history(metadata))


def check_publish(table: Table, branch: str, name: str) -> int:
    """The snapshot a publish of ``branch`` would move main to now; refused as the commit would refuse it.

    Raises:
        WriteRejectedError: the branch is missing, or main changed data since it forked.
    """
    try:
        return _fast_forward_target(table.metadata, branch)
    except EntryRefused as e:
        raise WriteRejectedError(f"table {name}: {e.reason}", table=name, outcome="REFUSED") from e


def _replace(staged: StagedCommit, head: WalEntry | None) -> Any:
    """An overwrite snapshot removing what ``protocol.replace.removals`` selects among the branch's live files.

    The live files are read here, on the commit's base: a replace applies to what is live at apply
    time, whatever was live when its rows were written.
    """
    branch_head = staged.head
    if branch_head is None or head is None:
        return staged.update().fast_append()
    doomed = _doomed(staged.table, staged.tx.table_metadata, branch_head, head)
    producer = staged.update().overwrite()
    for data_file in doomed:
        producer.delete_data_file(data_file)
    return producer


def _publish(staged: StagedCommit, head: WalEntry | None) -> Any:
    """Fast-forward main to the entry's branch, then an empty snapshot on main carrying the commit record."""
    source = head.branch if head is not None else None
    if source is None:
        raise CorruptControlDataError("a publish entry names no branch: the WAL object is damaged")
    metadata = staged.tx.table_metadata
    branch_head = _fast_forward_target(metadata, source)
    staged.refs.add(source)
    if branch_head != metadata.current_snapshot_id:
        staged.move_ref(MAIN_BRANCH, branch_head)
    staged.summary[SUMMARY_PUBLISHED] = f"{source}@{branch_head}"
    return staged.update().fast_append()


#: Write mode -> the snapshot producer of a commit whose first applied entry has that mode.
_PRODUCERS: dict[WriteMode, Callable[[StagedCommit, WalEntry | None], Any]] = {
    WriteMode.APPEND: _append,
    WriteMode.OVERWRITE: _replace,
    WriteMode.DYNAMIC: _replace,
    WriteMode.REPLACE_WHERE: _replace,
    WriteMode.PUBLISH: _publish,
    WriteMode.COMPACT: compaction_producer,
    WriteMode.UPSERT: upsert_producer,
}
