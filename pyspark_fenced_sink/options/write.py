"""Write options: every sink key and default, validated once on the driver (PROTOCOL.md step 0).

:func:`parse_write_options` validates everything before any task runs and
returns a frozen :class:`SinkOptions` of typed values (the write mode is a
``protocol.entry.WriteMode``); a bad option raises ``InvalidOptionsError``
naming the key, the value found and what is expected. The README's option table
is the reference for users. Iceberg's write property names are accepted as this
write's file settings (:data:`ICEBERG_WRITE_ALIASES`); other tools' names that mean
something else are refused naming fencedlake's (:data:`FOREIGN_WRITE_OPTIONS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.masking import looks_secret
from pyspark_fenced_sink.options.catalog import CATALOG, CATALOG_PREFIX, WAREHOUSE, CatalogConfig, catalog_options
from pyspark_fenced_sink.options.common import BRANCH, SPARK_PASSED, TABLE, flag, integer, lowered, table_name
from pyspark_fenced_sink.protocol.context import MAX_WAIT_MS_DEFAULT
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.protocol.fencing import WRITER_ID_PATTERN, validate_writer_id
from pyspark_fenced_sink.protocol.reconcile import MAX_GROUP_DEFAULT

__all__ = [
    "FOREIGN_WRITE_OPTIONS",
    "ICEBERG_WRITE_ALIASES",
    "WRITE_KEYS",
    "SinkOptions",
    "is_write_option",
    "parse_write_options",
]

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
COMMIT_MAX_WAIT_MS_DEFAULT = MAX_WAIT_MS_DEFAULT
COMMIT_MAX_GROUP_SIZE = "commit.max-group-size"
COMMIT_MAX_GROUP_SIZE_DEFAULT = MAX_GROUP_DEFAULT
TEST_FAILPOINTS = "test.failpoints"
OVERWRITE_MODE = "overwrite-mode"
OVERWRITE_MODE_DEFAULT = "static"
OVERWRITE_MODES = ("static", "dynamic")
REPLACE_WHERE = "replace-where"
UPSERT_KEYS = "upsert-keys"
UPSERT_ORDER = "upsert-order"
UPSERT_DELETE_WHERE = "upsert-delete-where"
SNAPSHOT_PROPERTY_PREFIX = "snapshot-property."
#: Iceberg's table write properties a write may also take as options (for that write only; the table's otherwise).
WRITE_TARGET_FILE_SIZE = "write.target-file-size-bytes"
WRITE_PARQUET_PREFIX = "write.parquet."
#: Iceberg's Spark write options with the same meaning -> the write property they set.
ICEBERG_WRITE_ALIASES = {
    "target-file-size-bytes": WRITE_TARGET_FILE_SIZE,
    "compression-codec": "write.parquet.compression-codec",
    "compression-level": "write.parquet.compression-level",
}
#: Other tools' write option names (lower-cased, as Spark passes them) -> what fencedlake says instead.
FOREIGN_WRITE_OPTIONS = {
    "replacewhere": REPLACE_WHERE,
    "partitionoverwritemode": OVERWRITE_MODE,
    "txnappid": WRITER_ID,
    "txnversion": WRITER_BATCH_ID,
    "mergeschema": MERGE_SCHEMA,
    "usermetadata": SNAPSHOT_PROPERTY_PREFIX + "<key>",
    "overwriteschema": f"nothing: fencedlake never replaces a table's schema ({MERGE_SCHEMA} adds columns)",
    "partitionby": f"{PARTITION_BY} (Iceberg transforms, e.g. 'day(ts)')",
}

#: Every plain write option key (prefixed keys: ``catalog.``, ``table.``, ``snapshot-property.``).
WRITE_KEYS = frozenset(
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
#: Snapshot-summary keys fencedlake or Iceberg write themselves (``partitions.`` too, as a prefix).
_RESERVED_SUMMARY_PREFIXES = ("fencedlake.", "partitions.")


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options (the README's option table is their reference).

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
        commit_max_group_size: At most this many WAL entries applied per catalog commit (PROTOCOL.md §5).
        failpoints: Test fail points (``test.failpoints``).
        overwrite_mode: ``overwrite-mode`` as given (None: not given, i.e. ``static``).
        replace_where: The ``replace-where`` row filter, if any.
        branch: The branch to write (None: main).
        snapshot_properties: ``snapshot-property.<key>`` options: summary properties of the commit
            that applies the write.
        upsert_keys: ``upsert-keys``: the key columns as given (None: the table's identifier fields).
        upsert_order: ``upsert-order``: the column whose greatest value wins per key, if any.
        upsert_delete_where: ``upsert-delete-where``: the filter of rows that delete their key, if any.
        write_properties: Iceberg write properties given as options (``write.target-file-size-bytes``,
            ``write.parquet.*``, or Iceberg's Spark option names for them): this write's files only.
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
    write_properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def upsert(self) -> bool:
        """True if the write upserts by key (any ``upsert-*`` option given; PROTOCOL.md §5.5)."""
        return bool(self.upsert_keys or self.upsert_order or self.upsert_delete_where)

    def __repr__(self) -> str:
        return (
            f"SinkOptions(table={self.table!r}, catalog={self.catalog!r}, "
            f"writer_id={self.writer_id!r}, batch_id={self.batch_id!r})"
        )

    def file_properties(self, table_properties: Mapping[str, str]) -> dict[str, str]:
        """The write properties this write's files are written with: the table's, then the write's options."""
        return {**table_properties, **self.write_properties}

    def write_mode(self, overwrite: bool) -> WriteMode:
        """How a write that Spark says overwrites (or not) changes the table (PROTOCOL.md §5.1).

        ``overwrite-mode`` says what an overwrite replaces and is ignored by a write that appends (as
        Spark's ``partitionOverwriteMode``), so one SQL view's options serve ``INSERT INTO`` and
        ``INSERT OVERWRITE``; ``replace-where`` also constrains the rows written and is refused there.

        Raises:
            InvalidOptionsError: ``replace-where`` on a write that appends; an ``upsert-*`` option on a
                write that overwrites.
        """
        if self.upsert:
            if overwrite:
                raise InvalidOptionsError(
                    f"options {UPSERT_KEYS}/{UPSERT_ORDER}/{UPSERT_DELETE_WHERE} upsert by key and apply to writes "
                    'that append (batch .mode("append"), SQL INSERT INTO, streaming .outputMode("append")), but '
                    "this write overwrites: drop the upsert options or append"
                )
            return WriteMode.UPSERT
        if not overwrite:
            if self.replace_where:
                raise InvalidOptionsError(
                    f'option {REPLACE_WHERE} applies to writes that overwrite (batch .mode("overwrite"), SQL '
                    'INSERT OVERWRITE, streaming .outputMode("complete")), but this write appends: drop the option '
                    "or overwrite"
                )
            return WriteMode.APPEND
        if self.replace_where is not None:
            return WriteMode.REPLACE_WHERE
        return WriteMode.DYNAMIC if self.overwrite_mode == "dynamic" else WriteMode.OVERWRITE


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
    if where is not None:
        where = _filter_syntax(UPSERT_DELETE_WHERE, where)
    return keys, None if order is None else order.strip(), where


