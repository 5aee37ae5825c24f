"""The replace-where row filter: binding, the executors' row check, file classification (PROTOCOL.md §5.1)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestampType, TimestamptzType

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.codec.row_filter import bind_row_filter, file_matcher, filter_columns, row_violations
from pyspark_fenced_sink.protocol.replace import Match

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "Region", StringType(), required=False),
    NestedField(4, "local", TimestampType(), required=False),
    NestedField(5, "d", DateType(), required=False),
)
BY_DAY_REGION = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"),
    PartitionField(source_id=3, field_id=1001, transform=IdentityTransform(), name="Region"),
    spec_id=1,
)
UNPARTITIONED = PartitionSpec(spec_id=0)
UTC = dt.UTC


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("ts >= '2026-01-01'", 1767225600000000),
        ("ts >= '2026-01-01 06:00:00'", 1767225600000000 + 6 * 3600 * 10**6),
        ("ts >= '2026-01-01 06:00'", 1767225600000000 + 6 * 3600 * 10**6),
        ("ts >= '2026-01-01T06:00:00+02:00'", 1767225600000000 + 4 * 3600 * 10**6),
        ("local >= '2026-01-01'", 1767225600000000),
    ],
    ids=["date-only-is-utc-midnight", "space-separated", "no-seconds", "explicit-offset", "timestamp-without-zone"],
)
def test_timestamp_literals_may_be_written_as_people_write_them(text: str, micros: int) -> None:
    """A date alone is midnight, a space may replace T, a timestamptz without offset is UTC."""
    bound = bind_row_filter(text, SCHEMA)
    assert bound.literal.value == micros  # type: ignore[attr-defined]


def test_column_names_bind_case_insensitively_as_in_spark_sql() -> None:
    """``region`` finds the column ``Region``."""
    assert bind_row_filter("region = 'eu' AND ID > 3", SCHEMA).left.term.field.name == "Region"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "match"),
    [("nope = 1", "nope"), ("id = 'abc'", "invalid"), ("ts >= 'yesterday'", "yesterday"), ("id >", "ParseException")],
)
def test_a_filter_that_does_not_bind_is_an_invalid_option(text: str, match: str) -> None:
    """Unknown columns, literals of the wrong type and syntax errors name the option and the cause."""
    with pytest.raises(InvalidOptionsError, match=f"option replace-where=.*{match}"):
        bind_row_filter(text, SCHEMA)


def test_row_violations_are_the_rows_where_the_filter_is_false_or_null() -> None:
    """A null in a filtered column does not satisfy the filter (SQL semantics)."""
    arrow = schema_to_pyarrow(SCHEMA)
    batch = pa.RecordBatch.from_pylist(
        [
            {"id": 1, "Region": "eu"},
            {"id": 2, "Region": "us"},
            {"id": 3, "Region": None},
            {"id": 4, "Region": "eu"},
        ],
        schema=arrow,
    )
    bad = row_violations(batch, "region = 'eu'", SCHEMA.model_dump_json())
    assert bad.column("id").to_pylist() == [2, 3]
    assert filter_columns("region = 'eu' and id > 1", SCHEMA.model_dump_json()) == ("Region", "id")


def data_file(
    spec: PartitionSpec, partition: tuple[object, ...], ids: tuple[int, int], nulls: int = 0, count: int = 10
) -> DataFile:
    df = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"f-{partition}-{ids}",
        file_format=FileFormat.PARQUET,
        partition=Record(*partition),
        record_count=count,
        file_size_in_bytes=1,
        value_counts={1: count},
        null_value_counts={1: nulls},
        lower_bounds={1: to_bytes(LongType(), ids[0])},
        upper_bounds={1: to_bytes(LongType(), ids[1])},
    )
    df.spec_id = spec.spec_id
    return df


DAY_2026_01_01 = 20454
NONE = Match.NONE


@pytest.mark.parametrize(
    ("text", "file", "expected"),
    [
        ("ts >= '2026-01-01' AND region = 'eu'", data_file(BY_DAY_REGION, (DAY_2026_01_01, "eu"), (1, 9)), Match.ALL),
        ("ts >= '2026-01-01' AND region = 'eu'", data_file(BY_DAY_REGION, (DAY_2026_01_01, "us"), (1, 9)), Match.NONE),
        (
            "ts >= '2026-01-01' AND region = 'eu'",
            data_file(BY_DAY_REGION, (DAY_2026_01_01 - 1, "eu"), (1, 9)),
            Match.NONE,
        ),
        ("ts >= '2026-01-01 12:00'", data_file(BY_DAY_REGION, (DAY_2026_01_01, "eu"), (1, 9)), Match.SOME),
        ("id >= 5", data_file(UNPARTITIONED, (), (5, 9)), Match.ALL),
        ("id >= 5", data_file(UNPARTITIONED, (), (1, 4)), Match.NONE),
        ("id >= 5", data_file(UNPARTITIONED, (), (1, 9)), Match.SOME),
        ("id >= 5", data_file(UNPARTITIONED, (), (5, 9), nulls=1), Match.SOME),
    ],
    ids=[
        "partition-inside",
        "other-region",
        "day-before",
        "cuts-a-day",
        "stats-inside",
        "stats-outside",
        "stats-straddle",
        "null-rows-do-not-match",
    ],
)
def test_files_are_classified_by_partition_projections_and_column_statistics(
    text: str, file: DataFile, expected: Match
) -> None:
    """ALL only when every row must match, NONE only when none can, SOME (refused) otherwise."""
    matcher = file_matcher(text, SCHEMA, {0: UNPARTITIONED, 1: BY_DAY_REGION})
    assert matcher(file) is expected
