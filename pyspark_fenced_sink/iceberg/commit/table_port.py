"""The one catalog commit, over pyiceberg (PROTOCOL.md step 5, §4; driver).

:class:`IcebergTablePort` implements ``protocol.context.TablePort`` for any
pyiceberg catalog: one snapshot on the plan's branch (staged by the lead entry's
producer, ``producers``), the commit record in its summary, the new committed
state as a table property, and requirements that make it a compare-and-swap on
the base view. pyiceberg's own retry is bypassed (it would rebase a stale plan:
§12): ``CommitFailedException`` -> ``CommitConflict`` (manifests removed);
transport, database and 5xx errors -> ``CommitUnknown`` (nothing removed); a
storage error while the manifests are written, before the catalog request ->
``CommitConflict`` too (nothing was sent).
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from itertools import pairwise
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
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AssertDefaultSpecId, AssertTableUUID, update_table_metadata

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import CorruptControlDataError, TableChangedError
from pyspark_fenced_sink.iceberg.commit import shared_loads
from pyspark_fenced_sink.iceberg.commit.branches import (
    StagedCommit,
    ref_requirements,
)
from pyspark_fenced_sink.iceberg.commit.entry_files import INAPPLICABLE, decoded_files
from pyspark_fenced_sink.iceberg.commit.producers import PRODUCERS
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitUnknown
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.reconcile import Outcome, ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused
from pyspark_fenced_sink.protocol.state import (
    STATE_PROPERTY,
    CommitRecord,
    CommittedState,
    decode_record,
    encode_record,
)
from pyspark_fenced_sink.protocol.view import TableView

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


#: What writing a commit's manifests and manifest list may raise when the storage fails (a reset, a cut or
#: timed-out response, an outage): the commit was not sent, so nothing landed. The loop treats it as a
#: conflict -- back off, re-read, re-plan -- until ``commit.max-wait-ms``, instead of an unknown outcome.
#: EOFError: a read of the parent's manifest list cut short (pyarrow returns the bytes that came; pyiceberg's
#: Avro decoder runs out of them).
_STAGING_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError)
try:
    from botocore.exceptions import BotoCoreError

    _STAGING_ERRORS += (BotoCoreError,)
except ImportError:  # pragma: no cover - pyiceberg's S3 FileIO brings botocore
    pass


def _cleanup_quietly(cleanup: Callable[[], None]) -> None:
    """Remove what a failed attempt staged, if the storage lets us (gc removes what is left: §8)."""
    try:
        cleanup()
    except Exception:
        logger.info("fencedlake: could not remove a failed commit attempt's manifests (gc will)", exc_info=True)


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


#: Views already made, by table name and metadata location, each with the metadata object it was made from:
#: a view is a function of the metadata alone, and the threads waiting on one table re-read the same version
#: many times (``shared_loads``). The newest few are kept.
_VIEWS: OrderedDict[tuple[tuple[str, ...], str], tuple[TableMetadata, TableView]] = OrderedDict()
_VIEWS_KEPT = 32
_views_lock = threading.Lock()


def view_of(table: Table) -> TableView:
    """The committed view of a loaded table (not yet checked: ``CommitContext.check`` binds it)."""
    key = (table.name(), str(table.metadata_location))
    with _views_lock:
        made = _VIEWS.get(key)
        if made is not None and made[0] is table.metadata:
            _VIEWS.move_to_end(key)
            return made[1]
    view = _view_of(table)
    with _views_lock:
        _VIEWS[key] = (table.metadata, view)
        _VIEWS.move_to_end(key)
        while len(_VIEWS) > _VIEWS_KEPT:
            _VIEWS.popitem(last=False)
    return view


def _view_of(table: Table) -> TableView:
    metadata = table.metadata
    snapshot = table.current_snapshot()
    text = table.properties.get(STATE_PROPERTY)
    state, error = CommittedState(), None
    try:
        state = CommittedState.decode(text, where=".".join(table.name()))
    except CorruptControlDataError as e:
        error = str(e)
    newest = _newest_record(metadata)
    pace, cadence = _pace(metadata)
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
        pace=pace,
        cadence=cadence,
    )


#: The pace of a table is measured over its newest fencedlake commits (at most this many), found among its
#: newest snapshots (at most ``4 *`` this many looked at).
PACE_COMMITS = 8


def _pace(metadata: TableMetadata) -> tuple[float | None, float | None]:
    """(WAL entries reconciled per second, seconds between commits) while the table is being written.

    Over the newest fencedlake commits. The cadence is the **median** interval between them, not
    their mean: a spell in which nobody wrote (a minute between two jobs, the gap between two
    rounds of writes) is one long interval, and a mean would carry it into the burst that ends
    it, where every waiter would sleep, and every helper wait, a cadence of the idle spell's
    length while the commits ahead of it land every 50-100 ms (a convoy: 1-3 s per write; docs/
    benchmarks.md §9.2). A table written rarely has only long intervals, and its median is long.
    The pace is the mean entries per commit over that cadence. Entries, not positions: voided
    holes are not counted (counting them would widen claims, make more holes and widen claims
    further). From the snapshots' timestamps (the committers' clocks): only a hint for how
    writers claim positions and how often waiters look (``protocol.waiting``), never used for a
    decision.
    """
    recent: list[tuple[float, int]] = []
    for snapshot in metadata.snapshots[::-1][: 4 * PACE_COMMITS]:
        try:
            record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        except CorruptControlDataError:
            continue
        if record is not None:
            entries = sum(1 for _, code in record.outcomes if code != Outcome.VOID.value)
            recent.append((snapshot.timestamp_ms / 1000.0, entries))
            if len(recent) >= PACE_COMMITS:
                break
    if len(recent) < 2 or recent[0][0] <= recent[-1][0]:
        return None, None
    intervals = [newer[0] - older[0] for newer, older in pairwise(recent)]
    cadence = statistics.median(intervals)
    if cadence <= 0:  # most commits in the same millisecond: the mean of the span
        cadence = (recent[0][0] - recent[-1][0]) / len(intervals)
    per_commit = sum(n for _, n in recent[:-1]) / len(intervals)
    return per_commit / cadence, cadence


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
            return self.remember(shared_loads.load_table(self.catalog, self.name))
        except NoSuchTableError as e:
            raise TableChangedError(
                f"table {self.name} no longer exists: it was dropped while in use", table=self.name
            ) from e

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
        added = decoded_files(metadata, plan, entries)
        summary = {**dict(plan.properties), **encode_record(record)}
        lead = entries[plan.lead] if plan.lead is not None else None
        staged = None
        try:
            staged = StagedCommit(_LeanTransaction(table), table, plan, entries, summary)
            producer = PRODUCERS[plan.mode](staged, lead)
            for data_file in added:
                producer.append_data_file(data_file)
            staged.finish(producer)
        except EntryRefused as e:
            if staged is not None:
                staged.cleanup()
            raise EntryRefused(e.reason, plan.lead if e.seq is None else e.seq) from e
        except INAPPLICABLE as e:  # the table as another engine left it cannot take the entry: decide, not raise
            if staged is not None:
                staged.cleanup()
            logger.warning("fencedlake: WAL seq %s cannot be applied to %s", plan.lead, self.name, exc_info=True)
            raise EntryRefused(
                f"the entry cannot be applied to the table as it is now ({type(e).__name__}: {e}); nothing was changed",
                plan.lead,
            ) from e
        except _STAGING_ERRORS as e:  # storage failed under the manifests: nothing reached the catalog (§4)
            if staged is not None:
                _cleanup_quietly(staged.cleanup)
            raise CommitConflict(
                f"writing the commit's manifests failed, so nothing was sent to the catalog ({type(e).__name__}: {e})"
            ) from e
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
        """The one catalog request: the staged updates, if ``requirements`` still hold. No retry.

        Against the version ``table`` was loaded at, where the catalog can tell (``iceberg.sql_catalog``).
        """
        from pyspark_fenced_sink.iceberg.sql_catalog import compare_against

        with compare_against(table):
            table._do_commit(updates=tx._updates, requirements=requirements)
