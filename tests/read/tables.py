"""Small Iceberg tables built through pyiceberg's public API, for the reader's tests (no Spark).

``make_table`` creates a table in an embedded warehouse (the catalog the
reader's ``warehouse`` option opens) and ``append`` adds one snapshot per
call, so tests can count files and snapshots exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.options.read import ReadOptions, parse_read_options

__all__ = ["EVENTS", "EVENTS_SCHEMA", "append", "events", "make_table", "read_options", "ten_rows_per_file"]

#: id long, k string, v long: the shape most reader tests use (field ids 1, 2, 3).
EVENTS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "k", StringType(), required=False),
    NestedField(3, "v", LongType(), required=False),
)
EVENTS = pa.schema([("id", pa.int64()), ("k", pa.string()), ("v", pa.int64())])


def events(ids: Sequence[int], k: str = "a") -> pa.Table:
    """Rows ``id``, ``k``, ``v = id * 10`` (an ``EVENTS`` table)."""
    return pa.table({"id": list(ids), "k": [k] * len(ids), "v": [i * 10 for i in ids]}, schema=EVENTS)


def ten_rows_per_file() -> dict[str, str]:
    """Table properties that make pyiceberg write 10 ``events`` rows per data file."""
    return {"write.target-file-size-bytes": str(events(range(10)).nbytes)}


def make_table(
    warehouse: str,
    name: str = "db.t",
    schema: Any = EVENTS_SCHEMA,
    spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
    **properties: str,
) -> Any:
    """A new table in the embedded catalog of ``warehouse`` (v2 unless ``format-version`` says otherwise)."""
    catalog = embedded_catalog(warehouse)
    namespace = tuple(name.split(".")[:-1])
    if not catalog.namespace_exists(namespace):
        catalog.create_namespace(namespace)
    props = {"format-version": "2", **properties}
    return catalog.create_table(name, schema=schema, partition_spec=spec, properties=props)


def append(table: Any, data: pa.Table) -> Any:
    """Append ``data`` as one snapshot; returns the reloaded table."""
    table.append(data)
    return table.catalog.load_table(table.name())


def read_options(warehouse: str, name: str = "db.t", *, streaming: bool = False, **options: str) -> ReadOptions:
    """Validated read options for ``name`` in ``warehouse`` (keys as Spark passes them: dashes, dots)."""
    return parse_read_options({"warehouse": warehouse, "table": name, **options}, streaming=streaming)
