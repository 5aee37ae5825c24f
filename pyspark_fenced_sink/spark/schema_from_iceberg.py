"""Iceberg -> Spark types: the schema a read returns (driver; PROTOCOL.md §14).

The inverse of :mod:`pyspark_fenced_sink.spark.schema_to_iceberg`'s write mapping: an
Iceberg ``int`` reads as Spark ``int``, ``timestamptz`` as ``timestamp``,
``timestamp`` as ``timestamp_ntz``, structs, lists and maps to any depth.
Types the writer never produces but other engines do are mapped the way
Iceberg's own Spark reader maps them: ``uuid`` -> ``string`` (the canonical
text form), ``fixed(n)`` -> ``binary``, ``time`` -> ``time(6)`` where the
installed Spark has it, v3 ``unknown`` -> ``void``. A type Spark cannot hold
(nanosecond timestamps, variant, geometry, geography) raises
:class:`~pyspark_fenced_sink.errors.ReadRefusedError` naming the column; a
user-given schema that leaves the column out reads the rest of the table
(:func:`project_user_schema`).

Required Iceberg fields are non-nullable Spark fields, as in Iceberg's reader.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyspark.sql import types as st

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError

__all__ = ["project_user_schema", "spark_schema_from_iceberg", "spark_type_from_iceberg"]

_SPARK_TIME: Any = getattr(st, "TimeType", None)  # Spark >= 4.1

_SIMPLE: tuple[tuple[type[IcebergType], st.DataType], ...] = (
    (BooleanType, st.BooleanType()),
    (IntegerType, st.IntegerType()),
    (LongType, st.LongType()),
    (FloatType, st.FloatType()),
    (DoubleType, st.DoubleType()),
    (StringType, st.StringType()),
    (UUIDType, st.StringType()),
    (BinaryType, st.BinaryType()),
    (FixedType, st.BinaryType()),
    (DateType, st.DateType()),
    (TimestamptzType, st.TimestampType()),
    (TimestampType, st.TimestampNTZType()),
)


def _refused(path: str, iceberg_type: IcebergType, why: str) -> ReadRefusedError:
    return ReadRefusedError(
        f"column {path!r} has Iceberg type {iceberg_type}, which {why}; read the other columns by giving "
        "spark.read a schema without it (.schema(...)), or read the table with pyiceberg",
        column=path,
    )


def spark_type_from_iceberg(iceberg_type: IcebergType, path: str) -> st.DataType:
    """The Spark type a column of ``iceberg_type`` reads as.

    Raises:
        ReadRefusedError: Spark has no type that holds the values exactly.
    """
    if isinstance(iceberg_type, StructType):
        return st.StructType([_field(f, f"{path}.{f.name}") for f in iceberg_type.fields])
    if isinstance(iceberg_type, ListType):
        element = spark_type_from_iceberg(iceberg_type.element_type, f"{path}.element")
        return st.ArrayType(element, containsNull=not iceberg_type.element_required)
    if isinstance(iceberg_type, MapType):
        key = spark_type_from_iceberg(iceberg_type.key_type, f"{path}.key")
        value = spark_type_from_iceberg(iceberg_type.value_type, f"{path}.value")
        return st.MapType(key, value, valueContainsNull=not iceberg_type.value_required)
    if isinstance(iceberg_type, DecimalType):
        return st.DecimalType(iceberg_type.precision, iceberg_type.scale)
    if isinstance(iceberg_type, TimeType):
        if _SPARK_TIME is None:
            raise _refused(path, iceberg_type, "this Spark version has no type for (TIME needs Spark >= 4.1)")
        time_type: st.DataType = _SPARK_TIME(6)
        return time_type
    for iceberg_class, spark_type in _SIMPLE:
        if isinstance(iceberg_type, iceberg_class):
            return spark_type
    if type(iceberg_type).__name__ == "UnknownType":  # format v3: a column with no values yet
        return st.NullType()
    raise _refused(path, iceberg_type, "Spark cannot hold exactly (no matching Spark type)")


def _field(f: NestedField, path: str) -> st.StructField:
    return st.StructField(f.name, spark_type_from_iceberg(f.field_type, path), nullable=not f.required)


def spark_schema_from_iceberg(schema: Schema) -> st.StructType:
    """The Spark schema of a read of ``schema`` (same names and order; required -> non-nullable)."""
    return st.StructType([_field(f, f.name) for f in schema.fields])


def _accepts(user: st.DataType, table: st.DataType) -> bool:
    """True if ``user`` has ``table``'s shape and types and allows nulls wherever ``table`` does."""
    if isinstance(user, st.StructType) and isinstance(table, st.StructType):
        return len(user.fields) == len(table.fields) and all(
            u.name == t.name and (u.nullable or not t.nullable) and _accepts(u.dataType, t.dataType)
            for u, t in zip(user.fields, table.fields, strict=True)
        )
    if isinstance(user, st.ArrayType) and isinstance(table, st.ArrayType):
        return (user.containsNull or not table.containsNull) and _accepts(user.elementType, table.elementType)
    if isinstance(user, st.MapType) and isinstance(table, st.MapType):
        return (
            (user.valueContainsNull or not table.valueContainsNull)
            and _accepts(user.keyType, table.keyType)
            and _accepts(user.valueType, table.valueType)
        )
    return bool(user == table)


def project_user_schema(user: st.StructType, schema: Schema, table: str) -> Schema:
    """The table columns a user-given read schema (``spark.read.schema(...)``) selects, in its order.

    A user schema is a projection: each of its columns must be a top-level table column with the
    type the table's column reads as (nullability may widen, never narrow), so only those columns are
    read from the data files.

    Raises:
        InvalidOptionsError: a column the table lacks, or one whose type differs.
    """
    by_name = {f.name: f for f in schema.fields}
    fields: list[NestedField] = []
    for column in user.fields:
        found = by_name.get(column.name)
        if found is None:
            raise InvalidOptionsError(
                f"read schema column {column.name!r}: expected a column of table {table} "
                f"({', '.join(by_name)}), found none; drop it from .schema(...) or fix its name"
            )
        expected = spark_type_from_iceberg(found.field_type, found.name)
        if not _accepts(column.dataType, expected) or (not column.nullable and not found.required):
            nullable = "" if column.nullable else " not null"
            raise InvalidOptionsError(
                f"read schema column {column.name!r}: expected {expected.simpleString()} (the table's type; "
                f"nullable: {not found.required}), found {column.dataType.simpleString()}{nullable}; "
                "use the table's type in .schema(...)"
            )
        fields.append(found)
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=[])
