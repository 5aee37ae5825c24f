"""Catalogs and tables on the driver: load, create, open (PROTOCOL.md step 0, §1.1; driver).

* :func:`load_catalog` — the embedded default (pyiceberg ``SqlCatalog`` on
  SQLite at ``<warehouse>/catalog.db`` with a local warehouse) or a catalog
  configured the pyiceberg way: ``catalog`` names one from ``.pyiceberg.yaml``
  / ``PYICEBERG_CATALOG__*``, ``catalog.<key>`` options pass properties
  through. Catalogs are cached per process (Spark reuses the driver's Python
  workers between commits); REST and PostgreSQL catalogs are built with a bound
  on every request (:mod:`.timeouts`).
* :func:`open_table` — one catalog read of a table (created first, namespace
  included, when :class:`TableCreation` says how and it is missing; its own
  settings checked) and the protocol context to commit to it. The write
  transaction, the CLI, compaction, tests and benchmarks all open tables here.

Catalog and storage failures in both become ``ServiceError`` (endpoint named,
secrets masked, retryable or not: ``iceberg.service_errors``); a table name whose
namespace would shadow an existing table is refused (:func:`check_namespace`).
"""

from __future__ import annotations

import fcntl
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.errors import InvalidOptionsError, TableChangedError
from pyspark_fenced_sink.iceberg.codec.fileio import io_properties, with_lean_file_io
from pyspark_fenced_sink.iceberg.codec.partitioning import parse_partition_by, same_partitioning, spec_to_text
from pyspark_fenced_sink.iceberg.codec.write_properties import check_write_properties
from pyspark_fenced_sink.iceberg.commit import shared_loads
from pyspark_fenced_sink.iceberg.commit.manifests import merge_settings
from pyspark_fenced_sink.iceberg.commit.table_port import IcebergTablePort
from pyspark_fenced_sink.iceberg.service_errors import classify, service_errors
from pyspark_fenced_sink.iceberg.timeouts import load_bounded
from pyspark_fenced_sink.masking import redact
from pyspark_fenced_sink.options.catalog import CatalogConfig
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.layout import control_root
from pyspark_fenced_sink.protocol.view import TableIdentity, TableView, bind
from pyspark_fenced_sink.protocol.wal import Wal
from pyspark_fenced_sink.store.registry import open_store

__all__ = [
    "OpenedTable",
    "TableCreation",
    "embedded_catalog",
    "embedded_catalog_exists",
    "load_catalog",
    "open_table",
    "validate_table_properties",
]

logger = logging.getLogger(__name__)

_EMBEDDED_DB = "catalog.db"
_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


def embedded_catalog_exists(warehouse: str) -> bool:
    """True if ``warehouse`` holds an embedded catalog (:func:`embedded_catalog` creates one otherwise)."""
    return (Path(warehouse) / _EMBEDDED_DB).is_file()


def embedded_catalog(warehouse: str) -> Any:
    """The embedded default catalog for ``warehouse`` (created on first use, safely across processes)."""
    from pyspark_fenced_sink.iceberg.sql_catalog import LeanSqlCatalog

    root = Path(warehouse)
    root.mkdir(parents=True, exist_ok=True)
    db = root / _EMBEDDED_DB
    # SQLite waits up to 60 s for a lock (many processes commit to one file); WAL journal mode lets
    # readers proceed while a writer commits. Creating the catalog tables is serialized with a lock
    # file so concurrent first writers do not race on CREATE TABLE.
    with open(root / ".catalog.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            catalog = LeanSqlCatalog(
                "fencedlake",
                **with_lean_file_io({"uri": f"sqlite:///{db}?timeout=60", "warehouse": root.as_uri()}),
            )
            with catalog.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return catalog


def load_catalog(config: CatalogConfig) -> Any:
    """The catalog ``config`` selects (cached per process)."""
    key = (config.name, tuple(sorted(config.properties.items())), config.warehouse if config.embedded else "")
    with _cache_lock:
        catalog = _cache.get(key)
    if catalog is not None:
        return catalog
    if config.embedded:
        catalog = embedded_catalog(config.warehouse)
    else:
        try:
            catalog = load_bounded(config.name or "fencedlake", config.properties)
        except Exception as e:  # noqa: BLE001 - pyiceberg raises ValueError, NotInstalledError, connection errors...
            typed = classify(e, config, None)
            if typed is not None:
                raise typed from None
            raise InvalidOptionsError(
                f"cannot load {config.describe()}: {type(e).__name__}: {_redacted_message(e, config)}"
            ) from None
    with _cache_lock:
        _cache[key] = catalog
    return catalog


