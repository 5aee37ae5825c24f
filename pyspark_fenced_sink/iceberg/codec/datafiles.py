"""DataFile <-> compact JSON-able dict (PROTOCOL.md steps 2-3; executors and driver).

Executors describe each file they wrote as a pyiceberg ``DataFile``; the
description travels in the task's message and the WAL entry, so it is plain,
small JSON (short keys, base64 bounds and partition values) that decodes to a
DataFile equal field by field. v1/v2 tables use pyiceberg's v2 field layout in
memory, v3 tables the v3 layout.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Mapping
from typing import Any

from pyiceberg.conversions import from_bytes, to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record, TableVersion
from pyiceberg.types import DoubleType, FloatType, IntegerType, LongType, PrimitiveType, StructType

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.file_refs import FILE_PARTITION_KEY, FILE_PATH_KEY, FILE_SPEC_KEY

__all__ = [
    "CODEC_VERSION",
    "data_file_layout_version",
    "decode_data_file",
    "decode_value",
    "encode_data_file",
    "encode_partition",
    "normalized_partition",
]

CODEC_VERSION = 1

_COUNT_MAPS = (("cs", "column_sizes"), ("vc", "value_counts"), ("nc", "null_value_counts"), ("nn", "nan_value_counts"))
_BOUND_MAPS = (("lb", "lower_bounds"), ("ub", "upper_bounds"))


def data_file_layout_version(format_version: int) -> TableVersion:
    """The ``DataFile.from_args`` layout to use for a table's format version."""
    return 3 if format_version >= 3 else 2


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _partition_types(partition_type: StructType) -> list[PrimitiveType]:
    out = []
    for f in partition_type.fields:
        if not isinstance(f.field_type, PrimitiveType):
            raise CorruptControlDataError(
                f"partition field {f.name!r}: expected a primitive result type, found {f.field_type}"
            )
        out.append(f.field_type)
    return out


def decode_value(value_type: PrimitiveType, raw: bytes) -> Any:
    """A single-value serialization decoded under ``value_type``, also when written before a legal promotion.

    Iceberg lets another engine promote ``int`` to ``long`` and ``float`` to ``double`` at any time: values
    serialized before (4 bytes: partition values in WAL entries, bounds in manifests) then meet the wider
    type; they are read as the narrower one, as Iceberg's readers do.

    Raises:
        ValueError, TypeError, struct.error: ``raw`` is not a value of the type (or of the one it was promoted from).
    """
    if len(raw) == 4 and isinstance(value_type, LongType):
        return from_bytes(IntegerType(), raw)
    if len(raw) == 4 and isinstance(value_type, DoubleType):
        return from_bytes(FloatType(), raw)
    return from_bytes(value_type, raw)


def normalized_partition(values: tuple[str | None, ...], partition_type: StructType) -> tuple[str | None, ...]:
    """Encoded partition values re-encoded under ``partition_type`` as it is now.

    Equal values then encode equal also across a promotion of a partition source column.

    Raises:
        CorruptControlDataError: the values do not fit ``partition_type``.
    """
    types = _partition_types(partition_type)
    if len(values) != len(types):
        raise CorruptControlDataError(f"expected {len(types)} partition values, found {len(values)}")
    try:
        decoded = [None if v is None else decode_value(t, _unb64("pt", v)) for t, v in zip(types, values, strict=True)]
    except (ValueError, TypeError, struct.error, OverflowError) as e:
        raise CorruptControlDataError(f"partition values {values} do not fit {partition_type}: {e}") from e
    return encode_partition(Record(*decoded), partition_type)


def encode_partition(partition: Record, partition_type: StructType) -> tuple[str | None, ...]:
    """A partition tuple's encoded values (base64 of Iceberg's single-value serialization; None for null).

    The same form data files carry in their ``pt`` list and dynamic overwrites in their partition set.

    Raises:
        CorruptControlDataError: the partition tuple does not fit ``partition_type``.
    """
    types = _partition_types(partition_type)
    if len(partition) != len(types):
        raise CorruptControlDataError(
            f"expected {len(types)} partition values (one per partition field), found {len(partition)}"
        )
    return tuple(None if partition[i] is None else _b64(to_bytes(t, partition[i])) for i, t in enumerate(types))


def encode_data_file(df: DataFile, partition_type: StructType) -> dict[str, Any]:
    """Encode ``df`` as a JSON-able dict.

    Args:
        df: The data file (its ``partition`` matches ``partition_type``).
        partition_type: ``spec.partition_type(schema)`` of the file's spec.

    Raises:
        CorruptControlDataError: the partition tuple does not fit ``partition_type``.
    """
    try:
        values = list(encode_partition(df.partition, partition_type))
    except CorruptControlDataError as e:
        raise CorruptControlDataError(f"data file {df.file_path}: {e}") from e
    spec_id = getattr(df, "_spec_id", None)
    if spec_id is None:
        raise CorruptControlDataError(f"data file {df.file_path}: expected its spec_id to be set, found none")
    out: dict[str, Any] = {
        "v": CODEC_VERSION,
        "c": int(df.content),
        FILE_PATH_KEY: df.file_path,
        "f": df.file_format.name,
        FILE_SPEC_KEY: spec_id,
        FILE_PARTITION_KEY: values,
        "n": df.record_count,
        "z": df.file_size_in_bytes,
    }
    for key, attr in _COUNT_MAPS:
        counts = getattr(df, attr)
        out[key] = None if counts is None else {str(k): int(v) for k, v in counts.items()}
    for key, attr in _BOUND_MAPS:
        bounds = getattr(df, attr)
        out[key] = None if bounds is None else {str(k): _b64(v) for k, v in bounds.items()}
    out["so"] = None if df.split_offsets is None else list(df.split_offsets)
    out["o"] = df.sort_order_id
    out["km"] = None if df.key_metadata is None else _b64(df.key_metadata)
    out["eq"] = None if df.equality_ids is None else list(df.equality_ids)
    return out


