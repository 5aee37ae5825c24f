"""The one table from URI scheme to object store (PROTOCOL.md §2; driver and CLI).

Every caller that needs storage for a location — the WAL's control store and
``gc``'s data-file listing and its comparison of listed paths with the paths
snapshots reference — resolves it here, so a scheme is supported everywhere or
nowhere: adding one is one row in :data:`SCHEMES`. A location without a scheme
is a local path. Azure and GCS modules import their SDKs only when used (the
``azure`` and ``gcs`` extras).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.base import ObjectStore
from pyspark_fenced_sink.store.local import LocalStore, local_filesystem
from pyspark_fenced_sink.store.s3 import S3Store, s3_filesystem
from pyspark_fenced_sink.store.s3_http import http_store

__all__ = ["SCHEMES", "Scheme", "filesystem_path", "open_filesystem", "open_store", "scheme_of"]


def _strip_scheme(uri: str) -> str:
    return uri.split("://", 1)[1] if "://" in uri else uri


@dataclass(frozen=True)
class Scheme:
    """How to reach one kind of storage.

    Attributes:
        store: ``(root URI, FileIO properties) -> ObjectStore`` for control objects under ``root``.
        filesystem: ``(location, FileIO properties) -> fsspec file system`` for listing and deleting data files.
        path: ``URI -> the path that file system uses`` (``bucket/key``; Azure: ``container/path``).
    """

    store: Callable[[str, Mapping[str, str]], ObjectStore]
    filesystem: Callable[[str, Mapping[str, str]], Any]
    path: Callable[[str], str] = _strip_scheme


def _local(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    return LocalStore(root)


def _s3(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    """The HTTP store where it can serve these properties, s3fs's otherwise (``store/s3_http.py``)."""
    store = http_store(root, io_properties)
    return store if store is not None else S3Store(root, s3_filesystem(io_properties))


def _s3_fs(location: str, io_properties: Mapping[str, str]) -> Any:
    return s3_filesystem(io_properties)


def _azure(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    from pyspark_fenced_sink.store.azure import open_azure_store

    return open_azure_store(root, io_properties)


def _azure_fs(location: str, io_properties: Mapping[str, str]) -> Any:
    from pyspark_fenced_sink.store.azure import azure_filesystem

    return azure_filesystem(location, io_properties)


def _azure_path(uri: str) -> str:
    from pyspark_fenced_sink.store.azure import azure_location

    return azure_location(uri).fs_path


def _gcs(root: str, io_properties: Mapping[str, str]) -> ObjectStore:
    from pyspark_fenced_sink.store.gcs import open_gcs_store

    return open_gcs_store(root, io_properties)


def _gcs_fs(location: str, io_properties: Mapping[str, str]) -> Any:
    from pyspark_fenced_sink.store.gcs import gcs_filesystem

    return gcs_filesystem(location, io_properties)


_S3 = Scheme(store=_s3, filesystem=_s3_fs)
_AZURE = Scheme(store=_azure, filesystem=_azure_fs, path=_azure_path)
_GCS = Scheme(store=_gcs, filesystem=_gcs_fs)

#: URI scheme -> storage. FileIO properties are the table's (``s3.*``, ``adls.*``, ``gcs.*``), never logged.
SCHEMES: dict[str, Scheme] = {
    "file": Scheme(store=_local, filesystem=local_filesystem),
    "s3": _S3,
    "s3a": _S3,
    "s3n": _S3,
    "abfs": _AZURE,
    "abfss": _AZURE,
    "wasb": _AZURE,
    "wasbs": _AZURE,
    "az": _AZURE,
    "gs": _GCS,
    "gcs": _GCS,
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
    """(fsspec file system, :func:`filesystem_path` of ``location``) for listing and deleting data files."""
    scheme = _scheme(location)
    return scheme.filesystem(location, io_properties), scheme.path(location)


def filesystem_path(uri: str) -> str:
    """``uri`` as its file system lists it: how ``gc`` compares a listing with referenced paths."""
    return _scheme(uri).path(uri)
