"""Iceberg data files -> the Arrow batches Spark expects (executor side; PROTOCOL.md §14).

Runs in Spark's Python workers for every input split of a batch or streaming
read. Files are decoded by the executor-side file reader (``read.files``: by
field id, deletes applied, the pushed-down filter applied while decoding — a
superset of what Spark keeps; Spark filters again). Each batch is then cast to
the Arrow schema Spark derives from the read's Spark schema, which Spark checks
field by field; ``uuid`` values become their canonical text.

No catalog code here (``tests/read/test_task.py`` checks it in a fresh interpreter).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.masking import redact
from pyspark_fenced_sink.read.files import file_batches

__all__ = ["ReadSpec", "read_files", "spark_arrow_schema"]


@dataclass(frozen=True)
class ReadSpec:
    """Everything a read task needs (pickled to executors with Spark's reader).

    Attributes:
        table: Table name, for messages.
        metadata: The table metadata to read with: the read schema current, every partition
            spec, no snapshot history (``iceberg.planning.scan.executor_metadata``).
        projection: The Iceberg columns read (the read schema, or the user's projection of it).
        spark_schema_json: The Spark schema Spark expects, as JSON.
        io_properties: FileIO properties; may hold secrets, masked in ``repr``.
        row_filter: Rows to keep while decoding (a superset of Spark's filter; Spark filters again).
        text_uuids: The projection has ``uuid`` columns (converted to text, value by value).
    """

    table: str
    metadata: TableMetadata
    projection: Schema
    spark_schema_json: str
    io_properties: Mapping[str, str] = field(default_factory=dict)
    row_filter: BooleanExpression = field(default_factory=AlwaysTrue)
    text_uuids: bool = False

    def __repr__(self) -> str:
        return (
            f"ReadSpec(table={self.table!r}, columns={[f.name for f in self.projection.fields]}, "
            f"row_filter={self.row_filter!r}, io_properties={redact(self.io_properties)})"
        )


@functools.lru_cache(maxsize=16)
def spark_arrow_schema(spark_schema_json: str) -> pa.Schema:
    """The Arrow schema Spark checks a Python source's batches against (its own conversion, in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(spark_schema_json))
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # Spark 4.0's signature has no timezone (and does not compare schemas exactly)
        return to_arrow_schema(schema)


def _uuid_text(array: pa.Array) -> pa.Array:
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    return pa.array([None if v is None else str(uuid.UUID(bytes=v)) for v in array.to_pylist()], pa.string())


def _conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast ``array`` to ``target``, turning 16-byte uuid values into text where the target is a string."""
    source = array.storage.type if isinstance(array, pa.ExtensionArray) else array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_string(target) and pa.types.is_fixed_size_binary(source):
        return _uuid_text(array)
    if pa.types.is_struct(target):
        children = [_conform(child, target.field(i).type) for i, child in enumerate(array.flatten())]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_map(target):
        keys = _conform(array.keys, target.key_type)
        items = _conform(array.items, target.item_type)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_list(target):
        values = _conform(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, type=target, mask=mask)
    return array.cast(target)


def _to_spark(batch: pa.RecordBatch, target: pa.Schema, text_uuids: bool) -> pa.RecordBatch:
    if not text_uuids:
        return batch.cast(target)
    columns = [_conform(batch.column(i), f.type) for i, f in enumerate(target)]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def read_files(spec: ReadSpec, tasks: Sequence[FileScanTask]) -> Iterator[pa.RecordBatch]:
    """Stream the rows of ``tasks`` (data files with their delete files) as Spark-ready Arrow batches."""
    target = spark_arrow_schema(spec.spark_schema_json)
    batches = file_batches(
        spec.metadata,
        spec.io_properties,
        tasks,
        projection=spec.projection,
        row_filter=spec.row_filter,
        before_file=lambda: failpoints.hit("read.before-file"),
    )
    for batch in batches:
        yield _to_spark(batch, target, spec.text_uuids)
