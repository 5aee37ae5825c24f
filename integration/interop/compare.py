"""What Iceberg's Spark runtime and pyiceberg see of one table, in forms that compare exactly.

Rows: both sides become sorted lists of canonical JSON strings (timestamps as UTC wall-clock
ISO text, maps as sorted pairs, bytes as hex), so one lost, extra or changed value fails a
comparison. Metadata: Iceberg's metadata tables (``snapshots``, ``refs``, ``manifests``,
``files``, ``entries``) against pyiceberg's reading of the same metadata, and the readable
metrics Iceberg decodes from our manifests against the values the data files actually hold.

The test process runs in UTC (the interop conftest sets ``TZ``), so PySpark's naive local
``datetime`` for a ``timestamp`` is UTC wall-clock time, like pyarrow's ``timestamptz`` converted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = [
    "canonical",
    "java_files",
    "java_manifests",
    "java_refs",
    "java_snapshots",
    "py_files",
    "py_manifests",
    "py_refs",
    "py_snapshots",
    "pyiceberg_rows",
    "spark_rows",
]


def canonical(value: Any) -> Any:
    """A JSON-able form of a value from PySpark's ``collect()`` or pyarrow's ``to_pylist()``."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        return canonical(dict(value))  # pyarrow's map: a list of (key, value) pairs
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return f"decimal:{value}"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _keyed(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(canonical(r), sort_keys=True) for r in rows)


def spark_rows(df: Any) -> list[str]:
    """Every row of a Spark DataFrame, canonical and sorted."""
    return _keyed([r.asDict(recursive=True) for r in df.collect()])


def pyiceberg_rows(table: Any, *, snapshot_id: int | None = None, row_filter: str | None = None) -> list[str]:
    """Every row pyiceberg reads from ``table`` (at ``snapshot_id``; matching ``row_filter``), canonical and sorted."""
    scan = (
        table.scan(snapshot_id=snapshot_id, row_filter=row_filter)
        if row_filter
        else table.scan(snapshot_id=snapshot_id)
    )
    return _keyed(scan.to_arrow().to_pylist())


def _path(path: str) -> str:
    """``file:/x`` and ``file:///x`` are one file (Java writes the first form, pyiceberg the second)."""
    return "file://" + path[len("file:") :] if path.startswith("file:/") and not path.startswith("file://") else path


# ---------------------------------------------------------------------- snapshots and refs


def java_snapshots(spark: Any, table: str) -> dict[int, tuple[int | None, str, dict[str, str]]]:
    """``snapshot id -> (parent id, operation, summary)`` from Iceberg's ``snapshots`` metadata table."""
    rows = spark.sql(f"SELECT snapshot_id, parent_id, operation, summary FROM {table}.snapshots").collect()
    return {r.snapshot_id: (r.parent_id, r.operation, dict(r.summary or {})) for r in rows}


def py_snapshots(table: Any) -> dict[int, tuple[int | None, str, dict[str, str]]]:
    """The same from pyiceberg's reading of the table metadata."""
    out = {}
    for s in table.metadata.snapshots:
        summary = s.summary
        props = {k: str(v) for k, v in (summary.additional_properties if summary else {}).items()}
        out[s.snapshot_id] = (s.parent_snapshot_id, summary.operation.value if summary else "", props)
    return out


def java_refs(spark: Any, table: str) -> dict[str, tuple[str, int]]:
    """``ref name -> (type, snapshot id)`` from Iceberg's ``refs`` metadata table."""
    rows = spark.sql(f"SELECT name, type, snapshot_id FROM {table}.refs").collect()
    return {r.name: (r.type, r.snapshot_id) for r in rows}


def py_refs(table: Any) -> dict[str, tuple[str, int]]:
    """The same from pyiceberg."""
    return {name: (ref.snapshot_ref_type.value.upper(), ref.snapshot_id) for name, ref in table.metadata.refs.items()}


# ---------------------------------------------------------------------- manifests and files


def java_manifests(spark: Any, table: str, ref: str | None = None) -> list[tuple[Any, ...]]:
    """The current (or ``ref``'s) snapshot's manifests from Iceberg's ``manifests`` table, sorted."""
    suffix = f" VERSION AS OF '{ref}'" if ref else ""
    rows = spark.sql(
        "SELECT content, path, length, partition_spec_id, added_snapshot_id, "
        "added_data_files_count + added_delete_files_count AS added, "
        "existing_data_files_count + existing_delete_files_count AS existing, "
        f"deleted_data_files_count + deleted_delete_files_count AS deleted FROM {table}.manifests{suffix}"
    ).collect()
    return sorted(
        (r.content, _path(r.path), r.length, r.partition_spec_id, r.added_snapshot_id, r.added, r.existing, r.deleted)
        for r in rows
    )


def py_manifests(table: Any, snapshot: Any) -> list[tuple[Any, ...]]:
    """The same from pyiceberg's manifest list of ``snapshot``."""
    return sorted(
        (
            int(m.content),
            _path(m.manifest_path),
            m.manifest_length,
            m.partition_spec_id,
            m.added_snapshot_id,
            m.added_files_count,
            m.existing_files_count,
            m.deleted_files_count,
        )
        for m in snapshot.manifests(table.io)
    )


def java_files(spark: Any, table: str, ref: str | None = None) -> dict[str, dict[str, Any]]:
    """Live data and delete files of the current (or ``ref``'s) snapshot from Iceberg's ``files`` table."""
    suffix = f" VERSION AS OF '{ref}'" if ref else ""
    rows = spark.sql(
        "SELECT content, file_path, record_count, file_size_in_bytes, value_counts, null_value_counts, "
        f"lower_bounds, upper_bounds, readable_metrics FROM {table}.files{suffix}"
    ).collect()
    return {
        _path(r.file_path): {
            "content": r.content,
            "record_count": r.record_count,
            "file_size_in_bytes": r.file_size_in_bytes,
            "value_counts": dict(r.value_counts or {}),
            "null_value_counts": dict(r.null_value_counts or {}),
            "lower_bounds": {k: bytes(v) for k, v in (r.lower_bounds or {}).items()},
            "upper_bounds": {k: bytes(v) for k, v in (r.upper_bounds or {}).items()},
            "readable_metrics": r.readable_metrics.asDict(recursive=True) if r.readable_metrics else {},
        }
        for r in rows
    }


def py_files(table: Any, snapshot: Any) -> dict[str, dict[str, Any]]:
    """The same fields from pyiceberg's live manifest entries of ``snapshot``."""
    out = {}
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            out[_path(f.file_path)] = {
                "content": int(f.content),
                "record_count": f.record_count,
                "file_size_in_bytes": f.file_size_in_bytes,
                "value_counts": dict(f.value_counts or {}),
                "null_value_counts": dict(f.null_value_counts or {}),
                "lower_bounds": {k: bytes(v) for k, v in (f.lower_bounds or {}).items()},
                "upper_bounds": {k: bytes(v) for k, v in (f.upper_bounds or {}).items()},
            }
    return out


def without(d: Mapping[str, dict[str, Any]], *keys: str) -> dict[str, dict[str, Any]]:
    """``d`` with ``keys`` dropped from every value (fields only one side has)."""
    return {path: {k: v for k, v in fields.items() if k not in keys} for path, fields in d.items()}
