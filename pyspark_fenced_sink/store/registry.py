"""The one table from URI scheme to object store (PROTOCOL.md §2; driver and CLI).

Every caller that needs storage for a location — the WAL's control store and
``gc``'s data-file listing — resolves it here, so a scheme is supported
everywhere or nowhere: adding one is one row in :data:`SCHEMES`. A location
without a scheme is a local path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.base import ObjectStore
from pyspark_fenced_sink.store.local import LocalStore, local_filesystem
from pyspark_fenced_sink.store.s3 import S3Store, s3_filesystem

__all__ = ["SCHEMES", "Scheme", "open_filesystem", "open_store", "scheme_of"]


@dataclass(frozen=True)
class Scheme:
    """How to reach one kind of storage.

    Attributes:
        store: ``(root URI, FileIO properties) -> ObjectStore`` for control objects under ``root``.
        filesystem: ``FileIO properties -> fsspec file system`` for listing and deleting data files.
    """

    store: Callable[[str, Mapping[str, str]], ObjectStore]
    filesystem: Callable[[Mapping[str, str]], Any]


def _local(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    return LocalStore(root)


def _s3(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    return S3Store(root, s3_filesystem(io_properties))


_S3 = Scheme(store=_s3, filesystem=s3_filesystem)

#: URI scheme -> storage. FileIO properties are the table's (``s3.*``, ...), never logged.
SCHEMES: dict[str, Scheme] = {
    "file": Scheme(store=_local, filesystem=local_filesystem),
    "s3": _S3,
    "s3a": _S3,
    "s3n": _S3,
}


def scheme_of(uri: str) -> str:
    """The lower-cased scheme of ``uri``; ``file`` for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def _scheme(uri: str) -> Scheme:
    scheme = scheme_of(uri)
    found = SCHEMES.get(scheme)
    if found is None:
        raise StoreError(
            f"no object store for scheme {scheme!r} of {uri!r}: expected one of "
            f"{', '.join(s + '://' for s in sorted(SCHEMES))} (or a local path)"
        )
    return found


def open_store(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    """The control store rooted at ``root`` (a URI or a local path)."""
    return _scheme(root).store(root, io_properties)


def open_filesystem(location: str, io_properties: Mapping[str, str]) -> tuple[Any, str]:
    """(fsspec file system, ``location`` without its scheme) for listing and deleting data files."""
    fs = _scheme(location).filesystem(io_properties)
    return fs, location.split("://", 1)[1] if "://" in location else location
