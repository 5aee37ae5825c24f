"""Tests for pyspark_fenced_sink.write.task: Arrow batches -> Iceberg data files."""

from __future__ import annotations

import datetime as dt
import importlib.util
import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import (
    _determine_partitions,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import InvalidOptionsError, SchemaMismatchError
from pyspark_fenced_sink.iceberg.codec.datafiles import decode_data_file
from pyspark_fenced_sink.iceberg.codec.fileio import cached_file_io
from pyspark_fenced_sink.iceberg.codec.partitioning import parse_partition_by
from pyspark_fenced_sink.protocol.filetag import FileTag
from pyspark_fenced_sink.spark.schema_to_iceberg import iceberg_schema_from_spark
from pyspark_fenced_sink.write import layout as write_layout
from pyspark_fenced_sink.write.task import TaskInfo, WriteResult, WriteSpec, task_info_from_spark, write_task

NY = "America/New_York"
TAG = FileTag(writer="orders", ephemeral=False, epoch=3, opened=41, batch=None)
SPARK = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("small", T.ByteType()),
        T.StructField("mid", T.ShortType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("amount", T.DecimalType(10, 2)),
        T.StructField("name", T.StringType()),
        T.StructField("d", T.DateType()),
        T.StructField(
            "payload",
            T.StructType(
                [
                    T.StructField("label", T.StringType()),
                    T.StructField("items", T.ArrayType(T.StructType([T.StructField("x", T.IntegerType())]))),
                    T.StructField("attrs", T.MapType(T.StringType(), T.LongType())),
                ]
            ),
        ),
    ]
)
SCHEMA = iceberg_schema_from_spark(SPARK)
PAYLOAD = pa.struct(
    [
        ("label", pa.string()),
        ("items", pa.list_(pa.field("element", pa.struct([("x", pa.int32())])))),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)
T0 = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def spark_batch(start: int, n: int, *, large: bool = True) -> pa.RecordBatch:
    """A batch shaped like Spark sends it: int8/int16, NY timestamps, decimal128, nested types."""
    ids = np.arange(start, start + n, dtype=np.int64)
    micros = int(T0.timestamp() * 1_000_000) + ids * 37 * 3_600_000_000  # one row per 37 hours
    names = [None if i % 7 == 0 else f"name-{i % 13}" for i in ids]
    payload = [
        None
        if i % 11 == 0
        else {"label": f"l{i % 3}", "items": [{"x": int(i)}, {"x": None}], "attrs": [("k", int(i)), ("z", None)]}
        for i in ids
    ]
    return pa.record_batch(
        {
            "id": pa.array(ids),
            "small": pa.array((ids % 100).astype(np.int8)),
            "mid": pa.array((ids % 1000).astype(np.int16)),
            "ts": pa.array(micros, pa.timestamp("us", tz=NY)),
            "ntz": pa.array(micros, pa.timestamp("us")),
            "amount": pa.array([Decimal(int(i)) / 100 for i in ids], pa.decimal128(10, 2)),
            "name": pa.array(names, pa.large_string() if large else pa.string()),
            "d": pa.array((micros // 86_400_000_000).astype(np.int32), pa.date32()),
            "payload": pa.array(payload, PAYLOAD),
        }
    )


def spark_batches(count: int, size: int) -> list[pa.RecordBatch]:
    return [spark_batch(i * size, size) for i in range(count)]


def make_spec(
    root: Path,
    schema: Schema = SCHEMA,
    partition_by: str = "",
    properties: dict[str, str] | None = None,
    **overrides: Any,
) -> WriteSpec:
    spec = parse_partition_by(partition_by, schema)
    args: dict[str, Any] = {
        "table": "db.t",
        "location": f"file://{root}/wh/db/t",
        "schema_json": schema.model_dump_json(),
        "spec_json": spec.model_dump_json(),
        "spec_id": spec.spec_id,
        "table_uuid": "00000000-0000-0000-0000-000000000000",
        "format_version": 2,
        "properties": properties or {},
        "io_properties": {},
        "tag": TAG,
    }
    args.update(overrides)
    return WriteSpec(**args)


def decoded(ws: WriteSpec, result: WriteResult) -> list[DataFile]:
    schema = Schema.model_validate_json(ws.schema_json)
    spec = PartitionSpec.model_validate_json(ws.spec_json)
    return [decode_data_file(f, spec.partition_type(schema), ws.format_version) for f in result.files]


def local(path: str) -> str:
    return path.removeprefix("file://")


def read_back(files: list[DataFile]) -> pa.Table:
    return pa.concat_tables([pq.read_table(local(f.file_path)) for f in files]).sort_by("id")


def expected_rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return sorted((row for b in batches for row in b.to_pylist()), key=lambda r: r["id"])


# ---------------------------------------------------------------- process hygiene and small types


def test_importing_executor_loads_no_catalog_code() -> None:
    """Executors never import pyiceberg.catalog (nor sqlalchemy), not even with the writers that carry the
    write transaction; checked in a fresh interpreter."""
    code = (
        "import sys, pyspark_fenced_sink.write.task, pyspark_fenced_sink.write.transaction\n"
        "import pyspark_fenced_sink.spark.batch, pyspark_fenced_sink.spark.streaming\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('pyiceberg.catalog', 'sqlalchemy')))\n"
        "print(','.join(bad))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_write_spec_repr_masks_secrets_and_pickles(tmp_path: Path) -> None:
    """Secret-looking io/table property values never appear in repr; the spec pickles."""
    ws = make_spec(
        tmp_path,
        io_properties={
            "s3.access-key-id": "AKIAXXX",
            "s3.secret-access-key": "s3cr3t",
            "s3.session-token": "tok",
            "gcs.oauth2.token": "tok2",
            "adls.credential": "cred",
            "rest.password": "pw",
            "s3.endpoint": "http://127.0.0.1:9000",
        },
    )
    text = repr(ws)
    for secret in ("AKIAXXX", "s3cr3t", "tok", "tok2", "cred", "pw"):
        assert f"'{secret}'" not in text
    assert "'s3.endpoint': 'http://127.0.0.1:9000'" in text
    assert text.count("'****'") == 6
    assert str(ws) == text
    assert pickle.loads(pickle.dumps(ws)) == ws


def test_task_info_outside_spark_is_zeros() -> None:
    """Without a TaskContext (unit tests, driver) the task is 0/0 with no batch id."""
    assert task_info_from_spark() == TaskInfo(0, 0, None)


def test_task_info_reads_the_spark_task_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a task: partitionId, taskAttemptId and the streaming batch id local property."""
    import pyspark

    class FakeContext:
        def __init__(self, batch: str | None) -> None:
            self.batch = batch

        def partitionId(self) -> int:  # noqa: N802 - Spark's API
            return 4

        def taskAttemptId(self) -> int:  # noqa: N802 - Spark's API
            return 1234

        def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's API
            return self.batch if key == "streaming.sql.batchId" else None

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: FakeContext("17")))
    assert task_info_from_spark() == TaskInfo(4, 1234, 17)
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: FakeContext(None)))
    assert task_info_from_spark() == TaskInfo(4, 1234, None)


def test_fsspec_file_io_from_io_properties(tmp_path: Path) -> None:
    """io_properties reach pyiceberg's FileIO loader (here fsspec, the s3fs code path); sizes come from tell()."""
    ws = make_spec(tmp_path, io_properties={"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"})
    files = decoded(ws, write_task(ws, iter(spark_batches(2, 500)), TaskInfo(0, 0, None)))
    assert len(files) == 1
    assert Path(local(files[0].file_path)).stat().st_size == files[0].file_size_in_bytes
    assert read_back(files).column("id").to_pylist() == list(range(1000))
    assert type(cached_file_io(ws.io_properties, ws.location)).__name__ == "FsspecFileIO"


def test_spark_time_values_are_written_as_iceberg_time(tmp_path: Path) -> None:
    """Spark sends TimeType as time64[ns]; the table's time column is microseconds."""
    schema = iceberg_schema_from_spark(T.StructType([T.StructField("t", T.TimeType())]))
    ws = make_spec(tmp_path, schema=schema)
    batch = pa.record_batch({"t": pa.array([3_723_000_001_000, None], pa.time64("ns"))})
    (f,) = decoded(ws, write_task(ws, iter([batch]), TaskInfo(0, 0, None)))
    table = pq.read_table(local(f.file_path))
    assert table.schema.field("t").type == pa.time64("us")
    assert table.column("t").to_pylist() == [dt.time(1, 2, 3, 1), None]


def test_empty_input_writes_nothing(tmp_path: Path) -> None:
    """No batches, or only empty ones: no file, an empty result."""
    ws = make_spec(tmp_path, partition_by="day(ts)")
    assert write_task(ws, iter([]), TaskInfo(0, 0, None)) == WriteResult()
    assert write_task(ws, iter([spark_batch(0, 0)]), TaskInfo(0, 0, None)) == WriteResult()
    assert not (tmp_path / "wh").exists()


# ---------------------------------------------------------------- files, names, Parquet layout


def test_files_land_in_the_data_dir_with_file_tag_names(tmp_path: Path) -> None:
    """Names parse back to the writer's tag plus this task's id and attempt; nonces differ."""
    ws = make_spec(tmp_path, partition_by="bucket(4, id)")
    result = write_task(ws, iter(spark_batches(2, 100)), TaskInfo(5, 9001, None))
    files = decoded(ws, result)
    assert len(files) == 4
    nonces = set()
    for f in files:
        path = Path(local(f.file_path))
        assert path.is_file()
        assert path.stat().st_size == f.file_size_in_bytes
        assert path.parent.parent == tmp_path / "wh/db/t/data"
        assert path.parent.name == f"id_bucket={f.partition[0]}"
        tag = FileTag.parse(path.name)
        assert tag is not None
        assert (tag.writer, tag.ephemeral, tag.epoch, tag.opened, tag.batch) == ("orders", False, 3, 41, None)
        assert (tag.task, tag.attempt) == (5, 9001)
        nonces.add(tag.nonce)
    assert len(nonces) == 4
    assert result.rows == 200
    assert result.bytes == sum(f.file_size_in_bytes for f in files)


def test_streaming_takes_the_batch_id_from_the_task(tmp_path: Path) -> None:
    """A streaming write names files with the task's streaming.sql.batchId; batch writes keep the tag's."""
    streaming = make_spec(tmp_path, streaming=True)
    (f,) = decoded(streaming, write_task(streaming, iter([spark_batch(0, 5)]), TaskInfo(1, 2, 77)))
    assert FileTag.parse(Path(f.file_path).name).batch == 77  # type: ignore[union-attr]
    batch = make_spec(tmp_path, tag=FileTag("a1", True, None, None, 12))
    (g,) = decoded(batch, write_task(batch, iter([spark_batch(0, 5)]), TaskInfo(1, 2, 77)))
    parsed = FileTag.parse(Path(g.file_path).name)
    assert parsed is not None
    assert parsed.batch == 12
    assert parsed.ephemeral
    assert parsed.epoch is None


def test_parquet_field_ids_match_the_iceberg_schema(tmp_path: Path) -> None:
    """Every Parquet column, nested ones included, carries its Iceberg field id."""
    ws = make_spec(tmp_path)
    (f,) = decoded(ws, write_task(ws, iter([spark_batch(0, 10)]), TaskInfo(0, 0, None)))
    meta = pq.read_metadata(local(f.file_path))
    assert meta.schema.to_arrow_schema().field("id").metadata[b"PARQUET:field_id"] == b"1"
    by_path = {meta.schema.column(i).path: meta.schema.column(i) for i in range(meta.num_columns)}
    expected = parquet_path_to_id_mapping(SCHEMA)
    assert set(by_path) == set(expected)
    arrow = meta.schema.to_arrow_schema()
    payload = arrow.field("payload").type
    items = payload.field("items").type
    assert (
        payload.field("items").metadata[b"PARQUET:field_id"]
        == str(SCHEMA.find_field("payload.items").field_id).encode()
    )
    assert (
        items.value_field.metadata[b"PARQUET:field_id"]
        == str(SCHEMA.find_field("payload.items.element").field_id).encode()
    )
    x_id = items.value_type.field("x").metadata[b"PARQUET:field_id"]
    assert x_id == str(SCHEMA.find_field("payload.items.element.x").field_id).encode()
    attrs = payload.field("attrs").type
    assert (
        attrs.key_field.metadata[b"PARQUET:field_id"] == str(SCHEMA.find_field("payload.attrs.key").field_id).encode()
    )


def test_default_codec_is_zstd_and_table_codec_is_honoured(tmp_path: Path) -> None:
    """Iceberg's default zstd, or write.parquet.compression-codec."""
    for props, codec in [({}, "ZSTD"), ({"write.parquet.compression-codec": "snappy"}, "SNAPPY"),
                         ({"write.parquet.compression-codec": "uncompressed"}, "UNCOMPRESSED")]:  # fmt: skip
        ws = make_spec(tmp_path / codec, properties=props)
        (f,) = decoded(ws, write_task(ws, iter([spark_batch(0, 50)]), TaskInfo(0, 0, None)))
        meta = pq.read_metadata(local(f.file_path))
        rg = meta.row_group(0)
        assert {rg.column(i).compression for i in range(meta.num_columns)} == {codec}


def _dictionary_encoded(path: str) -> dict[str, bool]:
    meta = pq.read_metadata(path)
    columns = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
    return {c.path_in_schema: "RLE_DICTIONARY" in c.encodings or "PLAIN_DICTIONARY" in c.encodings for c in columns}


def test_dictionary_encoding_is_kept_only_where_it_pays_like_parquet_mr(tmp_path: Path) -> None:
    """Unique ids, instants, dates and amounts are written plain; repeats and nested leaves keep a dictionary."""
    ws = make_spec(tmp_path)
    batches = spark_batches(2, 5_000)
    (f,) = decoded(ws, write_task(ws, iter(batches), TaskInfo(0, 0, None)))
    encoded = _dictionary_encoded(local(f.file_path))
    assert {k: v for k, v in encoded.items() if not k.startswith("payload.")} == {
        "id": False,  # unique
        "small": True,  # 100 distinct
        "mid": True,  # 1,000 distinct int16: 2 KB of dictionary + 10-bit indices < 20 KB plain
        "ts": False,  # one per 37 hours: unique
        "ntz": False,
        "amount": False,
        "name": True,  # 13 distinct
        "d": False,  # a new day every row
    }
    assert all(v for k, v in encoded.items() if k.startswith("payload."))
    table = read_back([f])  # encoding only: the same values (instants compared as integers: DST folds)
    source = pa.Table.from_batches(batches)
    assert table.column("ts").cast(pa.int64()).to_pylist() == source.column("ts").cast(pa.int64()).to_pylist()
    assert table.drop_columns(["ts"]).to_pylist() == source.drop_columns(["ts"]).to_pylist()


@pytest.mark.parametrize(
    ("column", "dictionary"),
    [
        (pa.array(range(1000), pa.int64()), False),
        (pa.array([7] * 1000, pa.int64()), True),
        (pa.array([None] * 1000, pa.int64()), True),  # nothing to decide on: pyarrow's default
        (pa.array([f"user-{i}" for i in range(1000)], pa.large_string()), False),
        (pa.array([f"user-{i % 10}" for i in range(1000)], pa.large_string()), True),
        (pa.array([i % 2 == 0 for i in range(1000)]), True),  # booleans are never decided (pyarrow has no dict)
        (pa.array([float(i) / 3 for i in range(1000)]), False),
    ],
)
def test_dictionary_columns_decides_top_level_primitives_only(column: pa.Array, dictionary: bool) -> None:
    from pyspark_fenced_sink.iceberg.codec.write_properties import dictionary_columns

    nested = pa.array([{"x": i} for i in range(1000)], pa.struct([("x", pa.int64())]))
    table = pa.table({"c": column, "s": nested})
    chosen = dictionary_columns(table, ["c", "s.x"])
    assert ("c" in chosen) is dictionary
    assert "s.x" in chosen  # a nested leaf is never decided: unique values keep their dictionary


def test_invalid_parquet_properties_are_rejected(tmp_path: Path) -> None:
    """Unknown codecs and non-integer sizes fail clearly, before any file is written."""
    bad = make_spec(tmp_path, properties={"write.parquet.compression-codec": "lzo2"})
    with pytest.raises(InvalidOptionsError, match=r"compression-codec: expected one of zstd, .* found 'lzo2'"):
        write_task(bad, iter([spark_batch(0, 5)]), TaskInfo(0, 0, None))
    bad = make_spec(tmp_path, properties={"write.target-file-size-bytes": "big"})
    with pytest.raises(InvalidOptionsError, match="target-file-size-bytes: expected an integer, found 'big'"):
        write_task(bad, iter([spark_batch(0, 5)]), TaskInfo(0, 0, None))
    assert not (tmp_path / "wh").exists()


def test_small_batches_are_buffered_into_one_large_row_group(tmp_path: Path) -> None:
    """20 input batches of 10k rows make one row group, not 20."""
    ws = make_spec(tmp_path)
    (f,) = decoded(ws, write_task(ws, iter(spark_batches(20, 10_000)), TaskInfo(0, 0, None)))
    meta = pq.read_metadata(local(f.file_path))
    assert (meta.num_row_groups, meta.num_rows, f.record_count) == (1, 200_000, 200_000)


def test_row_group_limit_gives_full_row_groups(tmp_path: Path) -> None:
    """write.parquet.row-group-limit caps rows per row group; groups are full except the last."""
    ws = make_spec(tmp_path, properties={"write.parquet.row-group-limit": "3000"})
    (f,) = decoded(ws, write_task(ws, iter(spark_batches(7, 1000)), TaskInfo(0, 0, None)))
    meta = pq.read_metadata(local(f.file_path))
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3000, 3000, 1000]
    assert f.split_offsets is not None
    assert len(f.split_offsets) == 3


def test_row_group_size_bytes_bounds_row_groups(tmp_path: Path) -> None:
    """write.parquet.row-group-size-bytes caps the Arrow bytes buffered per row group."""
    batches = spark_batches(10, 1000)
    per_row = sum(b.nbytes for b in batches) / 10_000
    limit = int(per_row * 2500)
    ws = make_spec(tmp_path, properties={"write.parquet.row-group-size-bytes": str(limit)})
    (f,) = decoded(ws, write_task(ws, iter(batches), TaskInfo(0, 0, None)))
    meta = pq.read_metadata(local(f.file_path))
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 10_000
    assert 4 <= len(sizes) <= 6
    assert max(sizes) <= 2600


def test_files_roll_at_the_target_size(tmp_path: Path) -> None:
    """A small write.target-file-size-bytes yields several files whose counts sum to the input."""
    target = 64 * 1024
    ws = make_spec(
        tmp_path,
        properties={"write.target-file-size-bytes": str(target), "write.parquet.row-group-limit": "2000"},
    )
    batches = spark_batches(10, 2000)
    result = write_task(ws, iter(batches), TaskInfo(0, 0, None))
    files = decoded(ws, result)
    assert len(files) >= 3
    assert sum(f.record_count for f in files) == result.rows == 20_000
    assert all(f.file_size_in_bytes >= target for f in files[:-1])
    assert read_back(files).column("id").to_pylist() == list(range(20_000))


def test_fail_point_fires_once_per_closed_file(tmp_path: Path) -> None:
    """executor.after-file-written is hit after each file is closed (the file exists by then)."""
    seen: list[int] = []

    def handler(name: str) -> None:
        assert name == "executor.after-file-written"
        seen.append(len(list((tmp_path / "wh").rglob("*.parquet"))))

    failpoints.set_handler(handler)
    try:
        ws = make_spec(tmp_path, partition_by="bucket(3, id)")
        result = write_task(ws, iter([spark_batch(0, 300)]), TaskInfo(0, 0, None))
    finally:
        failpoints.set_handler(None)
    assert len(seen) == len(result.files) == 3


def test_a_failed_task_deletes_its_files(tmp_path: Path) -> None:
    """When a task fails mid-way, the files it wrote (referenced by nothing yet) are removed."""
    calls = []

    def handler(name: str) -> None:
        calls.append(name)
        if len(calls) == 2:
            raise failpoints.FailPointError("boom")

    failpoints.set_handler(handler)
    try:
        ws = make_spec(tmp_path, partition_by="bucket(4, id)")
        with pytest.raises(failpoints.FailPointError):
            write_task(ws, iter([spark_batch(0, 400)]), TaskInfo(0, 0, None))
    finally:
        failpoints.set_handler(None)
    assert len(calls) == 2
    assert list((tmp_path / "wh").rglob("*.parquet")) == []


# ---------------------------------------------------------------- casting


def test_spark_shaped_batches_are_cast_to_the_table_schema(tmp_path: Path) -> None:
    """int8/int16 -> int32, NY timestamps -> UTC (same instant), ntz stays naive, nested kept."""
    ws = make_spec(tmp_path)
    batches = [spark_batch(0, 30, large=False), spark_batch(30, 30, large=True)]
    files = decoded(ws, write_task(ws, iter(batches), TaskInfo(0, 0, None)))
    table = read_back(files)
    schema = table.schema
    assert schema.field("small").type == pa.int32()
    assert schema.field("mid").type == pa.int32()
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert schema.field("ntz").type == pa.timestamp("us")
    assert schema.field("name").type == pa.large_string()
    assert schema.field("amount").type == pa.decimal128(10, 2)
    source = pa.Table.from_batches([batches[0], batches[1].cast(batches[0].schema)])
    ts_in = source.column("ts").cast(pa.int64()).to_pylist()
    assert table.column("ts").cast(pa.int64()).to_pylist() == ts_in  # same instants
    assert table.column("ntz").cast(pa.int64()).to_pylist() == source.column("ntz").cast(pa.int64()).to_pylist()
    assert table.to_pylist() == expected_rows(batches)
    assert table.column("ts")[0].as_py() == T0


def test_columns_are_matched_by_name_and_missing_ones_are_null(tmp_path: Path) -> None:
    """Shuffled columns and struct fields, and absent optional ones (top level and nested)."""
    ws = make_spec(tmp_path)
    full = spark_batch(0, 20)
    payload = full.column("payload")
    shuffled_payload = pa.StructArray.from_arrays(
        [payload.field("attrs"), payload.field("items")], names=["attrs", "items"], mask=payload.is_null()
    )
    batch = pa.record_batch(
        [shuffled_payload, full.column("ts"), full.column("id"), full.column("amount")],
        names=["payload", "ts", "id", "amount"],
    )
    (f,) = decoded(ws, write_task(ws, iter([batch]), TaskInfo(0, 0, None)))
    rows = read_back([f]).to_pylist()
    want = expected_rows([full])
    for got, exp in zip(rows, want, strict=True):
        assert got["name"] is None
        assert got["small"] is None
        assert got["d"] is None
        assert (got["id"], got["ts"], got["amount"]) == (exp["id"], exp["ts"], exp["amount"])
        if exp["payload"] is None:
            assert got["payload"] is None
        else:
            assert got["payload"] == {**exp["payload"], "label": None}


def test_uncastable_batch_is_reported_as_a_bug_with_the_column(tmp_path: Path) -> None:
    """A cast failure names the column and both types (the driver should have caught it)."""
    ws = make_spec(tmp_path)
    batch = pa.record_batch({"id": pa.array([1, 2]), "d": pa.array(["x", "y"])})
    with pytest.raises(
        SchemaMismatchError,
        match=r"^column 'd': expected Arrow data castable to date32\[day\], "
        r"found string on the executor \(.*\); the driver's schema check should have rejected",
    ):
        write_task(ws, iter([batch]), TaskInfo(0, 0, None))
    naive = pa.record_batch({"id": pa.array([1]), "ts": pa.array([1], pa.timestamp("us"))})
    with pytest.raises(SchemaMismatchError, match="timestamp with and without time zone do not mix"):
        write_task(ws, iter([naive]), TaskInfo(0, 0, None))
    assert list((tmp_path / "wh").rglob("*.parquet")) == []


def test_columns_the_table_lacks_are_never_dropped_silently(tmp_path: Path) -> None:
    """A batch column (top level or nested) missing from the task's schema fails instead of being lost."""
    ws = make_spec(tmp_path)
    batch = pa.record_batch({"id": pa.array([1]), "extra": pa.array(["x"])})
    with pytest.raises(SchemaMismatchError, match=r"^the batch has columns \['extra'\] the table schema"):
        write_task(ws, iter([batch]), TaskInfo(0, 0, None))
    nested = pa.record_batch({"id": pa.array([1]), "payload": pa.array([{"label": "a", "new": 1}])})
    with pytest.raises(SchemaMismatchError, match=r"^struct 'payload' has columns \['new'\] the table schema"):
        write_task(ws, iter([nested]), TaskInfo(0, 0, None))


def test_nulls_in_a_required_column_are_rejected(tmp_path: Path) -> None:
    """The executor refuses to write nulls into a required column."""
    ws = make_spec(tmp_path)
    batch = pa.record_batch({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(SchemaMismatchError, match=r"^column 'id': expected no nulls .*found 1;"):
        write_task(ws, iter([batch]), TaskInfo(0, 0, None))


# ---------------------------------------------------------------- partitioning


@pytest.mark.parametrize(
    "partition_by",
    [
        "name",
        "d",
        "amount",
        "small",
        "day(ts)",
        "month(ntz)",
        "year(d)",
        "hour(ts)",
        "bucket(5, id)",
        "bucket(3, name)",
        "truncate(10, id)",
        "truncate(2, name)",
        "truncate(50, amount)",
        "day(ts), bucket(2, id), name",
        "payload.label",
        "void(name)",
    ],
)
def test_partition_tuples_equal_pyiceberg_determine_partitions(tmp_path: Path, partition_by: str) -> None:
    """Each file's partition Record and row count matches pyiceberg's own _determine_partitions."""
    ws = make_spec(tmp_path, partition_by=partition_by)
    batches = spark_batches(3, 100)
    files = decoded(ws, write_task(ws, iter(batches), TaskInfo(0, 0, None)))
    ours = Counter()
    for f in files:
        ours[tuple(f.partition._data)] += f.record_count
    spec = PartitionSpec.model_validate_json(ws.spec_json)
    theirs = Counter()
    for part in _determine_partitions(spec, SCHEMA, read_back(files)):
        theirs[tuple(part.partition_key.partition._data)] += part.arrow_table_partition.num_rows
    assert ours == theirs
    assert sum(ours.values()) == 300
    assert len(ours) == 1 if partition_by.startswith("void") else len(ours) > 1


def test_known_partition_values(tmp_path: Path) -> None:
    """Hand-checked values: day of 2024-01-03T16:04:05Z is 19725; identity keeps the string."""
    ws = make_spec(tmp_path, partition_by="day(ts), name, payload.label")
    batch = spark_batch(1, 1)  # id 1: ts = T0 + 37h = 2024-01-03T16:04:05Z, name-1, label l1
    (f,) = decoded(ws, write_task(ws, iter([batch]), TaskInfo(0, 0, None)))
    assert f.partition == Record(19725, "name-1", "l1")
    assert "/data/ts_day=2024-01-03/name=name-1/payload.label=l1/" in f.file_path


def test_nan_and_signed_zero_get_their_own_identity_partitions(tmp_path: Path) -> None:
    """NaN is not folded into another value's partition (min/max ignore NaN), nor -0.0 into 0.0."""
    schema = iceberg_schema_from_spark(T.StructType([T.StructField("x", T.DoubleType())]))
    ws = make_spec(tmp_path, schema=schema, partition_by="x")
    batch = pa.record_batch({"x": pa.array([float("nan"), 1.0, 1.0, -0.0, 0.0, 0.0])})
    files = decoded(ws, write_task(ws, iter([batch]), TaskInfo(0, 0, None)))
    counts = sorted((repr(f.partition[0]), f.record_count) for f in files)
    assert counts == [("-0.0", 1), ("0.0", 2), ("1.0", 2), ("nan", 1)]


def test_two_partition_fields_on_one_column(tmp_path: Path) -> None:
    """identity(n) and truncate(W, n) together (pyiceberg's PartitionKey alone rejects this)."""
    ws = make_spec(tmp_path, partition_by="id, truncate(10, id)")
    files = decoded(ws, write_task(ws, iter([spark_batch(0, 25)]), TaskInfo(0, 0, None)))
    assert sorted(tuple(f.partition._data) for f in files) == [(i, i - i % 10) for i in range(25)]


def test_buffer_limit_flushes_the_largest_partitions_first(tmp_path: Path) -> None:
    """With a tiny buffer limit, partitions are flushed early (more row groups), rows are all kept."""
    batches = spark_batches(10, 1000)
    roomy = make_spec(tmp_path / "roomy", partition_by="bucket(4, id)")
    tight = make_spec(tmp_path / "tight", partition_by="bucket(4, id)", buffer_bytes=200_000)
    groups = {}
    for name, ws in (("roomy", roomy), ("tight", tight)):
        files = decoded(ws, write_task(ws, iter(batches), TaskInfo(0, 0, None)))
        assert sum(f.record_count for f in files) == 10_000
        assert read_back(files).column("id").to_pylist() == list(range(10_000))
        groups[name] = sum(pq.read_metadata(local(f.file_path)).num_row_groups for f in files)
    assert groups["roomy"] == 4
    assert groups["tight"] > 8


def test_layout_is_parsed_once_per_process(tmp_path: Path) -> None:
    """Schema/spec JSON is parsed once and cached across tasks."""
    ws = make_spec(tmp_path, partition_by="day(ts)", properties={"x.unique": str(tmp_path)})
    before = write_layout.layout.cache_info()
    for task in range(3):
        write_task(ws, iter([spark_batch(task * 10, 10)]), TaskInfo(task, task, None))
    after = write_layout.layout.cache_info()
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == 2


# ---------------------------------------------------------------- stats


@pytest.mark.parametrize("partition_by", ["", "bucket(3, id)"])
def test_stats_equal_pyiceberg_stats_from_the_footer(tmp_path: Path, partition_by: str) -> None:
    """Our stats (from the writer's metadata) equal pyiceberg's, computed from the file read back."""
    ws = make_spec(tmp_path, partition_by=partition_by, properties={"write.parquet.row-group-limit": "700"})
    files = decoded(ws, write_task(ws, iter(spark_batches(3, 1000)), TaskInfo(0, 0, None)))
    for f in files:
        meta = pq.read_metadata(local(f.file_path))
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=meta,
            stats_columns=compute_statistics_plan(SCHEMA, {}),
            parquet_column_mapping=parquet_path_to_id_mapping(SCHEMA),
        ).to_serialized_dict()
        for key, value in stats.items():
            assert getattr(f, key) == value, key
    table = read_back(files)
    id_field = SCHEMA.find_field("id").field_id
    name_field = SCHEMA.find_field("name").field_id
    assert min(from_bytes(LongType(), f.lower_bounds[id_field]) for f in files) == 0
    assert max(from_bytes(LongType(), f.upper_bounds[id_field]) for f in files) == 2999
    assert all(f.lower_bounds[id_field] <= f.upper_bounds[id_field] for f in files if partition_by == "")
    assert sum(f.null_value_counts[name_field] for f in files) == table.column("name").null_count
    assert sum(f.value_counts[id_field] for f in files) == 3000


def test_stats_match_pyiceberg_parquet_file_to_data_file(tmp_path: Path) -> None:
    """An unpartitioned file's DataFile equals what pyiceberg builds when importing the file."""
    from pyiceberg.io.pyarrow import PyArrowFileIO, parquet_file_to_data_file

    _catalog, table = catalog_table(tmp_path, "")
    ws = spec_for_table(table)
    (ours,) = decoded(ws, write_task(ws, iter(spark_batches(2, 500)), TaskInfo(0, 0, None)))
    theirs = parquet_file_to_data_file(PyArrowFileIO(), table.metadata, ours.file_path)
    assert ours._data == theirs._data


# ---------------------------------------------------------------- end to end


def catalog_table(root: Path, partition_by: str, format_version: int = 2) -> tuple[Any, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("test", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/wh")
    catalog.create_namespace("db")
    table = catalog.create_table(
        "db.t",
        SCHEMA,
        partition_spec=parse_partition_by(partition_by, SCHEMA),
        properties={"format-version": str(format_version)},
    )
    return catalog, table


def spec_for_table(table: Any, **overrides: Any) -> WriteSpec:
    args: dict[str, Any] = {
        "table": "db.t",
        "location": table.location(),
        "schema_json": table.schema().model_dump_json(),
        "spec_json": table.spec().model_dump_json(),
        "spec_id": table.spec().spec_id,
        "table_uuid": str(table.metadata.table_uuid),
        "format_version": table.format_version,
        "properties": dict(table.properties),
        "io_properties": {},
        "tag": TAG,
    }
    args.update(overrides)
    return WriteSpec(**args)


def append(table: Any, files: list[DataFile]) -> None:
    with table.transaction() as tx, tx.update_snapshot().fast_append() as fast:
        for f in files:
            fast.append_data_file(f)


def write_in_tasks(ws: WriteSpec, batches: list[pa.RecordBatch], tasks: int) -> list[DataFile]:
    files: list[DataFile] = []
    for task in range(tasks):
        mine: Iterator[pa.RecordBatch] = iter(batches[task::tasks])
        files.extend(decoded(ws, write_task(ws, mine, TaskInfo(task, 100 + task, None))))
    return files


@pytest.mark.parametrize(
    ("partition_by", "format_version"),
    [("", 2), ("day(ts), bucket(4, id)", 2), ("truncate(3, name), month(d)", 1), ("hour(ntz), payload.label", 2)],
)
def test_appended_files_scan_back_exactly(tmp_path: Path, partition_by: str, format_version: int) -> None:
    """DataFiles appended to a real SqlCatalog table scan back as exactly the input rows."""
    catalog, table = catalog_table(tmp_path, partition_by, format_version)
    ws = spec_for_table(table)
    batches = spark_batches(6, 50)
    files = write_in_tasks(ws, batches, tasks=3)
    append(table, files)
    table = catalog.load_table("db.t")
    scanned = table.scan().to_arrow().sort_by("id")
    assert scanned.num_rows == 300
    assert scanned.to_pylist() == expected_rows(batches)
    summary = table.current_snapshot().summary
    assert summary["added-data-files"] == str(len(files))
    assert summary["added-records"] == "300"
    assert table.scan(row_filter="id >= 200").to_arrow().num_rows == 100


def duckdb_connection() -> Any:
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        spec = importlib.util.find_spec(package)
        assert spec is not None, package
        assert spec.origin is not None, package
        extension = next(Path(spec.origin).parent.rglob("*.duckdb_extension"))
        con.execute(f"LOAD '{extension}'")
    return con


@pytest.mark.parametrize("partition_by", ["", "day(ts), bucket(4, id)"])
def test_duckdb_reads_the_same_rows(tmp_path: Path, partition_by: str) -> None:
    """DuckDB's iceberg extension, reading the metadata file independently, sees exactly the input rows."""
    catalog, table = catalog_table(tmp_path, partition_by)
    ws = spec_for_table(table)
    batches = spark_batches(4, 100)
    append(table, write_in_tasks(ws, batches, tasks=2))
    metadata = local(catalog.load_table("db.t").metadata_location)
    con = duckdb_connection()
    con.execute("SET TimeZone = 'UTC'")
    got = con.execute(f"SELECT * FROM iceberg_scan('{metadata}') ORDER BY id").to_arrow_table()
    assert got.num_rows == 400
    rows = got.to_pylist()
    want = expected_rows(batches)
    assert [r["id"] for r in rows] == [r["id"] for r in want]
    for got_row, want_row in zip(rows, want, strict=True):
        assert got_row == want_row


def test_object_store_failure_during_a_data_file_upload_is_a_retryable_service_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store cuts a data file's upload: a typed, retryable ServiceError (not pyarrow's OSError); no file left."""
    from pyspark_fenced_sink.errors import ServiceError
    from pyspark_fenced_sink.write import task as task_module

    ws = make_spec(tmp_path)
    real = task_module._TaskWriter._close_file

    def cut(self: Any, part: Any) -> None:
        real(self, part)
        raise OSError("When completing multiple part upload for key 'data/x.parquet': AWS Error NETWORK_CONNECTION")

    monkeypatch.setattr(task_module._TaskWriter, "_close_file", cut)
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int64())})
    with pytest.raises(ServiceError, match="nothing of this write is durable") as raised:
        write_task(ws, iter([batch]), TaskInfo(0, 0, None))
    assert raised.value.retryable and raised.value.service == "storage"
    assert list((tmp_path / "wh").rglob("*.parquet")) == []
