"""Tests for pyspark_fenced_sink.iceberg.codec.partitioning: the partition-by option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.codec.partitioning import parse_partition_by, same_partitioning, spec_to_text

SCHEMA = Schema(
    NestedField(1, "ts", TimestamptzType(), required=False),
    NestedField(2, "user_id", LongType(), required=True),
    NestedField(3, "code", StringType(), required=False),
    NestedField(4, "region", StringType(), required=False),
    NestedField(5, "d", DateType(), required=False),
    NestedField(6, "ntz", TimestampType(), required=False),
    NestedField(7, "flag", BooleanType(), required=False),
    NestedField(8, "score", DoubleType(), required=False),
    NestedField(9, "amount", DecimalType(10, 2), required=False),
    NestedField(10, "raw", BinaryType(), required=False),
    NestedField(
        11,
        "a",
        StructType(
            NestedField(12, "b", DateType(), required=False),
            NestedField(13, "my col", IntegerType(), required=False),
        ),
        required=False,
    ),
    NestedField(
        14,
        "items",
        ListType(15, StructType(NestedField(16, "x", IntegerType(), required=False)), element_required=False),
        required=False,
    ),
    NestedField(17, "m", MapType(18, StringType(), 19, LongType(), value_required=False), required=False),
    NestedField(20, "n", IntegerType(), required=False),
)


def field(source_id: int, n: int, transform: object, name: str) -> PartitionField:
    return PartitionField(source_id=source_id, field_id=1000 + n, transform=transform, name=name)


def test_blank_text_is_unpartitioned() -> None:
    """Empty or blank text means an unpartitioned spec."""
    for text in ("", "   ", "\n"):
        spec = parse_partition_by(text, SCHEMA)
        assert spec.is_unpartitioned()
        assert spec.spec_id == 0


def test_the_documented_example_parses_with_iceberg_names_and_ids() -> None:
    """Names follow Iceberg Java (ts_day, user_id_bucket, code_trunc); ids start at 1000."""
    spec = parse_partition_by("day(ts), bucket(16, user_id), truncate(4, code), region", SCHEMA)
    assert spec == PartitionSpec(
        field(1, 0, DayTransform(), "ts_day"),
        field(2, 1, BucketTransform(16), "user_id_bucket"),
        field(3, 2, TruncateTransform(4), "code_trunc"),
        field(4, 3, IdentityTransform(), "region"),
        spec_id=0,
    )


@pytest.mark.parametrize(
    ("text", "transform", "source_id", "name"),
    [
        ("year(ts)", YearTransform(), 1, "ts_year"),
        ("years(ts)", YearTransform(), 1, "ts_year"),
        ("month(d)", MonthTransform(), 5, "d_month"),
        ("MONTHS(d)", MonthTransform(), 5, "d_month"),
        ("day(ntz)", DayTransform(), 6, "ntz_day"),
        ("days(d)", DayTransform(), 5, "d_day"),
        ("hour(ntz)", HourTransform(), 6, "ntz_hour"),
        ("hours(ts)", HourTransform(), 1, "ts_hour"),
        ("bucket(8, amount)", BucketTransform(8), 9, "amount_bucket"),
        ("bucket(code, 8)", BucketTransform(8), 3, "code_bucket"),
        ("truncate(3, raw)", TruncateTransform(3), 10, "raw_trunc"),
        ("truncate(user_id, 10)", TruncateTransform(10), 2, "user_id_trunc"),
        ("identity(flag)", IdentityTransform(), 7, "flag"),
        ("void(score)", VoidTransform(), 8, "score_null"),
        ("a.b", IdentityTransform(), 12, "a.b"),
        ("day(a.b)", DayTransform(), 12, "a.b_day"),
        ("bucket(4, a.`my col`)", BucketTransform(4), 13, "a.my col_bucket"),
        ("`a`.`b`", IdentityTransform(), 12, "a.b"),
    ],
)
def test_each_transform_parses(text: str, transform: object, source_id: int, name: str) -> None:
    """Every transform, plural aliases, either argument order, nested and quoted paths."""
    assert parse_partition_by(text, SCHEMA) == PartitionSpec(field(source_id, 0, transform, name), spec_id=0)


@pytest.mark.parametrize(
    "text",
    [
        "day(ts), bucket(16, user_id), truncate(4, code), region",
        "year(d), month(ntz), hour(ts), void(score), bucket(3, raw), truncate(2, amount), flag",
        "a.b, bucket(4, a.`my col`)",
        "identity(n), truncate(5, n)",
        "",
    ],
)
def test_spec_to_text_round_trips(text: str) -> None:
    """parse(spec_to_text(parse(t))) == parse(t)."""
    spec = parse_partition_by(text, SCHEMA)
    rendered = spec_to_text(spec, SCHEMA)
    assert parse_partition_by(rendered, SCHEMA) == spec
    assert spec_to_text(parse_partition_by(rendered, SCHEMA), SCHEMA) == rendered


def test_spec_to_text_renders_canonical_syntax() -> None:
    """Aliases, spacing and argument order are normalised."""
    spec = parse_partition_by("DAYS( ts ),bucket(user_id,16), `region`, void(a.`my col`)", SCHEMA)
    assert spec_to_text(spec, SCHEMA) == "day(ts), bucket(16, user_id), region, void(a.`my col`)"


def test_same_partitioning_ignores_names_and_ids() -> None:
    """Two specs with the same sources and transforms compare equal whatever their names."""
    ours = parse_partition_by("day(ts), bucket(16, user_id)", SCHEMA)
    pyiceberg_named = PartitionSpec(
        PartitionField(1, 1005, DayTransform(), "ts_day"),
        PartitionField(2, 1006, BucketTransform(16), "user_id_bucket_16"),
        spec_id=3,
    )
    assert same_partitioning(ours, pyiceberg_named)
    assert not same_partitioning(ours, parse_partition_by("day(ts), bucket(8, user_id)", SCHEMA))
    assert not same_partitioning(ours, parse_partition_by("bucket(16, user_id), day(ts)", SCHEMA))


def test_spec_is_accepted_by_catalog_create_table(tmp_path: Path) -> None:
    """The spec is bound to the schema: a real SqlCatalog creates the table with it."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    text = "day(ts), bucket(16, user_id), truncate(4, code), region, day(a.b), void(score)"
    table = catalog.create_table("db.t", SCHEMA, partition_spec=parse_partition_by(text, SCHEMA))
    assert spec_to_text(table.spec(), table.schema()) == text
    assert [f.name for f in table.spec().fields] == [
        "ts_day",
        "user_id_bucket",
        "code_trunc",
        "region",
        "a.b_day",
        "score_null",
    ]


