"""Real Spark tests of ``read_table``: Spark's own Parquet reader over the files fencedlake plans.

Every native read is compared with ``spark.read.format("fencedlake")`` of the same
table and options (the data source, itself checked against pyiceberg and DuckDB in
``test_read.py``), and the tests check the path taken: Spark's file scan over
exactly the planned files when native, the data source (and why) otherwise.
The module's session is its own (``spark.newSession()``): ``read_table`` sets a
session SQL conf.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimeType,
    UUIDType,
)
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink import InvalidOptionsError, read_table
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark import delete_bitmap, jvm_calls, native_deletes
from pyspark_fenced_sink.spark.native_deletes import listed_name, spark_file_name
from pyspark_fenced_sink.spark.native_read import FIELD_ID_READ, TIME_TYPE_CONF, plan_native_read
from tests.read.rowdelta import commit_deletes, position_delete_file

pytestmark = pytest.mark.spark

UTC = dt.UTC

ROWS = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("s", T.StringType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("dec", T.DecimalType(20, 4)),
        T.StructField("dt", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("bin", T.BinaryType()),
        T.StructField(
            "st",
            T.StructType(
                [
                    T.StructField("x", T.IntegerType()),
                    T.StructField("items", T.ArrayType(T.StructType([T.StructField("y", T.StringType())]))),
                ]
            ),
        ),
        T.StructField("m", T.MapType(T.StringType(), T.ArrayType(T.LongType()))),
    ]
)


def _rows(lo: int, hi: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for i in range(lo, hi):
        if i % 4 == 3:
            out.append((i, *([None] * 7), {"x": None, "items": None}, None))
            continue
        out.append(
            (
                i,
                f"s{i}\u00e9",
                [math.inf, -0.0, 1e300][i % 3],
                Decimal(i).scaleb(-4) + Decimal("1234.5"),
                dt.date(2026, 1, 1) + dt.timedelta(days=i % 30),
                dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i * 7),
                dt.datetime(2024, 2, 29, 12) + dt.timedelta(minutes=i),
                bytes([i % 256, 0]),
                {"x": i, "items": [{"y": f"y{i}"}, {"y": None}]},
                {"a": [i, -i], "b": []},
            )
        )
    return out


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("read-table") / "wh")


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    return spark.newSession()


def _write(session: Any, wh: str, table: str, rows: list[tuple[Any, ...]], schema: Any = ROWS, **options: str) -> None:
    writer = session.createDataFrame(rows, schema).write.format("fencedlake").mode("append").option("warehouse", wh)
    writer.options(**options).save(table)


def _plain(value: Any) -> Any:
    if isinstance(value, T.Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _sorted(df: Any) -> list[Any]:
    return sorted((_plain(r) for r in df.collect()), key=lambda r: r["id"])


def _source(session: Any, wh: str, table: str, **options: str) -> Any:
    return session.read.format("fencedlake").option("warehouse", wh).options(**options).load(table)


def _local(path: str, *, uri: bool = False) -> str:
    """A data file's local path; ``uri``: Spark's form (a URI, ``%`` escaped as ``%25``)."""
    path = path.removeprefix("file:")
    return str(Path(unquote(path) if uri else path).resolve())


def _assert_native(df: Any, planned: tuple[str, ...]) -> None:
    """``df`` is Spark's Parquet file scan over exactly the ``planned`` data files."""
    assert planned, "a native plan with no files"
    assert sorted(_local(p, uri=True) for p in df.inputFiles()) == sorted(_local(p) for p in planned)
    assert "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("partition_by", ["", "day(ts), s"], ids=["unpartitioned", "partitioned"])
def test_native_read_returns_the_sources_rows_through_sparks_parquet_scan(
    session: Any, wh: str, partition_by: str
) -> None:
    """Nested types, nulls, decimals and both timestamps: the same rows and columns as the data source."""
    table = "db.native_" + ("p" if partition_by else "u")
    _write(session, wh, table, _rows(0, 40), **{"partition-by": partition_by})
    _write(session, wh, table, _rows(40, 60), **{"partition-by": partition_by})
    plan = plan_native_read(session, table, warehouse=wh)
    assert plan.native and plan.reason == "" and len(plan.files) >= 2
    df = read_table(session, table, warehouse=wh)
    _assert_native(df, plan.files)
    source = _source(session, wh, table)
    assert df.columns == source.columns == ROWS.names  # no partition columns inferred from directory names
    assert df.schema.simpleString() == source.schema.simpleString()  # types (metadata and nullability aside)
    assert _sorted(df) == _sorted(source)
    assert len(_sorted(df)) == 60


