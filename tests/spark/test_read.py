"""Real Spark end-to-end tests of the batch reader: ``spark.read.format("fencedlake")``.

One embedded warehouse for the module. Tables are written by fencedlake itself
(the writer's whole type table, nested, with nulls), by pyiceberg directly
(types fencedlake never writes), and from Parquet files DuckDB wrote; every
read is compared with an independent one (the source rows, pyiceberg's scan or
DuckDB's ``iceberg_scan``).

Pruning is measured with ``split-size=1``: every data file is then its own
Spark task, so the number of input partitions is the number of files read.
Filter pushdown needs ``spark.sql.python.filterPushdown.enabled=true`` (Spark's
default is false); the module's pushdown tests use their own session
(``spark.newSession()``) with it on, and check the default session reads
correctly, and every file, with it off.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FixedType, LongType, NestedField, StringType, TimeType, UUIDType
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink import ReadRefusedError, fencedlake_error, tune_session
from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark.reader import PUSHED_FILTERS_PRUNE
from tests.read.rowdelta import commit_deletes, equality_delete_file
from tests.spark.support import duckdb_connection, duckdb_rows

pytestmark = pytest.mark.spark

UTC = dt.UTC


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("spark-read") / "wh")


@pytest.fixture(scope="module")
def pushdown(spark: Any) -> Any:
    """A session with Spark's Python filter pushdown on (``tune_session`` turns it on)."""
    session = spark.newSession()
    tune_session(session)
    return session


def load(spark: Any, wh: str, table: str, schema: str | None = None, **options: str) -> Any:
    reader = spark.read.format("fencedlake").option("warehouse", wh)
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(table)


def _fails(action: Callable[[], Any], kind: type[Exception], text: str) -> None:
    """``action`` fails through Spark; fencedlake_error() gives back a ``kind`` whose message holds ``text``."""
    with pytest.raises(Exception, match=re.escape(text)) as err:
        action()
    found = fencedlake_error(err.value)
    assert isinstance(found, kind), f"no {kind.__name__} in {type(err.value).__name__}: {str(err.value)[:500]}"
    assert text in str(found)


# ------------------------------------------------------------------------------------------- round trips

TYPES = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("bo", T.BooleanType()),
        T.StructField("by", T.ByteType()),
        T.StructField("sh", T.ShortType()),
        T.StructField("i", T.IntegerType()),
        T.StructField("f", T.FloatType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("dec", T.DecimalType(38, 10)),
        T.StructField("s", T.StringType()),
        T.StructField("bin", T.BinaryType()),
        T.StructField("dt", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField(
            "st",
            T.StructType(
                [
                    T.StructField("x", T.IntegerType()),
                    T.StructField("items", T.ArrayType(T.StructType([T.StructField("y", T.StringType())]))),
                ]
            ),
        ),
        T.StructField("arr", T.ArrayType(T.LongType())),
        T.StructField("m", T.MapType(T.StringType(), T.ArrayType(T.DoubleType()))),
    ]
)


def _typed_rows(n: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for i in range(n):
        if i % 5 == 4:  # a row of nulls
            rows.append((i, *([None] * 12), {"x": None, "items": None}, None, None))
            continue
        if i % 5 == 3:  # empty collections
            rows.append((i, *([None] * 12), {"x": i, "items": []}, [], {}))
            continue
        rows.append(
            (
                i,
                i % 2 == 0,
                i % 100 - 50,
                i * 3 - 1000,
                i * 1000 - 7,
                float(i) / 4,
                [math.nan, math.inf, -0.0, 1e300][i % 4],
                Decimal(i).scaleb(-10) + Decimal("123456789.0123456789"),
                f"s{i}\u00e9\U0001f600",
                bytes([i % 256, 0, 255]),
                dt.date(1969, 12, 31) + dt.timedelta(days=i * 37),
                dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC) + dt.timedelta(hours=i * 11),
                dt.datetime(2024, 2, 29, 12, 0, 0, 1) + dt.timedelta(minutes=i),
                {"x": i, "items": [{"y": f"y{i}"}, {"y": None}]},
                [i, None, -i],
                {"a": [float(i), None], "b": None},
            )
        )
    return rows


