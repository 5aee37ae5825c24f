"""The one catalog commit, over pyiceberg (PROTOCOL.md step 5; driver).

:class:`IcebergTablePort` implements ``commit.TablePort`` for any pyiceberg
catalog (SQL on SQLite or PostgreSQL, REST, Glue, ...). ``commit`` is the only
place fencedlake changes a table's snapshots: one snapshot (append, or an
atomic replace of all rows) carrying the files of every applied entry, the
commit record in its summary, and the new committed state as a table property
— all in one catalog commit whose requirements assert the table UUID and the
main branch's current snapshot id (a compare-and-swap on the base view).

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
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AssertDefaultSpecId, AssertRefSnapshotId, AssertTableUUID, update_table_metadata
from pyiceberg.table.update.snapshot import UpdateSnapshot

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import CorruptControlDataError, InvalidOptionsError
from pyspark_fenced_sink.iceberg.datafiles import decode_data_file
from pyspark_fenced_sink.protocol.commit import CommitConflict, CommitUnknown
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.state import (
    STATE_PROPERTY,
    CommitRecord,
    CommittedState,
    decode_record,
    encode_record,
)
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.wal import WalEntry, WriteMode, encoded_spec_id

__all__ = ["IcebergTablePort", "view_of"]

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
    """Commit records of the current snapshot's ancestry, newest first."""
    snapshot = metadata.current_snapshot()
    while snapshot is not None:
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is not None:
            yield record
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None


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
        """Every commit record of the current snapshot's ancestry at ``view``, oldest first."""
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
        requirements = (
            AssertTableUUID(uuid=table.metadata.table_uuid),
            AssertRefSnapshotId(ref="main", snapshot_id=base.snapshot_id),  # type: ignore[call-arg]
        )
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
        tx = _LeanTransaction(table)
        update = tx.update_snapshot(snapshot_properties=encode_record(record))
        producer = _PRODUCERS[plan.mode](update, table)
        for data_file in added:
            producer.append_data_file(data_file)
        producer.commit()
        tx.set_properties({STATE_PROPERTY: plan.state.encode()})
        failpoints.hit("commit.after-manifests-written")
        requirements = (
            *tx._requirements,
            AssertTableUUID(uuid=metadata.table_uuid),
            AssertDefaultSpecId(default_spec_id=metadata.default_spec_id),  # type: ignore[call-arg]  # pydantic: by name
        )
        return self._commit_updates(base, table, tx, requirements, cleanup=producer._clean_all_uncommitted)

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


def _append(update: UpdateSnapshot, table: Table) -> Any:
    """A fast append: new manifests, nothing removed."""
    return update.fast_append()


def _replace_all(update: UpdateSnapshot, table: Table) -> Any:
    """An overwrite snapshot that deletes every live data file (the new files are added to it)."""
    if table.metadata.current_snapshot() is None:
        return update.fast_append()
    producer = update.overwrite()
    for existing in _live_data_files(table):
        producer.delete_data_file(existing)
    return producer


#: Write mode -> the snapshot producer of the commit whose first applied entry has that mode.
_PRODUCERS: dict[WriteMode, Callable[[UpdateSnapshot, Table], Any]] = {
    WriteMode.APPEND: _append,
    WriteMode.OVERWRITE: _replace_all,
}


def _live_data_files(table: Table) -> list[DataFile]:
    """Every live data file of the current snapshot (for a full replace)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
        if entry.data_file.content == DataFileContent.DATA
    ]