def _bad(key: str, expected: str, found: Any) -> CorruptControlDataError:
    shown = repr(found)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return CorruptControlDataError(
        f"data file entry field {key!r}: expected {expected}, found {shown}; the WAL entry or commit message "
        "is damaged: inspect it before recovering"
    )


def _get(d: Mapping[str, Any], key: str, expected: str, check: Callable[[Any], bool], optional: bool = False) -> Any:
    if key not in d:
        if optional:
            return None
        raise _bad(key, expected, "<missing>")
    value = d[key]
    if value is None and optional:
        return None
    if not check(value):
        raise _bad(key, expected, value)
    return value


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _unb64(key: str, text: Any) -> bytes:
    if not isinstance(text, str):
        raise _bad(key, "a base64 string", text)
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise _bad(key, "a base64 string", text) from e


def _id_map(d: Mapping[str, Any], key: str, value: Callable[[str, Any], Any]) -> dict[int, Any] | None:
    raw = _get(d, key, "an object of field id -> value, or null", lambda v: isinstance(v, Mapping), optional=True)
    if raw is None:
        return None
    out: dict[int, Any] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k.lstrip("-").isdigit():
            raise _bad(key, "integer field ids as keys", k)
        out[int(k)] = value(f"{key}.{k}", v)
    return out


def _count(key: str, v: Any) -> int:
    if not _is_count(v):
        raise _bad(key, "a non-negative integer", v)
    return int(v)


def _int_list(d: Mapping[str, Any], key: str) -> list[int] | None:
    value: list[int] | None = _get(
        d, key, "a list of integers or null", lambda v: isinstance(v, list) and all(map(_is_int, v)), True
    )
    return value


def decode_data_file(d: Mapping[str, Any], partition_type: StructType, format_version: int) -> DataFile:
    """Decode a dict written by :func:`encode_data_file`.

    Args:
        d: The decoded JSON object.
        partition_type: ``spec.partition_type(schema)`` of the file's spec.
        format_version: The table's format version (selects the DataFile layout).

    Raises:
        CorruptControlDataError: a field is missing or malformed (the message names it).
    """
    if not isinstance(d, Mapping):
        raise _bad("<entry>", "an object", d)
    _get(d, "v", f"codec version {CODEC_VERSION}", lambda v: v == CODEC_VERSION and _is_int(v))
    content = _get(d, "c", "0 (data)", lambda v: v == int(DataFileContent.DATA) and _is_int(v))
    path = _get(d, FILE_PATH_KEY, "a non-empty path", lambda v: isinstance(v, str) and bool(v))
    fmt = _get(d, "f", "a file format name", lambda v: isinstance(v, str) and v in FileFormat.__members__)
    spec_id = _get(d, FILE_SPEC_KEY, "a partition spec id", _is_count)
    types = _partition_types(partition_type)
    raw_values = _get(d, FILE_PARTITION_KEY, f"a list of {len(types)} partition values", lambda v: isinstance(v, list))
    if len(raw_values) != len(types):
        raise _bad("pt", f"{len(types)} partition values", raw_values)
    values: list[Any] = []
    for i, (t, raw) in enumerate(zip(types, raw_values, strict=True)):
        if raw is None:
            values.append(None)
            continue
        try:
            values.append(decode_value(t, _unb64(f"pt[{i}]", raw)))
        except (ValueError, TypeError, UnicodeDecodeError, OverflowError, struct.error) as e:
            raise _bad(f"pt[{i}]", f"a serialized {t} value", raw) from e
    counts = {attr: _id_map(d, key, _count) for key, attr in _COUNT_MAPS}
    bounds = {attr: _id_map(d, key, _unb64) for key, attr in _BOUND_MAPS}
    key_metadata = _get(d, "km", "base64 or null", lambda v: isinstance(v, str), optional=True)
    data_file = DataFile.from_args(
        _table_format_version=data_file_layout_version(format_version),
        content=DataFileContent(content),
        file_path=path,
        file_format=FileFormat[fmt],
        partition=Record(*values),
        record_count=_get(d, "n", "a record count", _is_count),
        file_size_in_bytes=_get(d, "z", "a file size", _is_count),
        **counts,
        **bounds,
        split_offsets=_int_list(d, "so"),
        sort_order_id=_get(d, "o", "a sort order id or null", _is_int, optional=True),
        key_metadata=None if key_metadata is None else _unb64("km", key_metadata),
        equality_ids=_int_list(d, "eq"),
    )
    data_file.spec_id = spec_id
    return data_file
