"""The executor read path: data files -> Spark-ready Arrow batches, for tables other engines changed.

Tables are changed through pyiceberg's public API (schema and partition
evolution, ``add_files`` of files DuckDB wrote) or as a Java engine commits
row-level deletes (``tests/read/rowdelta.py``); rows are read through the
same planning and ``read_files`` calls Spark's reader makes, and the batches
must carry exactly the Arrow schema Spark checks.
"""

from __future__ import annotations

import datetime as dt
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, GreaterThan
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import FixedType, LongType, NestedField, StringType, TimeType, UUIDType

from pyspark_fenced_sink.iceberg.codec.fileio import io_properties
from pyspark_fenced_sink.iceberg.planning.scan import executor_metadata, executor_task, plan_files, resolve_point
from pyspark_fenced_sink.read.task import ReadSpec, read_files, spark_arrow_schema
from pyspark_fenced_sink.spark.schema_from_iceberg import spark_schema_from_iceberg
from tests.read.rowdelta import commit_deletes, position_delete_file
from tests.read.tables import append, events, make_table, read_options

ROOT = Path(__file__).resolve().parents[2]
ALL: BooleanExpression = AlwaysTrue()


def _spec(table: Any, row_filter: BooleanExpression = ALL, **overrides: Any) -> ReadSpec:
    schema = table.schema()
    has_uuid = any(isinstance(schema.find_type(i), UUIDType) for i in schema.field_ids)
    values: dict[str, Any] = {
        "table": "db.t",
        "metadata": executor_metadata(table.metadata, schema),
        "projection": schema,
        "spark_schema_json": spark_schema_from_iceberg(schema).json(),
        "io_properties": io_properties(table),
        "row_filter": row_filter,
        "text_uuids": has_uuid,
    }
    return ReadSpec(**{**values, **overrides})


def _tasks(table: Any, wh: str, row_filter: BooleanExpression = ALL) -> list[Any]:
    point = resolve_point(table, read_options(wh))
    return [executor_task(t) for t in plan_files(table, point, row_filter, "db.t")]


def _read(table: Any, wh: str, row_filter: BooleanExpression = ALL) -> pa.Table:
    """Every row as Spark would receive it; asserts each batch has exactly Spark's Arrow schema."""
    spec = _spec(table, row_filter)
    target = spark_arrow_schema(spec.spark_schema_json)
    batches = list(read_files(spec, _tasks(table, wh, row_filter)))
    assert all(b.schema.equals(target) for b in batches)
    return pa.Table.from_batches(batches, schema=target)


def _by_id(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


def test_the_read_path_loads_no_catalog_code(wh: str, tmp_path: Path) -> None:
    """A fresh interpreter that loads the Spark readers' modules (as executors unpickling them do), unpickles a
    split and reads it never imports pyiceberg.catalog (nor sqlalchemy)."""
    table = append(make_table(wh), events(range(5)))
    job = tmp_path / "job.pickle"
    job.write_bytes(pickle.dumps((_spec(table), _tasks(table, wh))))
    code = (
        "import pickle, sys\n"
        "import pyspark_fenced_sink.spark.reader, pyspark_fenced_sink.spark.stream_reader\n"
        "from pyspark_fenced_sink.read.task import read_files\n"
        f"spec, tasks = pickle.loads(open({str(job)!r}, 'rb').read())\n"
        "rows = sum(b.num_rows for b in read_files(spec, tasks))\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('pyiceberg.catalog', 'sqlalchemy')))\n"
        "print(rows, ','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["5"]


def test_renamed_dropped_added_and_promoted_columns_read_by_field_id(wh: str) -> None:
    """Old files read through the current schema: rename by id, dropped gone, added null, int promoted."""
    schema = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "k", StringType()), NestedField(3, "v", LongType())
    )
    table = make_table(wh, schema=schema)
    table = append(table, events([1, 2]))
    with table.update_schema() as update:
        update.rename_column("k", "key")
        update.delete_column("v")
        update.add_column("extra", StringType())
    table = table.catalog.load_table("db.t")
    new = pa.table({"id": [3], "key": ["z"], "extra": ["e"]}, schema=table.schema().as_arrow())
    table = append(table, new)
    assert _read(table, wh).column_names == ["id", "key", "extra"]
    assert _by_id(_read(table, wh)) == [
        {"id": 1, "key": "a", "extra": None},
        {"id": 2, "key": "a", "extra": None},
        {"id": 3, "key": "z", "extra": "e"},
    ]


def test_a_column_promoted_from_int_to_long_reads_as_long(wh: str) -> None:
    """int -> long evolution: old int files read as the table's long type."""
    from pyiceberg.types import IntegerType

    table = make_table(wh, schema=Schema(NestedField(1, "id", LongType()), NestedField(2, "n", IntegerType())))
    table = append(table, pa.table({"id": [1], "n": pa.array([7], pa.int32())}))
    with table.update_schema() as update:
        update.update_column("n", LongType())
    table = table.catalog.load_table("db.t")
    rows = _read(table, wh)
    assert rows.schema.field("n").type == pa.int64() and rows.column("n").to_pylist() == [7]


