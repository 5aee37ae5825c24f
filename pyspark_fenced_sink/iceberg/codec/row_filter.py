"""The ``replace-where`` row filter over pyiceberg expressions (PROTOCOL.md §5.1; driver and executors).

:func:`bind_row_filter` parses and binds on the driver (Iceberg's syntax, names
case-insensitive, lenient timestamp literals); :func:`row_violations` finds the
rows of an Arrow batch that do not satisfy it (executors) and :func:`split_rows`
splits a batch into those and the rest (an upsert's delete rows, PROTOCOL.md
§5.5); :func:`file_matcher`
places a data file against it (all / none / some rows, or unproven where a
statistic it needs is absent: ``iceberg.codec.file_stats``) from partition
projections and column metrics; :func:`apply_matcher` does so at apply time with
the filter's columns taken by the field ids they bound to at planning
(:func:`filter_field_ids`, carried in the WAL entry, PROTOCOL.md §5.4). No
catalog code: executors import it.

"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

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
    Reference,
    SetPredicate,
    UnboundPredicate,
    UnboundTerm,
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
from pyspark_fenced_sink.iceberg.codec.file_stats import UNREADABLE_STATS, column_stats, filter_fields, widened
from pyspark_fenced_sink.protocol.replace import EntryRefused, Match, filter_columns_now, holds_unmatched, missing_stats

__all__ = [
    "apply_matcher",
    "bind_row_filter",
    "file_matcher",
    "filter_columns",
    "filter_field_ids",
    "row_violations",
    "split_rows",
]


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


class _Rebuild(BooleanExpressionVisitor[BooleanExpression]):
    """Rebuilds an unbound expression's connectives as they are; subclasses rewrite its predicates."""

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


class _Normalize(_Rebuild):
    """Rewrites timestamp literals of an unbound expression into the ISO form pyiceberg binds.

    ``respell``: also name each column as the table does (a scan binds case-sensitively).
    """

    def __init__(self, schema: Schema, respell: bool = False) -> None:
        self.schema = schema
        self.respell = respell

    def _fix(self, field_type: IcebergType | None, lit: Literal[Any]) -> Literal[Any]:
        if isinstance(lit, StringLiteral) and isinstance(field_type, TimestampType | TimestamptzType):
            return StringLiteral(_timestamp_text(lit.value, isinstance(field_type, TimestamptzType)))
        return lit

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> BooleanExpression:
        name = str(getattr(predicate.term, "name", ""))
        term: UnboundTerm = predicate.term
        try:
            field = self.schema.find_field(name, False)
            field_type: IcebergType | None = field.field_type
            if self.respell:  # a scan binds case-sensitively: the table's spelling
                term = Reference(self.schema.find_column_name(field.field_id) or name)
        except ValueError:
            field_type = None  # binding names the unknown column
        if isinstance(predicate, LiteralPredicate):
            return type(predicate)(term, self._fix(field_type, predicate.literal))
        if isinstance(predicate, SetPredicate):
            return type(predicate)(term, {self._fix(field_type, lit) for lit in predicate.literals})
        return type(predicate)(term)

    def visit_bound_predicate(self, predicate: BoundPredicate) -> BooleanExpression:
        return predicate


@functools.lru_cache(maxsize=32)
def _unbound(text: str, schema_json: str, respell: bool = False) -> BooleanExpression:
    """The parsed, normalized (still unbound) filter; ``schema_json`` is the table schema it binds to.

    Column names stay as written (``filter_field_ids`` pairs them with field ids), unless ``respell``.
    """
    from pyiceberg.expressions.parser import parse

    schema = Schema.model_validate_json(schema_json)
    return visit(parse(text), _Normalize(schema, respell))


def _parsed(
    text: str, schema: Schema, what: str = "option replace-where", *, respell: bool = False
) -> BooleanExpression:
    try:
        expr = _unbound(text, schema.model_dump_json(), respell)
        bind(schema, expr, _CASE_SENSITIVE)
    except Exception as e:  # noqa: BLE001 - pyparsing's ParseException, pyiceberg's ValueError/TypeError ...
        raise InvalidOptionsError(
            f"{what}={text!r} is invalid: {type(e).__name__}: {str(e).splitlines()[0][:300]}; "
            "expected an Iceberg filter over the table's columns, e.g. \"ts >= '2026-01-01' AND region = 'eu'\""
        ) from None
    return expr


def read_filter(text: str, schema: Schema, what: str = "option filter") -> BooleanExpression:
    """``text`` parsed and checked against ``schema``, unbound, with the table's column names (for a scan).

    Raises:
        InvalidOptionsError: as :func:`bind_row_filter`.
    """
    return _parsed(text, schema, what, respell=True)


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


