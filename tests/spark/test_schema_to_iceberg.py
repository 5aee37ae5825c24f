"""Tests for pyspark_fenced_sink.spark.schema_to_iceberg: Spark -> Iceberg conversion and write checks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
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
)
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink.errors import InvalidOptionsError, SchemaMismatchError
from pyspark_fenced_sink.spark.schema_to_iceberg import check_write_schema, iceberg_schema_from_spark
from pyspark_fenced_sink.write.schema_plan import SchemaAddition, SchemaPlan, apply_additions


@contextmanager
def raises_exact(message: str) -> Iterator[None]:
    """Expect a SchemaMismatchError whose message is exactly ``message``."""
    with pytest.raises(SchemaMismatchError, match="^" + re.escape(message) + "$"):
        yield


def sf(name: str, dtype: T.DataType, nullable: bool = True) -> T.StructField:
    return T.StructField(name, dtype, nullable)


def st(*fields: T.StructField) -> T.StructType:
    return T.StructType(list(fields))


# ---------------------------------------------------------------- conversion


def test_every_supported_spark_type_maps_to_its_iceberg_type() -> None:
    """The type map is exact for every primitive Spark type."""
    spark = st(
        sf("bo", T.BooleanType()),
        sf("by", T.ByteType()),
        sf("sh", T.ShortType()),
        sf("i", T.IntegerType()),
        sf("l", T.LongType()),
        sf("f", T.FloatType()),
        sf("d", T.DoubleType()),
        sf("dec", T.DecimalType(12, 3)),
        sf("s", T.StringType()),
        sf("c", T.CharType(4)),
        sf("v", T.VarcharType(9)),
        sf("bin", T.BinaryType()),
        sf("dt", T.DateType()),
        sf("ts", T.TimestampType()),
        sf("ntz", T.TimestampNTZType()),
        sf("t", T.TimeType()),
    )
    got = [(f.name, f.field_type) for f in iceberg_schema_from_spark(spark).fields]
    assert got == [
        ("bo", BooleanType()),
        ("by", IntegerType()),
        ("sh", IntegerType()),
        ("i", IntegerType()),
        ("l", LongType()),
        ("f", FloatType()),
        ("d", DoubleType()),
        ("dec", DecimalType(12, 3)),
        ("s", StringType()),
        ("c", StringType()),
        ("v", StringType()),
        ("bin", BinaryType()),
        ("dt", DateType()),
        ("ts", TimestamptzType()),
        ("ntz", TimestampType()),
        ("t", TimeType()),
    ]


def test_nested_types_get_fresh_ids_and_keep_nullability() -> None:
    """Ids are assigned like pyiceberg's assign_fresh_schema_ids; nullability is kept."""
    spark = st(
        sf("id", T.LongType(), nullable=False),
        sf(
            "payload",
            st(
                sf("items", T.ArrayType(st(sf("x", T.IntegerType())), containsNull=False)),
                sf("attrs", T.MapType(T.StringType(), st(sf("y", T.ShortType(), False)), valueContainsNull=True)),
            ),
        ),
        sf("tags", T.ArrayType(T.StringType(), containsNull=True), nullable=False),
    )
    expected = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2,
            "payload",
            StructType(
                NestedField(
                    4,
                    "items",
                    ListType(6, StructType(NestedField(7, "x", IntegerType(), required=False)), element_required=True),
                    required=False,
                ),
                NestedField(
                    5,
                    "attrs",
                    MapType(
                        8,
                        StringType(),
                        9,
                        StructType(NestedField(10, "y", IntegerType(), required=True)),
                        value_required=False,
                    ),
                    required=False,
                ),
            ),
            required=False,
        ),
        NestedField(3, "tags", ListType(11, StringType(), element_required=False), required=True),
    )
    assert iceberg_schema_from_spark(spark) == expected