def test_partition_evolution_reads_files_of_every_spec_and_prunes_each(wh: str) -> None:
    """Files written under an old spec (identity k) and a new one (+ bucket(v)) all read; pruning spans both."""
    table = make_table(wh)
    with table.update_spec() as update:
        update.add_field("k", IdentityTransform(), "k")
    table = table.catalog.load_table("db.t")
    table = append(table, events(range(10), k="a"))
    table = append(table, events(range(10, 20), k="b"))
    with table.update_spec() as update:
        update.add_field("v", BucketTransform(4), "v_bucket")
    table = table.catalog.load_table("db.t")
    table = append(table, events(range(20, 30), k="a"))
    specs = {t.file.spec_id for t in _tasks(table, wh)}
    assert len(specs) == 2
    assert sorted(_read(table, wh).column("id").to_pylist()) == list(range(30))
    from pyiceberg.expressions import EqualTo

    pruned = _tasks(table, wh, EqualTo("k", "b"))
    assert {t.file.spec_id for t in pruned} == {min(specs)} and len(pruned) == 1


def test_positional_deletes_are_applied(wh: str) -> None:
    """Rows a v2 positional delete file names are not returned; other files are untouched."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    table = append(table, events(range(10, 20)))
    target = next(t.file.file_path for t in _tasks(table, wh) if t.file.record_count == 10)
    first_ids = sorted(_read(table, wh).column("id").to_pylist())
    table = commit_deletes(table, [position_delete_file(table, target, [0, 3, 9])])
    ids = sorted(_read(table, wh).column("id").to_pylist())
    assert len(ids) == 17 and set(ids) < set(first_ids)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == ids  # pyiceberg agrees


def test_files_duckdb_wrote_without_field_ids_read_through_the_name_mapping(wh: str, tmp_path: Path) -> None:
    """add_files of Parquet written by DuckDB (no field ids): read by the table's name mapping."""
    from tests.spark.support import duckdb_connection

    path = tmp_path / "duck.parquet"
    duckdb_connection().cursor().execute(
        f"COPY (SELECT i::BIGINT AS id, 'd' || i AS k, i * 10 AS v FROM range(4) t(i)) TO '{path}' (FORMAT parquet)"
    )
    table = make_table(wh)
    table = append(table, events([100]))
    table.add_files([str(path)])
    table = table.catalog.load_table("db.t")
    assert _by_id(_read(table, wh))[:2] == [{"id": 0, "k": "d0", "v": 0}, {"id": 1, "k": "d1", "v": 10}]
    assert len(_read(table, wh)) == 5


def test_uuid_fixed_and_time_columns_reach_spark_types(wh: str) -> None:
    """Types other engines write: uuid as its canonical text, fixed as binary, time as time(6) (ns in Arrow)."""
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "u", UUIDType()),
        NestedField(3, "fx", FixedType(3)),
        NestedField(4, "t", TimeType()),
    )
    table = make_table(wh, schema=schema)
    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    arrow_schema = table.schema().as_arrow()
    data = pa.table(
        {"id": [1, 2], "u": [value.bytes, None], "fx": [b"abc", None], "t": [dt.time(1, 2, 3, 4), None]},
        schema=arrow_schema.set(1, pa.field("u", pa.binary(16))),
    )
    table = append(table, data.cast(arrow_schema))
    rows = _by_id(_read(table, wh))
    assert rows[0] == {"id": 1, "u": str(value), "fx": b"abc", "t": dt.time(1, 2, 3, 4)}
    assert rows[1] == {"id": 2, "u": None, "fx": None, "t": None}


def test_null_lists_and_maps_of_structs_stay_null(wh: str, tmp_path: Path) -> None:
    """pyiceberg 0.12 reads a null list<struct> or map<_, struct> as empty; the read path keeps it null."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    point = pa.struct([("y", pa.string())])
    arrow = pa.schema(
        [
            ("id", pa.int64()),
            ("items", pa.list_(point)),
            ("m", pa.map_(pa.string(), point)),
            ("st", pa.struct([("inner", pa.list_(point))])),
            ("plain", pa.list_(pa.int64())),
        ]
    )
    rows = [
        {"id": 1, "items": None, "m": None, "st": {"inner": None}, "plain": None},
        {"id": 2, "items": [], "m": [], "st": None, "plain": []},
        {"id": 3, "items": [{"y": "a"}, None], "m": [("k", {"y": None})], "st": {"inner": [{"y": "b"}]}, "plain": [1]},
    ]
    table = make_table(wh, schema=make_table(wh, "db.shape", schema=arrow).schema())
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.Table.from_pylist(rows, arrow).cast(schema_to_pyarrow(table.schema())), path)
    table.add_files([str(path)])
    table = table.catalog.load_table("db.t")
    assert _by_id(_read(table, wh)) == rows


def test_the_row_filter_drops_rows_while_decoding(wh: str) -> None:
    """The pushed-down filter keeps only matching rows of a file that was not pruned."""
    table = append(make_table(wh), events(range(10)))
    assert sorted(_read(table, wh, GreaterThan("id", 6)).column("id").to_pylist()) == [7, 8, 9]


def test_read_spec_repr_masks_secrets_and_pickles(wh: str) -> None:
    """io properties may hold keys: never in repr; the spec travels to executors by pickle."""
    table = append(make_table(wh), events(range(3)))
    spec = _spec(table, io_properties={"s3.secret-access-key": "s3cr3t", "s3.endpoint": "http://x"})
    assert "s3cr3t" not in repr(spec) and "http://x" in repr(spec)
    assert pickle.loads(pickle.dumps(spec)).projection == spec.projection