def test_renamed_dropped_readded_and_added_columns_read_by_field_id(session: Any, wh: str) -> None:
    """Old files carry old names: columns still match by field id, as Iceberg reads them."""
    schema = T.StructType(
        [T.StructField("id", T.LongType(), False), T.StructField("a", T.StringType()), T.StructField("b", T.LongType())]
    )
    _write(session, wh, "db.evolved", [(i, f"a{i}", i * 10) for i in range(5)], schema)
    table = embedded_catalog(wh).load_table("db.evolved")
    with table.update_schema() as update:
        update.rename_column("a", "name")
        update.delete_column("b")
    with table.update_schema() as update:
        update.add_column("b", StringType())  # same name as the dropped column, a new field id
        update.add_column("c", LongType())
    new = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("b", T.StringType()),
            T.StructField("c", T.LongType()),
        ]
    )
    _write(session, wh, "db.evolved", [(i, f"n{i}", f"b{i}", i) for i in range(5, 8)], new)
    plan = plan_native_read(session, "db.evolved", warehouse=wh)
    assert plan.native
    df = read_table(session, "db.evolved", warehouse=wh)
    _assert_native(df, plan.files)
    rows = _sorted(df)
    assert rows[:5] == [{"id": i, "name": f"a{i}", "b": None, "c": None} for i in range(5)]
    assert rows[5:] == [{"id": i, "name": f"n{i}", "b": f"b{i}", "c": i} for i in range(5, 8)]
    assert rows == _sorted(_source(session, wh, "db.evolved"))


def test_promoted_int_column_reads_natively(session: Any, wh: str) -> None:
    """int -> long promotion: files of both widths, one long column."""
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("v", T.IntegerType())])
    _write(session, wh, "db.promoted", [(i, i - 2) for i in range(4)], schema)
    table = embedded_catalog(wh).load_table("db.promoted")
    with table.update_schema() as update:
        update.update_column("v", LongType())
    wide = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("v", T.LongType())])
    _write(session, wh, "db.promoted", [(4, 2**40)], wide)
    df = read_table(session, "db.promoted", warehouse=wh)
    _assert_native(df, plan_native_read(session, "db.promoted", warehouse=wh).files)
    assert df.schema["v"].dataType == T.LongType()
    assert _sorted(df) == [{"id": i, "v": i - 2} for i in range(4)] + [{"id": 4, "v": 2**40}]


def test_time_travel_reads_the_files_of_that_snapshot(session: Any, wh: str) -> None:
    """snapshot-id, tag and an incremental range plan their own files; rows as the data source's."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    for lo in (0, 5, 10):
        _write(session, wh, "db.travel", [(i,) for i in range(lo, lo + 5)], schema)
    table = embedded_catalog(wh).load_table("db.travel")
    first, second = (s.snapshot_id for s in table.metadata.snapshots[:2])
    table.manage_snapshots().create_tag(first, "v1").commit()
    cases: list[tuple[dict[str, str], list[int]]] = [
        ({"snapshot-id": str(second)}, list(range(10))),
        ({"tag": "v1"}, list(range(5))),
        ({"start-snapshot-id": str(first), "end-snapshot-id": str(second)}, list(range(5, 10))),
        ({}, list(range(15))),
    ]
    for options, ids in cases:
        plan = plan_native_read(session, "db.travel", warehouse=wh, **options)
        df = read_table(session, "db.travel", warehouse=wh, **options)
        _assert_native(df, plan.files)
        assert sorted(r.id for r in df.collect()) == ids, options
        assert sorted(r.id for r in _source(session, wh, "db.travel", **options).collect()) == ids


#: The three native ways to drop deleted rows: (COLLECT_LIMIT, BITMAP_ROWS, the unsafe literal is built).
_DELETE_PATHS = {
    "bitmap": (native_deletes.COLLECT_LIMIT, native_deletes.BITMAP_ROWS, True),
    "bitmap-unavailable": (native_deletes.COLLECT_LIMIT, native_deletes.BITMAP_ROWS, False),
    "collected": (native_deletes.COLLECT_LIMIT, -1, True),
    "spark-read": (-1, native_deletes.BITMAP_ROWS, True),
}


@pytest.mark.parametrize("path", list(_DELETE_PATHS))
def test_position_deletes_are_applied_natively_per_planned_data_file(
    session: Any, wh: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted positions leave the rows (a bitmap filter, or an anti-join: keys collected on the driver or read by
    Spark); clean files join nothing."""
    collect_limit, bitmap_rows, unsafe_literal = _DELETE_PATHS[path]
    monkeypatch.setattr(native_deletes, "COLLECT_LIMIT", collect_limit)
    monkeypatch.setattr(native_deletes, "BITMAP_ROWS", bitmap_rows)
    if not unsafe_literal:
        monkeypatch.setattr(delete_bitmap, "long_array", lambda spark, values: None)
    table_name = f"db.deleted_{path.replace('-', '_')}"
    schema = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("s", T.StringType())])
    for lo in (0, 10, 20):
        _write(session, wh, table_name, [(i, f"s{i}") for i in range(lo, lo + 10)], schema)
    table = embedded_catalog(wh).load_table(table_name)
    files = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.file_path)
    first, second = files[0].file_path, files[1].file_path
    table = commit_deletes(table, [position_delete_file(table, first, [0, 3])])
    # One delete file naming two data files (no bounds: the planner applies it to both) and a third, unplanned one.
    shared = position_delete_file(table, first, [4], named=False)
    table = commit_deletes(table, [shared, position_delete_file(table, second, [1])])
    plan = plan_native_read(session, table_name, warehouse=wh)
    assert plan.native and {f.path for f in plan.dirty} >= {first, second}
    df = read_table(session, table_name, warehouse=wh, native=True)
    source = _source(session, wh, table_name)
    kept = _sorted(df)
    assert kept == _sorted(source) == sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert len(kept) == 30 - 4
    assert df.columns == ["id", "s"] and df.schema.simpleString() == source.schema.simpleString()
    executed = df._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in executed and "BatchEvalPython" not in executed and "PythonScan" not in executed
    read = {_local(p, uri=True) for p in df.inputFiles()}
    deletes = {_local(p) for f in plan.dirty for p in f.delete_files}
    assert read - deletes == {_local(p) for p in plan.files}  # Spark reads the delete files only when told to
    assert (read & deletes == deletes) is (collect_limit < 0)
    joined = "BroadcastHashJoin" in executed
    assert joined is (path != "bitmap"), executed
    if path == "bitmap":  # the bitmap travels in the plan as one token, not spelled out value by value
        assert "UnsafeArrayData" in executed and len(executed) < 20_000