@pytest.mark.parametrize(
    ("dtype", "shown", "hint"),
    [
        (T.NullType(), "void", "cast it to the type the column should have, e.g. lit(None).cast('string')"),
        (T.DayTimeIntervalType(), "interval day to second", None),
        (T.YearMonthIntervalType(), "interval year to month", None),
        (T.CalendarIntervalType(), "interval", None),
        (T.VariantType(), "variant", "convert it to a string with to_json()"),
        (T.GeometryType(4326), "geometry(4326)", "convert it to WKB binary with st_asbinary()"),
        (T.GeographyType(4326), "geography(4326)", "convert it to WKB binary with st_asbinary()"),
    ],
)
def test_type_iceberg_cannot_hold_names_nested_path_and_what_to_do(dtype: T.DataType, shown: str, hint: str) -> None:
    """Unsupported types are rejected with the full nested path, the Spark type and a fix."""
    hint = hint or "cast it to a supported type (e.g. .cast('string') or .cast('bigint')) or drop it"
    spark = st(sf("payload", st(sf("items", T.ArrayType(st(sf("x", dtype)))))))
    with raises_exact(
        f"column 'payload.items.element.x' has Spark type {shown}, which an Iceberg table cannot store; {hint}"
    ):
        iceberg_schema_from_spark(spark)


def test_udt_is_rejected_at_map_value_path() -> None:
    """A user-defined type inside a map value is rejected naming the map value path."""
    from pyspark.ml.linalg import VectorUDT

    spark = st(sf("m", T.MapType(T.StringType(), VectorUDT())))
    with raises_exact(
        "column 'm.value' has Spark type vector, which an Iceberg table cannot store; cast it to a supported "
        "type (e.g. .cast('string') or .cast('bigint')) or drop it"
    ):
        iceberg_schema_from_spark(spark)


def test_duplicate_dataframe_column_names_are_rejected() -> None:
    """Spark allows duplicate names; Iceberg does not."""
    with raises_exact("the DataFrame has two columns named 'a'; expected unique names: rename or drop one of them"):
        iceberg_schema_from_spark(st(sf("a", T.LongType()), sf("a", T.StringType())))


def test_schema_mismatch_is_an_invalid_options_error() -> None:
    """Callers that catch InvalidOptionsError (and ValueError) also catch schema errors."""
    with pytest.raises(InvalidOptionsError):
        iceberg_schema_from_spark(st(sf("n", T.NullType())))
    with pytest.raises(ValueError, match=r"^column 'n' has Spark type void"):
        iceberg_schema_from_spark(st(sf("n", T.NullType())))


# ---------------------------------------------------------------- write check: good cases

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "amount", DecimalType(12, 2), required=False),
    NestedField(3, "ts", TimestamptzType(), required=False),
    NestedField(
        4,
        "payload",
        StructType(
            NestedField(5, "name", StringType(), required=False),
            NestedField(
                6,
                "items",
                ListType(7, StructType(NestedField(8, "x", LongType(), required=False)), element_required=False),
                required=False,
            ),
            NestedField(
                9,
                "attrs",
                MapType(
                    10,
                    StringType(),
                    11,
                    StructType(NestedField(12, "y", DoubleType(), required=False)),
                    value_required=False,
                ),
                required=False,
            ),
        ),
        required=False,
    ),
    NestedField(13, "note", StringType(), required=False),
)


def df_schema(**overrides: T.DataType | None) -> T.StructType:
    """A DataFrame schema matching TABLE, with some columns replaced or (None) dropped."""
    columns: dict[str, tuple[T.DataType, bool]] = {
        "id": (T.LongType(), False),
        "amount": (T.DecimalType(12, 2), True),
        "ts": (T.TimestampType(), True),
        "payload": (
            st(
                sf("name", T.StringType()),
                sf("items", T.ArrayType(st(sf("x", T.LongType())))),
                sf("attrs", T.MapType(T.StringType(), st(sf("y", T.DoubleType())))),
            ),
            True,
        ),
        "note": (T.StringType(), True),
    }
    fields = []
    for name, (dtype, nullable) in columns.items():
        if name in overrides:
            if overrides[name] is None:
                continue
            dtype = overrides[name]  # type: ignore[assignment]
        fields.append(sf(name, dtype, nullable))
    for name, dtype in overrides.items():
        if name not in columns and dtype is not None:
            fields.append(sf(name, dtype))
    return T.StructType(fields)


def test_identical_schema_gives_an_empty_plan() -> None:
    """Nested structs, lists of structs and maps with struct values match by name."""
    assert check_write_schema(df_schema(), TABLE, merge_schema=False) == SchemaPlan()


def test_columns_match_by_name_in_any_order() -> None:
    """Column order does not matter, at the top level and inside structs."""
    spark = df_schema()
    reordered = T.StructType(list(reversed(spark.fields)))
    payload = reordered["payload"].dataType
    reordered["payload"].dataType = T.StructType(list(reversed(payload.fields)))
    assert check_write_schema(reordered, TABLE, merge_schema=False) == SchemaPlan()