class _Rename(_Rebuild):
    """Renames the columns of an unbound expression (``names``: as written -> as the schema has them now).

    With ``names`` None it only collects the column names as written, into :attr:`seen`.
    """

    def __init__(self, names: Mapping[str, str] | None) -> None:
        self.names = names
        self.seen: set[str] = set()

    def visit_unbound_predicate(self, predicate: UnboundPredicate) -> BooleanExpression:
        name = str(getattr(predicate.term, "name", ""))
        self.seen.add(name)
        if self.names is None:
            return predicate
        term = Reference(self.names.get(name, name))
        if isinstance(predicate, LiteralPredicate):
            return type(predicate)(term, predicate.literal)
        if isinstance(predicate, SetPredicate):
            return type(predicate)(term, predicate.literals)
        return type(predicate)(term)

    def visit_bound_predicate(self, predicate: BoundPredicate) -> BooleanExpression:
        return predicate


def filter_field_ids(text: str, schema_json: str) -> tuple[tuple[str, int], ...]:
    """Each column name of the filter, as written, -> the field id it binds to in the schema (``WalEntry.filter_ids``).

    Raises:
        InvalidOptionsError: the filter does not bind to the schema.
    """
    schema = Schema.model_validate_json(schema_json)
    collect = _Rename(None)
    visit(_parsed(text, schema), collect)
    return tuple(sorted((name, schema.find_field(name, _CASE_SENSITIVE).field_id) for name in collect.seen))


def apply_matcher(
    text: str, filter_ids: Sequence[tuple[str, int]], schema: Schema, specs: Mapping[int, PartitionSpec]
) -> Callable[[DataFile], Match]:
    """:func:`file_matcher` for a replace-where entry applied now: its columns by the field ids it was planned with.

    Raises:
        EntryRefused: a column it bound to was dropped, or (an entry without field ids, from an older
            release) the filter no longer binds to the table's schema by name.
    """
    try:
        if not filter_ids:
            return file_matcher(text, schema, specs)
        current = {i: n for _, i in filter_ids if (n := schema.find_column_name(i)) is not None}
        names = filter_columns_now(filter_ids, current)
        expr = visit(visit(_parse(text), _Rename(names)), _Normalize(schema))
        return file_matcher(bind_checked(expr, schema), schema, specs)
    except InvalidOptionsError as e:
        raise EntryRefused(
            f"replace-where {text!r} no longer binds to the table's schema ({e}): it was written for columns "
            "another engine renamed or dropped since; nothing was changed"
        ) from e


def _parse(text: str) -> BooleanExpression:
    from pyiceberg.expressions.parser import parse

    try:
        return parse(text)
    except Exception as e:  # noqa: BLE001 - pyparsing's ParseException
        raise InvalidOptionsError(f"filter {text!r} does not parse: {e}") from None


def file_matcher(
    text: str | BooleanExpression, schema: Schema, specs: Mapping[int, PartitionSpec]
) -> Callable[[DataFile], Match]:
    """Classify data files against the filter: all rows match, none can, some may, or unknown.

    A file is ``ALL`` if the strict projection of the filter onto its partition
    spec holds for its partition, or its column statistics prove every row
    matches — which needs value and null counts (and NaN counts for float
    columns) for every column the filter reads, no null or NaN in a column it
    compares, and the strict metrics evaluator; ``NONE`` if the inclusive
    projection fails on its partition or the inclusive metrics evaluator proves
    no row can match; otherwise ``UNPROVEN`` if a statistic it needed is absent
    or unreadable (absent is unknown, never zero), else ``SOME``.

    Raises:
        InvalidOptionsError: the filter does not bind to ``schema``.
    """
    expr = _parsed(text, schema) if isinstance(text, str) else bind_checked(text, schema)
    fields = filter_fields(bind(schema, expr, _CASE_SENSITIVE))
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
        try:
            strict, inclusive = partition_tests(data_file.spec_id)
            if strict(data_file.partition):
                return Match.ALL
            columns = column_stats(data_file, schema, fields)
            absent = missing_stats(columns)
            view = cast(DataFile, widened(data_file, schema, fields))
            if absent is None and not holds_unmatched(columns) and strict_rows(view):
                return Match.ALL
            if not inclusive(data_file.partition) or not inclusive_rows(view):
                return Match.NONE
        except UNREADABLE_STATS:
            return Match.UNPROVEN
        return Match.SOME if absent is None else Match.UNPROVEN

    return match


def bind_checked(expr: BooleanExpression, schema: Schema) -> BooleanExpression:
    """``expr`` (unbound) if it binds to ``schema``.

    Raises:
        InvalidOptionsError: it does not.
    """
    try:
        bind(schema, expr, _CASE_SENSITIVE)
    except ValueError as e:
        raise InvalidOptionsError(f"filter {expr} does not bind to the table's schema: {e}") from None
    return expr
