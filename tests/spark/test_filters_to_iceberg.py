"""Spark's pushed filters -> Iceberg: what is translated, and that a translation never drops a row Spark keeps.

The second half is differential: every filter (and its ``NOT``) is evaluated
over rows with nulls twice — in Python with Spark's three-valued semantics,
and by Arrow through pyiceberg's own translation of the Iceberg expression
(the executors' row filter; partition and statistics pruning use the same
expression). Arrow must keep every row Spark keeps.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow, schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)
from pyspark.sql import datasource as F  # noqa: N812 - the filter classes, as Spark's docs spell them

from pyspark_fenced_sink.spark.filters_to_iceberg import to_iceberg

UTC = dt.UTC
SCHEMA = Schema(
    NestedField(1, "i", IntegerType()),
    NestedField(2, "s", StringType()),
    NestedField(3, "d", DecimalType(5, 2)),
    NestedField(4, "dt", DateType()),
    NestedField(5, "ts", TimestamptzType()),
    NestedField(6, "ntz", TimestampType()),
    NestedField(7, "b", BinaryType()),
    NestedField(8, "bo", BooleanType()),
    NestedField(9, "f", DoubleType()),
    NestedField(10, "st", StructType(NestedField(11, "x", IntegerType()), NestedField(12, "y.z", IntegerType()))),
    NestedField(13, "l", ListType(14, IntegerType())),
    NestedField(15, "u", UUIDType()),
)


def _one(spark_filter: Any) -> str:
    expression, used = to_iceberg([spark_filter], SCHEMA)
    return repr(expression) if used else "untranslated"


@pytest.mark.parametrize(
    ("spark_filter", "expected"),
    [
        (F.EqualTo(("i",), 3), "EqualTo(term=Reference(name='i'), literal=LongLiteral(3))"),
        (F.GreaterThan(("s",), "m"), "GreaterThan(term=Reference(name='s'), literal=literal('m'))"),
        (
            F.LessThanOrEqual(("d",), Decimal("1.50")),
            "LessThanOrEqual(term=Reference(name='d'), literal=DecimalLiteral(Decimal('1.50')))",
        ),
        (F.EqualTo(("dt",), dt.date(1970, 1, 11)), "EqualTo(term=Reference(name='dt'), literal=LongLiteral(10))"),
        (
            F.GreaterThanOrEqual(("ts",), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)),
            "GreaterThanOrEqual(term=Reference(name='ts'), literal=LongLiteral(1000000))",
        ),
        (
            F.LessThan(("ntz",), dt.datetime(1970, 1, 1, 0, 0, 0, 5)),
            "LessThan(term=Reference(name='ntz'), literal=LongLiteral(5))",
        ),
        (F.EqualTo(("b",), b"\x01"), "EqualTo(term=Reference(name='b'), literal=BinaryLiteral(b'\\x01'))"),
        (F.EqualTo(("bo",), True), "EqualTo(term=Reference(name='bo'), literal=BooleanLiteral(True))"),
        (F.EqualTo(("st", "x"), 1), "EqualTo(term=Reference(name='st.x'), literal=LongLiteral(1))"),
        (F.In(("i",), [1, 2]), "In(Reference(name='i'), {LongLiteral(1), LongLiteral(2)})"),
        (F.IsNull(("f",)), "IsNull(term=Reference(name='f'))"),
        (F.EqualNullSafe(("i",), None), "IsNull(term=Reference(name='i'))"),
        (F.StringStartsWith(("s",), "ab"), "StartsWith(term=Reference(name='s'), literal=literal('ab'))"),
        (F.Not(F.EqualTo(("i",), 4)), "NotEqualTo(term=Reference(name='i'), literal=LongLiteral(4))"),
        # Left to Spark: NaN semantics, unsupported shapes, values of another type.
        (F.GreaterThan(("f",), 1.0), "untranslated"),
        (F.EqualTo(("f",), 1.0), "untranslated"),
        (F.StringEndsWith(("s",), "x"), "untranslated"),
        (F.StringContains(("s",), "x"), "untranslated"),
        (F.In(("i",), [1, None]), "untranslated"),
        (F.Not(F.In(("i",), [1, None])), "untranslated"),
        (F.EqualTo(("st", "y.z"), 1), "untranslated"),
        (F.EqualTo(("l", "element"), 1), "untranslated"),
        (F.EqualTo(("u",), "00000000-0000-0000-0000-000000000000"), "untranslated"),
        (F.EqualTo(("nope",), 1), "untranslated"),
        (F.EqualTo(("i",), "3"), "untranslated"),
        (F.EqualTo(("i",), True), "untranslated"),
        (F.EqualTo(("d",), Decimal("1.555")), "untranslated"),
        (F.EqualTo(("ts",), dt.datetime(2024, 1, 1)), "untranslated"),
        (F.EqualTo(("ntz",), dt.datetime(2024, 1, 1, tzinfo=UTC)), "untranslated"),
        (F.IsNull(("st",)), "untranslated"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else v[:24],
)
def test_translation_of_each_filter_kind(spark_filter: Any, expected: str) -> None:
    """Translated where Spark and Iceberg agree on every value and on nulls; else left to Spark."""
    assert _one(spark_filter) == expected


def test_the_and_of_several_filters_keeps_only_the_translated_ones() -> None:
    """An AND of filters: the translatable ones combine, their indices are reported."""
    filters = [F.EqualTo(("i",), 1), F.GreaterThan(("f",), 0.0), F.StringStartsWith(("s",), "a")]
    expression, used = to_iceberg(filters, SCHEMA)
    assert used == (0, 2)
    assert "StartsWith" in repr(expression) and "'f'" not in repr(expression)
    assert to_iceberg([], SCHEMA) == (AlwaysTrue(), ())


def test_null_safe_equality_keeps_its_meaning_under_not() -> None:
    """a <=> 5 is (a IS NOT NULL AND a = 5), so NOT(a <=> 5) keeps the null rows, as in Spark."""
    expression, _ = to_iceberg([F.Not(F.EqualNullSafe(("i",), 5))], SCHEMA)
    assert repr(expression) == (
        "Or(left=IsNull(term=Reference(name='i')), right=NotEqualTo(term=Reference(name='i'), literal=LongLiteral(5)))"
    )


# ------------------------------------------------------------------------------ differential semantics


def _ts(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


ROWS: list[dict[str, Any]] = [
    dict(zip(("i", "s", "d", "dt", "ts", "ntz", "b", "bo"), values, strict=True))
    for values in [
        (1, "abc", Decimal("1.50"), dt.date(2024, 1, 1), _ts(2024, 1, 1), dt.datetime(2024, 1, 1), b"\x01", True),
        (
            2,
            "abd",
            Decimal("-3.25"),
            dt.date(1969, 12, 31),
            _ts(1969, 12, 31, 23, 59, 59, 999999),
            dt.datetime(2024, 1, 1, 0, 0, 1),
            b"\x02",
            False,
        ),
        (None, None, None, None, None, None, None, None),
        (5, "", Decimal("0.00"), dt.date(2000, 2, 29), _ts(2000, 2, 29, 12), dt.datetime(1970, 1, 1), b"", True),
        (
            -7,
            "zz\u00e9",
            Decimal("999.99"),
            dt.date(2024, 1, 2),
            _ts(2024, 1, 2),
            dt.datetime(2023, 12, 31),
            b"\xff",
            None,
        ),
    ]
]
COLUMNS = ("i", "s", "d", "dt", "ts", "ntz", "b", "bo")
PROBES: dict[str, list[Any]] = {c: [r[c] for r in ROWS if r[c] is not None] for c in COLUMNS}


def _spark(kind: str, a: Any, v: Any) -> bool | None:
    """Spark SQL's three-valued result of ``a <kind> v``."""
    if kind == "EqualNullSafe":
        return (a is None and v is None) or (a is not None and v is not None and a == v)
    if kind == "IsNull":
        return a is None
    if kind == "IsNotNull":
        return a is not None
    if a is None:
        return None
    if kind == "In":
        return True if a in [x for x in v if x is not None] else (None if None in v else False)
    if kind == "StringStartsWith":
        return bool(a.startswith(v))
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "EqualTo": lambda x, y: x == y,
        "GreaterThan": lambda x, y: x > y,
        "GreaterThanOrEqual": lambda x, y: x >= y,
        "LessThan": lambda x, y: x < y,
        "LessThanOrEqual": lambda x, y: x <= y,
    }
    return ops[kind](a, v)


