"""The JSON form of control data: compact, sorted, format-versioned (PROTOCOL.md §1).

WAL entries (``wal``) and the committed state (``state``) are JSON objects with
a format version ``v``. A reader refuses any other version with an upgrade
hint rather than misreading it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError

__all__ = [
    "MALFORMED",
    "dumps",
    "field",
    "is_bool",
    "is_count",
    "is_partition",
    "is_str",
    "is_text",
    "loads_versioned",
    "name_ids",
    "partition_lists",
    "str_pairs",
    "text_list",
]

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


def is_bool(value: Any) -> bool:
    """A JSON boolean."""
    return isinstance(value, bool)


def is_count(value: Any) -> bool:
    """A JSON integer >= 0 (not a boolean, not a float, not a numeric string)."""
    return type(value) is int and value >= 0


def is_str(value: Any) -> bool:
    """A JSON string."""
    return isinstance(value, str)


def is_text(value: Any) -> bool:
    """A non-empty JSON string."""
    return isinstance(value, str) and bool(value)


def field(
    body: Mapping[str, Any],
    key: str,
    expected: str,
    ok: Callable[[Any], bool],
    default: Any = None,
    *,
    required: bool = False,
    where: str = "",
) -> Any:
    """``body[key]`` if ``ok`` says it is well-formed; ``default`` if absent or null (unless ``required``).

    Raises:
        ValueError: the value is malformed, or missing although ``required`` (the message names the field).
    """
    value = body.get(key)
    name = f"{where}.{key}" if where else key
    if value is None:
        if required:
            raise ValueError(f"field {name!r} is missing: expected {expected}")
        return default
    if not ok(value):
        shown = json.dumps(value)
        raise ValueError(
            f"field {name!r}: expected {expected}, found {shown if len(shown) <= 60 else shown[:57] + '...'}"
        )
    return value


def is_partition(value: Any) -> bool:
    """A list of encoded partition values (strings, or null for a null value)."""
    return isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)


def _listed(body: Mapping[str, Any], key: str, expected: str, ok: Callable[[Any], bool]) -> list[Any]:
    value = field(body, key, expected, lambda v: isinstance(v, list) and all(map(ok, v)), [])
    return list(value)


def partition_lists(body: Mapping[str, Any], key: str) -> tuple[tuple[str | None, ...], ...]:
    """A list of encoded partition tuples (absent: none)."""
    return tuple(tuple(p) for p in _listed(body, key, "a list of encoded partition tuples", is_partition))


def text_list(body: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list of non-empty strings (absent: none)."""
    return tuple(_listed(body, key, "a list of non-empty strings", is_text))


def str_pairs(body: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    """An object of strings, as sorted (key, value) pairs (absent: none)."""
    value = field(body, key, "an object of strings", lambda v: isinstance(v, dict) and all(map(is_str, v.values())))
    return tuple(sorted((value or {}).items()))


def name_ids(body: Mapping[str, Any], key: str) -> tuple[tuple[str, int], ...]:
    """An object of names to non-negative integers, as sorted pairs (absent: none)."""
    value = field(
        body, key, "an object of names to integers", lambda v: isinstance(v, dict) and all(map(is_count, v.values()))
    )
    return tuple(sorted((value or {}).items()))