def _branch(opts: Mapping[str, str]) -> str | None:
    branch = opts.get(BRANCH)
    if branch is None or branch == "main":
        return None
    if not WRITER_ID_PATTERN.fullmatch(branch) or branch.lower().startswith("fencedlake"):
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
        elif looks_secret(key, value):
            problem = "snapshot summaries are public table metadata and this looks like a secret"
        if problem:
            raise InvalidOptionsError(
                f"option {option} is refused: {problem}; choose another key (keys arrive lower-cased from Spark)"
            )
        out[key] = value
    return out


def _failpoints(opts: Mapping[str, str]) -> str:
    spec = opts.get(TEST_FAILPOINTS, "")
    if spec:
        from pyspark_fenced_sink.failpoints import validate

        try:
            validate(spec)
        except ValueError as e:
            raise InvalidOptionsError(f"option {TEST_FAILPOINTS} is invalid: {e}") from e
    return spec


def is_write_option(key: str) -> bool:
    """True for a (lower-cased) key of the sink's options (reads ignore them: one SQL view serves both)."""
    return (
        key in WRITE_KEYS
        or key in ICEBERG_WRITE_ALIASES
        or key == WRITE_TARGET_FILE_SIZE
        or key.startswith((TABLE_PROPERTY_PREFIX, SNAPSHOT_PROPERTY_PREFIX, WRITE_PARQUET_PREFIX))
    )


