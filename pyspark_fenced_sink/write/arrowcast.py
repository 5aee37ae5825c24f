"""Conforming executor-side Arrow batches to the table's Arrow schema (step 2 of docs/PROTOCOL.md §3).

The driver has already checked the DataFrame schema against the table (``schema.check_write_schema``);
this module only reshapes what Spark hands a task: columns matched by name (recursively inside
structs, lists and maps), missing optional columns filled with nulls, safe casts only. Anything
else is a fencedlake bug and is reported as such, never written.
"""

from __future__ import annotations

import pyarrow as pa

from pyspark_fenced_sink.errors import SchemaMismatchError


def _cast_error(path: str, src: pa.DataType, dst: pa.DataType, cause: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {path!r}: expected Arrow data castable to {dst}, found {src} on the executor ({cause}); "
        "the driver's schema check should have rejected this write: please report it as a fencedlake bug"
    )


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def _check_no_extra(found: list[str], expected: set[str], path: str) -> None:
    extra = [name for name in found if name not in expected]
    if extra:
        where = f"struct {path!r}" if path else "the batch"
        raise SchemaMismatchError(
            f"{where} has columns {extra} the table schema this task was given lacks; expected only table "
            "columns (the driver adds merged columns before tasks start): please report it as a fencedlake bug"
        )


def _conform(arr: pa.Array, dst: pa.DataType, path: str) -> pa.Array:
    """Cast ``arr`` to ``dst``, matching struct fields by name, recursively."""
    src = arr.type
    if src.equals(dst):
        return arr
    if pa.types.is_struct(dst):
        if not pa.types.is_struct(src):
            raise _cast_error(path, src, dst, "not a struct")
        fields = [dst.field(i) for i in range(dst.num_fields)]
        _check_no_extra([src.field(i).name for i in range(src.num_fields)], {f.name for f in fields}, path)
        children = []
        for f in fields:
            j = src.get_field_index(f.name)
            child = pa.nulls(len(arr), f.type) if j < 0 else _conform(arr.field(j), f.type, f"{path}.{f.name}")
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(arr))
    if pa.types.is_map(dst):
        if not pa.types.is_map(src):
            raise _cast_error(path, src, dst, "not a map")
        entries = arr.values
        keys = _conform(entries.field(0), dst.key_type, f"{path}.key")
        items = _conform(entries.field(1), dst.item_type, f"{path}.value")
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=dst, mask=_mask(arr))
    if pa.types.is_large_list(dst) or pa.types.is_list(dst):
        if not (pa.types.is_list(src) or pa.types.is_large_list(src)):
            raise _cast_error(path, src, dst, "not a list")
        values = _conform(arr.values, dst.value_type, f"{path}.element")
        cls = pa.LargeListArray if pa.types.is_large_list(dst) else pa.ListArray
        offsets = arr.offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32())
        return cls.from_arrays(offsets, values, type=dst, mask=_mask(arr))
    if pa.types.is_timestamp(dst) and pa.types.is_timestamp(src) and (src.tz is None) != (dst.tz is None):
        raise _cast_error(path, src, dst, "timestamp with and without time zone do not mix")
    try:
        return arr.cast(dst)  # safe: tz relabel keeps the instant; overflow/truncation raises
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise _cast_error(path, src, dst, str(e)) from e


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema, required: tuple[int, ...]) -> pa.RecordBatch:
    """Return ``batch`` with exactly the columns and types of ``schema`` (missing optional columns as nulls).

    Raises :class:`SchemaMismatchError` for an extra column, an uncastable value or a null in a
    ``required`` column (positions in ``schema``).
    """
    names = batch.schema.names
    if names == schema.names and all(c.type.equals(f.type) for c, f in zip(batch.columns, schema, strict=True)):
        columns = batch.columns
    else:
        _check_no_extra(names, set(schema.names), "")
        columns = []
        for f in schema:
            i = batch.schema.get_field_index(f.name)
            columns.append(pa.nulls(batch.num_rows, f.type) if i < 0 else _conform(batch.column(i), f.type, f.name))
    for i in required:
        if columns[i].null_count:
            raise SchemaMismatchError(
                f"column {schema.field(i).name!r}: expected no nulls (the table column is required), found "
                f"{columns[i].null_count}; the driver's schema check should have rejected this write"
            )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
