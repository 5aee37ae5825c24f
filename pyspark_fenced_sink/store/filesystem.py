"""What the fsspec-backed control stores share: GET and DELETE through one file system (PROTOCOL.md §2).

``s3`` and ``gcs`` subclass :class:`FileSystemStore` and add what differs per
service: LIST (each service's start-after parameter) and put-if-absent (each
service's conditional create and its error answers). Error messages pass
through the one secret masker.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.masking import mask_secrets
from pyspark_fenced_sink.store.base import check_key

__all__ = ["FileSystemStore"]


class FileSystemStore:
    """Control objects under ``bucket/prefix`` of one reused fsspec file system.

    Attributes:
        scheme: The URI scheme messages name (``s3``, ``gs``).
        root: ``bucket/prefix`` without the scheme or a trailing ``/``.
        fs: The file system (``s3fs.S3FileSystem``, ``gcsfs.GCSFileSystem``).
    """

    scheme: ClassVar[str] = ""

    def __init__(self, root: str, fs: Any, failures: tuple[type[BaseException], ...]) -> None:
        self.root = root.split("://", 1)[-1].strip("/")
        self.fs = fs
        self._failures = failures

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.scheme}://{self.root}')"

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def _error(self, what: str, key: str, e: BaseException, *, ambiguous: bool = False) -> StoreError:
        where = f"{self.scheme}://{self.root}/{key}"
        return StoreError(f"{what} {where} failed: {mask_secrets(str(e))[:500]}", ambiguous=ambiguous)

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            return None
        except self._failures as e:
            raise self._error("GET", key, e) from e

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            return
        except self._failures as e:
            raise self._error("DELETE", key, e) from e