def _dirty_table(session: Any, wh: str, table_name: str, files: int) -> tuple[Any, int]:
    """``files`` data files of 5 rows, each with its first row deleted: (the table, rows kept)."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    df = session.createDataFrame([(i,) for i in range(5 * files)], schema).repartitionByRange(files, "id")
    df.write.format("fencedlake").mode("append").option("warehouse", wh).save(table_name)
    table = embedded_catalog(wh).load_table(table_name)
    paths = sorted(t.file.file_path for t in table.scan().plan_files())
    assert len(paths) == files
    table = commit_deletes(table, [position_delete_file(table, p, [0]) for p in paths])
    return table, 4 * files


def _ids(df: Any) -> list[int]:
    return sorted(r.id for r in df.collect())


def _sized_table(session: Any, wh: str, table_name: str, rows: list[int]) -> tuple[Any, int]:
    """One data file per entry of ``rows`` holding that many rows (so sizes differ), each with its first row deleted."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    start = 0
    for count in rows:
        df = session.createDataFrame([(i,) for i in range(start, start + count)], schema).coalesce(1)
        df.write.format("fencedlake").mode("append").option("warehouse", wh).save(table_name)
        start += count
    table = embedded_catalog(wh).load_table(table_name)
    files = list(table.scan().plan_files())
    assert len({t.file.file_size_in_bytes for t in files}) == len(files) == len(rows)
    table = commit_deletes(table, [position_delete_file(table, t.file.file_path, [0]) for t in files])
    return table, sum(rows) - len(rows)


def _sized_table_more(session: Any, wh: str, table_name: str, rows: list[int], deleted: list[int]) -> None:
    """One more data file per entry of ``rows`` holding that many rows, each with its rows ``deleted`` deleted."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    before = {t.file.file_path for t in embedded_catalog(wh).load_table(table_name).scan().plan_files()}
    start = 1_000 + 100 * len(before)
    for count in rows:
        df = session.createDataFrame([(i,) for i in range(start, start + count)], schema).coalesce(1)
        df.write.format("fencedlake").mode("append").option("warehouse", wh).save(table_name)
        start += count
    table = embedded_catalog(wh).load_table(table_name)
    added = [t.file.file_path for t in table.scan().plan_files() if t.file.file_path not in before]
    if deleted:
        commit_deletes(table, [position_delete_file(table, p, deleted) for p in added])


def _keyed_by(df: Any) -> str:
    """Which key the bitmap filter of ``df``'s plan looks its rows' files up by."""
    executed = df._jdf.queryExecution().executedPlan().toString()
    assert "UnsafeArrayData" in executed and "BroadcastHashJoin" not in executed
    return "name" if "hash(" in executed else "size"


@pytest.mark.parametrize("key", ["size", "name"])
def test_the_bitmap_finds_every_file_by_probing_past_its_home_slot(
    session: Any, wh: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four files in one home slot (a table of one slot and its spill slots): each row finds its file by probing,
    by size (the files' sizes differ) or by name (they share one)."""
    if key == "size":
        table, kept = _sized_table(session, wh, "db.probed_size", [5, 7, 9, 11])
    else:
        table, kept = _dirty_table(session, wh, "db.probed_name", delete_bitmap._PROBES)
        monkeypatch.setattr(delete_bitmap, "_NAMED_MAX", 0)
    monkeypatch.setattr(delete_bitmap, "_direct", lambda keys: None)
    monkeypatch.setattr(delete_bitmap, "_open_addressed", lambda keys: list(range(len(keys))))
    df = read_table(session, f"db.probed_{key}", warehouse=wh, native=True)
    assert _keyed_by(df) == key
    assert _ids(df) == sorted(r["id"] for r in table.scan().to_arrow().to_pylist())
    assert len(_ids(df)) == kept


