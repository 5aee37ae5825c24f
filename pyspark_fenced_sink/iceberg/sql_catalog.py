"""pyiceberg's SqlCatalog with fewer round trips per table load and per commit (PROTOCOL.md §4; driver).

pyiceberg's ``SqlCatalog`` runs every table load in a transaction (``BEGIN``,
``SELECT``, ``ROLLBACK``: three round trips to the database after the pool's
ping), reads and parses the table's metadata file on every load, and loads the
table again inside ``commit_table`` before its compare-and-swap ``UPDATE``. At
100 ms to PostgreSQL that was 0.47 s per load and 1.8 s per commit step of a
write (docs/benchmarks.md §2.2). :class:`LeanSqlCatalog` keeps the same tables,
rows and semantics with less of that:

* **PostgreSQL connections are autocommit connections** (set when each is
  made): every statement is its own transaction, so no ``BEGIN`` before it and
  no ``COMMIT``/``ROLLBACK`` after it cross the network. A load reads one row
  with one statement, as consistent as inside a transaction; the commit's
  compare-and-swap is one ``UPDATE``.
* **A pooled connection is pinged only after sitting idle** (:func:`ping_after_idle`,
  installed by ``iceberg.timeouts`` unless the catalog sets ``pool_pre_ping``):
  one ``SELECT 1`` before handing out a connection that was last returned
  :data:`PING_AFTER_IDLE_S` or more ago (a connection that died in an outage is
  not handed out), none for one used moments before -- the commit's ``UPDATE``
  right after its load, a commit loop's next load. SQLAlchemy's
  ``pool_pre_ping`` pings before every statement: a round trip each, 100 ms
  apiece at cloud latency, inside the serialized commit. A connection that died
  within the window fails its next statement as a disconnect: a load then runs
  once more on a fresh connection (:meth:`LeanSqlCatalog.load_table`; a read,
  safe to repeat); a commit's ``UPDATE`` is not repeated (the commit loop
  resolves its outcome, PROTOCOL.md §4). What pyiceberg does in several statements (a namespace's
  properties) is no longer atomic on PostgreSQL; the sink creates namespaces
  with no properties (one row). SQLite (the embedded catalog) is unchanged:
  its transactions cost no network.
* **Loads**: one ``SELECT`` of the metadata location. A metadata file is parsed
  once per process (:func:`_metadata`): a location names one content for ever
  (a commit writes a new file; none is rewritten), so a load whose location is
  unchanged, or that this process's own commit wrote, reads no file. The
  FileIO is made once per table properties, not per load (its connections are
  reused).
* **A protocol commit** (:func:`compare_against`, used by the table port's one
  catalog request) stages the updates on the table the commit was built on and
  compares and swaps against its metadata location, instead of a reload: the
  ``UPDATE ... WHERE metadata_location = <base>`` is the check pyiceberg makes
  against its reload, and the requirements hold against the base by
  construction. A table that moved since is a ``CommitFailedException`` (a
  conflict the commit loop re-plans), never a silent rebase onto the newer
  version. Other commits (schema merges, table creation) keep pyiceberg's path.

On PostgreSQL a load is then one round trip (``SELECT``; a ping first after an
idle spell) and the protocol's commit one (``UPDATE``), down from four and eight.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import FileIO
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, StagedTable, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from sqlalchemy import event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, InvalidatePoolError

from pyspark_fenced_sink.iceberg.timeouts import NO_ANSWER

__all__ = ["PING_AFTER_IDLE_S", "LeanSqlCatalog", "compare_against", "ping_after_idle"]

#: A pooled connection returned this many seconds ago or more is pinged before it is handed out again.
PING_AFTER_IDLE_S = 5.0
_RETURNED_AT = "fencedlake.returned_at"

#: Parsed metadata files kept per process (a file is immutable: its location is the key).
_METADATA_ENTRIES = 32
_metadata_cache: OrderedDict[str, TableMetadata] = OrderedDict()
_metadata_lock = threading.Lock()


def _metadata(location: str, read: Callable[[], TableMetadata]) -> TableMetadata:
    """The parsed metadata file at ``location``: ``read()`` once per process, then the kept copy."""
    with _metadata_lock:
        found = _metadata_cache.get(location)
        if found is not None:
            _metadata_cache.move_to_end(location)
            return found
    metadata = read()
    with _metadata_lock:
        _metadata_cache[location] = metadata
        while len(_metadata_cache) > _METADATA_ENTRIES:
            _metadata_cache.popitem(last=False)
    return metadata


def _autocommit(dbapi_connection: Any, _record: Any) -> None:
    """A new psycopg2 connection: each statement its own transaction (no ``BEGIN``/``COMMIT`` round trips)."""
    dbapi_connection.autocommit = True


def ping_after_idle(engine: Engine, idle_s: float = PING_AFTER_IDLE_S) -> None:
    """Ping a connection of ``engine``'s pool before use only if it was returned ``idle_s`` or more ago.

    A fresh connection is not pinged (it was just made), nor one returned moments ago. A ping
    that fails throws the whole pool away (the connections that died with this one in an
    outage) and hands out a new connection, as ``pool_pre_ping`` does; the engine must not
    also have ``pool_pre_ping`` on (that pings every time).
    """

    def returned(_dbapi_connection: Any, record: Any) -> None:
        record.info[_RETURNED_AT] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_RETURNED_AT)
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as e:
            if isinstance(e, engine.dialect.loaded_dbapi.Error):
                raise InvalidatePoolError(f"ping after {time.monotonic() - since:.1f} s idle failed: {e}") from e
            raise

    event.listen(engine, "checkin", returned)
    event.listen(engine, "checkout", checkout)


class LeanSqlCatalog(SqlCatalog):
    """A ``SqlCatalog`` whose loads and protocol commits take fewer round trips (see the module docstring)."""

    #: Set before ``__init__`` (``iceberg.timeouts``): install :func:`ping_after_idle` on the engine with this window.
    ping_after_idle_s: float | None = None

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._ios: dict[tuple[tuple[str, str], ...], FileIO] = {}
        self._base = threading.local()

    def _init_catalog(self) -> None:
        """pyiceberg's, after making every PostgreSQL connection of the pool an autocommit one (first thing)."""
        if self.engine.dialect.driver == "psycopg2":
            event.listen(self.engine, "connect", _autocommit)
        if self.ping_after_idle_s is not None:
            ping_after_idle(self.engine, self.ping_after_idle_s)
        super()._init_catalog()

    def load_table(self, identifier: str | Identifier) -> Table:
        """The table's current version: one ``SELECT``, the metadata file parsed once per process."""
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        table_name = Catalog.table_name_from(identifier)
        stmt = select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == self.name,
            IcebergTables.table_namespace == namespace,
            IcebergTables.table_name == table_name,
        )
        if (type_filter := self._iceberg_type_filter()) is not None:
            stmt = stmt.where(type_filter)
        location = self._scalar(stmt)
        if not location:
            raise NoSuchTableError(f"Table does not exist: {namespace}.{table_name}")
        io = self._io({}, location)
        metadata = _metadata(location, lambda: FromInputFile.table_metadata(io.new_input(location)))
        return Table(
            identifier=(*Catalog.identifier_to_tuple(namespace), table_name),
            metadata=metadata,
            metadata_location=location,
            io=self._io(metadata.properties, location),
            catalog=self,
        )

    def _scalar(self, stmt: Any) -> Any:
        """One read statement's value; run once more on a fresh connection if the first met a dead one.

        Not after a statement that got no answer in time (``iceberg.timeouts``): that server is not
        answering, and a second wait would double the bound a caller was promised.
        """
        try:
            with self.engine.connect() as connection:  # not an ORM session: a third of the CPU of a read
                return connection.execute(stmt).scalar()
        except DBAPIError as e:
            if not e.connection_invalidated or NO_ANSWER in str(e):
                raise
        with self.engine.connect() as connection:  # the pool was invalidated with it: a new connection
            return connection.execute(stmt).scalar()

    def commit_table(
        self, table: Table, requirements: tuple[Any, ...], updates: tuple[Any, ...]
    ) -> CommitTableResponse:
        """The usual commit; inside :func:`compare_against`, one compare-and-swap against ``table``'s location."""
        if getattr(self._base, "table", None) is not table or not self.engine.dialect.supports_sane_rowcount:
            return super().commit_table(table, requirements, updates)
        staged = self._update_and_stage_table(table, table.name(), requirements, updates)
        if staged.metadata == table.metadata:
            return _response(table.metadata, table.metadata_location)
        self._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(table.name()))
        table_name = Catalog.table_name_from(table.name())
        stmt = (
            update(IcebergTables)
            .where(
                IcebergTables.catalog_name == self.name,
                IcebergTables.table_namespace == namespace,
                IcebergTables.table_name == table_name,
                IcebergTables.metadata_location == table.metadata_location,
            )
            .values(metadata_location=staged.metadata_location, previous_metadata_location=table.metadata_location)
        )
        with self.engine.begin() as connection:  # one statement (on PostgreSQL: its own transaction)
            if connection.execute(stmt).rowcount < 1:
                raise CommitFailedException(f"Table has been updated by another process: {namespace}.{table_name}")
        _metadata(staged.metadata_location, lambda: staged.metadata)  # the next load here reads no file
        return _response(staged.metadata, staged.metadata_location)

    def _io(self, properties: dict[str, str], location: str) -> FileIO:
        """One FileIO per table properties and location scheme (its connections are reused across loads)."""
        key = (*sorted(properties.items()), ("", location.split("://", 1)[0]))
        io = self._ios.get(key)
        if io is None:
            io = self._ios.setdefault(key, self._load_file_io(properties, location))
        return io

    @contextlib.contextmanager
    def based_on(self, table: Table) -> Iterator[None]:
        """Inside the block, a commit of ``table`` is one compare-and-swap against its own metadata location."""
        self._base.table = table
        try:
            yield
        finally:
            self._base.table = None


def _response(metadata: TableMetadata, location: str) -> CommitTableResponse:
    return CommitTableResponse(metadata=metadata, metadata_location=location)  # type: ignore[call-arg]


@contextlib.contextmanager
def compare_against(table: Table) -> Iterator[None]:
    """Commit ``table``'s staged updates against the version it was loaded at (no reload), where the catalog can.

    A no-op for other catalogs (a REST catalog checks the requirements on the server in one request).
    """
    catalog = getattr(table, "catalog", None)
    if isinstance(catalog, LeanSqlCatalog) and not isinstance(table, StagedTable):
        with catalog.based_on(table):
            yield
    else:
        yield
