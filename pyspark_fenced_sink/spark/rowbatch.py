"""Spark 4.0's row-based streaming writer: rows -> Arrow batches (PROTOCOL.md step 2; executors).

``DataSourceStreamArrowWriter`` exists from Spark 4.1; on 4.0 the stream writer
receives Rows and converts them here (naive local timestamps become UTC
instants, as Spark's Arrow path does). The result is the same, the path slower.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

__all__ = ["ROWS_PER_BATCH", "rows_to_batches"]

ROWS_PER_BATCH = 10_000


def rows_to_batches(
    rows: Iterator[Any], spark_schema: Any, rows_per_batch: int = ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of at most ``rows_per_batch`` rows of ``spark_schema`` from Spark ``Row`` objects."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        arrow_schema = to_arrow_schema(spark_schema, timezone="UTC")
    except TypeError:  # pragma: no cover - a pyspark without the timezone keyword maps timestamps to UTC itself
        arrow_schema = to_arrow_schema(spark_schema)
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append({f.name: _value(row[i], f.dataType) for i, f in enumerate(spark_schema.fields)})
        if len(chunk) >= rows_per_batch:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)


def _value(value: Any, data_type: Any) -> Any:
    """One Python value of Spark type ``data_type`` as Arrow's ``from_pylist`` expects it."""
    from pyspark.sql.types import ArrayType, MapType, StructType, TimestampType

    if value is None:
        return None
    if isinstance(data_type, TimestampType):
        return value.astimezone(UTC) if isinstance(value, datetime) and value.tzinfo is None else value
    if isinstance(data_type, StructType):
        return {f.name: _value(value[i], f.dataType) for i, f in enumerate(data_type.fields)}
    if isinstance(data_type, ArrayType):
        return [_value(v, data_type.elementType) for v in value]
    if isinstance(data_type, MapType):
        return [(_value(k, data_type.keyType), _value(v, data_type.valueType)) for k, v in value.items()]
    return value
