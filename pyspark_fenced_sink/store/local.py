"""A control store on a local or shared POSIX file system (PROTOCOL.md §2; driver).

Put-if-absent writes a complete temporary file, fsyncs it and ``link()``s it to
its final name: atomic, and readers never see a partial object. Any file system
that honours ``link()`` (local disks, NFSv4, most cluster file systems) works.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.base import check_key

__all__ = ["LocalStore", "local_filesystem"]


class LocalStore:
    """A POSIX directory (local disk or a shared file system honouring link())."""

    def __init__(self, root: str) -> None:
        self.root = Path(root[len("file://") :] if root.startswith("file://") else root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read {self._path(key)}: {e.strerror}") from e

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        directory = self._path(prefix.rstrip("/"))
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        base = prefix if prefix.endswith("/") else prefix + "/"
        keys = (base + n for n in names if not n.startswith("."))
        return sorted(k for k in keys if k > start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {path.parent}: {e.strerror}") from e
        tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True
        except OSError as e:
            raise StoreError(f"cannot create {path}: {e.strerror}") from e
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


def local_filesystem(location: str = "", io_properties: Any = None) -> Any:
    """The fsspec file system for local paths (``gc``'s data-file listing)."""
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem()
