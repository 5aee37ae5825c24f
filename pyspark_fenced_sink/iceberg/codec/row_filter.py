"""The ``replace-where`` row filter over pyiceberg expressions (PROTOCOL.md §5.1; driver and executors).

:func:`bind_row_filter` parses and binds on the driver (Iceberg's syntax, names
case-insensitive, lenient timestamp literals); :func:`row_violations` finds the
rows of an Arrow batch that do not satisfy it (executors) and :func:`split_rows`
splits a batch into those and the rest (an upsert's delete rows, PROTOCOL.md
§5.4); :func:`file_matcher` places a data file against it (all / none / some
rows) from partition projections and column metrics. No catalog code: executors
import it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    LiteralPredicate,
    Not,
    Or,
    SetPredicate,
    UnboundPredicate,
)
from pyiceberg.expressions.literals import Literal, StringLiteral
from pyiceberg.expressions.visitors import (
    BooleanExpressionVisitor,
    _InclusiveMetricsEvaluator,
    _StrictMetricsEvaluator,
    bind,
    expression_evaluator,
    extract_field_ids,
    inclusive_projection,
    strict_projection,
    visit,
)
from pyiceberg.io.pyarrow import _expression_to_complementary_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, TimestampType, TimestamptzType

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.protocol.replace import Match

__all__ = ["bind_row_filter", "file_matcher", "filter_columns", "row_violations", "split_rows"]

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_OFFSET = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
_MINUTES_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$")
_CASE_SENSITIVE = False  # Spark SQL resolves column names case-insensitively


def _timestamp_text(text: str, with_zone: bool) -> str:
    """A user's timestamp literal in the ISO-8601 form pyiceberg parses."""
    text = text.strip()
    if _DATE_ONLY.fullmatch(text):
        text += "T00:00:00"
    elif len(text) > 10 and text[10] == " ":
        text = f"{text[:10]}T{text[11:]}"
    offset = _OFFSET.search(text[10:])
    clock, zone = (text[: 10 + offset.start()], offset.group()) if offset else (text, "")
    if _MINUTES_ONLY.fullmatch(clock):
        clock += ":00"
    if with_zone and not zone:
        zone = "+00:00"
    return clock + zone