def _redacted_message(error: BaseException, config: CatalogConfig) -> str:
    """The error's text with every secret-looking catalog property value masked."""
    text = str(error)
    masked = redact(config.properties)
    for key, value in config.properties.items():
        if value and masked[key] != value:
            text = text.replace(value, masked[key])
    return text


def check_namespace(catalog: Any, name: str) -> None:
    """Refuse to create table ``name`` in a namespace that shadows an existing table.

    ``db.events.x`` beside a table ``db.events`` would otherwise create a namespace ``db.events`` whose
    name reads as the table: almost always a typo (``db.events_x``) or a column taken for a table.

    Raises:
        InvalidOptionsError: a prefix of the namespace (of two parts or more) is a table.
    """
    parts = name.split(".")[:-1]
    for end in range(2, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if catalog.table_exists(prefix):
            rest = "_".join(name.split(".")[end:])
            raise InvalidOptionsError(
                f"table name {name!r} would create namespace {prefix!r}, but {prefix!r} is a table: a namespace may "
                f"not shadow a table; choose another name (e.g. {prefix}_{rest}); nothing was created"
            )


def _ensure_namespace(catalog: Any, namespace: tuple[str, ...]) -> None:
    from pyiceberg.exceptions import NamespaceAlreadyExistsError
    from sqlalchemy.exc import IntegrityError

    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    except IntegrityError:
        # pyiceberg's SqlCatalog checks, then inserts: when concurrent first writers both pass the check,
        # the loser's insert fails with the database's unique-key error, not NamespaceAlreadyExistsError.
        if not catalog.namespace_exists(namespace):
            raise


def validate_table_properties(properties: Mapping[str, str]) -> None:
    """Raise :class:`InvalidOptionsError` for a table property a write or its commit would reject.

    Executors' Parquet settings (``iceberg.codec.write_properties``) and the commit's manifest
    settings (``iceberg.commit.manifests``): checked on the driver before a table is created or a
    task runs, so a bad value fails the write with nothing created and nothing written.
    """
    check_write_properties(properties)
    merge_settings(properties, strict=True)  # commit.manifest-*: checked here, honoured at commit


@dataclass(frozen=True)
class TableCreation:
    """How :func:`open_table` creates a missing table, and what an existing one must agree with.

    Attributes:
        schema: Builds the new table's schema (called only when the table is missing).
        partition_by: Partition spec text (``"day(ts), bucket(16, id)"``); for an existing table,
            if given, it must match the table's spec.
        properties: Properties of a new table.
    """

    schema: Callable[[], Any]
    partition_by: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)


def _create(catalog: Any, name: str, creation: TableCreation) -> Any:
    """Create table ``name`` (and its namespace); a concurrent creator's table is loaded instead."""
    from pyiceberg.exceptions import TableAlreadyExistsError, ValidationError

    schema = creation.schema()
    spec = parse_partition_by(creation.partition_by, schema)
    validate_table_properties(creation.properties)  # executors would fail after the table exists
    check_namespace(catalog, name)
    _ensure_namespace(catalog, tuple(name.split(".")[:-1]))
    try:
        table = catalog.create_table(name, schema, partition_spec=spec, properties=dict(creation.properties))
    except TableAlreadyExistsError:
        return catalog.load_table(name)
    except (ValueError, ValidationError) as e:  # e.g. table.format-version=9 or =abc
        raise InvalidOptionsError(
            f"cannot create table {name} with table properties {redact(creation.properties)}: "
            f"{type(e).__name__}: {e}; fix the table.<property> options"
        ) from e
    logger.info("fencedlake: created table %s partitioned by [%s]", name, creation.partition_by)
    return table


def _check_existing(table: Any, name: str, creation: TableCreation) -> None:
    """An existing table agrees with what the write asks for (partitioning) and its properties are valid."""
    validate_table_properties(table.properties)  # fail on the driver, not in every task
    if creation.partition_by.strip():
        requested = parse_partition_by(creation.partition_by, table.schema())
        if not same_partitioning(requested, table.spec()):
            wanted = spec_to_text(requested, table.schema())
            actual = spec_to_text(table.spec(), table.schema())
            raise InvalidOptionsError(
                f"table {name} exists partitioned by [{actual}] but partition-by asks for [{wanted}]: "
                "drop the option or evolve the table's partition spec"
            )


