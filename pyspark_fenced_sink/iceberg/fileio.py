"""One pyiceberg FileIO per (properties, location) per process (executors and driver).

Write tasks (``write/task.py``) and read tasks (``read/task.py``) open data
files through the table's FileIO; building one costs an S3 client, so each
Python worker keeps the ones it made. No catalog code: executors import this.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pyiceberg.io import FileIO, load_file_io

__all__ = ["cached_file_io"]


@functools.lru_cache(maxsize=8)
def _file_io(io_props: tuple[tuple[str, str], ...], location: str) -> FileIO:
    return load_file_io(dict(io_props), location)


def cached_file_io(properties: Mapping[str, str], location: str) -> FileIO:
    """The FileIO for ``properties`` (the table's io properties) and ``location``, made once per process."""
    return _file_io(tuple(sorted(properties.items())), location)
