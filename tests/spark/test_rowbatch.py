"""The row-writer fallback (Spark 4.0 streaming): Spark rows to Arrow batches of the DataFrame's schema."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_fenced_sink.spark import streaming
from pyspark_fenced_sink.spark.rowbatch import rows_to_batches
from pyspark_fenced_sink.testing.harness import plan_options

INNER = StructType([StructField("at", TimestampType()), StructField("tags", ArrayType(StringType()))])
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("ts", TimestampType()),
        StructField("wall", TimestampNTZType()),
        StructField("day", DateType()),
        StructField("amount", DecimalType(10, 2)),
        StructField("inner", INNER),
        StructField("attrs", MapType(StringType(), LongType())),
    ]
)
LOCAL = datetime(2026, 3, 1, 12, 30, 0)  # naive local time, as Spark hands TimestampType values to Python


def _row(i: int) -> Any:
    return Row(
        id=i,
        ts=LOCAL,
        wall=LOCAL,
        day=date(2026, 3, 1),
        amount=Decimal("12.34"),
        inner=Row(at=LOCAL, tags=["a", "b"]),
        attrs={"k": i},
    )


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A worker whose local zone is not UTC, so a naive local time read as UTC would be 5 hours off."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_rows_become_batches_of_the_schema_with_utc_instants(new_york: Any) -> None:
    batches = list(rows_to_batches(iter([_row(1), _row(2)]), SCHEMA))
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 2 and table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    first = table.to_pylist()[0]
    instant = LOCAL.astimezone(UTC)
    assert instant == datetime(2026, 3, 1, 17, 30, tzinfo=UTC)
    assert first["ts"] == instant and first["inner"]["at"] == instant  # nested timestamps too
    assert first["wall"] == LOCAL  # timestamp_ntz keeps the wall clock
    assert first["amount"] == Decimal("12.34") and first["inner"]["tags"] == ["a", "b"]
    assert first["attrs"] == [("k", 1)] and first["day"] == date(2026, 3, 1)


def test_nulls_at_every_level() -> None:
    row = Row(id=None, ts=None, wall=None, day=None, amount=None, inner=Row(at=None, tags=None), attrs=None)
    (batch,) = rows_to_batches(iter([row]), SCHEMA)
    assert batch.to_pylist() == [
        {
            "id": None,
            "ts": None,
            "wall": None,
            "day": None,
            "amount": None,
            "inner": {"at": None, "tags": None},
            "attrs": None,
        }
    ]


def test_rows_are_chunked() -> None:
    sizes = [b.num_rows for b in rows_to_batches((_row(i) for i in range(7)), SCHEMA, rows_per_batch=3)]
    assert sizes == [3, 3, 1]
    assert list(rows_to_batches(iter([]), SCHEMA)) == []


@pytest.mark.parametrize("arrow", [True, False])
def test_stream_writer_writes_the_same_rows_through_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arrow: bool
) -> None:
    """The writer's task step with Arrow batches (Spark >= 4.1) and with rows (the 4.0 fallback)."""
    from pyspark.sql.types import StructField as F

    schema = StructType([F("id", LongType()), F("writer", StringType())])
    options = {"warehouse": str(tmp_path / "wh"), "table": "db.rows", "writer.id": "rows"}
    writer = streaming.FencedLakeStreamWriter(plan_options(options, schema=schema, streaming=True), schema)
    monkeypatch.setattr(streaming, "ARROW_STREAM_WRITER", arrow)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "writer": ["r"] * 3})
    source = iter(data.to_batches()) if arrow else iter([Row(id=i, writer="r") for i in (1, 2, 3)])
    message = writer.write(source)
    assert message.rows == 3 and len(message.files) == 1
