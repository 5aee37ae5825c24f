"""A table's FileIO: its properties, and one cached FileIO per location and properties per process (PROTOCOL.md §2).

The properties are the table's storage credentials (also what a REST catalog
vends): never log them unmasked (``masking.redact``).

:class:`LeanFileIO` is the FileIO of every catalog the sink loads unless the
catalog names its own (``py-io-impl``; ``iceberg.catalogs.load_catalog``):
pyiceberg's pyarrow FileIO with fewer object-store requests per file written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from pyiceberg.io import ARROW_FILE_IO, PY_IO_IMPL, SCHEMA_TO_FILE_IO, FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties

__all__ = ["LEAN_FILE_IO", "LeanFileIO", "cached_file_io", "io_properties", "with_lean_file_io"]


class _Counted:
    """An Avro output stream that remembers, when closed, how many bytes went into it (``_NewFile.__len__``)."""

    def __init__(self, stream: Any, file: _NewFile) -> None:
        self._stream = stream
        self._file = file
        self._size = 0

    def write(self, data: Any) -> int:
        self._size += len(data)
        return self._stream.write(data)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._stream.close()
        self._file.written = self._size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NewFile(PyArrowFile):
    """A file about to be written under a name nobody else writes: no existence check first.

    Its length after an Avro file (a manifest, a manifest list) was written through it is the
    count of bytes written, not a ``HEAD`` request (pyiceberg asks each manifest it writes).
    Other files (Parquet) get pyarrow's native stream unwrapped and ask the store as before.
    """

    written: int | None = None

    def create(self, overwrite: bool = False) -> Any:
        stream = super().create(overwrite=True)
        return _Counted(stream, self) if self.location.endswith(".avro") else stream

    def __len__(self) -> int:
        return super().__len__() if self.written is None else self.written


class LeanFileIO(PyArrowFileIO):
    """pyiceberg's ``PyArrowFileIO``, writing a small file to S3 in one request instead of five.

    For a scheme whose preferred FileIO in pyiceberg is another (Azure's ``abfs``/``wasb``: fsspec's),
    every call goes to that FileIO unchanged, as without this class.

    * S3 output streams open lazily (pyarrow's ``allow_delayed_open``): a file smaller than one
      part is a single ``PUT``, not a multipart upload (create, part, complete).
    * ``create()`` does not first ask whether the file exists (a ``HEAD`` and a ``LIST`` on S3),
      and the length of a manifest it wrote is the bytes it wrote, not a ``HEAD``.
      Every file the sink and pyiceberg write has a name no other write uses (a random nonce or
      UUID in it; PROTOCOL.md §2), and the check was never a guard anyway: a concurrent creator
      could come between it and the write. Put-if-absent, where the protocol needs it, is the
      WAL store's conditional ``PUT`` (``store``), not this.
    """

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties)
        self._others: dict[str, FileIO] = {}

    def _other(self, location: str) -> FileIO | None:
        """The FileIO pyiceberg prefers for ``location``'s scheme when it is not pyarrow's (Azure: fsspec's)."""
        scheme = location.split("://", 1)[0] if "://" in location else "file"
        preferred = SCHEMA_TO_FILE_IO.get(scheme, [ARROW_FILE_IO])
        if preferred[0] == ARROW_FILE_IO:
            return None
        io = self._others.get(scheme)
        if io is None:
            plain = {k: v for k, v in self.properties.items() if k != PY_IO_IMPL}
            io = self._others.setdefault(scheme, load_file_io(plain, location))
        return io

    def hands_on(self, location: str) -> bool:
        """Whether ``location`` goes to another FileIO (pyiceberg's preferred one for its scheme), not pyarrow's."""
        return self._other(location) is not None

    def new_input(self, location: str) -> Any:
        """A file to read at ``location``."""
        other = self._other(location)
        return other.new_input(location) if other is not None else super().new_input(location)

    def delete(self, location: Any) -> None:
        """Delete the file at ``location``."""
        path = location if isinstance(location, str) else location.location
        other = self._other(path)
        if other is not None:
            other.delete(location)
        else:
            super().delete(location)

    def _initialize_s3_fs(self, netloc: str | None) -> Any:
        fs = super()._initialize_s3_fs(netloc)
        rebuild, (options,) = fs.__reduce__()  # pyarrow's own pickling: every option of the filesystem
        return rebuild({**options, "allow_delayed_open": True})

    def new_output(self, location: str) -> Any:
        """A file to write at ``location`` (a new name: see the class docstring)."""
        other = self._other(location)
        if other is not None:
            return other.new_output(location)
        file = super().new_output(location)
        return _NewFile(location=file.location, path=file._path, fs=file._filesystem, buffer_size=file._buffer_size)


#: The ``py-io-impl`` catalog property value that selects :class:`LeanFileIO`.
LEAN_FILE_IO = f"{LeanFileIO.__module__}.{LeanFileIO.__qualname__}"


@functools.lru_cache(maxsize=8)
def _file_io(io_props: tuple[tuple[str, str], ...], location: str) -> FileIO:
    return load_file_io(dict(io_props), location)


def cached_file_io(properties: Mapping[str, str], location: str) -> FileIO:
    """The FileIO for ``properties`` (the table's io properties) and ``location``, made once per process."""
    return _file_io(tuple(sorted(properties.items())), location)


def io_properties(table: Any) -> dict[str, str]:
    """The FileIO properties of a loaded pyiceberg table (storage credentials: never log them unmasked)."""
    return dict(getattr(table.io, "properties", {}) or {})


def with_lean_file_io(properties: Mapping[str, str]) -> dict[str, str]:
    """Catalog ``properties`` with :class:`LeanFileIO` as the FileIO, unless they name one."""
    return {PY_IO_IMPL: LEAN_FILE_IO, **properties}
