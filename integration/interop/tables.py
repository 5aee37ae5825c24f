"""Rows for the interop tables: every Iceberg type the sink writes, deterministic per id.

``frame(spark, ids, day)`` builds a Spark DataFrame of those rows; the values are a pure function of
``(id, day)``, so a test can say which rows a table must hold and compare what both
implementations read. Strings longer than Iceberg's 16-character metric truncation, nulls in every
optional column, non-ASCII text, nested types and both timestamp kinds exercise the statistics
Iceberg's reader prunes with.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = ["DAY0", "SCHEMA_DDL", "day_bounds", "frame", "row"]

#: Day 0 of the tables (partitioned by day(ts)).
DAY0 = datetime(2026, 1, 1, tzinfo=UTC)

SCHEMA_DDL = (
    "id BIGINT NOT NULL, ts TIMESTAMP, name STRING, amount DECIMAL(12,2), score DOUBLE, flag BOOLEAN, "
    "d DATE, ts_ntz TIMESTAMP_NTZ, tags ARRAY<STRING>, attrs MAP<STRING,INT>, "
    "nested STRUCT<a: INT, b: STRING>, payload BINARY"
)


def row(i: int, day: int) -> tuple[Any, ...]:
    """The row of id ``i`` written into day ``day``."""
    ts = DAY0 + timedelta(days=day, seconds=(i * 37) % 86_400)
    long_name = i % 3 == 0
    return (
        i,
        ts,
        None
        if i % 11 == 5
        else (f"name-{i:05d}-{'λ' * (i % 4)}" + ("-a-long-tail-beyond-sixteen" if long_name else "")),
        None if i % 13 == 7 else Decimal(i * 7 % 100_000) / 100,
        None if i % 17 == 3 else (i % 1000) / 7.0,
        None if i % 19 == 2 else i % 2 == 0,
        date(2025, 12, 1) + timedelta(days=i % 60),
        (DAY0 + timedelta(days=day, minutes=i % 1440)).replace(tzinfo=None),
        None if i % 23 == 1 else [f"t{i % 5}", f"u{i % 7}"][: i % 3],
        None if i % 29 == 4 else {f"k{i % 3}": i % 100, "z": -i % 50},
        None if i % 31 == 6 else (i % 10, None if i % 2 else f"b{i % 9}"),
        None if i % 37 == 8 else i.to_bytes(4, "big"),
    )


def frame(spark: Any, ids: range | list[int], day: int) -> Any:
    """A DataFrame of ``row(i, day)`` for every ``i`` in ``ids``."""
    return spark.createDataFrame([row(i, day) for i in ids], SCHEMA_DDL)


def day_bounds(day: int) -> tuple[str, str]:
    """``(start, end)`` timestamps of day ``day`` as SQL / Iceberg filter literals."""
    start = DAY0 + timedelta(days=day)
    return start.strftime("%Y-%m-%dT%H:%M:%S+00:00"), (start + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
