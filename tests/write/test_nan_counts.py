"""NaN counts of fencedlake's own data files (PROTOCOL.md step 2, §5.4; executor side).

The Parquet footer has none, so the writer counts them from the rows it writes;
an absent count would make every float column's file unplaceable by a
replace-where.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink.spark.schema_to_iceberg import iceberg_schema_from_spark
from pyspark_fenced_sink.write.task import TaskInfo, write_task
from tests.write.test_task import decoded, local, make_spec

NAN = float("nan")
SPARK = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("v", T.DoubleType()),
        T.StructField("f", T.FloatType()),
        T.StructField("s", T.StructType([T.StructField("x", T.DoubleType())])),
        T.StructField("l", T.ArrayType(T.DoubleType())),
        T.StructField("m", T.MapType(T.StringType(), T.DoubleType())),
    ]
)
SCHEMA = iceberg_schema_from_spark(SPARK)
IDS = {name: SCHEMA.find_field(name).field_id for name in ("v", "f", "s.x", "l.element", "m.value", "m.key")}


def batch(n: int, start: int = 0) -> pa.RecordBatch:
    """Rows with NaNs and nulls in every float leaf, at different rates."""
    rows = range(start, start + n)
    return pa.record_batch(
        {
            "id": pa.array(list(rows), pa.int64()),
            "v": pa.array([NAN if i % 3 == 0 else None if i % 5 == 0 else float(i) for i in rows], pa.float64()),
            "f": pa.array([NAN if i % 4 == 0 else float(i) for i in rows], pa.float32()),
            "s": pa.array([None if i % 7 == 0 else {"x": NAN if i % 2 else 1.0} for i in rows]),
            "l": pa.array([[NAN, float(i)] if i % 2 else None for i in rows], pa.list_(pa.float64())),
            "m": pa.array([[("k", NAN if i % 6 == 0 else 0.5)] for i in rows], pa.map_(pa.string(), pa.float64())),
        }
    )


def nan_truth(path: str) -> dict[int, int]:
    """NaNs per float leaf of a written file, read back and counted in Python."""
    rows = pq.read_table(local(path)).to_pylist()

    def nans(values: list[Any]) -> int:
        return sum(1 for x in values if isinstance(x, float) and math.isnan(x))

    return {
        IDS["v"]: nans([r["v"] for r in rows]),
        IDS["f"]: nans([r["f"] for r in rows]),
        IDS["s.x"]: nans([r["s"]["x"] for r in rows if r["s"] is not None]),
        IDS["l.element"]: nans([x for r in rows if r["l"] is not None for x in r["l"]]),
        IDS["m.value"]: nans([v for r in rows for _, v in r["m"]]),
    }


def test_every_float_leaf_gets_its_exact_nan_count_zero_included(tmp_path: Path) -> None:
    """Top-level, struct, list-element and map-value floats: counted exactly; strings get none."""
    ws = make_spec(tmp_path, SCHEMA)
    (f,) = decoded(ws, write_task(ws, iter([batch(50)]), TaskInfo(0, 0, None)))
    assert f.nan_value_counts == nan_truth(f.file_path)
    assert IDS["m.key"] not in f.nan_value_counts
    (zero,) = decoded(ws, write_task(ws, iter([batch(1, start=1)]), TaskInfo(1, 1, None)))
    assert zero.nan_value_counts[IDS["v"]] == 0  # present and zero: "no NaN" is known, not assumed


def test_counts_are_per_file_when_files_roll_and_row_groups_split(tmp_path: Path) -> None:
    """Many row groups, several files: each file's counts are its own rows' NaNs."""
    props = {"write.parquet.row-group-limit": "40", "write.target-file-size-bytes": "4000"}
    ws = make_spec(tmp_path, SCHEMA, properties=props)
    files = decoded(ws, write_task(ws, iter([batch(100, s) for s in range(0, 1000, 100)]), TaskInfo(0, 0, None)))
    assert len(files) > 1
    for f in files:
        assert f.nan_value_counts == nan_truth(f.file_path)


def test_no_nan_counts_where_metrics_are_off(tmp_path: Path) -> None:
    """``write.metadata.metrics.default=none`` (or per column): no counts, as no other metric."""
    props = {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.f": "counts"}
    ws = make_spec(tmp_path, SCHEMA, properties=props)
    (f,) = decoded(ws, write_task(ws, iter([batch(20)]), TaskInfo(0, 0, None)))
    assert f.nan_value_counts == {IDS["f"]: nan_truth(f.file_path)[IDS["f"]]}
