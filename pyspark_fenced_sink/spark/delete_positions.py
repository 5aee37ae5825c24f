"""The deleted row positions of each dirty data file, read on the driver with pyarrow (PROTOCOL.md §14; driver).

Used by ``spark.native_deletes`` for the bitmap filter and the collected anti-join keys. A position counts
for a data file only when its delete file is one the planner scoped to that file (a ``file_path`` row
naming another data file is ignored, as pyiceberg ignores it).

Reading: where the table's FileIO is pyarrow's (``PyArrowFileIO``, the sink's ``LeanFileIO`` for every
scheme it does not hand on) and every delete file lives on one filesystem, all of them are read as one
pyarrow dataset (Arrow's own threads, one call; ``__filename`` names each row's delete file); otherwise
each file through the FileIO, eight at a time. Either way the rows are then assigned to their data files
in one vectorized pass into each delete file's positions per data file, kept for the process (delete files
are immutable; shared with the upsert's cache, bounded by bytes); a data file's positions are those its own
delete files (the planner's scope) hold for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

__all__ = ["collected_positions"]

_COLUMNS = ["file_path", "pos"]
#: The pyarrow dataset field naming the file a row came from.
_FILENAME = "__filename"


class Scoped(Protocol):
    """A data file with deletes: its path and the delete files the planner applies to it."""

    @property
    def path(self) -> str: ...

    @property
    def delete_files(self) -> tuple[str, ...]: ...


def _arrow_paths(io: Any, paths: Sequence[str]) -> tuple[Any, dict[str, str]] | None:
    """(the one pyarrow filesystem holding ``paths``, each path as that filesystem names it), or None."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from pyspark_fenced_sink.iceberg.codec.fileio import LeanFileIO

    if not isinstance(io, PyArrowFileIO) or (isinstance(io, LeanFileIO) and any(io.hands_on(p) for p in paths)):
        return None
    parsed = {p: io.parse_location(p, io.properties) for p in paths}
    roots = {(scheme, netloc) for scheme, netloc, _ in parsed.values()}
    if len(roots) != 1:
        return None
    ((scheme, netloc),) = roots
    names = {p: name for p, (_, _, name) in parsed.items()}
    if len(set(names.values())) != len(names):
        return None
    return io.fs_by_scheme(scheme, netloc), names


def _read(io: Any, paths: Sequence[str]) -> tuple[Any, Any]:
    """(the delete rows of ``paths`` as one Arrow table, each row's index into ``paths`` as an int64 numpy array)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    schema = pa.schema([("file_path", pa.string()), ("pos", pa.int64())])
    arrow = _arrow_paths(io, paths) if paths else None
    if arrow is not None:
        fs, names = arrow
        dataset = ds.FileSystemDataset.from_paths(
            [names[p] for p in paths], schema=schema, format=ds.ParquetFileFormat(), filesystem=fs
        )
        table = dataset.to_table(columns=[*_COLUMNS, _FILENAME])
        files = table.column(_FILENAME).combine_chunks().dictionary_encode()
        number = {name: i for i, name in enumerate(names[p] for p in paths)}
        lookup = np.array([number[n] for n in files.dictionary.to_pylist()], np.int64)
        return table.select(_COLUMNS), lookup[np.asarray(files.indices, np.int64)]

    def read(path: str) -> Any:
        with io.new_input(path).open() as stream:
            return pq.read_table(stream, columns=_COLUMNS).cast(schema)

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(paths)))) as pool:
        tables = list(pool.map(read, paths))
    owner = np.repeat(np.arange(len(tables), dtype=np.int64), [t.num_rows for t in tables])
    return pa.concat_tables(tables) if tables else schema.empty_table(), owner


def collected_positions(io: Any, dirty: Sequence[Scoped]) -> list[Any]:
    """Each dirty file's deleted row positions: one int64 numpy array per file of ``dirty``, in file order.

    Delete files read before in this process (by this path or an upsert's) are not read again: they are
    immutable, and their positions are kept per delete file in ``iceberg.commit.key_index``'s bounded cache.
    """
    import numpy as np

    from pyspark_fenced_sink.iceberg.commit.key_index import (
        keep_delete_positions,
        known_delete_positions,
        positions_by_data_file,
    )

    paths = sorted({p for f in dirty for p in f.delete_files})
    known = known_delete_positions(paths)
    missing = [p for p in paths if p not in known]
    if missing:
        table, owner = _read(io, missing)
        for path, positions in positions_by_data_file(table, owner, missing).items():
            keep_delete_positions(path, positions)
            known[path] = positions
    empty = np.empty(0, np.int64)
    return [
        np.concatenate([known[d].get(f.path, empty) for d in f.delete_files]) if f.delete_files else empty
        for f in dirty
    ]
