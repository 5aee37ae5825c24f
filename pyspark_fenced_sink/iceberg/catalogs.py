"""Catalogs and tables on the driver: load, create, check (PROTOCOL.md step 0; driver).

* :func:`load_catalog` — the embedded default (pyiceberg ``SqlCatalog`` on
  SQLite at ``<warehouse>/catalog.db`` with a local warehouse) or a catalog
  configured the pyiceberg way: ``catalog`` names one from ``.pyiceberg.yaml``
  / ``PYICEBERG_CATALOG__*``, ``catalog.<key>`` options pass properties
  through. Catalogs are cached per process (Spark reuses the driver's Python
  workers between commits).
* :func:`resolve_table` — load the table or create it (namespace included)
  from the DataFrame schema, check the DataFrame against it, and add columns
  when ``merge-schema`` is on; all before any task runs, so a bad write leaves
  nothing behind.
* :func:`open_table` — one catalog read of an existing table and the protocol
  context to commit to it (the sink, the CLI, tests and benchmarks all use it).
"""

from __future__ import annotations

import fcntl
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.table_port import IcebergTablePort
from pyspark_fenced_sink.options import CatalogConfig, SinkOptions, redact
from pyspark_fenced_sink.protocol.commit import CommitContext
from pyspark_fenced_sink.protocol.layout import control_root
from pyspark_fenced_sink.protocol.view import TableIdentity, TableView, bind
from pyspark_fenced_sink.protocol.wal import Wal
from pyspark_fenced_sink.store.registry import open_store

__all__ = [
    "OpenedTable",
    "embedded_catalog",
    "embedded_catalog_exists",
    "io_properties",
    "load_catalog",
    "open_table",
    "resolve_table",
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
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(warehouse)
    root.mkdir(parents=True, exist_ok=True)
    db = root / _EMBEDDED_DB
    # SQLite waits up to 60 s for a lock (many processes commit to one file); WAL journal mode lets
    # readers proceed while a writer commits. Creating the catalog tables is serialized with a lock
    # file so concurrent first writers do not race on CREATE TABLE.
    with open(root / ".catalog.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            catalog = SqlCatalog("fencedlake", uri=f"sqlite:///{db}?timeout=60", warehouse=root.as_uri())
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
        from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

        try:
            catalog = pyiceberg_load_catalog(config.name or "fencedlake", **config.properties)
        except Exception as e:  # noqa: BLE001 - pyiceberg raises ValueError, NotInstalledError, connection errors...
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


def resolve_table(catalog: Any, opts: SinkOptions, spark_schema: Any) -> Any:
    """Load or create the table, check the DataFrame schema against it, merge columns if asked."""
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError, ValidationError

    from pyspark_fenced_sink.iceberg.partitioning import parse_partition_by, same_partitioning, spec_to_text
    from pyspark_fenced_sink.iceberg.schema import apply_additions, check_write_schema, iceberg_schema_from_spark
    from pyspark_fenced_sink.iceberg.write_properties import validate_write_properties

    try:
        table = catalog.load_table(opts.table)
    except NoSuchTableError:
        if not opts.create_table:
            raise InvalidOptionsError(
                f"table {opts.table} does not exist and create-table=false: create it first or drop the option"
            ) from None
        schema = iceberg_schema_from_spark(spark_schema)
        if opts.upsert and opts.upsert_keys:  # an upsert creates its keys as the table's identifier fields
            from pyspark_fenced_sink.iceberg.upsert_plan import with_identifier_fields

            schema = with_identifier_fields(schema, opts.upsert_keys, opts.table)
        spec = parse_partition_by(opts.partition_by, schema)
        validate_write_properties(opts.table_properties)  # executors would fail after the table exists
        _ensure_namespace(catalog, tuple(opts.table.split(".")[:-1]))
        try:
            table = catalog.create_table(
                opts.table, schema, partition_spec=spec, properties=dict(opts.table_properties)
            )
            logger.info("fencedlake: created table %s partitioned by [%s]", opts.table, opts.partition_by)
        except TableAlreadyExistsError:
            table = catalog.load_table(opts.table)
        except (ValueError, ValidationError) as e:  # e.g. table.format-version=9 or =abc
            raise InvalidOptionsError(
                f"cannot create table {opts.table} with table properties {redact(opts.table_properties)}: "
                f"{type(e).__name__}: {e}; fix the table.<property> options"
            ) from e
    else:
        validate_write_properties(table.properties)  # fail on the driver, not in every task
        if opts.partition_by.strip():
            requested = parse_partition_by(opts.partition_by, table.schema())
            if not same_partitioning(requested, table.spec()):
                wanted = spec_to_text(requested, table.schema())
                actual = spec_to_text(table.spec(), table.schema())
                raise InvalidOptionsError(
                    f"table {opts.table} exists partitioned by [{actual}] but partition-by asks for [{wanted}]: "
                    "drop the option or evolve the table's partition spec"
                )
    for _ in range(10):
        plan = check_write_schema(
            spark_schema, table.schema(), merge_schema=opts.merge_schema, nulls_checked_per_row=opts.upsert
        )
        if not plan.additions:
            return table
        try:
            with table.update_schema() as update:
                apply_additions(update, plan)
            logger.info("fencedlake: merged %d new column(s) into %s", len(plan.additions), opts.table)
        except CommitFailedException:
            pass  # a concurrent schema change: reload and check again
        table = catalog.load_table(opts.table)
    raise InvalidOptionsError(f"table {opts.table}: schema merge kept conflicting with concurrent changes; retry")


def io_properties(table: Any) -> dict[str, str]:
    """The table's FileIO properties (storage credentials: never log them unmasked)."""
    return dict(getattr(table.io, "properties", {}) or {})


@dataclass(frozen=True)
class OpenedTable:
    """A table read once, and the protocol context to commit to it.

    Attributes:
        ctx: The commit context (its port is :attr:`port`).
        port: The catalog port the context commits through.
        view: The committed version read when the table was opened.
    """

    ctx: CommitContext
    port: IcebergTablePort
    view: TableView

    @property
    def table(self) -> Any:
        """The pyiceberg table at :attr:`view`."""
        return self.port.table(self.view)


def open_table(
    config: CatalogConfig,
    name: str,
    *,
    table: Any = None,
    max_wait_ms: int | None = None,
    max_group: int | None = None,
    check: bool = True,
    root: str | None = None,
) -> OpenedTable:
    """Open table ``name`` of ``config``'s catalog: one catalog read (none if ``table`` is given).

    ``max_wait_ms`` and ``max_group`` override the commit limits' defaults (the
    ``commit.max-wait-ms`` and ``commit.max-group-size`` options). With
    ``check=False`` the table's state is not checked (``repair-state`` opens a
    table whose state is lost or foreign that way); ``root`` then overrides the
    control root (default: the state's own, else the one derived from the
    current location and UUID).

    Raises:
        InvalidOptionsError: the catalog cannot be loaded or the table does not exist.
    """
    port = IcebergTablePort(load_catalog(config), name)
    raw = port.remember(table) if table is not None else port.load()
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
        wal=Wal(open_store(root, io_properties(loaded))),
        identity=TableIdentity(uuid, root),
        file_exists=lambda path: bool(io.new_input(path).exists()),
    )
    if max_wait_ms is not None:
        ctx.max_wait_s = max_wait_ms / 1000.0
    if max_group is not None:
        ctx.max_group = max_group
    return OpenedTable(ctx, port, ctx.check(raw) if check else raw)
