"""Iceberg table write properties → Parquet writer settings (step 2 of docs/PROTOCOL.md §3).

Codec (Iceberg's default zstd), level, page and dictionary sizes, row-group and target file
sizes, read the way Iceberg defines them; a bad value is an :class:`InvalidOptionsError` naming
the property, raised before a byte is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def validate_write_properties(props: Mapping[str, str]) -> None:
    """Raise :class:`InvalidOptionsError` for any write property the executors would reject.

    The driver calls this before it creates a table or launches a task, so a bad
    ``table.<prop>`` option fails the write with nothing created and nothing written.
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
