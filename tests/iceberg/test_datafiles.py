"""Tests for pyspark_fenced_sink.iceberg.codec.datafiles: DataFile <-> JSON codec."""

from __future__ import annotations

import copy
import json
import re
import uuid
from decimal import Decimal
from typing import Any

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.iceberg.codec.datafiles import data_file_layout_version, decode_data_file, encode_data_file


def ptype(*types: Any) -> StructType:
    return StructType(*(NestedField(1000 + i, f"p{i}", t, required=False) for i, t in enumerate(types)))


def make_file(partition: Record, format_version: int = 2, **overrides: Any) -> DataFile:
    args: dict[str, Any] = {
        "content": DataFileContent.DATA,
        "file_path": "s3://bucket/t/data/ts_day=2024-01-02/w-x~1~0~x~3-7-ab.parquet",
        "file_format": FileFormat.PARQUET,
        "partition": partition,
        "record_count": 1234,
        "file_size_in_bytes": 56789,
        "column_sizes": {1: 100, 2: 200, 17: 3},
        "value_counts": {1: 1234, 2: 1234, 17: 1234},
        "null_value_counts": {1: 0, 2: 17, 17: 0},
        "nan_value_counts": {2: 4},
        "lower_bounds": {1: b"\x00\x00\x00\x00\x00\x00\x00\x00", 17: b"abc"},
        "upper_bounds": {1: b"\xff\x00\x00\x00\x00\x00\x00\x00", 17: b"abd\xff"},
        "split_offsets": [4, 1048580],
        "sort_order_id": None,
        "key_metadata": None,
        "equality_ids": None,
    }
    args.update(overrides)
    data_file = DataFile.from_args(_table_format_version=data_file_layout_version(format_version), **args)
    data_file.spec_id = 3
    return data_file


def assert_same(a: DataFile, b: DataFile) -> None:
    """Field-by-field equality (DataFile.__eq__ compares paths only)."""
    assert a._data == b._data
    assert [type(x) for x in a.partition._data] == [type(x) for x in b.partition._data]
    assert a.spec_id == b.spec_id
    for name in ("content", "file_format", "record_count", "lower_bounds", "split_offsets", "sort_order_id"):
        assert getattr(a, name) == getattr(b, name)


def round_trip(data_file: DataFile, partition_type: StructType, format_version: int = 2) -> DataFile:
    wire = json.loads(json.dumps(encode_data_file(data_file, partition_type)))
    return decode_data_file(wire, partition_type, format_version)


@pytest.mark.parametrize(
    ("result_type", "value"),
    [
        (IntegerType(), 7),  # bucket, identity int, year/month/hour
        (IntegerType(), -3),
        (LongType(), 2**40 + 1),  # identity long, truncate long
        (StringType(), "héllo wörld"),  # identity / truncate string
        (DateType(), 19724),  # day (days since epoch)
        (TimestampType(), 1_704_164_645_123_456),  # identity timestamp (micros)
        (TimestamptzType(), -1),
        (DecimalType(10, 2), Decimal("-1234.56")),
        (DecimalType(38, 10), Decimal("1234567890123456789012345678.0123456789")),
        (BinaryType(), b"\x00\xffab"),
        (BooleanType(), True),
        (BooleanType(), False),
        (TimeType(), 3_600_000_000),
        (FloatType(), 1.5),
        (DoubleType(), 0.1),
        (UUIDType(), uuid.UUID("12345678-1234-5678-1234-567812345678").bytes),
        (LongType(), None),  # void, or a null source value
        (StringType(), None),
    ],
)
def test_partition_value_of_every_result_type_round_trips(result_type: Any, value: Any) -> None:
    """Each partition result type survives encode -> JSON -> decode exactly."""
    partition_type = ptype(result_type)
    original = make_file(Record(value))
    decoded = round_trip(original, partition_type)
    assert_same(original, decoded)
    assert decoded.partition[0] == value


def test_multi_field_partition_with_nulls_round_trips() -> None:
    """Several partition fields, some null, keep their order and types."""
    partition_type = ptype(DateType(), IntegerType(), StringType(), LongType(), DecimalType(5, 1))
    original = make_file(Record(19724, 5, None, 9, Decimal("12.5")))
    assert_same(original, round_trip(original, partition_type))


def test_unpartitioned_file_round_trips() -> None:
    """An empty partition tuple encodes as an empty list."""
    original = make_file(Record())
    encoded = encode_data_file(original, StructType())
    assert encoded["pt"] == []
    assert_same(original, round_trip(original, StructType()))


def test_none_valued_optional_stats_round_trip_as_none() -> None:
    """Optional stats that are None stay None (not empty maps)."""
    original = make_file(
        Record(),
        column_sizes=None,
        value_counts=None,
        null_value_counts=None,
        nan_value_counts=None,
        lower_bounds=None,
        upper_bounds=None,
        split_offsets=None,
    )
    decoded = round_trip(original, StructType())
    assert_same(original, decoded)
    assert decoded.lower_bounds is None
    assert decoded.column_sizes is None
    assert decoded.split_offsets is None


def test_empty_stats_maps_stay_empty() -> None:
    """Empty maps are distinct from None and are kept."""
    original = make_file(Record(), nan_value_counts={}, lower_bounds={}, upper_bounds={})
    decoded = round_trip(original, StructType())
    assert decoded.nan_value_counts == {}
    assert decoded.lower_bounds == {}


def test_sort_order_key_metadata_and_equality_ids_round_trip() -> None:
    """The rarely set fields are carried too."""
    original = make_file(Record(), sort_order_id=2, key_metadata=b"\x01\x02", equality_ids=[1, 2])
    assert_same(original, round_trip(original, StructType()))


