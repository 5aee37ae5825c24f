"""The file references a WAL entry carries: encoded data files and upsert delete-key files (PROTOCOL.md §1).

The protocol reads only a few keys of an encoded data file (path, spec id, partition values); the rest
of the encoding belongs to the Iceberg adapter (``iceberg.codec.datafiles``). The parsers here check
those keys when an entry is decoded (``protocol.entry.decode_entry``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_fenced_sink.protocol.codec import field, is_count, is_partition, is_text

__all__ = [
    "FILE_PARTITION_KEY",
    "FILE_PATH_KEY",
    "FILE_SPEC_KEY",
    "encoded_partition",
    "encoded_path",
    "encoded_spec_id",
    "file_list",
    "key_file_refs",
    "partitions_of",
]

#: The keys of an encoded data file that the protocol itself reads; the rest of the
#: encoding belongs to the Iceberg adapter (``iceberg.codec.datafiles``).
FILE_PATH_KEY = "p"
FILE_SPEC_KEY = "s"
FILE_PARTITION_KEY = "pt"


def file_list(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The ``files`` field: encoded DataFiles whose keys the protocol reads are valid (path, spec, partition)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"'files' must be a list of encoded data files, found {json.dumps(value)[:80]}")
    for i, f in enumerate(value):
        field(f, FILE_PATH_KEY, "a data file path", is_text, required=True, where=f"files[{i}]")
        field(f, FILE_SPEC_KEY, "a partition spec id", is_count, required=True, where=f"files[{i}]")
        field(f, FILE_PARTITION_KEY, "a list of encoded partition values", is_partition, where=f"files[{i}]")
    return tuple(value)


def _key_bounds(value: Any) -> bool:
    """Key bounds of a delete-key file: an object of field ids (decimal strings) to base64 strings."""
    return isinstance(value, dict) and all(k.isdigit() and is_text(v) for k, v in value.items())


def key_file_refs(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The ``deletes`` field: references to an upsert's delete-key files (``iceberg.codec.key_files.describe``)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"'deletes' must be a list of delete-key file references, found {json.dumps(value)[:80]}")
    for i, f in enumerate(value):
        where = f"deletes[{i}]"
        field(f, FILE_PATH_KEY, "a delete-key file path", is_text, required=True, where=where)
        field(f, "n", "a row count", is_count, where=where)
        field(f, "z", "a size in bytes", is_count, where=where)
        field(f, "lb", "an object of field ids to key bounds", _key_bounds, where=where)
        field(f, "ub", "an object of field ids to key bounds", _key_bounds, where=where)
    return tuple(value)


def encoded_path(encoded: Mapping[str, Any]) -> str:
    """The file path of an encoded data file (without decoding it)."""
    return str(encoded[FILE_PATH_KEY])


def encoded_spec_id(encoded: Mapping[str, Any]) -> int:
    """The partition spec id of an encoded data file (without decoding it)."""
    return int(encoded[FILE_SPEC_KEY])


def encoded_partition(encoded: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The encoded partition values of an encoded data file (one per partition field; () unpartitioned)."""
    return tuple(encoded.get(FILE_PARTITION_KEY) or ())


def partitions_of(files: Iterable[Mapping[str, Any]]) -> tuple[tuple[str | None, ...], ...]:
    """The sorted set of encoded partition tuples of ``files`` (a dynamic overwrite's partition set)."""
    found = {encoded_partition(f) for f in files}
    return tuple(sorted(found, key=lambda p: tuple((v is None, v or "") for v in p)))