def _cases() -> list[tuple[str, str, Any]]:
    cases: list[tuple[str, str, Any]] = []
    for column in COLUMNS:
        for kind in ("EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "EqualNullSafe"):
            cases.extend((column, kind, v) for v in PROBES[column])
        cases.extend([(column, "IsNull", None), (column, "IsNotNull", None), (column, "EqualNullSafe", None)])
        cases.append((column, "In", PROBES[column][:2]))
    cases.extend([("s", "StringStartsWith", p) for p in ("ab", "", "zz", "q")])
    return cases


def _filter(column: str, kind: str, value: Any) -> Any:
    cls = getattr(F, kind)
    return cls((column,)) if kind in ("IsNull", "IsNotNull") else cls((column,), value)


@pytest.mark.parametrize("negated", [False, True], ids=["plain", "not"])
def test_arrow_never_drops_a_row_spark_keeps(negated: bool) -> None:
    """Over rows with nulls, every translated filter (or its NOT) keeps a superset of Spark's rows."""
    schema = Schema(*[f for f in SCHEMA.fields if f.name in COLUMNS])
    table = pa.Table.from_pylist(ROWS, schema=schema_to_pyarrow(schema, include_field_ids=False))
    checked = 0
    for column, kind, value in _cases():
        spark_filter = _filter(column, kind, value)
        if negated:
            spark_filter = F.Not(spark_filter)
        expression, used = to_iceberg([spark_filter], schema)
        assert used == (0,), f"{spark_filter} was expected to translate"
        kept = set(table.filter(expression_to_pyarrow(bind(schema, expression, True), schema)).column("i").to_pylist())
        for row in ROWS:
            verdict = _spark(kind, row[column], value)
            if negated:
                verdict = None if verdict is None else not verdict
            if verdict is True:
                assert row["i"] in kept, f"{spark_filter} dropped row {row}"
        checked += 1
    assert checked > 150