def test_a_direct_table_gives_each_key_its_own_slot_at_the_shortest_length() -> None:
    """One lookup per row: key i at ``key mod length``, the shortest such length; none found past the bounds."""
    keys = [245_886, 245_930, 13, 1_000_003, 77]
    table = delete_bitmap._direct(keys)
    assert table is not None and sorted(i for i in table if i is not None) == list(range(len(keys)))
    assert all(table[k % len(table)] == i for i, k in enumerate(keys))
    assert all(len({k % m for k in keys}) < len(keys) for m in range(len(keys), len(table)))
    assert delete_bitmap._direct([]) == [None]
    assert delete_bitmap._direct([0, 1, 2, 3, 4, 5, 6, 7]) == list(range(8))
    assert delete_bitmap._direct([7, 7 + math.lcm(*range(2, 19))]) is None  # equal modulo every length up to 9 x 2
    assert delete_bitmap._direct(list(range(delete_bitmap._DIRECT_MAX_KEYS + 1))) is None
    files = [delete_bitmap.ScannedFile(f"f{k}", k, 5) for k in keys]
    slots = delete_bitmap._layout(files, {})
    assert slots is not None and (slots.probes, slots.modulus, slots.names) == (1, len(table), ())


@pytest.mark.parametrize("key", ["size", "name"])
def test_files_sharing_a_size_with_a_file_with_deletes_are_told_apart_by_name_in_a_read_by_size(
    session: Any, wh: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files of one size (three with deletes) among files of other sizes: the read stays by size and only the rows
    of the shared size compare names; past ``_NAMED_MAX`` such files the whole read is by name."""
    name = f"db.shared_size_{key}"
    _dirty_table(session, wh, name, 3)
    _sized_table_more(session, wh, name, [7, 9], deleted=[0])
    _sized_table_more(session, wh, name, [11], deleted=[])
    # Five rows of small ids: the size of the files with deletes, without deletes of its own.
    clean = session.createDataFrame([(i,) for i in range(15, 20)], "id long not null").coalesce(1)
    clean.write.format("fencedlake").mode("append").option("warehouse", wh).save(name)
    table = embedded_catalog(wh).load_table(name)
    tasks = list(table.scan().plan_files())
    dirty_sizes = {t.file.file_size_in_bytes for t in tasks if t.delete_files}
    shared = [t for t in tasks if sum(u.file.file_size_in_bytes == t.file.file_size_in_bytes for u in tasks) > 1]
    assert len(shared) == 4 and {t.file.file_size_in_bytes for t in shared} <= dirty_sizes and len(tasks) == 7
    assert sum(not t.delete_files for t in shared) == 1
    expected = sorted(r["id"] for r in table.scan().to_arrow().to_pylist())
    assert len(expected) == 3 * 4 + 6 + 8 + 11 + 5
    monkeypatch.setattr(delete_bitmap, "_NAMED_MAX", len(shared) if key == "size" else len(shared) - 1)
    df = read_table(session, name, warehouse=wh, native=True)
    assert _keyed_by(df) == key
    assert ("file_path" in df._jdf.queryExecution().executedPlan().toString()) is True
    assert _ids(df) == expected


def test_a_clean_files_rows_read_a_word_no_file_with_deletes_owns(session: Any, wh: str) -> None:
    """Every row of a file without deletes tests word 0 of the bitmap: word 0 must stay clear (the first file with
    deletes starts at word 1), or a clean file would lose the rows at the positions that file deleted."""
    table, kept = _sized_table(session, wh, "db.word_zero", [70, 80])  # row 0 of each deleted
    _sized_table_more(session, wh, "db.word_zero", [90], deleted=[])
    df = read_table(session, "db.word_zero", warehouse=wh, native=True)
    assert _keyed_by(df) == "size"
    table = embedded_catalog(wh).load_table("db.word_zero")
    assert _ids(df) == sorted(r["id"] for r in table.scan().to_arrow().to_pylist())
    assert len(_ids(df)) == kept + 90


def test_a_stored_size_that_is_not_the_manifests_fails_the_read(
    session: Any, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows find their file by the stored file's size: a size the manifest does not record fails, never a wrong row."""
    from pyspark_fenced_sink.spark import native_read

    _sized_table(session, wh, "db.resized", [5, 7])
    real = native_read.apply_deletes
    monkeypatch.setattr(
        native_read,
        "apply_deletes",
        lambda spark, io, reader, files, sizes, dirty: real(
            spark, io, reader, files, [sizes[0] + 1, *sizes[1:]], dirty
        ),
    )
    df = read_table(session, "db.resized", warehouse=wh, native=True)
    assert _keyed_by(df) == "size"
    with pytest.raises(Exception, match="size is not the one its manifest records"):
        df.collect()


def test_names_the_slots_cannot_hold_or_a_hash_spark_disagrees_with_are_anti_joined(
    session: Any, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More names sharing a hash than probes, or a driver hash that is not Spark's: the anti-join, exact rows."""
    assert delete_bitmap._open_addressed([7] * (delete_bitmap._PROBES + 1)) is None
    table, kept = _dirty_table(session, wh, "db.collide", delete_bitmap._PROBES + 2)
    monkeypatch.setattr(delete_bitmap, "_NAMED_MAX", 0)
    expected = sorted(r["id"] for r in table.scan().to_arrow().to_pylist())
    real = delete_bitmap.spark_hash
    for wrong in (lambda name: 7, lambda name: real(name) ^ 1):
        monkeypatch.setattr(delete_bitmap, "spark_hash", wrong)
        monkeypatch.setattr(delete_bitmap, "_HASH_AGREES", {})
        df = read_table(session, "db.collide", warehouse=wh, native=True)
        assert "BroadcastHashJoin" in df._jdf.queryExecution().executedPlan().toString()
        assert _ids(df) == expected and len(expected) == kept


def test_spark_hash_is_sparks_own_hash_of_a_file_name(session: Any) -> None:
    """The slot a row looks in is Spark's hash of its name: the driver's copy of it must agree on every tail."""
    from pyspark.sql import functions as F  # noqa: N812

    names = [
        "",
        "a",
        "ab",
        "abc",
        "abcd",
        "abcde",
        "file:/wh/\u00e9t\u00e9.parquet",
        "s3://b/\u4e2d~x~1.parquet",
        "x" * 101,
    ]
    rows = session.createDataFrame([(n,) for n in names], "n string").select("n", F.hash("n").alias("h")).collect()
    assert [(r.n, delete_bitmap.spark_hash(r.n)) for r in rows] == [(r.n, r.h) for r in rows]


@pytest.mark.parametrize("key", ["size", "named", "name"])
def test_a_file_holding_more_rows_than_its_manifest_records_fails_the_read(
    session: Any, wh: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bitmap gives each file the bits of its recorded rows: a row past them fails the read, never a wrong row."""
    from pyspark_fenced_sink.spark import native_read

    name = f"db.miscounted_{key}"
    if key == "size":
        _sized_table(session, wh, name, [10, 80])
    else:
        _dirty_table(session, wh, name, 2)
        monkeypatch.setattr(delete_bitmap, "_NAMED_MAX", 2 if key == "named" else 0)
    real = native_read.dirty_files
    monkeypatch.setattr(
        native_read, "dirty_files", lambda tasks: tuple(replace(f, record_count=2) for f in real(tasks))
    )
    df = read_table(session, name, warehouse=wh, native=True)
    assert _keyed_by(df) == ("size" if key == "named" else key)
    with pytest.raises(Exception, match="more rows than its manifest records"):
        df.collect()


def test_delete_rows_are_checked_against_every_reader_and_the_count_drops(session: Any, wh: str) -> None:
    """Without the deletes the count would stay: a reader that ignored them fails here."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    _write(session, wh, "db.dropcount", [(i,) for i in range(10)], schema)
    table = embedded_catalog(wh).load_table("db.dropcount")
    data_file = next(iter(table.scan().plan_files())).file.file_path
    before = read_table(session, "db.dropcount", warehouse=wh).count()
    commit_deletes(table, [position_delete_file(table, data_file, [0, 3])])
    df = read_table(session, "db.dropcount", warehouse=wh, native=True)
    assert (before, df.count()) == (10, 8)
    assert sorted(r.id for r in df.collect()) == [1, 2, 4, 5, 6, 7, 8, 9]


def test_spark_file_names_are_predicted_as_hadoop_spells_them() -> None:
    """Iceberg's local forms all become Spark's ``file:/``; escaped characters as java.net.URI escapes them."""
    assert spark_file_name("/wh/d/a.parquet") == "file:/wh/d/a.parquet"
    assert spark_file_name("file:///wh/d/a.parquet") == "file:/wh/d/a.parquet"
    assert spark_file_name("file:/wh//d/a.parquet") == "file:/wh/d/a.parquet"
    assert spark_file_name("s3://bucket/wh/d/a b%.parquet") == "s3://bucket/wh/d/a%20b%25.parquet"
    assert spark_file_name("/wh/k=a~x/\u00e9.parquet") == "file:/wh/k=a~x/\u00e9.parquet"
    assert spark_file_name("file:///wh/h#k?.parquet") == "file:/wh/h%23k%3F.parquet"
    assert listed_name("file:/wh/a.parquet") == "file:///wh/a.parquet"
    assert listed_name("s3a://b/a.parquet") == "s3a://b/a.parquet"


def test_a_file_spark_names_otherwise_leaves_the_read_to_the_data_source(
    session: Any, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong name prediction would lose the deletes: auto falls back, native=True raises."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    _write(session, wh, "db.misnamed", [(i,) for i in range(10)], schema)
    table = embedded_catalog(wh).load_table("db.misnamed")
    data_file = next(iter(table.scan().plan_files())).file.file_path
    commit_deletes(table, [position_delete_file(table, data_file, [1])])
    monkeypatch.setattr(native_deletes, "spark_file_name", lambda path: "file:/elsewhere" + path)
    df = read_table(session, "db.misnamed", warehouse=wh)
    assert "FileScan parquet" not in df._jdf.queryExecution().executedPlan().toString()
    assert sorted(r.id for r in df.collect()) == [0, *range(2, 10)]
    with pytest.raises(InvalidOptionsError, match="names the files otherwise"):
        read_table(session, "db.misnamed", warehouse=wh, native=True)


def test_spark_listed_names_come_in_one_round_trip_and_a_name_split_by_the_separator_is_refused(
    session: Any, wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The names Spark lists arrive joined in one string; a listed name holding the separator splits into more
    names than Spark listed files, and the check refuses it (the read leaves the native path)."""
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    for lo in (0, 10):
        _write(session, wh, "db.listed", [(i,) for i in range(lo, lo + 10)], schema)
    paths = [t.file.file_path for t in embedded_catalog(wh).load_table("db.listed").scan().plan_files()]
    df = session.read.parquet(*[spark_file_name(p) for p in paths])
    predicted = {listed_name(spark_file_name(p)) for p in paths}
    assert sorted(native_deletes._input_files(df, predicted)) == sorted(df.inputFiles()) == sorted(predicted)
    native_deletes._check_names(df, paths)
    monkeypatch.setattr(native_deletes, "free_separator", lambda names: None)  # none free: pyspark's list
    assert sorted(native_deletes._input_files(df, predicted)) == sorted(predicted)
    monkeypatch.setattr(native_deletes, "listed_name", lambda name: name.replace("/", ""))
    monkeypatch.setattr(native_deletes, "free_separator", lambda names: "/")  # not in the predicted names, in Spark's
    assert len(native_deletes._input_files(df, {"x"})) > len(paths)
    with pytest.raises(native_deletes.NameMismatch):
        native_deletes._check_names(df, paths)


def test_the_planned_paths_reach_spark_in_one_round_trip(
    session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyspark's ``parquet(*paths)`` makes a py4j call per path; ``parquet_scan`` sends them joined (a few calls in
    all) and scans the same files; where it cannot (no free separator, a reader without a JVM) pyspark's call."""
    import pyarrow.parquet as pq

    paths = []
    for i in range(12):
        pq.write_table(pa.table({"id": [i]}), tmp_path / f"part-{i}.parquet")
        paths.append(str(tmp_path / f"part-{i}.parquet"))
    reader = session.read.schema("id long")
    jvm_calls.parquet_scan(reader, paths)  # the JVM classes it uses, looked up once
    client = session._sc._gateway._gateway_client
    calls: list[str] = []
    real = client.send_command
    me = threading.get_ident()

    def counted(command: str, *args: Any, **kwargs: Any) -> Any:
        # Only this thread's calls: a collected Java object's proxy sends a memory delete ("m\nd\n...") from
        # wherever the garbage collector runs (79 of them once, under load), not a call of the scan's.
        if threading.get_ident() == me and not command.startswith("m\n"):
            calls.append(command)
        return real(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    scan = jvm_calls.parquet_scan(reader, paths)
    ours = len(calls)
    theirs = reader.parquet(*paths)
    assert ours <= 6 < len(paths) <= len(calls) - ours
    assert sorted(scan.inputFiles()) == sorted(theirs.inputFiles()) and len(scan.inputFiles()) == len(paths)
    assert sorted(r.id for r in scan.collect()) == list(range(12))
    monkeypatch.setattr(jvm_calls, "free_separator", lambda names: None)
    calls.clear()
    assert sorted(jvm_calls.parquet_scan(reader, paths).inputFiles()) == sorted(theirs.inputFiles())
    assert len(calls) >= len(paths)

    class _Reader:  # a Spark Connect reader has no JVM reader
        def parquet(self, *names: str) -> tuple[str, ...]:
            return names

    assert jvm_calls.parquet_scan(_Reader(), paths) == tuple(paths)


def test_a_uuid_column_reads_natively_as_the_data_sources_strings(session: Any, wh: str) -> None:
    """A top-level uuid column: read as its 16 bytes and formatted natively, the data source's strings (nulls too)."""
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "u", UUIDType()))
    catalog = embedded_catalog(wh)
    catalog.create_namespace_if_not_exists("db")
    table = catalog.create_table("db.uuids", schema=schema)
    values = [uuid.UUID(int=12345), uuid.UUID("f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f"), None]
    arrow = table.schema().as_arrow()
    data = pa.table(
        {"id": [1, 2, 3], "u": [v.bytes if v else None for v in values]},
        schema=arrow.set(1, pa.field("u", pa.binary(16))),
    )
    table.append(data.cast(arrow))
    plan = plan_native_read(session, "db.uuids", warehouse=wh)
    assert plan.native and plan.uuid_columns == ("u",), plan.reason
    df = read_table(session, "db.uuids", warehouse=wh)
    _assert_native(df, plan.files)
    source = _source(session, wh, "db.uuids")
    assert df.schema.simpleString() == source.schema.simpleString() == "struct<id:bigint,u:string>"
    assert (
        _sorted(df)
        == _sorted(source)
        == [{"id": i + 1, "u": None if v is None else str(v)} for i, v in enumerate(values)]
    )


def test_uuids_inside_structs_lists_and_maps_read_natively_as_the_data_sources_strings(session: Any, wh: str) -> None:
    """A uuid at any depth (a struct field, a list element, a map key and value) reads as its 16 bytes and is
    formatted natively: the data source's rows, nulls at every level kept."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "s", StructType(NestedField(3, "u", UUIDType()), NestedField(4, "n", IntegerType()))),
        NestedField(5, "l", ListType(6, UUIDType(), element_required=False)),
        NestedField(7, "m", MapType(8, StringType(), 9, UUIDType(), value_required=False)),
        NestedField(10, "k", MapType(11, UUIDType(), 12, IntegerType(), value_required=False)),
        NestedField(13, "b", BinaryType()),
    )
    catalog = embedded_catalog(wh)
    catalog.create_namespace_if_not_exists("db")
    table = catalog.create_table("db.nested_uuids", schema=schema)
    a, b = uuid.UUID(int=12345), uuid.UUID("f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f")
    raw = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("s", pa.struct([pa.field("u", pa.binary(16)), pa.field("n", pa.int32())])),
            pa.field("l", pa.list_(pa.binary(16))),
            pa.field("m", pa.map_(pa.string(), pa.binary(16))),
            pa.field("k", pa.map_(pa.binary(16), pa.int32())),
            pa.field("b", pa.binary()),
        ]
    )
    rows = [
        {
            "id": 1,
            "s": {"u": a.bytes, "n": 1},
            "l": [a.bytes, None, b.bytes],
            "m": [("x", a.bytes), ("y", None)],
            "k": [(b.bytes, 7)],
            "b": a.bytes,
        },
        {"id": 2, "s": {"u": None, "n": 2}, "l": [], "m": [], "k": [], "b": None},
        {"id": 3, "s": None, "l": None, "m": None, "k": None, "b": None},
    ]
    table.append(pa.Table.from_pylist(rows, raw).cast(table.schema().as_arrow()))
    plan = plan_native_read(session, "db.nested_uuids", warehouse=wh)
    assert plan.native and plan.uuid_columns == ("s", "l", "m", "k"), plan.reason
    df = read_table(session, "db.nested_uuids", warehouse=wh)
    _assert_native(df, plan.files)
    source = _source(session, wh, "db.nested_uuids")
    assert df.schema.simpleString() == source.schema.simpleString()
    assert _sorted(df) == _sorted(source)
    first = _sorted(df)[0]
    assert first["s"] == {"u": str(a), "n": 1} and first["l"] == [str(a), None, str(b)]
    assert first["m"] == {"x": str(a), "y": None} and first["k"] == {str(b): 7} and first["b"] == a.bytes
    assert [r["s"] for r in _sorted(df)[1:]] == [{"u": None, "n": 2}, None]


def test_a_time_column_reads_natively_only_where_the_session_turned_sparks_time_type_on(spark: Any, wh: str) -> None:
    """Spark 4.3 keeps TIME behind a preview setting: off, a time column falls back to the data source (whose
    Arrow path gives time(6)); on (the user's choice, never read_table's), Spark's reader reads it: the same rows."""
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "t", TimeType()))
    catalog = embedded_catalog(wh)
    catalog.create_namespace_if_not_exists("db")
    table = catalog.create_table("db.times", schema=schema)
    times = [dt.time(12, 30, 1, 5), None]
    table.append(pa.table({"id": [1, 2], "t": times}).cast(table.schema().as_arrow()))
    expected = [{"id": 1, "t": times[0]}, {"id": 2, "t": None}]
    off, on = spark.newSession(), spark.newSession()
    off.conf.set(TIME_TYPE_CONF, "false")
    on.conf.set(TIME_TYPE_CONF, "true")
    plan = plan_native_read(off, "db.times", warehouse=wh)
    assert not plan.native and "'t'" in plan.reason and TIME_TYPE_CONF in plan.reason
    assert _sorted(read_table(off, "db.times", warehouse=wh)) == _sorted(_source(off, wh, "db.times")) == expected
    assert off.conf.get(TIME_TYPE_CONF) == "false"
    plan = plan_native_read(on, "db.times", warehouse=wh)
    assert plan.native, plan.reason
    df = read_table(on, "db.times", warehouse=wh)
    _assert_native(df, plan.files)
    assert (
        df.schema.simpleString() == _source(on, wh, "db.times").schema.simpleString() == "struct<id:bigint,t:time(6)>"
    )
    assert _sorted(df) == expected


def test_a_session_that_turned_field_ids_off_gets_the_data_source(spark: Any, wh: str) -> None:
    """Reading Iceberg files by name is not safe after renames: an explicit false is respected, never overridden."""
    other = spark.newSession()
    other.conf.set(FIELD_ID_READ, "false")
    schema = T.StructType([T.StructField("id", T.LongType(), False)])
    _write(other, wh, "db.byname", [(1,), (2,)], schema)
    plan = plan_native_read(other, "db.byname", warehouse=wh)
    assert not plan.native and FIELD_ID_READ in plan.reason
    assert other.conf.get(FIELD_ID_READ) == "false"
    assert sorted(r.id for r in read_table(other, "db.byname", warehouse=wh).collect()) == [1, 2]
    fresh = spark.newSession()
    assert plan_native_read(fresh, "db.byname", warehouse=wh).native
    assert fresh.conf.get(FIELD_ID_READ) == "true"


def test_empty_table_and_bad_arguments(session: Any, wh: str) -> None:
    """An empty table reads as no rows with the table's columns; bad input is a clear InvalidOptionsError."""
    embedded_catalog(wh).create_table(
        "db.empty", schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "n", IntegerType()))
    )
    df = read_table(session, "db.empty", warehouse=wh)
    assert df.columns == ["id", "n"] and df.count() == 0
    with pytest.raises(InvalidOptionsError, match="native="):
        read_table(session, "db.empty", warehouse=wh, native="yes")
    with pytest.raises(InvalidOptionsError, match="does not exist"):
        read_table(session, "db.missing", warehouse=wh)
    with pytest.raises(InvalidOptionsError):
        read_table(session, "db.empty", warehouse=wh, **{"snapshot-id": "12"})


