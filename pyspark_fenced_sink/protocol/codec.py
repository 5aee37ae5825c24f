"""The JSON form of control data: compact, sorted, format-versioned (PROTOCOL.md §1).

WAL entries (``wal``) and the committed state (``state``) are JSON objects with
a format version ``v``. A reader refuses any other version with an upgrade
hint rather than misreading it.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError

__all__ = ["MALFORMED", "dumps", "loads_versioned"]

#: What building an object from a malformed JSON body raises (callers map these to CorruptControlDataError).
MALFORMED: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError, AttributeError)


def dumps(body: Any) -> str:
    """Compact, key-sorted JSON (the same object always encodes to the same text)."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def loads_versioned(data: str | bytes, version: int | tuple[int, ...], what: str) -> dict[str, Any]:
    """Parse a control object and check its format version (one version, or the versions this reader reads).

    Raises:
        CorruptControlDataError: another format version (``what`` names the object).
        ValueError, TypeError: not a JSON object (one of :data:`MALFORMED`).
    """
    body = json.loads(data)
    if not isinstance(body, dict):
        raise TypeError(f"expected a JSON object, found {type(body).__name__}")
    versions = version if isinstance(version, tuple) else (version,)
    if body.get("v") not in versions:
        readable = " or ".join(str(v) for v in versions)
        raise CorruptControlDataError(
            f"{what} has format version {body.get('v')!r}, this fencedlake reads {readable}: "
            "upgrade fencedlake on every writer of this table"
        )
    return body
