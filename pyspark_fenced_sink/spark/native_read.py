"""``read_table``: the read plan through Spark's own Parquet reader, where exact (PROTOCOL.md §14; driver).

Plans exactly as ``spark.read.format("fencedlake")`` does, then hands the planned
files to ``spark.read.parquet`` with the table's schema and each column's
Iceberg field id (``spark.sql.parquet.fieldId.read.enabled``), so columns match by
id. Position delete files are applied natively too, by a bitmap of the deleted (data file,
row index) pairs or an anti-join on them (``spark.native_deletes``). Object stores go native under ``"auto"`` when
the session's Hadoop configuration serves the scheme (:func:`scheme_obstacle`).
A ``uuid`` (top-level, or inside a struct, list or map) is read as its 16 bytes and formatted natively as
the canonical string the data source gives (Spark's reader cannot infer the type but reads it as ``binary``).
Wherever the rows could differ it falls back to the data source and logs why
(``native=True`` raises the reason instead): equality deletes are refused by the
planner; a name mapping (files without field ids), ``time`` columns (unless the session turned
Spark's TIME type on), v3 ``unknown`` columns and column defaults stay with the data source (Spark's
Parquet reader reads them otherwise and has no default for a missing column); also delete files that are not Parquet
position deletes, a ``_metadata`` column, glob characters, the field-id conf off, a
``filter`` option (the data source applies it to every row), and a Spark Connect
session on an object store (it cannot be asked for a filesystem). Measured in
docs/benchmarks.md §7.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark_fenced_sink.errors import InvalidOptionsError, marked_errors
from pyspark_fenced_sink.spark.jvm_calls import parquet_scan
from pyspark_fenced_sink.spark.native_deletes import (
    DirtyFile,
    NameMismatch,
    apply_deletes,
    column,
    delete_obstacle,
    dirty_files,
)

__all__ = ["FIELD_ID_READ", "NativeReadPlan", "plan_native_read", "read_table", "scheme_obstacle"]

logger = logging.getLogger(__name__)

#: The Spark SQL conf that makes Spark's Parquet reader match columns by field id (Spark's default: false).
FIELD_ID_READ = "spark.sql.parquet.fieldId.read.enabled"
#: Spark's preview setting that lets its SQL engine hold TIME values (Spark's Parquet reader reads them then).
TIME_TYPE_CONF = "spark.sql.timeType.enabled"
#: The StructField metadata key Spark's Parquet reader takes a column's field id from.
FIELD_ID_KEY = "parquet.field.id"
#: Iceberg's table property naming the columns of files written without field ids.
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
#: Spark's hidden column of a file's name and a row's position (shadowed by a table column of that name).
METADATA_COLUMN = "_metadata"
_GLOB_CHARS = frozenset("*?[]{}\\")
_LOGGED_SCHEMES: set[str] = set()
_NATIVE_MODES = ("auto", True, False)


@dataclass(frozen=True)
class NativeReadPlan:
    """How :func:`read_table` reads a table.

    Attributes:
        table: The table identifier.
        point: The read point in words (``snapshot 123``, ``tag 'eod'``, ...).
        native: True: Spark's Parquet reader over ``files``; False: the fencedlake data source.
        reason: Why the data source is used (empty when native).
        files: The planned data files' paths (empty for a data source read).
        sizes: Their recorded ``file_size_in_bytes``, in the same order.
        schema: The Spark schema the files are read with, with field ids in its metadata when native (``uuid``
            values as ``binary``: see ``uuid_columns``).
        dirty: The planned data files that have position deletes, with their delete files.
        io: The table's FileIO (reads the delete files on the driver).
        uuid_columns: The top-level columns holding a ``uuid`` (themselves, or a field, element, key or value
            at any depth): ``schema`` reads each ``uuid`` as ``binary``; :func:`read_table` formats them as the
            data source's strings.
        uuid_types: The Iceberg type of each of ``uuid_columns``, in the same order (where its ``uuid``s are).
    """

    table: str
    point: str
    native: bool
    reason: str
    files: tuple[str, ...]
    schema: Any
    sizes: tuple[int, ...] = ()
    dirty: tuple[DirtyFile, ...] = ()
    io: Any = None
    uuid_columns: tuple[str, ...] = ()
    uuid_types: tuple[Any, ...] = ()


def _type_obstacle(schema: Any, time_enabled: Callable[[], bool]) -> str:
    """Why some column of ``schema`` would not read the same through Spark's Parquet reader ("" if none).

    ``time_enabled``: whether the session turned Spark's TIME type on (asked only for a ``time`` column).
    """
    from pyiceberg.types import TimeType

    for field_id in schema.field_ids:
        field = schema.find_field(field_id)
        name = schema.find_column_name(field_id)
        if isinstance(field.field_type, TimeType) and not time_enabled():  # the data source gives time(6)
            return (
                f"column {name!r} has type time, which Spark's SQL engine refuses unless the preview setting "
                f"{TIME_TYPE_CONF} is on (read_table does not turn it on; with it on, time reads natively)"
            )
        if type(field.field_type).__name__ == "UnknownType":
            return f"column {name!r} has type {field.field_type}, which Spark's Parquet reader reads differently"
        if getattr(field, "initial_default", None) is not None:
            return f"column {name!r} has a default value for files written before it, which Spark cannot supply"
    return ""


def scheme_obstacle(spark: Any, scheme: str) -> str:
    """Why ``spark`` cannot open ``scheme://`` files with a Hadoop filesystem ("" if it can; never connects).

    Asks Hadoop which class serves the scheme (``fs.<scheme>.impl`` or a connector's service
    registration, as Spark's reader will) and whether that class loads. A Spark Connect session
    (no ``_jsc``) cannot be asked. The reason is logged once per scheme.
    """
    jsc, jvm = getattr(spark, "_jsc", None), getattr(spark, "_jvm", None)
    if jsc is None or jvm is None:
        reason = (
            f"data files are on {scheme}://; a Spark Connect session cannot be asked for a Hadoop filesystem of "
            "the scheme (read_table(..., native=True) uses the server's if it has one)"
        )
    else:
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, jsc.hadoopConfiguration())
            return ""
        except Exception as e:  # noqa: BLE001 - py4j raises Py4JJavaError (no class, no connector jar)
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            reason = (
                f"data files are on {scheme}://, which this session's Hadoop configuration cannot open ({first}); "
                f"add the connector (hadoop-aws for s3a://, with fs.{scheme}.impl for s3://; hadoop-azure for "
                "abfs://; the GCS connector for gs://) or pass native=True to try"
            )
    if scheme not in _LOGGED_SCHEMES:
        _LOGGED_SCHEMES.add(scheme)
        logger.warning("fencedlake: read_table falls back to the data source for %s:// files: %s", scheme, reason)
    return reason


def _path_obstacle(paths: Sequence[str], scheme_reason: Callable[[str], str]) -> str:
    """Why Spark's Parquet reader should not be handed ``paths`` ("" if it can be).

    ``scheme_reason``: why files of a non-local scheme cannot be read ("" if they can).
    """
    schemes: dict[str, str] = {}
    for path in paths:
        if any(c in _GLOB_CHARS for c in path):
            return f"data file {path!r} has a glob character in its path, which Spark would expand"
        scheme = urlsplit(path).scheme
        if scheme not in ("", "file") and scheme not in schemes:
            schemes[scheme] = scheme_reason(scheme)
            if schemes[scheme]:
                return schemes[scheme]
    return ""


def _read_type(spark_type: Any, iceberg_type: Any) -> Any:
    """``spark_type`` as Spark's reader is given it (recursively).

    Each struct field's Iceberg field id in its metadata; each ``uuid`` (a string to the data source) as ``binary``.
    """
    from pyiceberg.types import ListType, MapType, StructType, UUIDType
    from pyspark.sql import types as st

    if isinstance(iceberg_type, StructType):
        return st.StructType(
            [
                st.StructField(
                    f.name,
                    _read_type(f.dataType, i.field_type),
                    f.nullable,
                    {**(f.metadata or {}), FIELD_ID_KEY: i.field_id},
                )
                for f, i in zip(spark_type.fields, iceberg_type.fields, strict=True)
            ]
        )
    if isinstance(iceberg_type, ListType):
        return st.ArrayType(_read_type(spark_type.elementType, iceberg_type.element_type), spark_type.containsNull)
    if isinstance(iceberg_type, MapType):
        return st.MapType(
            _read_type(spark_type.keyType, iceberg_type.key_type),
            _read_type(spark_type.valueType, iceberg_type.value_type),
            spark_type.valueContainsNull,
        )
    return st.BinaryType() if isinstance(iceberg_type, UUIDType) else spark_type


def _field_id_conf(spark: Any) -> str:
    """Turn on field-id matching in ``spark`` unless the session set it; why native is impossible ("" if not)."""
    value = spark.conf.get(FIELD_ID_READ, None)
    if value is None:
        spark.conf.set(FIELD_ID_READ, "true")
        logger.info("fencedlake: set %s=true (read_table matches Parquet columns by field id)", FIELD_ID_READ)
        return ""
    if str(value).strip().lower() == "true":
        return ""
    return f"the session sets {FIELD_ID_READ}={value}, and reading Iceberg files by name could return wrong columns"


def plan_native_read(spark: Any, table: str, *, native: bool | str = "auto", **options: Any) -> NativeReadPlan:
    """Plan a batch read of ``table`` (the options of ``spark.read.format("fencedlake")``) and choose its path.

    Args:
        spark: The driver's SparkSession (its field-id conf is set if unset; see the module docstring).
        table: ``namespace.table``.
        native: ``"auto"``: Spark's Parquet reader when it gives the data source's rows and the session can
            open the files (local, or a scheme its Hadoop configuration serves: :func:`scheme_obstacle`);
            ``True``: that reader or an error; ``False``: always the data source.
        **options: Read options (``warehouse``, ``catalog``, ``catalog.<key>``, time travel, ...).

    Raises:
        InvalidOptionsError: bad options, a missing table or snapshot, or ``native=True`` on a table the native
            path cannot read (the message says why).
        ReadRefusedError: the table cannot be read at all (equality deletes, a type Spark cannot hold).
    """
    from pyiceberg.expressions import AlwaysTrue

    from pyspark_fenced_sink.iceberg.planning.scan import (
        ReadPoint,
        open_read_table,
        plan_files,
        plan_incremental,
        resolve_point,
    )
    from pyspark_fenced_sink.options.catalog import is_remote_session
    from pyspark_fenced_sink.options.read import parse_read_options
    from pyspark_fenced_sink.spark.schema_from_iceberg import spark_schema_from_iceberg

    if native not in _NATIVE_MODES:
        raise InvalidOptionsError(f"native={native!r}: expected 'auto', True or False")
    remote = is_remote_session(spark)  # Spark Connect: this process plans; the server reads the files
    opts = parse_read_options({**_text(options), "table": table}, streaming=False, remote=remote)
    iceberg = open_read_table(opts)
    point: ReadPoint
    tasks: list[Any] = []
    if opts.incremental:
        tasks, point = plan_incremental(iceberg, opts, AlwaysTrue())
    else:
        point = resolve_point(iceberg, opts)
    # The obstacles that need no plan first: a read that falls back plans once, in the data source.
    reason = "native=False" if native is False else _table_obstacle(spark, iceberg, point.schema)
    if not reason and opts.row_filter is not None:  # Spark's reader would return the kept files' other rows
        reason = "a filter option: the data source applies it to the rows exactly (and skips the files it excludes)"
    if not reason and not opts.incremental:
        tasks = plan_files(iceberg, point, AlwaysTrue(), opts.table)
    paths = tuple(t.file.file_path for t in tasks)
    probe: Callable[[str], str] = (lambda _: "") if native is True else (lambda scheme: scheme_obstacle(spark, scheme))
    reason = reason or _plan_obstacle(tasks, paths, probe) or _field_id_conf(spark)
    schema = spark_schema_from_iceberg(point.schema)
    if reason and native is True:
        raise InvalidOptionsError(f"read_table({opts.table}, native=True): cannot read natively: {reason}")
    if reason:
        return NativeReadPlan(opts.table, point.label, False, reason, (), schema)
    uuids = [f for f in point.schema.fields if _holds_uuid(f.field_type)]
    ids = _read_type(schema, point.schema.as_struct())
    sizes = tuple(t.file.file_size_in_bytes for t in tasks)
    return NativeReadPlan(
        opts.table,
        point.label,
        True,
        "",
        paths,
        ids,
        sizes,
        dirty_files(tasks),
        iceberg.io,
        tuple(f.name for f in uuids),
        tuple(f.field_type for f in uuids),
    )


def _holds_uuid(iceberg_type: Any) -> bool:
    """Whether ``iceberg_type`` is a ``uuid`` or holds one at any depth."""
    from pyiceberg.types import ListType, MapType, StructType, UUIDType

    if isinstance(iceberg_type, StructType):
        return any(_holds_uuid(f.field_type) for f in iceberg_type.fields)
    if isinstance(iceberg_type, ListType):
        return _holds_uuid(iceberg_type.element_type)
    if isinstance(iceberg_type, MapType):
        return _holds_uuid(iceberg_type.key_type) or _holds_uuid(iceberg_type.value_type)
    return isinstance(iceberg_type, UUIDType)


def _uuid_strings(df: Any, uuids: Sequence[str], types: Sequence[Any]) -> Any:
    """``df`` with each ``uuid`` of the ``uuids`` columns (Iceberg ``types``) as its canonical string.

    Read as binary, each becomes the lower-case 8-4-4-4-12 string, at any depth; null stays null.
    """
    if not uuids:
        return df
    typed = dict(zip(uuids, types, strict=True))
    return df.select(*[_uuid_text(column(c), typed[c]).alias(c) if c in typed else column(c) for c in df.columns])


def _uuid_text(value: Any, iceberg_type: Any) -> Any:
    """``value`` (a Column of Iceberg ``iceberg_type``, its ``uuid``s as binary) with each ``uuid`` as its string."""
    from pyiceberg.types import ListType, MapType, StructType, UUIDType
    from pyspark.sql import functions as F  # noqa: N812

    if isinstance(iceberg_type, UUIDType):
        digits = F.lower(F.hex(value))
        parts = [F.substring(digits, start, length) for start, length in ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))]
        return F.concat(*[p for part in parts for p in (part, F.lit("-"))][:-1])
    if not _holds_uuid(iceberg_type):
        return value
    if isinstance(iceberg_type, StructType):
        fields = [_uuid_text(value.getField(f.name), f.field_type).alias(f.name) for f in iceberg_type.fields]
        return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(iceberg_type, ListType):
        return F.transform(value, lambda element: _uuid_text(element, iceberg_type.element_type))
    if isinstance(iceberg_type, MapType):
        if _holds_uuid(iceberg_type.key_type):
            value = F.transform_keys(value, lambda key, _: _uuid_text(key, iceberg_type.key_type))
        if _holds_uuid(iceberg_type.value_type):
            value = F.transform_values(value, lambda _, item: _uuid_text(item, iceberg_type.value_type))
        return value
    raise AssertionError(f"a nested type without fields: {iceberg_type}")  # pragma: no cover


def _table_obstacle(spark: Any, iceberg: Any, schema: Any) -> str:
    """Why the table's metadata rules the native path out ("" if it does not)."""
    if NAME_MAPPING_PROPERTY in iceberg.properties:
        return f"the table has {NAME_MAPPING_PROPERTY} (data files without field ids)"
    if any(f.name == METADATA_COLUMN for f in schema.fields):
        return f"the table has a column {METADATA_COLUMN!r}, which hides Spark's file metadata column"
    return _type_obstacle(schema, lambda: str(spark.conf.get(TIME_TYPE_CONF, "false")).strip().lower() == "true")


def _plan_obstacle(tasks: Sequence[Any], paths: Sequence[str], scheme_reason: Callable[[str], str]) -> str:
    """Why the planned files rule the native path out ("" if they do not)."""
    return delete_obstacle(tasks) or _path_obstacle(paths, scheme_reason)


def _text(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items() if v is not None}


def read_table(spark: Any, table: str, *, native: bool | str = "auto", **options: Any) -> Any:
    """A DataFrame of ``table``'s rows: Spark's Parquet reader where that is exact, else the fencedlake source.

    Same options and rows as ``spark.read.format("fencedlake").options(**options).load(table)``;
    see the module docstring for when the faster native path is taken and what differs. Works on
    Spark Connect sessions: the plan is made in this process, so the catalog must be reachable from
    here and the embedded catalog needs an absolute ``warehouse``.
    Python keyword names cannot hold dashes: pass dashed options as ``**{"snapshot-id": 5}``.

    Raises:
        InvalidOptionsError, ReadRefusedError: as :func:`plan_native_read`.
    """
    with marked_errors():
        plan = plan_native_read(spark, table, native=native, **options)
    if plan.native:
        logger.info(
            "fencedlake: read_table %s at %s natively: %d data files (%d with position deletes)",
            plan.table,
            plan.point,
            len(plan.files),
            len(plan.dirty),
        )
        if not plan.files:
            return _uuid_strings(spark.createDataFrame([], plan.schema), plan.uuid_columns, plan.uuid_types)
        # recursiveFileLookup: no partition columns inferred from Iceberg's directory names.
        reader = spark.read.schema(plan.schema).option("recursiveFileLookup", "true")
        if not plan.dirty:
            return _uuid_strings(parquet_scan(reader, plan.files), plan.uuid_columns, plan.uuid_types)
        try:
            return _uuid_strings(
                apply_deletes(spark, plan.io, reader, plan.files, plan.sizes, plan.dirty),
                plan.uuid_columns,
                plan.uuid_types,
            )
        except NameMismatch as e:
            if native is True:
                with marked_errors():
                    raise InvalidOptionsError(
                        f"read_table({plan.table}, native=True): cannot read natively: {e}"
                    ) from e
            plan = dataclasses.replace(plan, native=False, reason=str(e))
    logger.info("fencedlake: read_table %s at %s through the data source: %s", plan.table, plan.point, plan.reason)
    return spark.read.format("fencedlake").options(**_text(options)).load(table)