def _write_properties(opts: Mapping[str, str]) -> dict[str, str]:
    """Iceberg write properties given as options (also by Iceberg's Spark write option names), for this write."""
    out: dict[str, str] = {}
    for key, value in opts.items():
        prop = ICEBERG_WRITE_ALIASES.get(key, key)
        if prop == WRITE_TARGET_FILE_SIZE or prop.startswith(WRITE_PARQUET_PREFIX):
            if prop in out and out[prop] != value:
                raise InvalidOptionsError(f"options {key} and {prop} both given, with different values: give one")
            out[prop] = value
    return out


def parse_write_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Validate Spark's options for a write; raise InvalidOptionsError on the first problem."""
    opts = lowered(options)
    unknown = sorted(
        k for k in opts if not is_write_option(k) and k not in SPARK_PASSED and not k.startswith(CATALOG_PREFIX)
    )
    if unknown:
        hints = [f"{k} -> {FOREIGN_WRITE_OPTIONS[k]}" for k in unknown if k in FOREIGN_WRITE_OPTIONS]
        said = f" (other tools' names; fencedlake's: {'; '.join(hints)})" if hints else ""
        raise InvalidOptionsError(
            f"unknown option(s) {', '.join(unknown)}{said}: expected one of {', '.join(sorted(WRITE_KEYS))}, "
            f"or {CATALOG_PREFIX}<pyiceberg property>, {TABLE_PROPERTY_PREFIX}<table property>, "
            f"{SNAPSHOT_PROPERTY_PREFIX}<summary key>, {WRITE_TARGET_FILE_SIZE}, {WRITE_PARQUET_PREFIX}<property> "
            "(this write's files)"
        )
    table_properties = {
        k[len(TABLE_PROPERTY_PREFIX) :]: v for k, v in opts.items() if k.startswith(TABLE_PROPERTY_PREFIX)
    }
    if "" in table_properties:
        raise InvalidOptionsError("an option key ends with '.': expected catalog.<key> or table.<property>")
    catalog = catalog_options(opts)
    writer_id = opts.get(WRITER_ID)
    if writer_id is not None:
        validate_writer_id(writer_id)
    elif streaming:
        raise InvalidOptionsError(
            "option writer.id is required for streaming writes: it is the query's stable identity across "
            'restarts, used to drop replayed batches and fence zombie runs; add .option("writer.id", "<name>")'
        )
    batch_id = integer(opts, WRITER_BATCH_ID, None, 0)
    if batch_id is not None and writer_id is None:
        raise InvalidOptionsError("option writer.batch-id needs writer.id: batch ids are counted per writer")
    if streaming and batch_id is not None:
        raise InvalidOptionsError("option writer.batch-id is for batch writes; streaming uses Spark's batch ids")
    overwrite_mode, replace_where = _overwrite_options(opts)
    upsert_keys, upsert_order, upsert_delete_where = _upsert_options(opts)
    return SinkOptions(
        table=table_name(opts),
        catalog=catalog,
        create_table=flag(opts, CREATE_TABLE, CREATE_TABLE_DEFAULT),
        partition_by=opts.get(PARTITION_BY, PARTITION_BY_DEFAULT),
        table_properties=table_properties,
        merge_schema=flag(opts, MERGE_SCHEMA, MERGE_SCHEMA_DEFAULT),
        writer_id=writer_id,
        batch_id=batch_id,
        commit_max_wait_ms=integer(opts, COMMIT_MAX_WAIT_MS, COMMIT_MAX_WAIT_MS_DEFAULT, 1)
        or COMMIT_MAX_WAIT_MS_DEFAULT,
        commit_max_group_size=integer(opts, COMMIT_MAX_GROUP_SIZE, COMMIT_MAX_GROUP_SIZE_DEFAULT, 1)
        or COMMIT_MAX_GROUP_SIZE_DEFAULT,
        failpoints=_failpoints(opts),
        overwrite_mode=overwrite_mode,
        replace_where=replace_where,
        branch=_branch(opts),
        snapshot_properties=_snapshot_properties(opts),
        upsert_keys=upsert_keys,
        upsert_order=upsert_order,
        upsert_delete_where=upsert_delete_where,
        write_properties=_write_properties(opts),
    )
