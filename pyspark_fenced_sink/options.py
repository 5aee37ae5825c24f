"""Sink and reader options: keys, defaults, validation (driver); the one secret masker.

Every option key is defined once here, with its ``*_DEFAULT`` sibling, next to
its validation. :func:`parse_options` (writes) and :func:`parse_read_options`
(``spark.read`` / ``spark.readStream``, Iceberg's Spark option names) validate
everything on the driver before any task runs and return a frozen
:class:`SinkOptions` / :class:`ReadOptions`; a bad option raises
``InvalidOptionsError`` naming the key, the value found and what is
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
    "ReadOptions",
    "SinkOptions",
    "catalog_config",
    "mask_secrets",
    "parse_options",
    "parse_read_options",
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
OVERWRITE_MODE = "overwrite-mode"
OVERWRITE_MODE_DEFAULT = "static"
OVERWRITE_MODES = ("static", "dynamic")
REPLACE_WHERE = "replace-where"
UPSERT_KEYS = "upsert-keys"
UPSERT_ORDER = "upsert-order"
UPSERT_DELETE_WHERE = "upsert-delete-where"
BRANCH = "branch"
SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."
# Reads (Iceberg's Spark read option names). Split sizing defaults come from the table's read.split.* properties.
SNAPSHOT_ID = "snapshot-id"
AS_OF_TIMESTAMP = "as-of-timestamp"
TAG = "tag"
START_SNAPSHOT_ID = "start-snapshot-id"
END_SNAPSHOT_ID = "end-snapshot-id"
SPLIT_SIZE = "split-size"
FILE_OPEN_COST = "file-open-cost"
STREAM_FROM_TIMESTAMP = "stream-from-timestamp"
STREAMING_MAX_FILES = "streaming-max-files-per-micro-batch"
STREAMING_MAX_ROWS = "streaming-max-rows-per-micro-batch"
STREAMING_SKIP_OVERWRITE = "streaming-skip-overwrite-snapshots"
STREAMING_SKIP_OVERWRITE_DEFAULT = False
STREAMING_SKIP_DELETE = "streaming-skip-delete-snapshots"
STREAMING_SKIP_DELETE_DEFAULT = False
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
        OVERWRITE_MODE,
        REPLACE_WHERE,
        UPSERT_KEYS,
        UPSERT_ORDER,
        UPSERT_DELETE_WHERE,
        BRANCH,
    }
)
_TIME_TRAVEL = (SNAPSHOT_ID, AS_OF_TIMESTAMP, BRANCH, TAG)
_BATCH_READ = frozenset({*_TIME_TRAVEL, END_SNAPSHOT_ID})
_STREAM_READ = frozenset(
    {STREAM_FROM_TIMESTAMP, STREAMING_MAX_FILES, STREAMING_MAX_ROWS, STREAMING_SKIP_OVERWRITE, STREAMING_SKIP_DELETE}
)
_ANY = -(2**63)  # snapshot ids are any long
_READ_KNOWN = frozenset({TABLE, CATALOG, WAREHOUSE, START_SNAPSHOT_ID, SPLIT_SIZE, FILE_OPEN_COST})
#: Letters, digits, ``_ . -``; 1 to 128 characters; not starting with ``.`` or ``-``.
WRITER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_SECRET = re.compile(r"secret|password|passwd|token|credential|key|auth|sas|connection-string", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(://[^:/@]*:)([^@]+)(@)")  # the user may be empty: redis://:pw@host
#: Secrets inside values: an Azure connection string's key or SAS, a SAS URL's signature.
_VALUE_SECRET = re.compile(r"((?:AccountKey|SharedAccessSignature|sig)=)([^;&\s]+)", re.IGNORECASE)
_IDENT = re.compile(r"^[A-Za-z0-9_$-]+$")
#: Branch names: like writer ids; names starting with ``fencedlake`` are fencedlake's own refs.
_BRANCH = WRITER_ID_PATTERN
#: Snapshot-summary keys fencedlake or Iceberg write themselves (``partitions.`` too, as a prefix).
_RESERVED_SUMMARY_PREFIXES = ("fencedlake.", "partitions.")


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
        overwrite_mode: ``overwrite-mode`` as given (None: not given, i.e. ``static``).
        replace_where: The ``replace-where`` row filter, if any.
        branch: The branch to write (None: main).
        snapshot_properties: ``snapshot-property.<key>`` options: summary properties of the commit
            that applies the write.
        upsert_keys: ``upsert-keys``: the key columns as given (None: the table's identifier fields).
        upsert_order: ``upsert-order``: the column whose greatest value wins per key, if any.
        upsert_delete_where: ``upsert-delete-where``: the filter of rows that delete their key, if any.
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
    overwrite_mode: str | None = None
    replace_where: str | None = None
    branch: str | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    upsert_keys: tuple[str, ...] | None = None
    upsert_order: str | None = None
    upsert_delete_where: str | None = None

    @property
    def upsert(self) -> bool:
        """True if the write upserts by key (any ``upsert-*`` option given; PROTOCOL.md §5.4)."""
        return bool(self.upsert_keys or self.upsert_order or self.upsert_delete_where)

    def __repr__(self) -> str:
        return (
            f"SinkOptions(table={self.table!r}, catalog={self.catalog!r}, "
            f"writer_id={self.writer_id!r}, batch_id={self.batch_id!r})"
        )

    def write_mode(self, overwrite: bool) -> str:
        """The write mode's value (``protocol.wal.WriteMode``) for a write Spark says overwrites or not.

        Raises:
            InvalidOptionsError: ``overwrite-mode`` or ``replace-where`` on a write that appends; an
                ``upsert-*`` option on a write that overwrites.
        """
        if self.upsert:
            if overwrite:
                raise InvalidOptionsError(
                    f"options {UPSERT_KEYS}/{UPSERT_ORDER}/{UPSERT_DELETE_WHERE} upsert by key and apply to writes "
                    'that append (batch .mode("append"), streaming .outputMode("append")), but this write '
                    "overwrites: drop the upsert options or append"
                )
            return "upsert"
        if not overwrite:
            given = [k for k, v in ((OVERWRITE_MODE, self.overwrite_mode), (REPLACE_WHERE, self.replace_where)) if v]
            if given:
                raise InvalidOptionsError(
                    f'option {given[0]} applies to writes that overwrite (batch .mode("overwrite"), streaming '
                    '.outputMode("complete")), but this write appends: drop the option or overwrite'
                )
            return "append"
        if self.replace_where is not None:
            return "filter"
        return "dynamic" if self.overwrite_mode == "dynamic" else "overwrite"


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
        expected = "an integer" if minimum < 0 else f"an integer >= {minimum}"
        raise InvalidOptionsError(f"option {key}={raw!r} is invalid: expected {expected}")
    return value


def _table_name(options: Mapping[str, str]) -> str:
    path, table = options.get(PATH), options.get(TABLE)
    if path and table and path != table:
        raise InvalidOptionsError(f"two table names given: save({path!r}) and option table={table!r}; give one")
    name = (table or path or "").strip()
    if not name:
        raise InvalidOptionsError(
            'no table given: use .save("namespace.table") (writes), .load("namespace.table") (reads) '
            'or .option("table", "namespace.table")'
        )
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


def _overwrite_options(opts: Mapping[str, str]) -> tuple[str | None, str | None]:
    """``overwrite-mode`` and ``replace-where``, checked (the filter's syntax here, its columns at planning)."""
    mode = opts.get(OVERWRITE_MODE)
    if mode is not None:
        mode = mode.strip().lower()
        if mode not in OVERWRITE_MODES:
            raise InvalidOptionsError(f"option {OVERWRITE_MODE}={mode!r} is invalid: expected static or dynamic")
    where = opts.get(REPLACE_WHERE)
    if where is None:
        return mode, None
    if not where.strip():
        raise InvalidOptionsError(f"option {REPLACE_WHERE} is empty: expected a filter such as \"region = 'eu'\"")
    if mode == "dynamic":
        raise InvalidOptionsError(
            f"options {REPLACE_WHERE} and {OVERWRITE_MODE}=dynamic conflict: replace-where replaces the rows its "
            "filter matches, dynamic overwrite the partitions the write touches; give one"
        )
    return mode, _filter_syntax(REPLACE_WHERE, where)


def _filter_syntax(key: str, where: str) -> str:
    """``where`` if it parses as an Iceberg filter (its columns are bound at planning)."""
    from pyiceberg.expressions.parser import parse

    try:
        parse(where)
    except Exception as e:  # noqa: BLE001 - pyparsing's ParseException and friends: a syntax error
        column = getattr(e, "col", None)
        near = f"a syntax error at column {column} ({where[column - 1 :][:20]!r})" if column else type(e).__name__
        raise InvalidOptionsError(
            f"option {key}={where!r} is not a valid filter: {near}; expected Iceberg's filter syntax, "
            "e.g. \"ts >= '2026-01-01' AND region = 'eu'\", \"id BETWEEN 1 AND 9\", \"code IN ('a', 'b')\""
        ) from None
    return where


def _upsert_options(opts: Mapping[str, str]) -> tuple[tuple[str, ...] | None, str | None, str | None]:
    """``upsert-keys`` (comma-separated names), ``upsert-order`` and ``upsert-delete-where`` (syntax only here)."""
    keys = None
    raw = opts.get(UPSERT_KEYS)
    if raw is not None:
        keys = tuple(k.strip() for k in raw.split(","))
        if not all(keys) or len({k.lower() for k in keys}) != len(keys):
            raise InvalidOptionsError(
                f"option {UPSERT_KEYS}={raw!r} is invalid: expected distinct column names separated by commas, "
                'e.g. "id" or "tenant, id"'
            )
    order = opts.get(UPSERT_ORDER)
    if order is not None and not order.strip():
        raise InvalidOptionsError(f"option {UPSERT_ORDER} is empty: expected a column name such as updated_at")
    where = opts.get(UPSERT_DELETE_WHERE)
    if where is not None and not where.strip():
        raise InvalidOptionsError(f"option {UPSERT_DELETE_WHERE} is empty: expected a filter such as \"op = 'D'\"")
    given = [k for k in (REPLACE_WHERE, OVERWRITE_MODE) if opts.get(k) is not None]
    if given and (raw is not None or order is not None or where is not None):
        raise InvalidOptionsError(
            f"options {given[0]} and upsert-* conflict: a write either overwrites or upserts by key; give one"
        )
    return (
        keys,
        None if order is None else order.strip(),
        None if where is None else _filter_syntax(UPSERT_DELETE_WHERE, where),
    )


def _branch(opts: Mapping[str, str]) -> str | None:
    branch = opts.get(BRANCH)
    if branch is None or branch == "main":
        return None
    if not _BRANCH.fullmatch(branch) or branch.lower().startswith("fencedlake"):
        raise InvalidOptionsError(
            f"option {BRANCH}={branch!r} is invalid: expected 1-128 letters, digits, '_', '.', '-', not starting "
            "with '.', '-' or 'fencedlake' (fencedlake's own refs)"
        )
    return branch


def _snapshot_properties(opts: Mapping[str, str]) -> dict[str, str]:
    """``snapshot-property.<key>`` options: public summary keys, never fencedlake's or Iceberg's, never secrets."""
    from pyiceberg.table import snapshots

    reserved = {v for k, v in vars(snapshots).items() if k.isupper() and isinstance(v, str)}
    out = {}
    for option, value in opts.items():
        if not option.startswith(SNAPSHOT_PROPERTY_PREFIX):
            continue
        key = option[len(SNAPSHOT_PROPERTY_PREFIX) :]
        problem = None
        if not key:
            problem = "the key is empty"
        elif key in reserved or key.startswith(_RESERVED_SUMMARY_PREFIXES):
            problem = "Iceberg or fencedlake writes that summary key itself"
        elif _SECRET.search(key) or _URI_PASSWORD.search(value):
            problem = "snapshot summaries are public table metadata and this looks like a secret"
        if problem:
            raise InvalidOptionsError(
                f"option {option} is refused: {problem}; choose another key (keys arrive lower-cased from Spark)"
            )
        out[key] = value
    return out


def parse_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Validate Spark's options; raise InvalidOptionsError on the first problem."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(
        k
        for k in opts
        if k not in _KNOWN
        and k not in SPARK_PASSED
        and not k.startswith((CATALOG_PREFIX, TABLE_PROPERTY_PREFIX, SNAPSHOT_PROPERTY_PREFIX))
    )
    if unknown:
        raise InvalidOptionsError(
            f"unknown option(s) {', '.join(unknown)}: expected one of {', '.join(sorted(_KNOWN))}, "
            f"or {CATALOG_PREFIX}<pyiceberg property>, {TABLE_PROPERTY_PREFIX}<table property>, "
            f"{SNAPSHOT_PROPERTY_PREFIX}<summary key>"
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
    overwrite_mode, replace_where = _overwrite_options(opts)
    upsert_keys, upsert_order, upsert_delete_where = _upsert_options(opts)
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
        overwrite_mode=overwrite_mode,
        replace_where=replace_where,
        branch=_branch(opts),
        snapshot_properties=_snapshot_properties(opts),
        upsert_keys=upsert_keys,
        upsert_order=upsert_order,
        upsert_delete_where=upsert_delete_where,
    )