def _normalized(rows: list[Any]) -> list[dict[str, Any]]:
    """Rows as plain values; NaN compared as a marker (NaN != NaN)."""

    def plain(value: Any) -> Any:
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        if isinstance(value, T.Row):
            return {k: plain(v) for k, v in value.asDict().items()}
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, bytearray):
            return bytes(value)
        return value

    return sorted((plain(r) for r in rows), key=lambda r: r["id"])


@pytest.mark.parametrize("partition_by", ["", "bucket(4, id), s"], ids=["unpartitioned", "partitioned"])
def test_every_writer_type_round_trips_with_nulls_and_nesting(spark: Any, wh: str, partition_by: str) -> None:
    """What fencedlake writes, fencedlake reads back value for value (byte and short as int)."""
    table = "db.types_" + ("p" if partition_by else "u")
    source = spark.createDataFrame(_typed_rows(40), TYPES)
    writer = source.write.format("fencedlake").mode("append").option("warehouse", wh)
    writer.option("partition-by", partition_by).save(table)
    read = load(spark, wh, table)
    assert read.schema["by"].dataType == T.IntegerType() and read.schema["sh"].dataType == T.IntegerType()
    assert read.schema["id"].nullable is False and read.schema["m"].dataType == TYPES["m"].dataType
    expected = source.selectExpr("*", "cast(by as int) as by_", "cast(sh as int) as sh_")
    expected = expected.drop("by", "sh").withColumnsRenamed({"by_": "by", "sh_": "sh"})
    assert _normalized(read.collect()) == _normalized(expected.select(*read.columns).collect())


def test_fencedlake_reads_what_duckdb_reads_from_the_same_metadata(spark: Any, wh: str) -> None:
    """An independent reader agrees: DuckDB's iceberg_scan of the table's metadata file, row for row."""
    source = spark.createDataFrame(_typed_rows(10), TYPES).select("id", "s", "dec", "dt", "ntz")
    source.write.format("fencedlake").mode("append").option("warehouse", wh).save("db.duckcheck")
    location = embedded_catalog(wh).load_table("db.duckcheck").metadata_location
    ours = load(spark, wh, "db.duckcheck").orderBy("id").collect()
    assert [r.asDict() for r in ours] == duckdb_rows(location)


def test_a_table_pyiceberg_wrote_with_uuid_fixed_and_time_columns(spark: Any, wh: str) -> None:
    """Types fencedlake never writes: uuid as text, fixed as binary, time as time(6); values as pyiceberg reads."""
    import uuid

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "u", UUIDType()),
        NestedField(3, "fx", FixedType(2)),
        NestedField(4, "t", TimeType()),
        NestedField(5, "s", StringType()),
    )
    catalog = embedded_catalog(wh)
    table = catalog.create_table("db.foreign", schema=schema, properties={"format-version": "2"})
    arrow = table.schema().as_arrow()
    values = [uuid.UUID(int=i * 7919) for i in range(3)]
    data = pa.table(
        {
            "id": [0, 1, 2],
            "u": [values[0].bytes, None, values[2].bytes],
            "fx": [b"ab", b"cd", None],
            "t": [dt.time(0, 0, 0, 1), None, dt.time(23, 59, 59, 999_999)],
            "s": ["x", None, "z"],
        },
        schema=arrow.set(1, pa.field("u", pa.binary(16))),
    )
    table.append(data.cast(arrow))
    rows = load(spark, wh, "db.foreign").orderBy("id").collect()
    assert [r.u for r in rows] == [str(values[0]), None, str(values[2])]
    assert [r.fx for r in rows] == [bytearray(b"ab"), bytearray(b"cd"), None]
    assert [r.t for r in rows] == [dt.time(0, 0, 0, 1), None, dt.time(23, 59, 59, 999_999)]


