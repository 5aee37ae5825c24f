"""The per-table layout of a write and the split of Arrow batches by partition (executor side).

PROTOCOL.md step 2 ("write data files"): everything :mod:`pyspark_fenced_sink.write.task` derives
once per (schema, spec, properties) -- Arrow schema, statistics plan, partition sources, Parquet
settings, row-group and file sizes -- and the one vectorized pass per batch that groups rows by
partition tuple. No catalog code here: this module runs in Spark's Python workers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import (
    StatisticsCollector,
    compute_statistics_plan,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.partitioning import PartitionField, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.transforms import TruncateTransform
from pyiceberg.typedef import Record
from pyiceberg.types import BinaryType, IcebergType, StructType

from pyspark_fenced_sink.iceberg.codec.partitioning import column_index
from pyspark_fenced_sink.iceberg.codec.write_properties import parquet_kwargs, size_property
from pyspark_fenced_sink.write.nan_counts import nan_columns

__all__ = ["Layout", "ResolvedKey", "layout", "split"]


# ------------------------------------------------------------------ layout


@dataclass(frozen=True)
class _Source:
    top: str
    nested: tuple[str, ...]
    transform: Callable[[pa.Array], pa.Array]


@dataclass(frozen=True)
class Layout:
    """What a task derives once per (schema, spec, properties); see :func:`layout`."""

    schema: Schema
    spec: PartitionSpec
    partition_type: StructType
    arrow_schema: pa.Schema
    required: tuple[int, ...]
    sources: tuple[_Source, ...]
    stats_plan: dict[int, StatisticsCollector]
    id_mapping: dict[str, int]
    parquet_kwargs: dict[str, Any]
    nan_columns: tuple[tuple[int, Callable[[pa.Table], pa.ChunkedArray]], ...]
    row_group_rows: int
    row_group_bytes: int
    target_file_bytes: int


def _source_transform(pf: PartitionField, source_type: IcebergType) -> Callable[[pa.Array], pa.Array]:
    fn = pf.transform.pyarrow_transform(source_type)
    if isinstance(pf.transform, TruncateTransform) and isinstance(source_type, BinaryType):
        # pyiceberg-core truncates binary but not large_binary (the table's Arrow type).
        return lambda arr: fn(arr.cast(pa.binary()))
    return fn


@functools.lru_cache(maxsize=32)
def layout(schema_json: str, spec_json: str, props: tuple[tuple[str, str], ...]) -> Layout:
    """Parse and derive everything per (schema, spec, properties), once per process."""
    properties = dict(props)
    schema = Schema.model_validate_json(schema_json)
    spec = PartitionSpec.model_validate_json(spec_json)
    index = column_index(schema)
    sources = []
    for pf in spec.fields:
        path = index[pf.source_id].path
        sources.append(_Source(path[0], path[1:], _source_transform(pf, index[pf.source_id].field.field_type)))
    arrow_schema = schema_to_pyarrow(schema, include_field_ids=True)
    tp = TableProperties
    return Layout(
        schema=schema,
        spec=spec,
        partition_type=spec.partition_type(schema),
        arrow_schema=arrow_schema,
        required=tuple(i for i, f in enumerate(arrow_schema) if not f.nullable),
        sources=tuple(sources),
        stats_plan=compute_statistics_plan(schema, properties),
        id_mapping=parquet_path_to_id_mapping(schema),
        parquet_kwargs=parquet_kwargs(properties),
        nan_columns=nan_columns(schema, compute_statistics_plan(schema, properties)),
        row_group_rows=size_property(properties, tp.PARQUET_ROW_GROUP_LIMIT, tp.PARQUET_ROW_GROUP_LIMIT_DEFAULT),
        row_group_bytes=size_property(
            properties, tp.PARQUET_ROW_GROUP_SIZE_BYTES, tp.PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT
        ),
        target_file_bytes=size_property(
            properties, tp.WRITE_TARGET_FILE_SIZE_BYTES, tp.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
        ),
    )


# ------------------------------------------------------------------ partitioning


def _is_constant(arr: pa.Array) -> bool:
    if pa.types.is_floating(arr.type):
        return False  # min_max skips NaN (and equates -0.0 with 0.0): let group_by decide
    if arr.null_count:
        return bool(arr.null_count == len(arr))
    try:
        bounds = pc.min_max(arr)
    except pa.ArrowNotImplementedError:
        return False
    return bool(bounds["min"].equals(bounds["max"]))


def split(batch: pa.RecordBatch, layout: Layout) -> list[tuple[tuple[Any, ...], pa.RecordBatch]]:
    """Group ``batch``'s rows by partition tuple: one group_by and one take per batch."""
    keys = []
    for src in layout.sources:
        values = batch.column(src.top)
        if src.nested:
            values = pc.struct_field(values, list(src.nested))
        keys.append(src.transform(values))
    if all(_is_constant(k) for k in keys):  # the common case for time-ordered data
        return [(tuple(k[0].as_py() for k in keys), batch)]
    names = [f"k{i}" for i in range(len(keys))]
    rows = pa.array(np.arange(batch.num_rows, dtype=np.int64))
    grouped = pa.Table.from_arrays([*keys, rows], names=[*names, "i"]).group_by(names, use_threads=False)
    groups = grouped.aggregate([("i", "list")])
    key_tuples = list(zip(*(groups.column(n).to_pylist() for n in names), strict=True))
    if len(key_tuples) == 1:
        return [(key_tuples[0], batch)]
    lists = groups.column("i_list").combine_chunks()
    offsets = lists.offsets.to_numpy()
    ordered = batch.take(lists.values)
    return [(key, ordered.slice(int(offsets[g]), int(offsets[g + 1] - offsets[g]))) for g, key in enumerate(key_tuples)]


@dataclass(frozen=True)
class ResolvedKey(PartitionKey):
    """A PartitionKey whose partition record is computed per field.

    pyiceberg's own ``PartitionKey.partition`` rejects two partition fields on
    one source column (e.g. ``id, truncate(10, id)``).
    """

    record: Record = field(default_factory=Record)

    @property
    def partition(self) -> Record:
        """The partition record, as computed per field."""
        return self.record
