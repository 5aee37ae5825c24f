"""A table's FileIO: its properties, and one cached FileIO per location and properties per process (PROTOCOL.md §2).

The properties are the table's storage credentials (also what a REST catalog
vends): never log them unmasked (``masking.redact``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pyiceberg.io import FileIO, load_file_io

__all__ = ["cached_file_io", "io_properties"]


@functools.lru_cache(maxsize=8)
def _file_io(io_props: tuple[tuple[str, str], ...], location: str) -> FileIO:
    return load_file_io(dict(io_props), location)


def cached_file_io(properties: Mapping[str, str], location: str) -> FileIO:
    """The FileIO for ``properties`` (the table's io properties) and ``location``, made once per process."""
    return _file_io(tuple(sorted(properties.items())), location)


def io_properties(table: Any) -> dict[str, str]:
    """The FileIO properties of a loaded pyiceberg table (storage credentials: never log them unmasked)."""
    return dict(getattr(table.io, "properties", {}) or {})
