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
* :func:`commit_context` — the protocol context for a table.
"""

from __future__ import annotations

import fcntl
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.commit import CommitContext
from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.options import SinkOptions, redact
from pyspark_fenced_sink.storage import open_store
from pyspark_fenced_sink.wal import Wal

__all__ = ["commit_context", "embedded_catalog", "load_catalog", "resolve_table"]

logger = logging.getLogger("pyspark_fenced_sink")

_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


def embedded_catalog(warehouse: str) -> Any:
    """The embedded default catalog for ``warehouse`` (created on first use, safely across processes)."""
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(warehouse)
    root.mkdir(parents=True, exist_ok=True)
    db = root / "catalog.db"
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


def load_catalog(opts: SinkOptions) -> Any:
    """The catalog the options select (cached per process)."""
    key = (opts.catalog_name, tuple(sorted(opts.catalog_properties.items())), opts.warehouse if opts.embedded else "")
    with _cache_lock:
        catalog = _cache.get(key)
    if catalog is not None:
        return catalog
    if opts.embedded:
        catalog = embedded_catalog(opts.warehouse)
    else:
        from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

        try:
            catalog = pyiceberg_load_catalog(opts.catalog_name or "fencedlake", **opts.catalog_properties)
        except Exception as e:  # noqa: BLE001 - pyiceberg raises ValueError, NotInstalledError, connection errors...
            raise InvalidOptionsError(
                f"cannot load catalog {opts.catalog_name or '(from catalog.* options)'} with properties "
                f"{redact(opts.catalog_properties)}: {type(e).__name__}: {_redacted_message(e, opts)}"
            ) from None
    with _cache_lock:
        _cache[key] = catalog
    return catalog


def _redacted_message(error: BaseException, opts: SinkOptions) -> str:
    """The error's text with every secret-looking catalog property value masked."""
    text = str(error)
    masked = redact(opts.catalog_properties)
    for key, value in opts.catalog_properties.items():
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

    from pyspark_fenced_sink.partitioning import parse_partition_by, same_partitioning, spec_to_text
    from pyspark_fenced_sink.schema import apply_additions, check_write_schema, iceberg_schema_from_spark
    from pyspark_fenced_sink.writeprops import validate_write_properties

    try:
        table = catalog.load_table(opts.table)
    except NoSuchTableError:
        if not opts.create_table:
            raise InvalidOptionsError(
                f"table {opts.table} does not exist and create-table=false: create it first or drop the option"
            ) from None
        schema = iceberg_schema_from_spark(spark_schema)
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
        plan = check_write_schema(spark_schema, table.schema(), merge_schema=opts.merge_schema)
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


def commit_context(catalog: Any, opts: SinkOptions, table: Any = None) -> CommitContext:
    """The protocol context for the options' table."""
    from pyspark_fenced_sink.iceberg_table import IcebergTablePort

    port = IcebergTablePort(catalog, opts.table, table)
    if table is None:
        table = port.table(port.load())
    store = open_store(table.metadata.location, _io_properties(table))
    return CommitContext(
        port=port,
        wal=Wal(store),
        max_wait_s=opts.commit_max_wait_ms / 1000.0,
        max_group=opts.commit_max_group_size,
    )


def _io_properties(table: Any) -> Mapping[str, str]:
    return dict(getattr(table.io, "properties", {}) or {})