def _load_or_create(
    catalog: Any, name: str, creation: TableCreation | None, missing_hint: str, expected_uuid: str | None
) -> Any:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = shared_loads.load_table(catalog, name)
    except NoSuchTableError:
        if expected_uuid is not None:
            raise TableChangedError(
                f"table {name} was dropped while the write ran (it was planned for table {expected_uuid}); "
                "nothing was committed, re-run the write",
                table=name,
            ) from None
        if creation is None:
            raise InvalidOptionsError(f"table {name} does not exist{missing_hint}") from None
        return _create(catalog, name, creation)
    uuid = str(table.metadata.table_uuid)
    if expected_uuid is not None and uuid != expected_uuid:
        raise TableChangedError(
            f"table {name} is now table {uuid}, not {expected_uuid} that this write was planned for: it was "
            "dropped and re-created, or renamed and replaced, while the write ran; nothing was committed, "
            "re-run the write",
            table=name,
        )
    if creation is not None:
        _check_existing(table, name, creation)
    return table


@dataclass(frozen=True)
class OpenedTable:
    """A table read once, and the protocol context to commit to it.

    Attributes:
        ctx: The commit context (its port is :attr:`port`).
        port: The catalog port the context commits through.
        view: The committed version read when the table was opened.
        config: The catalog it was opened from.
    """

    ctx: CommitContext
    port: IcebergTablePort
    view: TableView
    config: CatalogConfig = field(default_factory=CatalogConfig)

    @property
    def table(self) -> Any:
        """The pyiceberg table at :attr:`view`."""
        return self.port.table(self.view)


def open_table(
    config: CatalogConfig,
    name: str,
    *,
    create: TableCreation | None = None,
    missing_hint: str = "",
    expected_uuid: str | None = None,
    table: Any = None,
    max_wait_ms: int | None = None,
    max_group: int | None = None,
    check: bool = True,
    root: str | None = None,
    keep: bool = True,
) -> OpenedTable:
    """Open table ``name`` of ``config``'s catalog: one catalog read (none if ``table`` is given).

    With ``create``, a missing table is created first (see :class:`TableCreation`) and an existing
    one is checked against it; without, a missing table is an error (``missing_hint`` ends its message).
    With ``expected_uuid`` (a write planned earlier), the name must still hold that table.
    ``max_wait_ms`` and ``max_group`` override the commit limits' defaults (the
    ``commit.max-wait-ms`` and ``commit.max-group-size`` options). With
    ``check=False`` the table's state is not checked (``repair-state`` opens a
    table whose state is lost or foreign that way); ``root`` then overrides the
    control root (default: the state's own, else the one derived from the
    current location and UUID). With ``keep`` (the default) the WAL entries this process decodes
    are kept for its later reads (``protocol.kept.KeptEntries``); the operator's CLI opens with
    ``keep=False``: it looks at what the store holds now.

    Raises:
        InvalidOptionsError: the catalog cannot be loaded, the table does not exist (and is not to be
            created), or it cannot be created as asked.
        TableChangedError: ``expected_uuid`` is given and the name no longer holds that table.
        ServiceError: the catalog or its storage failed (nothing durable yet: a plain retry is safe).
    """
    catalog = load_catalog(config)
    port = IcebergTablePort(catalog, name)
    with service_errors(config, name):
        raw = port.remember(
            table if table is not None else _load_or_create(catalog, name, create, missing_hint, expected_uuid)
        )
    loaded = port.table(raw)
    uuid = str(loaded.metadata.table_uuid)
    if check:
        root = bind(raw, name).state.root  # recorded in the state, or derived for a fresh table
    elif root is None and raw.state_error is None and raw.state.table_uuid == uuid:
        root = raw.state.root
    root = root or control_root(loaded.metadata.location, uuid)
    io = loaded.io
    ctx = CommitContext(
        port=port,
        wal=Wal(open_store(root, io_properties(loaded)), keep=root if keep else None),
        identity=TableIdentity(uuid, root),
        file_exists=lambda path: bool(io.new_input(path).exists()),
    )
    if max_wait_ms is not None:
        ctx.max_wait_s = max_wait_ms / 1000.0
    if max_group is not None:
        ctx.max_group = max_group
    return OpenedTable(ctx, port, ctx.check(raw) if check else raw, config)
