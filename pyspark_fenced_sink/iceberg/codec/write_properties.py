"""Iceberg table write properties → Parquet writer settings (step 2 of docs/PROTOCOL.md §3).

Codec (Iceberg's default zstd), level, page and dictionary sizes, row-group and target file
sizes, read the way Iceberg defines them; a bad value is an :class:`InvalidOptionsError` naming
the property, raised before a byte is written. Which columns a file dictionary-encodes is decided
from its data, as Iceberg's parquet-mr writer does (:func:`dictionary_columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import TableProperties
from pyiceberg.utils.properties import property_as_int

from pyspark_fenced_sink.errors import InvalidOptionsError

_CODECS = {"zstd", "snappy", "gzip", "brotli", "lz4", "none"}


def _int_property(props: Mapping[str, str], key: str, default: int | None) -> int | None:
    try:
        value = property_as_int(dict(props), key, default)
    except ValueError as e:
        raise InvalidOptionsError(f"table property {key}: expected an integer, found {props.get(key)!r}") from e
    if value is not None and value <= 0 and key != TableProperties.PARQUET_COMPRESSION_LEVEL:
        raise InvalidOptionsError(f"table property {key}: expected a positive integer, found {value}")
    return value


def size_property(props: Mapping[str, str], key: str, default: int) -> int:
    """A positive size/count table property, ``default`` when unset."""
    value = _int_property(props, key, default)
    return default if value is None else value


def check_write_properties(props: Mapping[str, str]) -> None:
    """Raise :class:`InvalidOptionsError` for any write property the executors would reject.

    The driver calls this (``iceberg.catalogs.validate_table_properties``) before it creates a
    table or launches a task, so a bad ``table.<prop>`` option fails the write with nothing
    created and nothing written.
    """
    parquet_kwargs(props)
    tp = TableProperties
    size_property(props, tp.PARQUET_ROW_GROUP_LIMIT, tp.PARQUET_ROW_GROUP_LIMIT_DEFAULT)
    size_property(props, tp.PARQUET_ROW_GROUP_SIZE_BYTES, tp.PARQUET_ROW_GROUP_SIZE_BYTES_DEFAULT)
    size_property(props, tp.WRITE_TARGET_FILE_SIZE_BYTES, tp.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT)


def parquet_kwargs(props: Mapping[str, str]) -> dict[str, Any]:
    """``pyarrow.parquet.ParquetWriter`` keyword arguments from the table's ``write.parquet.*`` properties."""
    codec = props.get(TableProperties.PARQUET_COMPRESSION, TableProperties.PARQUET_COMPRESSION_DEFAULT).lower()
    codec = "none" if codec == "uncompressed" else codec
    if codec not in _CODECS:
        raise InvalidOptionsError(
            f"table property {TableProperties.PARQUET_COMPRESSION}: expected one of zstd, snappy, gzip, "
            f"brotli, lz4, uncompressed, found {codec!r}"
        )
    tp = TableProperties
    return {
        "compression": codec,
        "compression_level": _int_property(props, tp.PARQUET_COMPRESSION_LEVEL, tp.PARQUET_COMPRESSION_LEVEL_DEFAULT),
        "data_page_size": _int_property(props, tp.PARQUET_PAGE_SIZE_BYTES, tp.PARQUET_PAGE_SIZE_BYTES_DEFAULT),
        "dictionary_pagesize_limit": _int_property(
            props, tp.PARQUET_DICT_SIZE_BYTES, tp.PARQUET_DICT_SIZE_BYTES_DEFAULT
        ),
        "write_batch_size": _int_property(props, tp.PARQUET_PAGE_ROW_LIMIT, tp.PARQUET_PAGE_ROW_LIMIT_DEFAULT),
        "store_decimal_as_integer": True,
    }


_VARIABLE_WIDTH = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string, pa.types.is_large_string)
#: Rows of a file's first row group that decide its dictionary columns (Iceberg's default page row limit).
DICTIONARY_SAMPLE_ROWS = 20_000


def dictionary_columns(first_group: pa.Table, leaf_paths: Iterable[str]) -> list[str]:
    """The Parquet columns a file dictionary-encodes, decided from its first row group's first rows.

    Iceberg writes through parquet-mr, which drops a column's dictionary after the first page
    when dictionary + indices are not smaller than the plain values; pyarrow has no such
    fallback and keeps dictionary-encoding unique ids, timestamps and measures until the
    dictionary page limit (``write.parquet.dict-size-bytes``, 2 MiB) fills, which made files
    larger than Spark's and the write slower (docs/benchmarks.md has the numbers). The same test is applied here
    up front, on the first :data:`DICTIONARY_SAMPLE_ROWS` rows of each top-level primitive column:
    dictionary (distinct x width) + indices (rows x bits per index) < plain (rows x width).
    Nested leaf columns keep dictionary encoding. Encoding only: the values are the same.

    Args:
        first_group: the first row group the file will hold (the table's Arrow schema).
        leaf_paths: every Parquet leaf column path (``parquet_path_to_id_mapping``'s keys).
    """
    plain: set[str] = set()
    for field_, column in zip(first_group.schema, first_group.columns, strict=True):
        if pa.types.is_nested(field_.type) or pa.types.is_boolean(field_.type):
            continue
        sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
        values = len(sample) - sample.null_count
        if values == 0:
            continue
        try:
            distinct = pc.count_distinct(sample).as_py()
            if any(is_type(field_.type) for is_type in _VARIABLE_WIDTH):
                width = pc.sum(pc.binary_length(sample)).as_py() / values + 4  # + Parquet's length prefix
            else:
                width = field_.type.bit_width / 8
        except (pa.ArrowNotImplementedError, ValueError):
            continue  # a type these kernels do not cover: keep pyarrow's default (dictionary)
        index_bytes = max(1, distinct.bit_length()) / 8
        if distinct * width + values * index_bytes >= values * width:
            plain.add(field_.name)
    return [path for path in leaf_paths if path not in plain]