def test_missing_optional_columns_are_recorded_for_null_filling() -> None:
    """Optional table columns absent from the DataFrame are fine, top level and nested."""
    spark = df_schema(
        note=None, payload=st(sf("items", T.ArrayType(st())), sf("attrs", T.MapType(T.StringType(), st())))
    )
    plan = check_write_schema(spark, TABLE, merge_schema=False)
    assert plan.missing == ("payload.name", "payload.items.element.x", "payload.attrs.value.y", "note")
    assert plan.additions == ()


@pytest.mark.parametrize(
    ("column", "dtype"),
    [
        ("amount", T.DecimalType(10, 2)),
        ("id", T.IntegerType()),
        ("id", T.ShortType()),
        ("id", T.ByteType()),
        ("note", T.VarcharType(10)),
        ("note", T.CharType(3)),
    ],
)
def test_safe_promotions_and_aliases_are_accepted(column: str, dtype: T.DataType) -> None:
    """int -> long, decimal widening, byte/short -> int -> long, char/varchar -> string."""
    spark = df_schema(**{column: dtype})
    plan = check_write_schema(spark, TABLE, merge_schema=False)
    assert plan.promoted == (() if column == "note" else (column,))


def test_nested_promotions_float_to_double_and_int_to_long() -> None:
    """Promotions apply inside list elements and map values too."""
    spark = df_schema(
        payload=st(
            sf("name", T.StringType()),
            sf("items", T.ArrayType(st(sf("x", T.IntegerType())))),
            sf("attrs", T.MapType(T.StringType(), st(sf("y", T.FloatType())))),
        )
    )
    plan = check_write_schema(spark, TABLE, merge_schema=False)
    assert plan.promoted == ("payload.items.element.x", "payload.attrs.value.y")


def test_merge_records_top_level_and_nested_additions() -> None:
    """With merge-schema, new columns become optional additions at their parent's path."""
    spark = df_schema(
        extra=T.ArrayType(T.IntegerType()),
        payload=st(
            sf("name", T.StringType()),
            sf("items", T.ArrayType(st(sf("x", T.LongType()), sf("z", T.StringType())))),
            sf("attrs", T.MapType(T.StringType(), st(sf("y", T.DoubleType()), sf("w", T.BooleanType(), False)))),
            sf("deep", st(sf("a", T.DateType(), False))),
        ),
    )
    plan = check_write_schema(spark, TABLE, merge_schema=True)
    assert [(a.parent, a.name, a.path) for a in plan.additions] == [
        (("payload", "items", "element"), "z", "payload.items.element.z"),
        (("payload", "attrs", "value"), "w", "payload.attrs.value.w"),
        (("payload",), "deep", "payload.deep"),
        ((), "extra", "extra"),
    ]
    types = [a.field_type for a in plan.additions]
    assert types[:2] == [StringType(), BooleanType()]
    assert isinstance(types[2], StructType)
    assert types[2].fields[0].field_type == DateType()
    assert types[2].fields[0].required  # nested nullability kept; the added column itself is optional
    assert isinstance(types[3], ListType)
    assert types[3].element_type == IntegerType()
    assert plan.changes_table