BAD = [
    (
        "nope",
        "unknown column 'nope' in 'nope'; expected one of: ts, user_id, code, region, d, ntz, flag, score, "
        "amount, raw, a, a.b, a.`my col`, items, m, n",
    ),
    (
        "day(a.c)",
        "unknown column 'a.c' in 'day(a.c)'; expected one of: ts, user_id, code, region, d, ntz, flag, "
        "score, amount, raw, a, a.b, a.`my col`, items, m, n",
    ),
    (
        "day(TS)",
        "unknown column 'TS' in 'day(TS)'; the table has 'ts', which differs only in case (names are case-sensitive)",
    ),
    (
        "dy(ts)",
        "unknown transform 'dy' in 'dy(ts)'; expected one of identity, year, month, day, hour, bucket, truncate, void",
    ),
    ("bucket(0, user_id)", "bucket needs a positive number of buckets, found 0 in 'bucket(0, user_id)'"),
    ("truncate(-1,code)", "truncate needs a positive width, found -1 in 'truncate(-1,code)'"),
    (
        "bucket(user_id)",
        "bucket takes 2 arguments (number of buckets, column), found 1 in 'bucket(user_id)'; e.g. bucket(16, col)",
    ),
    (
        "truncate(4, 5, code)",
        "truncate takes 2 arguments (width, column), found 3 in 'truncate(4, 5, code)'; e.g. truncate(4, col)",
    ),
    (
        "bucket(code, region)",
        "bucket takes 2 arguments (number of buckets, column), found 2 in 'bucket(code, region)'; e.g. bucket(16, col)",
    ),
    ("day()", "day takes 1 argument (a column), found 0 in 'day()'"),
    ("day(ts, d)", "day takes 1 argument (a column), found 2 in 'day(ts, d)'"),
    ("day(3)", "day takes 1 argument (a column), found the integer 3 in 'day(3)'"),
    (
        "day(code)",
        "day cannot be applied to column 'code' of type string in 'day(code)'; day accepts date, "
        "timestamp, timestamptz",
    ),
    ("hour(d)", "hour cannot be applied to column 'd' of type date in 'hour(d)'; hour accepts timestamp, timestamptz"),
    (
        "truncate(4, flag)",
        "truncate cannot be applied to column 'flag' of type boolean in 'truncate(4, flag)'; "
        "truncate accepts int, long, decimal, string, binary",
    ),
    (
        "bucket(4, score)",
        "bucket cannot be applied to column 'score' of type double in 'bucket(4, score)'; "
        "bucket accepts int, long, decimal, date, time, timestamp, timestamptz, string, uuid, fixed, binary",
    ),
    (
        "a",
        "identity cannot be applied to column 'a' in 'a': it is a struct; expected a primitive column "
        "(partition by one of its fields instead)",
    ),
    (
        "bucket(4, m)",
        "bucket cannot be applied to column 'm' in 'bucket(4, m)': it is a map; expected a "
        "primitive column (partition by one of its fields instead)",
    ),
    (
        "items.element.x",
        "column 'items.element.x' in 'items.element.x' is inside a list or map; expected a "
        "column reached through structs only (Iceberg cannot partition by list elements or map entries)",
    ),
    (
        "items.x",
        "column 'items.element.x' in 'items.x' is inside a list or map; expected a column reached "
        "through structs only (Iceberg cannot partition by list elements or map entries)",
    ),
    (
        "bucket(4, m.value)",
        "column 'm.value' in 'bucket(4, m.value)' is inside a list or map; expected a column "
        "reached through structs only (Iceberg cannot partition by list elements or map entries)",
    ),
    ("day(ts), days(ts)", "duplicate partition field 'days(ts)' (same as 'day(ts)'); list each partition field once"),
    (
        "region, identity(region)",
        "duplicate partition field 'identity(region)' (same as 'region'); list each partition field once",
    ),
    (
        "day(ts), hour(ts)",
        "'hour(ts)' is redundant with 'day(ts)'; expected at most one of year, month, day, "
        "hour per column: keep the finest one",
    ),
    (
        "bucket(4, user_id), bucket(8, user_id)",
        "'bucket(4, user_id)' and 'bucket(8, user_id)' would both be "
        "named 'user_id_bucket'; expected one bucket transform per column: keep one of them",
    ),
    ("day(ts", "unbalanced parentheses in 'day(ts'"),
    ("day(ts))", "unbalanced parentheses in 'day(ts))'"),
    ("bucket(16, user_id", "unbalanced parentheses in 'bucket(16, user_id'"),
    (
        "day(hour(ts))",
        "expected a column or an integer as argument of 'day', found a nested transform in 'day(hour(ts))'",
    ),
    ("ts,", "empty partition field after the last ',' in 'ts,'"),
    ("ts,,code", "empty partition field in 'ts,,code'"),
    ("ts code", "expected ',' before 'code' in 'ts code'"),
    ("day(ts) ; code", "expected a column, a transform or ',' at '; code' in 'day(ts) ; code'"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[t for t, _ in BAD])
def test_bad_partition_by_is_rejected_with_exact_message(text: str, message: str) -> None:
    """Each malformed option fails with InvalidOptionsError and an exact, actionable message."""
    with pytest.raises(InvalidOptionsError, match="^" + re.escape(f"partition-by: {message}") + "$"):
        parse_partition_by(text, SCHEMA)


def test_partition_name_clashing_with_a_column_is_rejected() -> None:
    """Iceberg forbids a non-identity partition name equal to a column name."""
    schema = Schema(
        NestedField(1, "ts", TimestamptzType(), required=False),
        NestedField(2, "ts_day", IntegerType(), required=False),
    )
    with pytest.raises(
        InvalidOptionsError,
        match="^"
        + re.escape(
            "partition-by: partition field 'ts_day' for 'day(ts)' has the name of a table column; expected "
            "partition names distinct from column names: rename that column"
        )
        + "$",
    ):
        parse_partition_by("day(ts)", schema)


def test_syntax_errors_are_reported_before_unknown_columns() -> None:
    """The whole text is parsed before any column is resolved."""
    with pytest.raises(InvalidOptionsError, match=re.escape("expected ',' before 'y'")):
        parse_partition_by("nope, x y", SCHEMA)
