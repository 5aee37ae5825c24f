"""Iceberg -> Spark types (the inverse of the writer's mapping) and user-given read schemas."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DecimalType,
    FixedType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampNanoType,
    TimestamptzNanoType,
    TimeType,
    UUIDType,
)
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.spark.schema_from_iceberg import (
    project_user_schema,
    spark_schema_from_iceberg,
    spark_type_from_iceberg,
)
from pyspark_fenced_sink.spark.schema_to_iceberg import iceberg_schema_from_spark

#: The writer's type table (docs/SEMANTICS.md, "Schemas"), nested to depth, every nullability.
WRITER_TYPES = T.StructType(
    [
        T.StructField("bo", T.BooleanType(), False),
        T.StructField("i", T.IntegerType()),
        T.StructField("l", T.LongType()),
        T.StructField("f", T.FloatType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("dec", T.DecimalType(38, 10)),
        T.StructField("s", T.StringType()),
        T.StructField("bin", T.BinaryType()),
        T.StructField("dt", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("t", T.TimeType(6)),
        T.StructField(
            "st",
            T.StructType(
                [
                    T.StructField("x", T.IntegerType(), False),
                    T.StructField("arr", T.ArrayType(T.StructType([T.StructField("y", T.StringType())]), False)),
                ]
            ),
        ),
        T.StructField("m", T.MapType(T.StringType(), T.ArrayType(T.LongType(), True), False)),
    ]
)


def test_the_writers_type_table_reads_back_as_itself() -> None:
    """Spark -> Iceberg (writer) -> Spark (reader) is the identity on the writer's types."""
    assert spark_schema_from_iceberg(iceberg_schema_from_spark(WRITER_TYPES)) == WRITER_TYPES


@pytest.mark.parametrize(
    ("spark_type", "read_as"),
    [
        (T.ByteType(), T.IntegerType()),
        (T.ShortType(), T.IntegerType()),
        (T.CharType(3), T.StringType()),
        (T.VarcharType(9), T.StringType()),
    ],
)
def test_narrow_writer_types_read_as_their_iceberg_type(spark_type: T.DataType, read_as: T.DataType) -> None:
    """byte/short are stored as int and char/varchar as string: they read back as int and string."""
    schema = iceberg_schema_from_spark(T.StructType([T.StructField("c", spark_type)]))
    assert spark_schema_from_iceberg(schema)["c"].dataType == read_as


@pytest.mark.parametrize(
    ("iceberg_type", "spark_type"),
    [
        (UUIDType(), T.StringType()),
        (FixedType(16), T.BinaryType()),
        (TimeType(), T.TimeType(6)),
        (DecimalType(9, 3), T.DecimalType(9, 3)),
        (
            MapType(1, StringType(), 2, IntegerType(), value_required=True),
            T.MapType(T.StringType(), T.IntegerType(), False),
        ),
        (ListType(1, LongType(), element_required=False), T.ArrayType(T.LongType(), True)),
    ],
)
def test_types_other_engines_write(iceberg_type: IcebergType, spark_type: T.DataType) -> None:
    """uuid -> string, fixed -> binary, time -> time(6), as Iceberg's own Spark reader maps them."""
    assert spark_type_from_iceberg(iceberg_type, "c") == spark_type


@pytest.mark.parametrize("iceberg_type", [TimestampNanoType(), TimestamptzNanoType()])
def test_types_spark_cannot_hold_are_refused_naming_the_column(iceberg_type: IcebergType) -> None:
    """Nanosecond timestamps (v3) have no Spark type: refused, naming the column path and the way out."""
    nested = StructType(NestedField(5, "inner", iceberg_type))
    with pytest.raises(ReadRefusedError, match=r"column 'outer.inner' has Iceberg type .*\.schema\(\.\.\.\)") as err:
        spark_type_from_iceberg(nested, "outer")
    assert err.value.fields == {"column": "outer.inner"}


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "payload", StructType(NestedField(4, "x", BinaryType()))),
    schema_id=3,
)


def test_a_user_schema_projects_columns_in_its_order() -> None:
    """A user schema is a projection: only its columns, in its order, with the table's field ids."""
    user = T.StructType([T.StructField("name", T.StringType()), T.StructField("id", T.LongType())])
    projected = project_user_schema(user, SCHEMA, "db.t")
    assert [(f.field_id, f.name) for f in projected.fields] == [(2, "name"), (1, "id")]
    assert projected.schema_id == 3


@pytest.mark.parametrize(
    ("user", "match"),
    [
        (T.StructField("nope", T.StringType()), r"column 'nope': expected a column of table db.t \(id, name, payl"),
        (T.StructField("id", T.IntegerType()), r"read schema column 'id': expected bigint .* found int"),
        (T.StructField("name", T.StringType(), False), "expected string .*nullable: True.* found string not null"),
        (
            T.StructField("payload", T.StructType([T.StructField("x", T.StringType())])),
            "read schema column 'payload': expected struct<x:binary>",
        ),
    ],
)
def test_a_user_schema_that_does_not_fit_the_table_is_refused(user: T.StructField, match: str) -> None:
    """Unknown columns, other types and narrower nullability are refused, naming the column."""
    with pytest.raises(InvalidOptionsError, match=match):
        project_user_schema(T.StructType([user]), SCHEMA, "db.t")


def test_a_user_schema_may_widen_nullability() -> None:
    """A required table column may be read as nullable (never the reverse)."""
    user = T.StructType([T.StructField("id", T.LongType(), True)])
    assert project_user_schema(user, SCHEMA, "db.t").fields[0].required is True