def test_encoding_is_compact_json() -> None:
    """Short keys, string field ids, base64 bounds."""
    encoded = encode_data_file(make_file(Record(19724)), ptype(DateType()))
    assert set(encoded) == {"v", "c", "p", "f", "s", "pt", "n", "z", "cs", "vc", "nc", "nn", "lb", "ub", "so",
                            "o", "km", "eq"}  # fmt: skip
    assert encoded["pt"] == ["DE0AAA=="]
    assert encoded["cs"] == {"1": 100, "2": 200, "17": 3}
    assert encoded["lb"]["17"] == "YWJj"
    assert encoded["f"] == "PARQUET"
    assert encoded["s"] == 3
    assert len(json.dumps(encoded)) < 600


@pytest.mark.parametrize("format_version", [1, 2, 3])
def test_decoded_layout_matches_the_table_format_version(format_version: int) -> None:
    """v1/v2 tables get pyiceberg's v2 in-memory layout, v3 tables the v3 layout; accessors work."""
    original = make_file(Record(5), format_version=format_version)
    decoded = round_trip(original, ptype(IntegerType()), format_version)
    assert_same(original, decoded)
    assert decoded.content == DataFileContent.DATA
    assert decoded.record_count == 1234
    assert decoded.file_size_in_bytes == 56789
    assert len(decoded._data) == (20 if format_version == 3 else 16)


def test_encoding_a_partition_of_the_wrong_arity_fails() -> None:
    """The partition tuple must match the partition type."""
    with pytest.raises(CorruptControlDataError, match=r"expected 2 partition values .*, found 1"):
        encode_data_file(make_file(Record(1)), ptype(IntegerType(), IntegerType()))


def test_encoding_a_file_without_spec_id_fails() -> None:
    """A DataFile whose spec_id was never set cannot be routed to a spec."""
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="x",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=1,
    )
    with pytest.raises(CorruptControlDataError, match="expected its spec_id to be set, found none"):
        encode_data_file(data_file, StructType())


def good() -> dict[str, Any]:
    return encode_data_file(make_file(Record(19724, "x")), ptype(DateType(), StringType()))


def corrupt(mutate: Any) -> dict[str, Any]:
    d = copy.deepcopy(good())
    mutate(d)
    return d


BAD = [
    ("missing path", lambda d: d.pop("p"), "'p': expected a non-empty path, found '<missing>'"),
    ("empty path", lambda d: d.update(p=""), "'p': expected a non-empty path, found ''"),
    ("wrong version", lambda d: d.update(v=9), "'v': expected codec version 1, found 9"),
    ("delete file", lambda d: d.update(c=1), "'c': expected 0 (data), found 1"),
    ("bad format", lambda d: d.update(f="CSV"), "'f': expected a file format name, found 'CSV'"),
    ("negative count", lambda d: d.update(n=-1), "'n': expected a record count, found -1"),
    ("bool size", lambda d: d.update(z=True), "'z': expected a file size, found True"),
    ("string spec id", lambda d: d.update(s="0"), "'s': expected a partition spec id, found '0'"),
    ("short partition", lambda d: d.update(pt=["DE0AAA=="]), "'pt': expected 2 partition values, found"),
    ("partition not list", lambda d: d.update(pt="x"), "'pt': expected a list of 2 partition values, found 'x'"),
    ("partition not b64", lambda d: d["pt"].__setitem__(0, "@@"), "'pt[0]': expected a base64 string, found '@@'"),
    ("partition bad bytes", lambda d: d["pt"].__setitem__(0, "AA=="), "'pt[0]': expected a serialized date value"),
    ("partition bad utf8", lambda d: d["pt"].__setitem__(1, "/w=="), "'pt[1]': expected a serialized string"),
    ("count map key", lambda d: d["cs"].update({"a": 1}), "'cs': expected integer field ids as keys, found 'a'"),
    ("count map value", lambda d: d["vc"].update({"1": "x"}), "'vc.1': expected a non-negative integer, found 'x'"),
    ("count map type", lambda d: d.update(nc=[1]), "'nc': expected an object of field id -> value, or null"),
    ("bound not b64", lambda d: d["lb"].update({"1": 5}), "'lb.1': expected a base64 string, found 5"),
    ("offsets", lambda d: d.update(so=[1, "2"]), "'so': expected a list of integers or null, found [1, '2']"),
    ("sort order", lambda d: d.update(o="1"), "'o': expected a sort order id or null, found '1'"),
    ("key metadata", lambda d: d.update(km=3), "'km': expected base64 or null, found 3"),
]


@pytest.mark.parametrize(("mutate", "message"), [(m, msg) for _, m, msg in BAD], ids=[n for n, _, _ in BAD])
def test_corrupt_input_names_the_field(mutate: Any, message: str) -> None:
    """Every malformed field raises CorruptControlDataError naming that field."""
    with pytest.raises(CorruptControlDataError, match="^data file entry field " + re.escape(message)):
        decode_data_file(corrupt(mutate), ptype(DateType(), StringType()), 2)


def test_non_object_input_is_corrupt() -> None:
    """A list where an object belongs is rejected."""
    with pytest.raises(CorruptControlDataError, match="field '<entry>': expected an object, found"):
        decode_data_file([1, 2], StructType(), 2)  # type: ignore[arg-type]


def test_corrupt_message_says_what_to_do() -> None:
    """The message tells the operator the WAL entry is damaged."""
    with pytest.raises(CorruptControlDataError, match=r"damaged: inspect it before recovering$"):
        decode_data_file(corrupt(lambda d: d.pop("n")), ptype(DateType(), StringType()), 2)
