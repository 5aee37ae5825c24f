"""Upsert planning on the driver (PROTOCOL.md §5.5, "Keys and planning"; driver).

* :func:`plan_upsert` resolves ``upsert-keys`` (or the table's identifier
  fields), ``upsert-order`` and ``upsert-delete-where`` against the table,
  before any task runs, into the field ids the entry carries;
* :func:`with_identifier_fields` gives a table an upsert write creates its keys
  as required identifier fields;
* :func:`check_unique_keys` is the driver's check before the WAL put: without an
  order column, a key twice in one write fails it (nothing durable).

Every refusal is an ``InvalidOptionsError`` (or ``WriteRejectedError`` for
duplicate keys) naming the column and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    FixedType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from pyspark_fenced_sink.errors import InvalidOptionsError, WriteRejectedError
from pyspark_fenced_sink.iceberg.codec.row_filter import bind_row_filter
from pyspark_fenced_sink.iceberg.commit.key_index import Reads, Unreadable, column_name, drop_null_keys, key_table
from pyspark_fenced_sink.options.write import UPSERT_DELETE_WHERE, UPSERT_KEYS, UPSERT_ORDER, SinkOptions
from pyspark_fenced_sink.protocol.upsert import UpsertSpec

__all__ = ["check_unique_keys", "plan_upsert", "with_identifier_fields"]

_KEY_TYPES = (
    BooleanType,
    IntegerType,
    LongType,
    DecimalType,
    DateType,
    TimeType,
    TimestampType,
    TimestamptzType,
    StringType,
    UUIDType,
    FixedType,
    BinaryType,
)
_ORDER_TYPES = (IntegerType, LongType, DecimalType, DateType, TimeType, TimestampType, TimestamptzType, StringType)


def _field(schema: Schema, name: str, option: str, table: str) -> NestedField:
    """The top-level field ``name`` (case-insensitive, as Spark SQL resolves names)."""
    matches = [f for f in schema.fields if f.name.lower() == name.lower()]
    exact = [f for f in matches if f.name == name]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0]
    found = ", ".join(f.name for f in schema.fields)
    raise InvalidOptionsError(
        f"option {option}: table {table} has no top-level column {name!r} (columns: {found}); name one of its columns"
    )


def with_identifier_fields(schema: Schema, keys: Sequence[str], table: str) -> Schema:
    """``schema`` (of a table about to be created) with ``keys`` as required identifier fields."""
    ids = {_field(schema, k, UPSERT_KEYS, table).field_id for k in keys}
    fields = [
        NestedField(f.field_id, f.name, f.field_type, required=f.required or f.field_id in ids) for f in schema.fields
    ]
    for f in fields:
        if f.field_id in ids:
            _check_type(f, UPSERT_KEYS, _KEY_TYPES, "a key", table)
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=sorted(ids))


def _check_type(f: NestedField, option: str, allowed: tuple[type, ...], what: str, table: str) -> None:
    if not isinstance(f.field_type, allowed) or not isinstance(f.field_type, PrimitiveType):
        kinds = ", ".join(sorted({t.__name__.removesuffix("Type").lower() for t in allowed}))
        raise InvalidOptionsError(
            f"option {option}: column {f.name!r} of table {table} is {f.field_type}, which cannot be {what} "
            f"(expected one of: {kinds}; floating-point values have no key equality, nested ones no order)"
        )


def plan_upsert(table: Any, opts: SinkOptions) -> UpsertSpec:
    """The entry's key spec for an upsert into ``table`` (checked before any task runs).

    Raises:
        InvalidOptionsError: no key (no ``upsert-keys`` and no identifier fields), a column the table lacks or of a
            type that cannot key or order, a delete filter that does not bind, remembered deletes on a branch,
            a table format without position deletes.
    """
    metadata, name = table.metadata, opts.table
    if metadata.format_version != 2:
        raise InvalidOptionsError(
            f"table {name} is Iceberg format version {metadata.format_version}: upserts delete rows with format-2 "
            "position deletes (pyiceberg cannot write format 3, format 1 has no delete files); upsert into a "
            "format-version 2 table"
        )
    schema: Schema = metadata.schema()
    names = opts.upsert_keys or tuple(schema.identifier_field_names())
    if not names:
        raise InvalidOptionsError(
            f"table {name} has no identifier fields and option {UPSERT_KEYS} is not given: name the key columns, "
            f"""e.g. .option("{UPSERT_KEYS}", "id") (in a SQL view's OPTIONS: '{UPSERT_KEYS}' 'id')"""
        )
    keys = []
    for key in names:
        f = _field(schema, key, UPSERT_KEYS, name)
        _check_type(f, UPSERT_KEYS, _KEY_TYPES, "a key", name)
        keys.append((f.field_id, f.name))
    order = None
    if opts.upsert_order is not None:
        f = _field(schema, opts.upsert_order, UPSERT_ORDER, name)
        _check_type(f, UPSERT_ORDER, _ORDER_TYPES, "an order", name)
        if f.field_id in {i for i, _ in keys}:
            raise InvalidOptionsError(f"option {UPSERT_ORDER}: {f.name!r} is a key column; order by another column")
        order = (f.field_id, f.name)
    if opts.upsert_delete_where is not None:
        bind_row_filter(opts.upsert_delete_where, schema, what=f"option {UPSERT_DELETE_WHERE}")
    if order is not None and opts.upsert_delete_where is not None and opts.branch is not None:
        raise InvalidOptionsError(
            f"options {UPSERT_ORDER} and {UPSERT_DELETE_WHERE} on branch {opts.branch!r}: remembered deletes "
            "belong to main; upsert with deletes and an order into main, or without one of them into a branch"
        )
    return UpsertSpec(keys=tuple(keys), order=order, delete_where=opts.upsert_delete_where)


def check_unique_keys(
    table: Any, spec: UpsertSpec, paths: Sequence[str], name: str, reads: Reads | None = None
) -> None:
    """Refuse a write without an order column that holds a key twice (its data files and delete-key files).

    Raises:
        WriteRejectedError: a key appears twice; the message names it.
    """
    if spec.ordered or not paths:
        return
    metadata = table.metadata
    names = [column_name(i) for i in spec.key_ids]
    parts = []
    for path in paths:
        try:
            keys = key_table(table.io, path, spec.key_ids, metadata.schema(), None, reads or Reads())
        except Unreadable:
            continue  # the apply decides (REFUSED): this check only spares a doomed WAL entry
        parts.append(drop_null_keys(keys, names).select(names))
    if not parts:
        return
    counts = pa.concat_tables(parts).group_by(names).aggregate([([], "count_all")])
    twice = counts.filter(pc.greater(counts.column("count_all"), 1))
    if twice.num_rows:
        first = {n: twice.column(column_name(i))[0].as_py() for i, n in spec.keys}
        raise WriteRejectedError(
            f"table {name}: key {first} appears {twice.column('count_all')[0].as_py()} times in this write, and "
            f"without {UPSERT_ORDER} nothing says which row wins; nothing was committed. Deduplicate the rows by "
            f"key, or give {UPSERT_ORDER}",
            table=name,
            outcome="REFUSED",
        )
