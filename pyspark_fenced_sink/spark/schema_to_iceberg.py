"""Spark schema -> Iceberg schema: conversion and write compatibility (PROTOCOL.md step 0; driver).

Runs on the driver, before any task is launched, so a schema problem never
leaves a file behind. Executors trust the
:class:`~pyspark_fenced_sink.write.schema_plan.SchemaPlan` verdict and
only cast Arrow data (``write/task.py``). :class:`SparkWriteSchema` is how the
write transaction sees a DataFrame's schema.

Columns are matched **by name**, case-sensitively, recursively inside structs,
list elements and map keys/values. A path names a nested column the way
Iceberg does: ``payload.items.element.x``, ``attrs.key``, ``attrs.value.y``.

Allowed differences between a DataFrame and the table it is written into:

* an optional table column the DataFrame lacks (written as nulls);
* the safe promotions ``int -> long``, ``float -> double`` and
  ``decimal(p, s) -> decimal(P, s)`` with ``P >= p`` (Spark ``tinyint``,
  ``smallint``, ``char(n)`` and ``varchar(n)`` already map to ``int`` and
  ``string``);
* with schema merging on, a DataFrame column the table lacks: it is added to
  the table as an optional column (``write.schema_plan``).

This module never imports catalog code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)
from pyspark.sql import types as st

from pyspark_fenced_sink.errors import SchemaMismatchError
from pyspark_fenced_sink.options.write import MERGE_SCHEMA
from pyspark_fenced_sink.write.schema_plan import SchemaAddition, SchemaPlan

__all__ = [
    "SparkWriteSchema",
    "check_write_schema",
    "iceberg_schema_from_spark",
    "iceberg_type_from_spark",
]


_SIMPLE: tuple[tuple[type[st.DataType], Callable[[], PrimitiveType]], ...] = (
    (st.BooleanType, BooleanType),
    (st.ByteType, IntegerType),
    (st.ShortType, IntegerType),
    (st.IntegerType, IntegerType),
    (st.LongType, LongType),
    (st.FloatType, FloatType),
    (st.DoubleType, DoubleType),
    (st.StringType, StringType),
    (st.CharType, StringType),
    (st.VarcharType, StringType),
    (st.BinaryType, BinaryType),
    (st.DateType, DateType),
    (st.TimestampNTZType, TimestampType),
    (st.TimestampType, TimestamptzType),
)
_TIME_TYPE: type[st.DataType] | None = getattr(st, "TimeType", None)

# What to suggest for a Spark type Iceberg cannot hold, by Spark type name.
_UNSUPPORTED_HINTS = {
    "NullType": "cast it to the type the column should have, e.g. lit(None).cast('string')",
    "VariantType": "convert it to a string with to_json()",
    "GeometryType": "convert it to WKB binary with st_asbinary()",
    "GeographyType": "convert it to WKB binary with st_asbinary()",
}
_DEFAULT_HINT = "cast it to a supported type (e.g. .cast('string') or .cast('bigint')) or drop it"


def _spark_name(dtype: st.DataType) -> str:
    try:
        return dtype.simpleString()
    except Exception:  # noqa: BLE001 - a UDT's simpleString may fail; only used for messages
        return type(dtype).__name__


def _unsupported(path: str, dtype: st.DataType) -> SchemaMismatchError:
    hint = _UNSUPPORTED_HINTS.get(type(dtype).__name__, _DEFAULT_HINT)
    return SchemaMismatchError(
        f"column {path!r} has Spark type {_spark_name(dtype)}, which an Iceberg table cannot store; {hint}"
    )


def _primitive_from_spark(dtype: st.DataType, path: str) -> PrimitiveType:
    if isinstance(dtype, st.UserDefinedType):
        raise _unsupported(path, dtype)
    if isinstance(dtype, st.DecimalType):
        return DecimalType(dtype.precision, dtype.scale)
    if _TIME_TYPE is not None and isinstance(dtype, _TIME_TYPE):
        return TimeType()
    for spark_type, iceberg_type in _SIMPLE:
        if isinstance(dtype, spark_type):
            return iceberg_type()
    raise _unsupported(path, dtype)


def iceberg_type_from_spark(dtype: st.DataType, path: str, next_id: Callable[[], int] | None = None) -> IcebergType:
    """Convert one Spark type to an Iceberg type (placeholder field ids).

    Args:
        dtype: The Spark type.
        path: The column's path, for error messages.
        next_id: Field-id source; a fresh counter from 1 when omitted.

    Raises:
        SchemaMismatchError: the type (or a nested one) cannot be stored in Iceberg.
    """
    ids = next_id if next_id is not None else itertools.count(1).__next__
    if isinstance(dtype, st.StructType):
        return StructType(*_fields_from_spark(dtype, path, ids))
    if isinstance(dtype, st.ArrayType):
        element_path = f"{path}.element"
        return ListType(
            element_id=ids(),
            element=iceberg_type_from_spark(dtype.elementType, element_path, ids),
            element_required=not dtype.containsNull,
        )
    if isinstance(dtype, st.MapType):
        key_id, value_id = ids(), ids()
        return MapType(
            key_id=key_id,
            key_type=iceberg_type_from_spark(dtype.keyType, f"{path}.key", ids),
            value_id=value_id,
            value_type=iceberg_type_from_spark(dtype.valueType, f"{path}.value", ids),
            value_required=not dtype.valueContainsNull,
        )
    return _primitive_from_spark(dtype, path)


def _fields_from_spark(struct: st.StructType, prefix: str, ids: Callable[[], int]) -> list[NestedField]:
    _check_unique_names(struct, prefix)
    out = []
    for f in struct.fields:
        path = f"{prefix}.{f.name}" if prefix else f.name
        out.append(NestedField(ids(), f.name, iceberg_type_from_spark(f.dataType, path, ids), required=not f.nullable))
    return out


def iceberg_schema_from_spark(struct: st.StructType) -> Schema:
    """The Iceberg schema for a new table holding ``struct``'s columns.

    Field ids are assigned fresh, like ``pyiceberg.schema.assign_fresh_schema_ids``.
    Spark nullable columns become optional, non-nullable ones required; list
    elements and map values keep ``containsNull`` / ``valueContainsNull``.

    Raises:
        SchemaMismatchError: a column has a type Iceberg cannot store (the
            message names its path and Spark type and says what to do).
    """
    ids = itertools.count(1).__next__
    return assign_fresh_schema_ids(Schema(*_fields_from_spark(struct, "", ids)))


def _check_unique_names(struct: st.StructType, prefix: str) -> None:
    seen: set[str] = set()
    for name in struct.fieldNames():
        if name in seen:
            where = f"struct {prefix!r}" if prefix else "the DataFrame"
            raise SchemaMismatchError(
                f"{where} has two columns named {name!r}; expected unique names: rename or drop one of them"
            )
        seen.add(name)


# ---------------------------------------------------------------- write check


def _render(t: IcebergType) -> str:
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{f.name}: {_render(f.field_type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"list<{_render(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{_render(t.key_type)}, {_render(t.value_type)}>"
    return str(t)


_SPARK_NAME_OF: dict[IcebergType, str] = {
    BooleanType(): "boolean",
    IntegerType(): "int",
    LongType(): "bigint",
    FloatType(): "float",
    DoubleType(): "double",
    StringType(): "string",
    BinaryType(): "binary",
    DateType(): "date",
    TimestamptzType(): "timestamp",
    TimestampType(): "timestamp_ntz",
    TimeType(): "time(6)",
}


def _cast_hint(expected: IcebergType) -> str:
    if isinstance(expected, DecimalType):
        return f"cast it to decimal({expected.precision},{expected.scale})"
    if isinstance(expected, StructType):
        return "make it a struct with the table's fields"
    if isinstance(expected, ListType):
        return "make it an array of the table's element type"
    if isinstance(expected, MapType):
        return "make it a map of the table's key and value types"
    name = _SPARK_NAME_OF.get(expected)
    if name is None:
        return f"no Spark type writes Iceberg {expected}; fencedlake cannot write this column"
    return f"cast it to {name}"


def _promotes(found: PrimitiveType, expected: PrimitiveType) -> bool:
    if isinstance(found, IntegerType) and isinstance(expected, LongType):
        return True
    if isinstance(found, FloatType) and isinstance(expected, DoubleType):
        return True
    return (
        isinstance(found, DecimalType)
        and isinstance(expected, DecimalType)
        and found.scale == expected.scale
        and expected.precision >= found.precision
    )


@dataclass
class _Acc:
    merge: bool
    nulls_checked: bool = False
    additions: list[SchemaAddition] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    promoted: list[str] = field(default_factory=list)


def _join(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _mismatch(path: tuple[str, ...], expected: IcebergType, found: st.DataType) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {_join(path)!r}: expected {_render(expected)} (table), found {_spark_name(found)} (DataFrame); "
        f"{_cast_hint(expected)}"
    )


def _nullable_into_required(path: tuple[str, ...], what: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {_join(path)!r}: expected non-null values (the table column is required), found a nullable "
        f"{what} in the DataFrame; write a non-null expression (e.g. coalesce(...)) or make the table column "
        "optional"
    )


def _case_twin(name: str, candidates: Iterator[str]) -> str | None:
    return next((c for c in candidates if c != name and c.lower() == name.lower()), None)


def _check_struct(df: st.StructType, table: StructType, path: tuple[str, ...], acc: _Acc, in_key: bool) -> None:
    _check_unique_names(df, _join(path))
    df_fields = {f.name: f for f in df.fields}
    table_names = {f.name for f in table.fields}
    for tf in table.fields:
        here = (*path, tf.name)
        df_field = df_fields.get(tf.name)
        if df_field is None:
            twin = _case_twin(tf.name, (n for n in df_fields if n not in table_names))
            if twin is not None:
                raise SchemaMismatchError(
                    f"column {_join(here)!r}: expected a DataFrame column named {tf.name!r}, found "
                    f"{_join((*path, twin))!r}, which differs only in case; rename it (names are case-sensitive)"
                )
            if tf.required:
                raise SchemaMismatchError(
                    f"column {_join(here)!r}: expected in the DataFrame (the table column is required, "
                    f"{_render(tf.field_type)}), found no such column; add it to the DataFrame"
                )
            acc.missing.append(_join(here))
            continue
        if df_field.nullable and tf.required and not (acc.nulls_checked and not path):
            raise _nullable_into_required(here, "column")
        _check_type(df_field.dataType, tf.field_type, here, acc, in_key)
    for df_field in df.fields:
        if df_field.name in table_names:
            continue
        here = (*path, df_field.name)
        twin = _case_twin(df_field.name, iter(table_names))
        note = f" (the table has {_join((*path, twin))!r}, which differs only in case)" if twin else ""
        if not acc.merge:
            raise SchemaMismatchError(
                f"column {_join(here)!r} ({_spark_name(df_field.dataType)}): expected a column of the table, "
                f"found none{note}; drop or rename it, or enable the {MERGE_SCHEMA!r} option to add it "
                "as an optional column"
            )
        if in_key:
            raise SchemaMismatchError(
                f"column {_join(here)!r}: expected only the table's fields inside a map key, found a new "
                "field; Iceberg cannot add fields to map keys: drop it"
            )
        new_type = iceberg_type_from_spark(df_field.dataType, _join(here))
        acc.additions.append(SchemaAddition(parent=path, name=df_field.name, field_type=new_type))


def _check_type(found: st.DataType, expected: IcebergType, path: tuple[str, ...], acc: _Acc, in_key: bool) -> None:
    if isinstance(expected, StructType):
        if not isinstance(found, st.StructType):
            raise _mismatch(path, expected, found)
        _check_struct(found, expected, path, acc, in_key)
    elif isinstance(expected, (ListType, MapType)):
        # (path, found type, expected type, nulls into a required child, what it is, inside a map key)
        children: list[tuple[tuple[str, ...], st.DataType, IcebergType, bool, str, bool]]
        if isinstance(expected, ListType) and isinstance(found, st.ArrayType):
            nulls = found.containsNull and expected.element_required
            children = [((*path, "element"), found.elementType, expected.element_type, nulls, "list element", in_key)]
        elif isinstance(expected, MapType) and isinstance(found, st.MapType):
            nulls = found.valueContainsNull and expected.value_required
            children = [
                ((*path, "key"), found.keyType, expected.key_type, False, "map key", True),
                ((*path, "value"), found.valueType, expected.value_type, nulls, "map value", in_key),
            ]
        else:
            raise _mismatch(path, expected, found)
        for child_path, _, _, nulls_into_required, what, _ in children:
            if nulls_into_required:
                raise _nullable_into_required(child_path, what)
        for child_path, child_found, child_expected, _, _, child_in_key in children:
            _check_type(child_found, child_expected, child_path, acc, child_in_key)
    else:
        if isinstance(found, (st.StructType, st.ArrayType, st.MapType)):
            raise _mismatch(path, expected, found)
        converted = _primitive_from_spark(found, _join(path))
        if converted == expected:
            return
        if isinstance(expected, PrimitiveType) and _promotes(converted, expected):
            acc.promoted.append(_join(path))
            return
        raise _mismatch(path, expected, found)


def check_write_schema(
    df_schema: st.StructType, table_schema: Schema, *, merge_schema: bool, nulls_checked_per_row: bool = False
) -> SchemaPlan:
    """Check that a DataFrame can be written into a table, before anything is written.

    Args:
        df_schema: The DataFrame's schema (what Spark hands the writer).
        table_schema: The table's current Iceberg schema.
        merge_schema: Whether DataFrame columns missing from the table may be
            added to it (as optional columns).
        nulls_checked_per_row: A nullable DataFrame column may go into a required top-level
            column: the tasks check each row (an upsert's delete rows need only their key).

    Returns:
        The plan: columns to add, optional columns written as nulls, promotions.

    Raises:
        SchemaMismatchError: the first incompatibility found; the message names
            the column path, the table's type, the DataFrame's type, and what
            to do.
    """
    acc = _Acc(merge=merge_schema, nulls_checked=nulls_checked_per_row)
    _check_struct(df_schema, table_schema.as_struct(), (), acc, in_key=False)
    return SchemaPlan(additions=tuple(acc.additions), missing=tuple(acc.missing), promoted=tuple(acc.promoted))


@dataclass(frozen=True)
class SparkWriteSchema:
    """A DataFrame's Spark schema as the write transaction uses it (``write.transaction.WriteSchema``).

    Attributes:
        spark: The DataFrame's schema, as Spark hands it to the writer.
    """

    spark: st.StructType

    def iceberg(self) -> Schema:
        """The Iceberg schema of a table created from the DataFrame."""
        return iceberg_schema_from_spark(self.spark)

    def check(self, table_schema: Schema, *, merge_schema: bool, nulls_checked_per_row: bool = False) -> SchemaPlan:
        """:func:`check_write_schema` against the table's current schema."""
        return check_write_schema(
            self.spark, table_schema, merge_schema=merge_schema, nulls_checked_per_row=nulls_checked_per_row
        )