def test_parquet_files_duckdb_wrote_read_through_the_name_mapping(spark: Any, wh: str, tmp_path: Path) -> None:
    """DuckDB cannot commit Iceberg here (its writes need a REST catalog); its Parquet files added with
    add_files (no field ids) read through the table's name mapping, as DuckDB itself reads them."""
    path = tmp_path / "duck.parquet"
    duckdb_connection().cursor().execute(
        "COPY (SELECT i::BIGINT AS id, 'k' || (i % 3) AS k, (i * 1.5)::DOUBLE AS v FROM range(20) t(i)) "
        f"TO '{path}' (FORMAT parquet)"
    )
    catalog = embedded_catalog(wh)
    schema = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "k", StringType()), NestedField(3, "v", DoubleType())
    )
    table = catalog.create_table("db.duck", schema=schema)
    table.add_files([str(path)])
    expected = duckdb_connection().cursor().execute(f"SELECT id, k, v FROM '{path}' ORDER BY id").fetchall()
    assert [tuple(r) for r in load(spark, wh, "db.duck").orderBy("id").collect()] == [tuple(r) for r in expected]


# ------------------------------------------------------------------------------------------- time travel


def test_time_travel_by_snapshot_timestamp_tag_and_branch(spark: Any, wh: str) -> None:
    """snapshot-id, as-of-timestamp, tag and branch read the rows of that point of the history."""

    def append(lo: int) -> None:
        spark.range(lo, lo + 5).write.format("fencedlake").mode("append").option("warehouse", wh).save("db.tt")

    append(0)
    between = int(time.time() * 1000)
    time.sleep(0.01)
    append(5)
    table = embedded_catalog(wh).load_table("db.tt")
    first = table.metadata.snapshots[0].snapshot_id
    table.manage_snapshots().create_tag(first, "v1").create_branch(first, "audit").commit()
    append(10)

    def ids(**options: str) -> list[int]:
        return sorted(r.id for r in load(spark, wh, "db.tt", **options).collect())

    assert ids() == list(range(15))
    assert ids(**{"snapshot-id": str(first)}) == list(range(5))
    assert ids(**{"as-of-timestamp": str(between)}) == list(range(5))
    assert ids(tag="v1") == ids(branch="audit") == list(range(5))
    second = table.metadata.snapshots[1].snapshot_id
    assert ids(**{"start-snapshot-id": str(first), "end-snapshot-id": str(second)}) == list(range(5, 10))


def test_bad_read_options_fail_the_read_with_a_typed_error(spark: Any, wh: str) -> None:
    """A missing table or an unknown tag fails planning with InvalidOptionsError, found by fencedlake_error."""
    spark.range(1).write.format("fencedlake").mode("append").option("warehouse", wh).save("db.opts")
    _fails(lambda: load(spark, wh, "db.missing").collect(), InvalidOptionsError, "table db.missing does not exist")
    text = "tag 'nope': expected a tag of table db.opts"
    _fails(lambda: load(spark, wh, "db.opts", tag="nope").collect(), InvalidOptionsError, text)


def test_equality_deletes_fail_the_read_naming_the_feature(spark: Any, wh: str) -> None:
    """A table with equality delete files is refused through Spark (ReadRefusedError), never read without them."""
    spark.range(10).write.format("fencedlake").mode("append").option("warehouse", wh).save("db.eqdel")
    table = embedded_catalog(wh).load_table("db.eqdel")
    commit_deletes(table, [equality_delete_file(table, "id", [3])])
    _fails(lambda: load(spark, wh, "db.eqdel").collect(), ReadRefusedError, "cannot apply equality deletes")


# ---------------------------------------------------------------------------------- pruning and projection