def test_paths_spark_would_misread_are_not_handed_to_it() -> None:
    """A scheme the session cannot open is the probe's reason; globs are never passed."""
    from pyspark_fenced_sink.spark.native_read import _path_obstacle

    def probe(scheme: str) -> str:
        return "" if scheme == "s3a" else f"no {scheme}"

    assert _path_obstacle(["/wh/data/a.parquet", "file:///wh/data/b.parquet"], probe) == ""
    assert _path_obstacle(["s3://bucket/data/a.parquet"], probe) == "no s3"
    assert _path_obstacle(["s3a://bucket/data/a.parquet"], probe) == ""
    assert "glob" in _path_obstacle(["/wh/data/region=a[1]/f.parquet"], probe)


class _FakeJvmFileSystem:
    """What the probe calls: Hadoop's FileSystem.getFileSystemClass(scheme, conf), over a dict of schemes."""

    def __init__(self, served: dict[str, str]) -> None:
        self.served = served
        self.asked: list[str] = []

    def getFileSystemClass(self, scheme: str, conf: Any) -> str:  # noqa: N802 - Hadoop's name
        self.asked.append(scheme)
        if scheme not in self.served:
            raise RuntimeError(f'No FileSystem for scheme "{scheme}"')
        return self.served[scheme]


def _fake_session(served: dict[str, str] | None) -> tuple[Any, _FakeJvmFileSystem]:
    from types import SimpleNamespace

    fs = _FakeJvmFileSystem(served or {})
    if served is None:  # Spark Connect: no _jsc, no _jvm
        return SimpleNamespace(), fs
    jvm = SimpleNamespace(
        org=SimpleNamespace(apache=SimpleNamespace(hadoop=SimpleNamespace(fs=SimpleNamespace(FileSystem=fs))))
    )
    return SimpleNamespace(_jsc=SimpleNamespace(hadoopConfiguration=dict), _jvm=jvm), fs