class _Normalize(BooleanExpressionVisitor[BooleanExpression]):
    """Rewrites timestamp literals of an unbound expression into the ISO form pyiceberg binds."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def visit_true(self) -> BooleanExpression:
        return AlwaysTrue()

    def visit_false(self) -> BooleanExpression:
        return AlwaysFalse()

    def visit_not(self, child_result: BooleanExpression) -> BooleanExpression:
        return Not(child_result)

    def visit_and(self, left_result: BooleanExpression, right_result: BooleanExpression) -> BooleanExpression:
        return And(left_result, right_result)

    def visit_or(self, left_result: BooleanExpression, right_result: BooleanExpression) -> BooleanExpression:
        return Or(left_result, right_result)

    def _fix(self, field_type: IcebergType | None, lit: Literal[Any]) -> Literal[Any]:
        if isinstance(lit, StringLiteral) and isinstance(field_type, TimestampType | TimestamptzType):
            return StringLiteral(_timestamp_text(lit.value, isinstance(field_type, TimestamptzType)))
        return lit

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> BooleanExpression:
        try:
            field_type: IcebergType | None = self.schema.find_type(str(getattr(predicate.term, "name", "")), False)
        except ValueError:
            field_type = None  # binding names the unknown column
        if isinstance(predicate, LiteralPredicate):
            return type(predicate)(predicate.term, self._fix(field_type, predicate.literal))
        if isinstance(predicate, SetPredicate):
            return type(predicate)(predicate.term, {self._fix(field_type, lit) for lit in predicate.literals})
        return predicate

    def visit_bound_predicate(self, predicate: BoundPredicate) -> BooleanExpression:
        return predicate


@functools.lru_cache(maxsize=32)
def _unbound(text: str, schema_json: str) -> BooleanExpression:
    """The parsed, normalized (still unbound) filter; ``schema_json`` is the table schema it binds to."""
    from pyiceberg.expressions.parser import parse

    schema = Schema.model_validate_json(schema_json)
    return visit(parse(text), _Normalize(schema))


def _parsed(text: str, schema: Schema, what: str = "option replace-where") -> BooleanExpression:
    try:
        expr = _unbound(text, schema.model_dump_json())
        bind(schema, expr, _CASE_SENSITIVE)
    except Exception as e:  # noqa: BLE001 - pyparsing's ParseException, pyiceberg's ValueError/TypeError ...
        raise InvalidOptionsError(
            f"{what}={text!r} is invalid: {type(e).__name__}: {str(e).splitlines()[0][:300]}; "
            "expected an Iceberg filter over the table's columns, e.g. \"ts >= '2026-01-01' AND region = 'eu'\""
        ) from None
    return expr


def bind_row_filter(text: str, schema: Schema, what: str = "option replace-where") -> BooleanExpression:
    """``text`` bound to ``schema`` (case-insensitive names, normalized timestamp literals).

    ``what`` names the filter in the error message (an option, a CLI flag).

    Raises:
        InvalidOptionsError: the filter does not parse, names a column the table lacks, or a literal does
            not fit its column's type.
    """
    return bind(schema, _parsed(text, schema, what), _CASE_SENSITIVE)


def row_violations(batch: pa.RecordBatch, text: str, schema_json: str) -> pa.RecordBatch:
    """The rows of ``batch`` (in the table's Arrow schema) for which the filter is false or null.

    ``schema_json`` is the table schema (``Schema.model_dump_json()``) the filter binds to.
    """
    return batch.filter(_complement(text, schema_json))


def split_rows(batch: pa.RecordBatch, text: str, schema_json: str) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(rows where the filter is false or null, rows where it is true) of ``batch`` (``upsert-delete-where``)."""
    complement = _complement(text, schema_json)
    return batch.filter(complement), batch.filter(~complement)  # type: ignore[operator]


@functools.lru_cache(maxsize=32)
def filter_columns(text: str, schema_json: str) -> tuple[str, ...]:
    """The table columns the filter reads (for messages about a row that violates it)."""
    schema = Schema.model_validate_json(schema_json)
    ids = extract_field_ids(bind_row_filter(text, schema))
    return tuple(sorted(schema.find_column_name(i) or str(i) for i in ids))


@functools.lru_cache(maxsize=32)
def _complement(text: str, schema_json: str) -> object:
    schema = Schema.model_validate_json(schema_json)
    return _expression_to_complementary_pyarrow(bind_row_filter(text, schema), schema)


def file_matcher(text: str, schema: Schema, specs: Mapping[int, PartitionSpec]) -> Callable[[DataFile], Match]:
    """Classify data files against the filter: all rows match, none can, or some may (undecided).

    A file is ``ALL`` if the strict projection of the filter onto its partition
    spec holds for its partition, or the strict metrics evaluator proves every
    row matches; ``NONE`` if the inclusive projection fails on its partition or
    the inclusive metrics evaluator proves no row can match; ``SOME`` otherwise.
    """
    expr = _parsed(text, schema)
    strict_rows = _StrictMetricsEvaluator(schema, expr, _CASE_SENSITIVE).eval
    inclusive_rows = _InclusiveMetricsEvaluator(schema, expr, _CASE_SENSITIVE).eval

    @functools.cache
    def partition_tests(spec_id: int) -> tuple[Callable[[object], bool], Callable[[object], bool]]:
        spec = specs[spec_id]
        partition_schema = Schema(*spec.partition_type(schema).fields)
        strict = expression_evaluator(
            partition_schema, strict_projection(schema, spec, _CASE_SENSITIVE)(expr), _CASE_SENSITIVE
        )
        inclusive = expression_evaluator(
            partition_schema, inclusive_projection(schema, spec, _CASE_SENSITIVE)(expr), _CASE_SENSITIVE
        )
        return strict, inclusive  # type: ignore[return-value]

    def match(data_file: DataFile) -> Match:
        strict, inclusive = partition_tests(data_file.spec_id)
        if strict(data_file.partition) or strict_rows(data_file):
            return Match.ALL
        if not inclusive(data_file.partition) or not inclusive_rows(data_file):
            return Match.NONE
        return Match.SOME

    return match