@pytest.fixture(scope="module")
def regions(spark: Any, wh: str) -> str:
    """db.regions: partitioned by region (4 values), 2 appends -> 8 data files; 200 rows with nulls and NaN."""
    for part in range(2):
        df = spark.range(part * 100, part * 100 + 100).selectExpr(
            "id",
            "element_at(array('eu', 'us', 'ap', 'sa'), cast(id % 4 + 1 as int)) as region",
            "case when id % 10 = 0 then null else id * 2 end as v",
            "case when id % 7 = 0 then double('NaN') else id / 3.0 end as score",
        )
        writer = df.coalesce(1).write.format("fencedlake").mode("append").option("warehouse", wh)
        writer.option("partition-by", "region").save("db.regions")
    return "db.regions"


QUERIES = [
    ("region = 'eu'", 2),  # partition values
    ("id >= 100 and v is not null", 4),  # column statistics (the first append's files hold ids 0-99)
    ("score > 10", 8),  # double: left to Spark (NaN sorts above every number there)
]


def test_pushed_filters_prune_files_and_rows_stay_exact(spark: Any, pushdown: Any, wh: str, regions: str) -> None:
    """With pushdown on, only files whose partition or statistics may match are read (one task per file at
    split-size=1) where this Spark plans every scan anew, every file on Spark 4.1-4.3 (PUSHED_FILTERS_PRUNE);
    rows equal the same query with pushdown off (Spark's default). Every translation rule is covered without
    Spark in tests/spark/test_reader.py."""
    for where, files in QUERIES:
        pruned = load(pushdown, wh, regions, **{"split-size": "1"}).where(where)
        plain = load(spark, wh, regions, **{"split-size": "1"}).where(where)
        assert pruned.rdd.getNumPartitions() == (files if PUSHED_FILTERS_PRUNE else 8), where
        assert plain.rdd.getNumPartitions() == 8, where
        expected = _normalized(plain.collect())
        assert _normalized(pruned.collect()) == expected and expected, where


def test_a_dataframe_queried_with_and_then_without_a_filter_returns_every_row(
    pushdown: Any, wh: str, regions: str
) -> None:
    """Spark 4.3 reuses a relation's read plan for its later unfiltered queries: the same DataFrame (and a SQL
    view over it) must still count every row after a filtered query (it counted the filtered rows before)."""
    df = load(pushdown, wh, regions)
    assert df.where("region = 'eu'").count() == 50
    assert df.count() == 200
    df.createOrReplaceTempView("regions_view")
    assert pushdown.sql("SELECT count(*) AS n FROM regions_view WHERE id < 10").collect()[0].n == 10
    assert pushdown.sql("SELECT count(*) AS n FROM regions_view").collect()[0].n == 200


def test_the_filter_option_skips_files_and_rows_for_every_query(spark: Any, wh: str, regions: str) -> None:
    """option("filter", ...) is part of the DataFrame: files that cannot match are not read (2 of 8 tasks),
    only matching rows come back, and a further where() narrows it as usual."""
    df = load(spark, wh, regions, filter="region = 'eu' AND id >= 100", **{"split-size": "1"})
    assert df.rdd.getNumPartitions() == 1
    assert df.count() == 25 and df.where("v IS NULL").count() == 5  # ids 100, 120, ..., 180
    assert sorted(r.id for r in df.collect()) == list(range(100, 200, 4))


def test_a_user_schema_reads_only_its_columns(spark: Any, wh: str, regions: str) -> None:
    """spark.read.schema(...) is a projection: those columns, in that order; an unknown one is refused."""
    rows = load(spark, wh, regions, schema="v bigint, id bigint").where("id < 3").orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(None, 0), (2, 1), (4, 2)]
    text = "read schema column 'nope': expected a column of table db.regions"
    _fails(lambda: load(spark, wh, regions, schema="id bigint, nope string").collect(), InvalidOptionsError, text)
