"""Sink options: keys, defaults, validation (driver); the one secret masker.

Every option key is defined once here, with its ``*_DEFAULT`` sibling, next to
its validation. :func:`parse_options` validates everything on the driver
before any task runs and returns a frozen :class:`SinkOptions`; a bad option
raises ``InvalidOptionsError`` naming the key, the value found and what is
expected. Spark lower-cases option keys; values keep their case.
:class:`CatalogConfig` is the typed catalog selection shared by the sink, the
CLI, tests and benchmarks (:func:`catalog_config` builds and validates one).
:func:`redact` masks secrets for logs, reprs and error messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_fenced_sink.errors import InvalidOptionsError

__all__ = [
    "WRITER_ID_PATTERN",
    "CatalogConfig",
    "SinkOptions",
    "catalog_config",
    "mask_secrets",
    "parse_options",
    "redact",
    "validate_table_name",
    "validate_writer_id",
]

TABLE = "table"
PATH = "path"  # what .save("ns.table") passes
CATALOG = "catalog"
CATALOG_PREFIX = "catalog."
WAREHOUSE = "warehouse"
WAREHOUSE_ENV = "FENCEDLAKE_WAREHOUSE"
WAREHOUSE_DEFAULT = "./fencedlake-warehouse"
CREATE_TABLE = "create-table"
CREATE_TABLE_DEFAULT = True
PARTITION_BY = "partition-by"
PARTITION_BY_DEFAULT = ""
TABLE_PROPERTY_PREFIX = "table."
MERGE_SCHEMA = "merge-schema"
MERGE_SCHEMA_DEFAULT = False
WRITER_ID = "writer.id"
WRITER_BATCH_ID = "writer.batch-id"
COMMIT_MAX_WAIT_MS = "commit.max-wait-ms"
COMMIT_MAX_WAIT_MS_DEFAULT = 300_000
COMMIT_MAX_GROUP_SIZE = "commit.max-group-size"
COMMIT_MAX_GROUP_SIZE_DEFAULT = 1000
TEST_FAILPOINTS = "test.failpoints"
SPARK_PASSED = frozenset({PATH, "checkpointlocation", "queryname"})

_KNOWN = frozenset(
    {
        TABLE,
        CATALOG,
        WAREHOUSE,
        CREATE_TABLE,
        PARTITION_BY,
        MERGE_SCHEMA,
        WRITER_ID,
        WRITER_BATCH_ID,
        COMMIT_MAX_WAIT_MS,
        COMMIT_MAX_GROUP_SIZE,
        TEST_FAILPOINTS,
    }
)
#: Letters, digits, ``_ . -``; 1 to 128 characters; not starting with ``.`` or ``-``.
WRITER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_SECRET = re.compile(r"secret|password|passwd|token|credential|key|auth|sas|connection-string", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(://[^:/@]*:)([^@]+)(@)")  # the user may be empty: redis://:pw@host
#: Secrets inside values: an Azure connection string's key or SAS, a SAS URL's signature.
_VALUE_SECRET = re.compile(r"((?:AccountKey|SharedAccessSignature|sig)=)([^;&\s]+)", re.IGNORECASE)
_IDENT = re.compile(r"^[A-Za-z0-9_$-]+$")


def redact(properties: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log: secret-looking values masked, passwords removed from URIs."""
    return {k: "****" if _SECRET.search(k) else mask_secrets(str(v)) for k, v in properties.items()}


def mask_secrets(text: str) -> str:
    """``text`` with passwords in URIs, Azure account keys and SAS signatures masked (for messages)."""
    return _VALUE_SECRET.sub(r"\1****", _URI_PASSWORD.sub(r"\1****\3", text))


def validate_writer_id(writer_id: str) -> str:
    """Return ``writer_id`` if it is a valid writer identity (:data:`WRITER_ID_PATTERN`), else raise.

    It can never name a parent directory or an option-like token.

    Raises:
        InvalidOptionsError: the id is empty, too long or has other characters.
    """
    if not WRITER_ID_PATTERN.fullmatch(writer_id or ""):  # fullmatch: "$" alone accepts a trailing "\n"
        raise InvalidOptionsError(
            f"writer.id {writer_id!r} is invalid: expected 1-128 characters of letters, digits, "
            "'_', '.', '-', not starting with '.' or '-'"
        )
    return writer_id


