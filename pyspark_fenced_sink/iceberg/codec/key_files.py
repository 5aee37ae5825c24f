"""Delete-key and tombstone files: fencedlake-private Parquet of key and order columns (PROTOCOL.md §5.5).

An upsert's delete rows are reduced to their key and order columns and written
by the executor to a *delete-key file* under the control root
(``protocol.layout.keys_key``); a commit that merges remembered deletes writes a
*tombstone file* of the same shape with one more column, ``_ms`` (when each
delete was written). Columns carry the table's Iceberg field ids, so
``iceberg.commit.key_index.key_table`` reads them like data files.

A file is described in the WAL entry (and, once remembered, in the committed
state) as ``{"p": path, "n": rows, "z": bytes, "lb": {id: b64}, "ub": {id: b64}}``:
the lower and upper bounds of the key columns in Iceberg's single-value
serialization, so a commit reads only the files whose bounds can hold its keys.

No catalog code here: executors import it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

__all__ = ["MS_COLUMN", "decode_bounds", "describe", "write_key_file"]

#: The column of a tombstone file holding when each delete was written (ms since the epoch).
MS_COLUMN = "_ms"
_FIELD_ID = b"PARQUET:field_id"
#: Key types whose bounds are recorded (the ones ``iceberg.commit.upsert_apply`` prunes by).
_BOUNDED = (IntegerType, LongType, StringType, DateType, TimestampType, TimestamptzType, DecimalType)


def _physical_scalar(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    if pa.types.is_date32(column.type):
        return column.cast(pa.int32())
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.int64())
    return column


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def describe(path: str, table: pa.Table, key_ids: Sequence[int], schema: Schema, size: int) -> dict[str, Any]:
    """The reference of a key file at ``path`` holding ``table`` (columns named by :func:`_column`)."""
    lower: dict[str, str] = {}
    upper: dict[str, str] = {}
    for fid in key_ids:
        field_type = schema.find_field(fid).field_type
        name = f"f{fid}"
        if not isinstance(field_type, _BOUNDED) or name not in table.column_names or not table.num_rows:
            continue
        bounds = pc.min_max(_physical_scalar(table.column(name)))
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is not None and hi is not None:
            lower[str(fid)], upper[str(fid)] = _b64(to_bytes(field_type, lo)), _b64(to_bytes(field_type, hi))
    ref: dict[str, Any] = {"p": path, "n": table.num_rows, "z": size}
    if lower:
        ref["lb"], ref["ub"] = lower, upper
    return ref


def decode_bounds(ref: Mapping[str, Any]) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """The key bounds of a key-file reference, as data files carry them (field id -> bytes)."""

    def side(key: str) -> dict[int, bytes]:
        found = ref.get(key) or {}
        return {int(k): base64.b64decode(v) for k, v in dict(found).items()}

    return side("lb"), side("ub")


def write_key_file(io: FileIO, path: str, table: pa.Table, field_ids: Mapping[str, int]) -> int:
    """Write ``table`` to ``path`` as Parquet, columns tagged with ``field_ids`` (name -> id); returns the size."""
    fields = []
    for f in table.schema:
        fid = field_ids.get(f.name)
        fields.append(f.with_metadata({_FIELD_ID: str(fid).encode()}) if fid is not None else f)
    schema = pa.schema(fields)
    with io.new_output(path).create(overwrite=False) as stream:
        writer = pq.ParquetWriter(stream, schema, compression="zstd")
        writer.write_table(table.cast(schema))
        writer.close()
        return int(stream.tell())