def test_apply_additions_updates_a_real_table_schema(tmp_path: object) -> None:
    """apply_additions drives pyiceberg's UpdateSchema; the columns land optional at the right paths."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", TABLE)
    spark = df_schema(
        extra=T.ArrayType(T.IntegerType()),
        payload=st(
            sf("name", T.StringType()),
            sf("items", T.ArrayType(st(sf("x", T.LongType()), sf("z", T.StringType())))),
            sf("attrs", T.MapType(T.StringType(), st(sf("y", T.DoubleType()), sf("w", T.BooleanType())))),
        ),
    )
    plan = check_write_schema(spark, table.schema(), merge_schema=True)
    with table.update_schema() as update:
        apply_additions(update, plan)
    schema = catalog.load_table("db.t").schema()
    for path, expected in [
        ("extra", ListType),
        ("payload.items.element.z", StringType),
        ("payload.attrs.value.w", BooleanType),
    ]:
        found = schema.find_field(path)
        assert isinstance(found.field_type, expected)
        assert not found.required
    assert check_write_schema(spark, schema, merge_schema=False).additions == ()


# ---------------------------------------------------------------- write check: bad cases


def test_extra_column_without_merge_is_rejected() -> None:
    """A column the table lacks needs merge-schema."""
    with raises_exact(
        "column 'extra' (int): expected a column of the table, found none; drop or rename it, or enable the "
        "'merge-schema' option to add it as an optional column"
    ):
        check_write_schema(df_schema(extra=T.IntegerType()), TABLE, merge_schema=False)


def test_extra_nested_column_without_merge_names_its_path() -> None:
    """A new field inside a list element's struct is named by its full path."""
    spark = df_schema(payload=st(sf("items", T.ArrayType(st(sf("x", T.LongType()), sf("z", T.StringType()))))))
    with raises_exact(
        "column 'payload.items.element.z' (string): expected a column of the table, found none; drop or rename "
        "it, or enable the 'merge-schema' option to add it as an optional column"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_missing_required_column_is_rejected() -> None:
    """A required table column must be present."""
    with raises_exact(
        "column 'id': expected in the DataFrame (the table column is required, long), found no such column; "
        "add it to the DataFrame"
    ):
        check_write_schema(df_schema(id=None), TABLE, merge_schema=True)


def test_case_only_difference_is_explained() -> None:
    """'ID' vs 'id' is reported as a case difference, not as missing plus extra."""
    spark = T.StructType([sf("ID", T.LongType(), False), *df_schema(id=None).fields])
    with raises_exact(
        "column 'id': expected a DataFrame column named 'id', found 'ID', which differs only in case; rename "
        "it (names are case-sensitive)"
    ):
        check_write_schema(spark, TABLE, merge_schema=True)


def test_case_only_difference_of_an_extra_column_is_explained() -> None:
    """An extra column whose name differs from a table column only in case says so."""
    spark = df_schema(NOTE=T.StringType())
    with raises_exact(
        "column 'NOTE' (string): expected a column of the table, found none (the table has 'note', which "
        "differs only in case); drop or rename it, or enable the 'merge-schema' option to add it as an "
        "optional column"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


@pytest.mark.parametrize(
    ("column", "dtype", "expected", "found", "hint"),
    [
        ("id", T.StringType(), "long", "string", "cast it to bigint"),
        ("id", T.DoubleType(), "long", "double", "cast it to bigint"),
        ("ts", T.TimestampNTZType(), "timestamptz", "timestamp_ntz", "cast it to timestamp"),
        ("amount", T.DecimalType(14, 2), "decimal(12, 2)", "decimal(14,2)", "cast it to decimal(12,2)"),
        ("amount", T.DecimalType(12, 3), "decimal(12, 2)", "decimal(12,3)", "cast it to decimal(12,2)"),
        ("note", T.BinaryType(), "string", "binary", "cast it to string"),
        ("note", st(sf("a", T.StringType())), "string", "struct<a:string>", "cast it to string"),
        (
            "payload",
            T.StringType(),
            "struct<name: string, items: list<struct<x: long>>, attrs: map<string, struct<y: double>>>",
            "string",
            "make it a struct with the table's fields",
        ),
    ],
)
def test_incompatible_top_level_types_are_rejected(
    column: str, dtype: T.DataType, expected: str, found: str, hint: str
) -> None:
    """Narrowing, tz/ntz mixups, string->number and struct vs non-struct are errors."""
    with raises_exact(f"column {column!r}: expected {expected} (table), found {found} (DataFrame); {hint}"):
        check_write_schema(df_schema(**{column: dtype}), TABLE, merge_schema=True)


def test_long_into_int_is_rejected() -> None:
    """long -> int would lose values."""
    table = Schema(NestedField(1, "n", IntegerType(), required=False))
    with raises_exact("column 'n': expected int (table), found bigint (DataFrame); cast it to int"):
        check_write_schema(st(sf("n", T.LongType())), table, merge_schema=False)


def test_double_into_float_is_rejected() -> None:
    """double -> float would lose precision."""
    table = Schema(NestedField(1, "n", FloatType(), required=False))
    with raises_exact("column 'n': expected float (table), found double (DataFrame); cast it to float"):
        check_write_schema(st(sf("n", T.DoubleType())), table, merge_schema=False)


def test_type_mismatch_inside_list_of_structs_names_the_element_path() -> None:
    """Nested mismatches name the full path through the list element."""
    spark = df_schema(payload=st(sf("items", T.ArrayType(st(sf("x", T.StringType()))))))
    with raises_exact(
        "column 'payload.items.element.x': expected long (table), found string (DataFrame); cast it to bigint"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_type_mismatch_inside_map_value_names_the_value_path() -> None:
    """Nested mismatches name the full path through the map value."""
    spark = df_schema(payload=st(sf("attrs", T.MapType(T.StringType(), st(sf("y", T.BooleanType()))))))
    with raises_exact(
        "column 'payload.attrs.value.y': expected double (table), found boolean (DataFrame); cast it to double"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_map_key_type_mismatch_names_the_key_path() -> None:
    """Map keys are checked like any column."""
    spark = df_schema(payload=st(sf("attrs", T.MapType(T.IntegerType(), st(sf("y", T.DoubleType()))))))
    with raises_exact("column 'payload.attrs.key': expected string (table), found int (DataFrame); cast it to string"):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_list_versus_non_list_is_rejected() -> None:
    """An array column where the table has a list of structs needs the right element type."""
    spark = df_schema(payload=st(sf("items", T.StringType())))
    with raises_exact(
        "column 'payload.items': expected list<struct<x: long>> (table), found string (DataFrame); make it an "
        "array of the table's element type"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_nullable_column_into_required_column_is_rejected() -> None:
    """A nullable DataFrame column cannot fill a required table column."""
    spark = T.StructType([sf("id", T.LongType(), nullable=True), *df_schema(id=None).fields])
    with raises_exact(
        "column 'id': expected non-null values (the table column is required), found a nullable column in the "
        "DataFrame; write a non-null expression (e.g. coalesce(...)) or make the table column optional"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_nullable_list_elements_into_required_elements_are_rejected() -> None:
    """containsNull=True cannot fill a list whose elements are required."""
    table = Schema(NestedField(1, "xs", ListType(2, LongType(), element_required=True), required=False))
    with raises_exact(
        "column 'xs.element': expected non-null values (the table column is required), found a nullable list "
        "element in the DataFrame; write a non-null expression (e.g. coalesce(...)) or make the table column "
        "optional"
    ):
        check_write_schema(st(sf("xs", T.ArrayType(T.LongType(), containsNull=True))), table, merge_schema=False)


def test_nullable_map_values_into_required_values_are_rejected() -> None:
    """valueContainsNull=True cannot fill a map whose values are required."""
    table = Schema(NestedField(1, "m", MapType(2, StringType(), 3, LongType(), value_required=True), required=False))
    with raises_exact(
        "column 'm.value': expected non-null values (the table column is required), found a nullable map value "
        "in the DataFrame; write a non-null expression (e.g. coalesce(...)) or make the table column optional"
    ):
        check_write_schema(st(sf("m", T.MapType(T.StringType(), T.LongType(), True))), table, merge_schema=False)


def test_new_field_in_map_key_struct_cannot_be_merged() -> None:
    """Iceberg cannot add fields to map keys, even with merge-schema."""
    table = Schema(
        NestedField(
            1,
            "m",
            MapType(2, StructType(NestedField(4, "a", LongType(), required=False)), 3, LongType(), False),
            required=False,
        )
    )
    spark = st(sf("m", T.MapType(st(sf("a", T.LongType()), sf("b", T.LongType())), T.LongType())))
    with raises_exact(
        "column 'm.key.b': expected only the table's fields inside a map key, found a new field; Iceberg cannot "
        "add fields to map keys: drop it"
    ):
        check_write_schema(spark, table, merge_schema=True)


def test_unsupported_type_in_merged_column_is_rejected() -> None:
    """A new column whose type Iceberg cannot hold fails even with merge-schema."""
    with raises_exact(
        "column 'extra' has Spark type interval day to second, which an Iceberg table cannot store; cast it to a "
        "supported type (e.g. .cast('string') or .cast('bigint')) or drop it"
    ):
        check_write_schema(df_schema(extra=T.DayTimeIntervalType()), TABLE, merge_schema=True)


def test_duplicate_names_inside_a_struct_are_rejected() -> None:
    """Duplicate names inside a nested struct are reported with the struct's path."""
    spark = df_schema(payload=st(sf("name", T.StringType()), sf("name", T.StringType())))
    with raises_exact(
        "struct 'payload' has two columns named 'name'; expected unique names: rename or drop one of them"
    ):
        check_write_schema(spark, TABLE, merge_schema=False)


def test_addition_path_joins_parent_and_name() -> None:
    """SchemaAddition.path is the dotted path used in messages."""
    assert SchemaAddition(("a", "element"), "b", StringType()).path == "a.element.b"