@dataclass(frozen=True)
class ReadOptions:
    """Validated read options (``spark.read`` and ``spark.readStream``; the README's read option table).

    Attributes:
        table: Table identifier ``namespace.table``.
        catalog: Which catalog (the same ``catalog``, ``catalog.<key>``, ``warehouse`` options as writes).
        streaming: True for ``spark.readStream``.
        snapshot_id: ``snapshot-id``: read this snapshot.
        as_of_timestamp_ms: ``as-of-timestamp``: read the main branch's snapshot current at this time (ms).
        branch: ``branch``: read the head of this branch.
        tag: ``tag``: read the snapshot this tag names.
        start_snapshot_id: ``start-snapshot-id`` (exclusive): a batch read returns the rows appended after it
            (up to ``end_snapshot_id``); a stream starts after it.
        end_snapshot_id: ``end-snapshot-id`` (inclusive) of an incremental batch read; None: the current snapshot.
        split_size: ``split-size`` in bytes, or None (the table's ``read.split.target-size``, else adaptive).
        file_open_cost: ``file-open-cost`` in bytes, or None (table property, else 4 MiB).
        stream_from_timestamp_ms: ``stream-from-timestamp``: a stream starts at the first snapshot at or after it.
        max_files_per_batch: ``streaming-max-files-per-micro-batch``, or None (no bound).
        max_rows_per_batch: ``streaming-max-rows-per-micro-batch``, or None (no bound).
        skip_overwrite: ``streaming-skip-overwrite-snapshots``: skip overwrite snapshots instead of failing.
        skip_delete: ``streaming-skip-delete-snapshots``: skip delete snapshots instead of failing.
    """

    table: str
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    streaming: bool = False
    snapshot_id: int | None = None
    as_of_timestamp_ms: int | None = None
    branch: str | None = None
    tag: str | None = None
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    split_size: int | None = None
    file_open_cost: int | None = None
    stream_from_timestamp_ms: int | None = None
    max_files_per_batch: int | None = None
    max_rows_per_batch: int | None = None
    skip_overwrite: bool = STREAMING_SKIP_OVERWRITE_DEFAULT
    skip_delete: bool = STREAMING_SKIP_DELETE_DEFAULT

    @property
    def incremental(self) -> bool:
        """True for a batch read of the rows appended between two snapshots."""
        return not self.streaming and self.start_snapshot_id is not None


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None = False) -> ReadOptions:
    """Validate the options of ``spark.read`` (or, with ``streaming``, ``spark.readStream``).

    ``streaming=None`` infers the kind from the keys (``DataSource.schema()`` is not told which read
    asks; the reader itself validates strictly).

    Raises:
        InvalidOptionsError: an unknown key (a write or stream option in a batch read is named as such),
            a bad value, or options that cannot be combined.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    if streaming is None:
        streaming = any(k in _STREAM_READ for k in opts)
    known = _READ_KNOWN | (_STREAM_READ if streaming else _BATCH_READ)
    for key in sorted(opts):
        if key in known or key in SPARK_PASSED or key.startswith(CATALOG_PREFIX):
            continue
        where = "readStream" if key in _STREAM_READ else "spark.read (batch)" if key in _BATCH_READ else None
        if where is None and (key in _KNOWN or key.startswith(TABLE_PROPERTY_PREFIX)):
            where = "writes"
        hint = f"it applies to {where} only" if where else f"expected one of {', '.join(sorted(known))}"
        raise InvalidOptionsError(f"unknown read option {key}: {hint} (or {CATALOG_PREFIX}<pyiceberg property>)")
    catalog_properties = {k[len(CATALOG_PREFIX) :]: v for k, v in opts.items() if k.startswith(CATALOG_PREFIX)}
    given = [k for k in _TIME_TRAVEL if k in opts]
    if len(given) > 1 or (given and START_SNAPSHOT_ID in opts):
        both = ", ".join([*given, *([START_SNAPSHOT_ID] if START_SNAPSHOT_ID in opts else [])])
        raise InvalidOptionsError(f"options {both} cannot be combined: give one snapshot to read")
    if END_SNAPSHOT_ID in opts and START_SNAPSHOT_ID not in opts:
        raise InvalidOptionsError(f"option {END_SNAPSHOT_ID} needs {START_SNAPSHOT_ID} (an incremental read)")
    if streaming and STREAM_FROM_TIMESTAMP in opts and START_SNAPSHOT_ID in opts:
        raise InvalidOptionsError(f"options {START_SNAPSHOT_ID} and {STREAM_FROM_TIMESTAMP} cannot be combined")
    for ref in (BRANCH, TAG):
        if ref in opts and not opts[ref].strip():
            raise InvalidOptionsError(f"option {ref} is empty: expected the name of a {ref}")
    return ReadOptions(
        table=_table_name(opts),
        catalog=catalog_config(opts.get(CATALOG), catalog_properties, opts.get(WAREHOUSE)),
        streaming=streaming,
        snapshot_id=_int(opts, SNAPSHOT_ID, None, _ANY),
        as_of_timestamp_ms=_int(opts, AS_OF_TIMESTAMP, None, 0),
        branch=opts.get(BRANCH),
        tag=opts.get(TAG),
        start_snapshot_id=_int(opts, START_SNAPSHOT_ID, None, _ANY),
        end_snapshot_id=_int(opts, END_SNAPSHOT_ID, None, _ANY),
        split_size=_int(opts, SPLIT_SIZE, None, 1),
        file_open_cost=_int(opts, FILE_OPEN_COST, None, 0),
        stream_from_timestamp_ms=_int(opts, STREAM_FROM_TIMESTAMP, None, 0),
        max_files_per_batch=_int(opts, STREAMING_MAX_FILES, None, 1),
        max_rows_per_batch=_int(opts, STREAMING_MAX_ROWS, None, 1),
        skip_overwrite=_bool(opts, STREAMING_SKIP_OVERWRITE, STREAMING_SKIP_OVERWRITE_DEFAULT),
        skip_delete=_bool(opts, STREAMING_SKIP_DELETE, STREAMING_SKIP_DELETE_DEFAULT),
    )