@pytest.mark.parametrize(
    ("served", "scheme", "native"),
    [
        ({"s3": "org.apache.hadoop.fs.s3a.S3AFileSystem"}, "s3", True),
        ({"s3a": "org.apache.hadoop.fs.s3a.S3AFileSystem"}, "s3", False),
        ({"abfs": "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem"}, "abfs", True),
        ({}, "gs", False),
        (None, "s3", False),
    ],
    ids=["s3-mapped-to-s3a", "s3-unmapped", "abfs", "gs-no-connector", "connect"],
)
def test_auto_goes_native_on_an_object_store_only_where_the_session_can_open_it(
    served: dict[str, str] | None, scheme: str, native: bool
) -> None:
    """The probe asks the session's Hadoop for the scheme's filesystem; Connect cannot be asked."""
    from pyspark_fenced_sink.spark.native_read import scheme_obstacle

    session, fs = _fake_session(served)
    reason = scheme_obstacle(session, scheme)
    assert (reason == "") is native
    assert fs.asked == ([] if served is None else [scheme])
    if not native:
        assert f"{scheme}://" in reason


def test_the_probe_asks_the_real_sessions_hadoop(session: Any) -> None:
    """pip's pyspark serves file:// but has no S3A jar: s3a:// is a reason, file:// none."""
    from pyspark_fenced_sink.spark.native_read import scheme_obstacle

    assert scheme_obstacle(session, "file") == ""
    assert "s3a://" in scheme_obstacle(session, "s3a")
