"""NaN counts of the float columns a data file holds (PROTOCOL.md step 2, §5.4; executor side).

A Parquet footer has no NaN counts, and a missing NaN count in a data file's
metadata is unknown, not zero: a replace-where could never prove that a file of
a float column matches its filter. The writer therefore counts NaNs from the
rows of each row group it writes — ``float`` and ``double`` leaves only, at any
depth (struct fields, list elements, map keys and values), for every column
whose metrics mode is not ``none`` — and records them in the file's
``nan_value_counts`` (zero included).

No catalog code here: this module runs in Spark's Python workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import MetricModeTypes, StatisticsCollector
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, FloatType, IcebergType, ListType, MapType, NestedField, StructType

__all__ = ["count_nans", "nan_columns"]

#: A way to the values of one leaf column in a row group.
Getter = Callable[[pa.Table], pa.ChunkedArray]


def count_nans(values: pa.ChunkedArray) -> int:
    """NaNs among ``values`` (nulls are not NaN)."""
    total = pc.sum(pc.is_nan(values)).as_py()
    return int(total or 0)


def _struct_child(parent: Getter, index: int) -> Getter:
    return lambda t: pc.struct_field(parent(t), [index])


def _list_elements(parent: Getter) -> Getter:
    return lambda t: pc.list_flatten(parent(t))


def _map_side(parent: Getter, index: int) -> Getter:
    """Keys (0) or values (1) of a map column, within the row group's slice."""

    def get(t: pa.Table) -> pa.ChunkedArray:
        column = parent(t)
        chunks = []
        for chunk in column.chunks:
            offsets = chunk.offsets
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            side = chunk.items if index else chunk.keys
            chunks.append(side.slice(first, last - first))
        return pa.chunked_array(chunks, type=column.type.item_type if index else column.type.key_type)

    return get


def _walk(field_type: IcebergType, field_id: int, get: Getter, out: list[tuple[int, Getter]]) -> None:
    if isinstance(field_type, FloatType | DoubleType):
        out.append((field_id, get))
    elif isinstance(field_type, StructType):
        for index, child in enumerate(field_type.fields):
            _walk(child.field_type, child.field_id, _struct_child(get, index), out)
    elif isinstance(field_type, ListType):
        _walk(field_type.element_type, field_type.element_id, _list_elements(get), out)
    elif isinstance(field_type, MapType):
        _walk(field_type.key_type, field_type.key_id, _map_side(get, 0), out)
        _walk(field_type.value_type, field_type.value_id, _map_side(get, 1), out)


def _top(field: NestedField) -> Getter:
    return lambda t: t.column(field.name)


def nan_columns(schema: Schema, plan: Mapping[int, StatisticsCollector]) -> tuple[tuple[int, Getter], ...]:
    """The float leaves of ``schema`` whose metrics are collected (``plan``: pyiceberg's statistics plan)."""
    out: list[tuple[int, Getter]] = []
    for field in schema.fields:
        _walk(field.field_type, field.field_id, _top(field), out)
    return tuple((i, get) for i, get in out if i in plan and plan[i].mode.type is not MetricModeTypes.NONE)
