"""The deleted row positions of each dirty data file, read on the driver with pyarrow (PROTOCOL.md §14; driver).

Used by ``spark.native_deletes`` for the bitmap filter and the collected anti-join keys. A position counts
for a data file only when its delete file is one the planner scoped to that file (a ``file_path`` row
naming another data file is ignored, as pyiceberg ignores it).

Reading: where the table's FileIO is pyarrow's (``PyArrowFileIO``, the sink's ``LeanFileIO`` for every
scheme it does not hand on) and every delete file lives on one filesystem, all of them are read as one
pyarrow dataset (Arrow's own threads, one call; ``__filename`` names each row's delete file); otherwise
each file through the FileIO, eight at a time. Either way the rows are then assigned to their data files
in one vectorized pass (each row's (data file, delete file) pair looked up among the planner's), not one
filter per pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def _scope(dirty: Sequence[Scoped], paths: Mapping[str, int], data_codes: Mapping[str, int]) -> tuple[Any, Any]:
    """The planner's scope as arrays: (allowed, owner).

    ``allowed``: the sorted pairs (data code * len(paths) + delete file index) of each data file and a delete
    file the planner applies to it (pairs, not a matrix: a table may name many files in many delete files);
    ``owner[data code]``: the dirty file number of that name, -1 for a name no dirty file has.
    """
    import numpy as np

    owner = np.full(len(data_codes), -1, np.int64)
    pairs: list[int] = []
    for number, data_file in enumerate(dirty):
        code = data_codes.get(data_file.path)
        if code is not None:
            owner[code] = number
            pairs.extend(code * len(paths) + paths[p] for p in data_file.delete_files)
    return np.unique(np.array(pairs, np.int64)), owner


def collected_positions(io: Any, dirty: Sequence[Scoped]) -> list[Any]:
    """Each dirty file's deleted row positions: one int64 numpy array per file of ``dirty``, in file order."""
    import numpy as np

    paths = sorted({p for f in dirty for p in f.delete_files})
    table, delete_index = _read(io, paths)
    names = table.column("file_path").combine_chunks().dictionary_encode()
    codes = np.asarray(names.indices.fill_null(-1), np.int64)
    data_codes = {name: i for i, name in enumerate(names.dictionary.to_pylist())}
    allowed, owner = _scope(dirty, {p: i for i, p in enumerate(paths)}, data_codes)
    keep = (codes >= 0) & np.isin(codes * len(paths) + delete_index, allowed)
    numbers = owner[codes[keep]]
    positions = np.asarray(table.column("pos").combine_chunks().fill_null(-1), np.int64)[keep]
    order = np.argsort(numbers, kind="stable")
    numbers, positions = numbers[order], positions[order]
    bounds = np.searchsorted(numbers, np.arange(len(dirty) + 1))
    return [positions[bounds[n] : bounds[n + 1]] for n in range(len(dirty))]
