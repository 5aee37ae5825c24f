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
from pyiceberg.types import (
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.codec.row_filter import (
    apply_matcher,
    bind_row_filter,
    file_matcher,
    filter_columns,
    filter_field_ids,
    row_violations,
)
from pyspark_fenced_sink.protocol.replace import EntryRefused, Match

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
        ("ts >= '2026-01-01 12:00'", data_file(BY_DAY_REGION, (DAY_2026_01_01, "eu"), (1, 9)), Match.UNPROVEN),
        ("id >= 5", data_file(UNPARTITIONED, (), (5, 9)), Match.ALL),
        ("id >= 5", data_file(UNPARTITIONED, (), (1, 4)), Match.NONE),
        ("id >= 5", data_file(UNPARTITIONED, (), (1, 9)), Match.SOME),
        ("id >= 5", data_file(UNPARTITIONED, (), (5, 9), nulls=1), Match.SOME),
    ],
    ids=[
        "partition-inside",
        "other-region",
        "day-before",
        "cuts-a-day-no-ts-statistics",
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


FLOATS = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(6, "x", DoubleType(), required=False),
)


def float_file(lo: float, hi: float, *, nans: int | None = 0, nulls: int | None = 0, count: int = 10) -> DataFile:
    """A file of ``x`` values in [lo, hi] (bounds exclude NaN, as Iceberg's do) with the given counts."""
    df = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"x-{lo}-{hi}-{nans}-{nulls}",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=count,
        file_size_in_bytes=1,
        value_counts={6: count},
        null_value_counts=None if nulls is None else {6: nulls},
        nan_value_counts=None if nans is None else {6: nans},
        lower_bounds={6: to_bytes(DoubleType(), lo)},
        upper_bounds={6: to_bytes(DoubleType(), hi)},
    )
    df.spec_id = 0
    return df


@pytest.mark.parametrize(
    ("text", "file", "expected"),
    [
        ("x < 100", float_file(1.0, 2.0), Match.ALL),
        ("x < 100", float_file(1.0, 2.0, nans=1), Match.SOME),
        ("x < 100", float_file(1.0, 2.0, nans=None), Match.UNPROVEN),
        ("x < 100", float_file(1.0, 2.0, nulls=None), Match.UNPROVEN),
        ("x > 100", float_file(1.0, 2.0, nans=None), Match.NONE),
        ("x != 5", float_file(6.0, 9.0, nulls=2), Match.SOME),
        ("x != 5", float_file(6.0, 9.0), Match.ALL),
        ("x IS NULL", float_file(0.0, 0.0, nulls=10), Match.ALL),
        ("x IS NULL", float_file(0.0, 0.0, nulls=None), Match.UNPROVEN),
    ],
    ids=[
        "no-nan-inside",
        "a-nan-row-does-not-match",
        "nan-count-absent-is-unknown",
        "null-count-absent-is-unknown",
        "outside-whatever-the-nans",
        "not-equal-null-rows-do-not-match",
        "not-equal-all-values-differ",
        "all-null",
        "null-test-without-counts",
    ],
)
def test_absent_statistics_are_unknown_never_zero(text: str, file: DataFile, expected: Match) -> None:
    """A missing NaN or null count never proves a file's rows all match; known NaNs and nulls match no comparison."""
    assert file_matcher(text, FLOATS, {0: UNPARTITIONED})(file) is expected


def test_a_file_without_any_metrics_is_unproven_unless_its_partition_decides() -> None:
    """``write.metadata.metrics.default=none``: no counts, no bounds; only the partition can place the file."""
    bare = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="bare",
        file_format=FileFormat.PARQUET,
        partition=Record(DAY_2026_01_01, "eu"),
        record_count=10,
        file_size_in_bytes=1,
    )
    bare.spec_id = 1
    matcher = file_matcher("region = 'eu' AND id >= 5", SCHEMA, {0: UNPARTITIONED, 1: BY_DAY_REGION})
    assert matcher(bare) is Match.UNPROVEN
    assert file_matcher("region = 'us'", SCHEMA, {1: BY_DAY_REGION})(bare) is Match.NONE
    assert file_matcher("region = 'eu'", SCHEMA, {1: BY_DAY_REGION})(bare) is Match.ALL


def test_bounds_written_before_an_int_to_long_promotion_still_place_the_file() -> None:
    """4-byte bounds of a column promoted to long decode as ints (as Iceberg readers do), not as an error."""

    def old_int_file(lower: bytes) -> DataFile:
        df = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path="old-int",
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=10,
            file_size_in_bytes=1,
            value_counts={1: 10},
            null_value_counts={1: 0},
            lower_bounds={1: lower},
            upper_bounds={1: to_bytes(IntegerType(), 9)},
        )
        df.spec_id = 0
        return df

    assert file_matcher("id >= 5", SCHEMA, {0: UNPARTITIONED})(old_int_file(to_bytes(IntegerType(), 5))) is Match.ALL
    assert file_matcher("id >= 7", SCHEMA, {0: UNPARTITIONED})(old_int_file(to_bytes(IntegerType(), 5))) is Match.SOME
    damaged = old_int_file(b"\x01\x02\x03")  # beyond any promotion: the statistics cannot place the file
    assert file_matcher("id >= 5", SCHEMA, {0: UNPARTITIONED})(damaged) is Match.UNPROVEN


def test_apply_matcher_follows_the_field_ids_a_filter_was_planned_with() -> None:
    """Renamed: the filter follows its field id; dropped: refused; a new column of the old name is not it."""
    planned = filter_field_ids("REGION = 'eu'", SCHEMA.model_dump_json())
    assert planned == (("REGION", 3),)
    renamed = Schema(
        *(NestedField(f.field_id, "area" if f.field_id == 3 else f.name, f.field_type) for f in SCHEMA.fields)
    )
    eu = data_file(BY_DAY_REGION, (DAY_2026_01_01, "eu"), (1, 9))
    renamed_spec = PartitionSpec(*BY_DAY_REGION.fields, spec_id=1)
    assert apply_matcher("REGION = 'eu'", planned, renamed, {1: renamed_spec})(eu) is Match.ALL
    dropped = Schema(*(f for f in SCHEMA.fields if f.field_id != 3), NestedField(9, "region", StringType()))
    with pytest.raises(EntryRefused, match=r"field id 3.*dropped"):
        apply_matcher("REGION = 'eu'", planned, dropped, {0: UNPARTITIONED})
    with pytest.raises(EntryRefused, match="no longer binds"):
        apply_matcher("REGION = 'eu'", (), renamed, {0: UNPARTITIONED})  # an older entry, bound by name
