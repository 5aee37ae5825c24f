"""What a data file's column statistics can prove about its rows (PROTOCOL.md §5.1, §5.4; driver).

pyiceberg's metrics evaluators read an absent NaN or null count as zero and
decode bounds with the column's current type. Before a decision trusts them
(a replace-where removing a file whole), this module

* describes the filter's columns in one file (:func:`column_stats`) for the
  protocol's rules (``protocol.replace.missing_stats``, ``holds_unmatched``):
  absent counts are unknown, a compared column with nulls or NaNs cannot match
  every row;
* widens bounds written before a legal type promotion (``int`` -> ``long``,
  ``float`` -> ``double``: 4-byte bounds under an 8-byte type) so they decode
  (:func:`widened`).

No catalog code here.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.conversions import to_bytes
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    BooleanExpression,
    BoundIsNaN,
    BoundIsNull,
    BoundNotNaN,
    BoundNotNull,
    BoundPredicate,
)
from pyiceberg.expressions.visitors import BooleanExpressionVisitor, visit
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, FloatType, PrimitiveType

from pyspark_fenced_sink.iceberg.codec.datafiles import decode_value
from pyspark_fenced_sink.protocol.replace import ColumnStats

__all__ = ["UNREADABLE_STATS", "StatsView", "column_stats", "filter_fields", "widened"]

_NULL_TESTS = (BoundIsNull, BoundNotNull, BoundIsNaN, BoundNotNaN)


class _Fields(BooleanExpressionVisitor[dict[int, bool]]):
    """Field id -> compared (True if some predicate compares its values) of a bound expression."""

    def visit_true(self) -> dict[int, bool]:
        return {}

    def visit_false(self) -> dict[int, bool]:
        return {}

    def visit_not(self, child_result: dict[int, bool]) -> dict[int, bool]:
        return child_result

    def visit_and(self, left_result: dict[int, bool], right_result: dict[int, bool]) -> dict[int, bool]:
        return _merge(left_result, right_result)

    def visit_or(self, left_result: dict[int, bool], right_result: dict[int, bool]) -> dict[int, bool]:
        return _merge(left_result, right_result)

    def visit_unbound_predicate(self, predicate: Any) -> dict[int, bool]:
        raise TypeError(f"expected a bound expression, found {predicate}")

    def visit_bound_predicate(self, predicate: BoundPredicate) -> dict[int, bool]:
        return {predicate.term.ref().field.field_id: not isinstance(predicate, _NULL_TESTS)}


def _merge(a: dict[int, bool], b: dict[int, bool]) -> dict[int, bool]:
    return {k: a.get(k, False) or b.get(k, False) for k in a.keys() | b.keys()}


def filter_fields(bound: BooleanExpression) -> dict[int, bool]:
    """The field ids a bound filter reads, each with whether it compares its values."""
    if isinstance(bound, AlwaysTrue | AlwaysFalse):
        return {}
    return visit(bound, _Fields())


def column_stats(data_file: DataFile, schema: Schema, fields: Mapping[int, bool]) -> list[ColumnStats]:
    """The statistics ``data_file`` records for each filter field (``filter_fields``)."""
    values = data_file.value_counts or {}
    nulls = data_file.null_value_counts or {}
    nans = data_file.nan_value_counts or {}
    out = []
    for field_id, compared in sorted(fields.items()):
        field_type = schema.find_type(field_id)
        out.append(
            ColumnStats(
                name=schema.find_column_name(field_id) or str(field_id),
                compared=compared,
                floating=isinstance(field_type, FloatType | DoubleType),
                values=values.get(field_id),
                nulls=nulls.get(field_id),
                nans=nans.get(field_id),
            )
        )
    return out


@dataclass(frozen=True)
class StatsView:
    """The statistics attributes pyiceberg's metrics evaluators read, with bounds widened."""

    file_path: str
    record_count: int
    value_counts: Mapping[int, int] | None
    null_value_counts: Mapping[int, int] | None
    nan_value_counts: Mapping[int, int] | None
    lower_bounds: Mapping[int, bytes]
    upper_bounds: Mapping[int, bytes]
    partition: Record
    spec_id: int


def widened(data_file: DataFile, schema: Schema, fields: Mapping[int, bool]) -> StatsView:
    """``data_file``'s statistics with the filter fields' bounds decodable under the current schema.

    Raises:
        struct.error: a bound is damaged beyond a promotion (the caller treats the file as unplaceable).
    """
    lower, upper = dict(data_file.lower_bounds or {}), dict(data_file.upper_bounds or {})
    for field_id in fields:
        field_type = schema.find_type(field_id)
        if not isinstance(field_type, PrimitiveType):
            continue
        for bounds in (lower, upper):
            if field_id in bounds:
                bounds[field_id] = to_bytes(field_type, decode_value(field_type, bounds[field_id]))
    return StatsView(
        file_path=data_file.file_path,
        record_count=data_file.record_count,
        value_counts=data_file.value_counts,
        null_value_counts=data_file.null_value_counts,
        nan_value_counts=data_file.nan_value_counts,
        lower_bounds=lower,
        upper_bounds=upper,
        partition=data_file.partition,
        spec_id=data_file.spec_id,
    )


#: What evaluating a file's statistics may raise when they are damaged or of another type: the file is then
#: one the statistics cannot place (``Match.UNPROVEN``), never an error every committer hits.
UNREADABLE_STATS: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError, struct.error, OverflowError)
