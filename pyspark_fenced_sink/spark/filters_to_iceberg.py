"""Spark's pushed filters -> one Iceberg expression for pruning and row filtering (PROTOCOL.md §14; driver).

:func:`to_iceberg` translates the filters it can into an expression that keeps
**at least** the rows Spark keeps (Spark applies every filter again): only where
Spark's and Iceberg's semantics agree on every value and on nulls, so ``NOT`` of a
translation is safe too. ``float``/``double`` columns (NaN orders differently),
``LIKE '%x'``, columns inside lists or maps and dotted names are left to Spark.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Sequence
from typing import Any, cast

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotNull,
    StartsWith,
)
from pyiceberg.expressions.visitors import rewrite_not
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

__all__ = ["to_iceberg"]

_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_COMPARISONS: dict[str, Any] = {
    "EqualTo": EqualTo,
    "GreaterThan": GreaterThan,
    "GreaterThanOrEqual": GreaterThanOrEqual,
    "LessThan": LessThan,
    "LessThanOrEqual": LessThanOrEqual,
}
_COMPARABLE = (BooleanType, IntegerType, LongType, DecimalType, StringType, BinaryType, DateType)


def _expr(kind: Any, *args: Any) -> BooleanExpression:
    """``kind(*args)``: pyiceberg's predicates declare pydantic fields, not the positional form they accept."""
    return cast(BooleanExpression, kind(*args))


def _micros(value: datetime.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _literal(value: Any, column_type: IcebergType) -> Any:
    """``value`` as a literal of ``column_type``, or None when it cannot be one exactly."""
    if isinstance(column_type, BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(column_type, (IntegerType, LongType)):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(column_type, DecimalType):
        if not isinstance(value, decimal.Decimal) or not value.is_finite():
            return None
        scaled = value.quantize(decimal.Decimal(1).scaleb(-column_type.scale))
        return scaled if scaled == value else None
    if isinstance(column_type, StringType):
        return value if isinstance(value, str) else None
    if isinstance(column_type, BinaryType):
        return bytes(value) if isinstance(value, (bytes, bytearray)) else None
    if isinstance(column_type, DateType):
        ok = isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
        return (value - _EPOCH_DATE).days if ok else None
    if isinstance(column_type, TimestamptzType):  # Spark sends an aware datetime (UTC)
        ok = isinstance(value, datetime.datetime) and value.tzinfo is not None
        return _micros(value) if ok else None
    if isinstance(column_type, TimestampType):  # timestamp_ntz: a naive wall-clock datetime
        ok = isinstance(value, datetime.datetime) and value.tzinfo is None
        return _micros(value.replace(tzinfo=datetime.UTC)) if ok else None
    return None


def _column(path: Sequence[str], schema: Schema) -> tuple[str, IcebergType] | None:
    """The dotted Iceberg name and type of a column reached through structs only, or None."""
    if not path or any("." in part for part in path):
        return None
    current: IcebergType = schema.as_struct()
    for part in path:
        if not isinstance(current, StructType):
            return None
        found = next((f for f in current.fields if f.name == part), None)
        if found is None:
            return None
        current = found.field_type
    return ".".join(path), current


def _translate(spark_filter: Any, schema: Schema) -> BooleanExpression | None:
    kind = type(spark_filter).__name__
    if kind == "Not":
        child = _translate(spark_filter.child, schema)
        return Not(child) if child is not None else None
    column = _column(tuple(getattr(spark_filter, "attribute", ())), schema)
    if column is None:
        return None
    name, column_type = column
    if kind in ("IsNull", "IsNotNull"):
        if not isinstance(column_type, PrimitiveType):
            return None
        return _expr(IsNull if kind == "IsNull" else NotNull, name)
    if not isinstance(column_type, (*_COMPARABLE, TimestampType, TimestamptzType)):
        return None  # float/double (NaN), uuid, fixed, time, nested: Spark alone
    value = spark_filter.value
    if kind == "EqualNullSafe":
        if value is None:
            return _expr(IsNull, name)
        literal = _literal(value, column_type)
        return None if literal is None else And(_expr(NotNull, name), _expr(EqualTo, name, literal))
    if kind in _COMPARISONS:
        literal = _literal(value, column_type)
        return None if literal is None else _expr(_COMPARISONS[kind], name, literal)
    if kind == "In":
        literals = [_literal(v, column_type) if v is not None else None for v in value]
        if not literals or any(v is None for v in literals):
            return None
        return _expr(In, name, literals)
    if kind == "StringStartsWith" and isinstance(column_type, StringType) and isinstance(value, str):
        return _expr(StartsWith, name, value)
    return None


def to_iceberg(filters: Sequence[Any], schema: Schema) -> tuple[BooleanExpression, tuple[int, ...]]:
    """The AND of the translatable ``filters`` (Spark ``Filter`` objects) over ``schema``.

    Returns:
        The expression (``AlwaysTrue()`` if none translates) and the indices of the filters it covers.
    """
    expression: BooleanExpression = AlwaysTrue()
    used: list[int] = []
    for index, spark_filter in enumerate(filters):
        translated = _translate(spark_filter, schema)
        if translated is not None:
            expression = And(expression, translated)
            used.append(index)
    return rewrite_not(expression), tuple(used)