@dataclass(frozen=True)
class CatalogConfig:
    """Which catalog holds the tables: the embedded default, or a pyiceberg catalog.

    Attributes:
        name: A pyiceberg catalog name (``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__*``), or None.
        properties: pyiceberg catalog properties (the sink's ``catalog.<key>`` options).
        warehouse: Absolute warehouse path of the embedded default catalog (SQLite at
            ``<warehouse>/catalog.db``), used when ``name`` and ``properties`` are empty.
    """

    name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    warehouse: str = ""

    @property
    def embedded(self) -> bool:
        """True when the embedded default catalog (SQLite + local warehouse) is used."""
        return self.name is None and not self.properties

    def describe(self) -> str:
        """A secret-free description for messages."""
        if self.embedded:
            return f"the embedded catalog at {self.warehouse}"
        return f"catalog {self.name or '(from catalog.* options)'} with properties {redact(self.properties)}"

    def __repr__(self) -> str:
        return f"CatalogConfig(name={self.name!r}, properties={redact(self.properties)}, warehouse={self.warehouse!r})"


def catalog_config(
    name: str | None = None, properties: Mapping[str, str] | None = None, warehouse: str | None = None
) -> CatalogConfig:
    """A validated :class:`CatalogConfig` (the sink's ``catalog``/``catalog.*``/``warehouse`` options, the CLI's flags).

    ``warehouse`` defaults to ``$FENCEDLAKE_WAREHOUSE``, else ``./fencedlake-warehouse``.

    Raises:
        InvalidOptionsError: a warehouse given with a configured catalog, or a warehouse that is not local.
    """
    properties = dict(properties or {})
    if "" in properties:
        raise InvalidOptionsError("an option key ends with '.': expected catalog.<key>")
    if warehouse is not None and (name or properties):
        raise InvalidOptionsError(
            "option warehouse applies to the embedded default catalog only; with a configured catalog "
            "set catalog.warehouse instead"
        )
    path = warehouse or os.environ.get(WAREHOUSE_ENV) or WAREHOUSE_DEFAULT
    path = path[len("file://") :] if path.startswith("file://") else path
    if "://" in path:
        raise InvalidOptionsError(
            f"warehouse {path!r} is invalid: the embedded catalog needs a local path; for object "
            "storage configure a catalog (catalog.type, catalog.uri, catalog.warehouse, ...)"
        )
    return CatalogConfig(name=name or None, properties=properties, warehouse=str(Path(path).expanduser().resolve()))


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options (see the README's option table).

    Attributes:
        table: Table identifier ``namespace.table`` (namespaces may nest: ``a.b.t``).
        catalog: Which catalog (``catalog``, ``catalog.<key>`` and ``warehouse`` options).
        create_table: Create the table (and namespace) from the DataFrame if missing.
        partition_by: Partition spec for a created table (``"day(ts), bucket(16, id)"``).
        table_properties: ``table.<prop>`` options: properties of a created table.
        merge_schema: Add DataFrame columns missing from the table.
        writer_id: Stable writer identity, or None (batch: anonymous writer).
        batch_id: ``writer.batch-id`` (idempotent batch re-runs), or None.
        commit_max_wait_ms: How long a commit waits for its outcome before "outcome unknown".
        commit_max_group_size: At most this many WAL entries per catalog commit.
        failpoints: Test fail points (``test.failpoints``).
    """

    table: str
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    create_table: bool = CREATE_TABLE_DEFAULT
    partition_by: str = PARTITION_BY_DEFAULT
    table_properties: Mapping[str, str] = field(default_factory=dict)
    merge_schema: bool = MERGE_SCHEMA_DEFAULT
    writer_id: str | None = None
    batch_id: int | None = None
    commit_max_wait_ms: int = COMMIT_MAX_WAIT_MS_DEFAULT
    commit_max_group_size: int = COMMIT_MAX_GROUP_SIZE_DEFAULT
    failpoints: str = ""

    def __repr__(self) -> str:
        return (
            f"SinkOptions(table={self.table!r}, catalog={self.catalog!r}, "
            f"writer_id={self.writer_id!r}, batch_id={self.batch_id!r})"
        )


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionsError(f"option {key}={raw!r} is invalid: expected true or false")
    return value == "true"


def _int(options: Mapping[str, str], key: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidOptionsError(f"option {key}={raw!r} is invalid: expected an integer >= {minimum}")
    return value


def _table_name(options: Mapping[str, str]) -> str:
    path, table = options.get(PATH), options.get(TABLE)
    if path and table and path != table:
        raise InvalidOptionsError(f"two table names given: save({path!r}) and option table={table!r}; give one")
    name = (table or path or "").strip()
    if not name:
        raise InvalidOptionsError('no table given: use .save("namespace.table") or .option("table", "namespace.table")')
    return validate_table_name(name)


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is ``namespace.table`` (namespaces may nest), else raise InvalidOptionsError."""
    parts = name.split(".")
    if len(parts) < 2 or not all(_IDENT.fullmatch(p) for p in parts):
        raise InvalidOptionsError(
            f"table name {name!r} is invalid: expected namespace.table with letters, digits, '_', '-' or '$' "
            "in each part (for example db.events)"
        )
    return name


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Validate Spark's options; raise InvalidOptionsError on the first problem."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(
        k
        for k in opts
        if k not in _KNOWN and k not in SPARK_PASSED and not k.startswith((CATALOG_PREFIX, TABLE_PROPERTY_PREFIX))
    )
    if unknown:
        raise InvalidOptionsError(
            f"unknown option(s) {', '.join(unknown)}: expected one of {', '.join(sorted(_KNOWN))}, "
            f"or {CATALOG_PREFIX}<pyiceberg property>, {TABLE_PROPERTY_PREFIX}<table property>"
        )
    catalog_properties = {k[len(CATALOG_PREFIX) :]: v for k, v in opts.items() if k.startswith(CATALOG_PREFIX)}
    table_properties = {
        k[len(TABLE_PROPERTY_PREFIX) :]: v for k, v in opts.items() if k.startswith(TABLE_PROPERTY_PREFIX)
    }
    if "" in catalog_properties or "" in table_properties:
        raise InvalidOptionsError("an option key ends with '.': expected catalog.<key> or table.<property>")
    catalog = catalog_config(opts.get(CATALOG), catalog_properties, opts.get(WAREHOUSE))
    writer_id = opts.get(WRITER_ID)
    if writer_id is not None:
        validate_writer_id(writer_id)
    elif streaming:
        raise InvalidOptionsError(
            "option writer.id is required for streaming writes: it is the query's stable identity across "
            'restarts, used to drop replayed batches and fence zombie runs; add .option("writer.id", "<name>")'
        )
    batch_id = _int(opts, WRITER_BATCH_ID, None, 0)
    if batch_id is not None and writer_id is None:
        raise InvalidOptionsError("option writer.batch-id needs writer.id: batch ids are counted per writer")
    if streaming and batch_id is not None:
        raise InvalidOptionsError("option writer.batch-id is for batch writes; streaming uses Spark's batch ids")
    failpoint_spec = opts.get(TEST_FAILPOINTS, "")
    if failpoint_spec:
        from pyspark_fenced_sink.failpoints import validate

        try:
            validate(failpoint_spec)
        except ValueError as e:
            raise InvalidOptionsError(f"option {TEST_FAILPOINTS} is invalid: {e}") from e
    return SinkOptions(
        table=_table_name(opts),
        catalog=catalog,
        create_table=_bool(opts, CREATE_TABLE, CREATE_TABLE_DEFAULT),
        partition_by=opts.get(PARTITION_BY, PARTITION_BY_DEFAULT),
        table_properties=table_properties,
        merge_schema=_bool(opts, MERGE_SCHEMA, MERGE_SCHEMA_DEFAULT),
        writer_id=writer_id,
        batch_id=batch_id,
        commit_max_wait_ms=_int(opts, COMMIT_MAX_WAIT_MS, COMMIT_MAX_WAIT_MS_DEFAULT, 1) or COMMIT_MAX_WAIT_MS_DEFAULT,
        commit_max_group_size=_int(opts, COMMIT_MAX_GROUP_SIZE, COMMIT_MAX_GROUP_SIZE_DEFAULT, 1)
        or COMMIT_MAX_GROUP_SIZE_DEFAULT,
        failpoints=failpoint_spec,
    )
