"""What an upsert's apply reads, and the caches that make it cheap (PROTOCOL.md §5.5, steps 1-4; driver).

* :func:`key_table` — the key and order columns of a data file or a delete-key
  file, matched by Iceberg field id (a column renamed by another engine still
  matches; files without field ids through the table's name mapping), cast to the
  table's current types, with each row's position;
* :func:`delete_positions` — the positions a position delete file deletes, per
  data file path (:func:`positions_by_data_file`; ``read_table``'s native path
  decodes many delete files at once the same way, and keeps and reuses them too:
  :func:`known_delete_positions`, :func:`keep_delete_positions`);
* :func:`manifest_entries` — a manifest's live entries.

Data files, delete files and manifests are immutable once written, so each is
read once per process and kept in a least-recently-used cache bounded by bytes
(:data:`CACHE_BYTES`): a conflict, a retry and the next commit reuse what was read.
:class:`Reads` counts what one commit had to read (``fencedlake.upsert`` metrics).

A read that cannot give a definite answer — a column whose type can no longer be
cast to the table's, a file without field ids and no name mapping, a file missing
from storage — raises :class:`Unreadable`; the caller decides the entry REFUSED.
Transient storage errors pass through (the commit's outcome is then unknown).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, ManifestEntry, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.types import IcebergType, UUIDType

__all__ = [
    "CACHE_BYTES",
    "POS",
    "Reads",
    "Unreadable",
    "column_name",
    "delete_positions",
    "keep_delete_positions",
    "key_table",
    "known_delete_positions",
    "manifest_entries",
    "physical",
    "positions_by_data_file",
]

#: Bytes each cache (key columns, delete positions, manifests) may hold in one process.
CACHE_BYTES = 256 * 1024 * 1024
#: The column holding each row's position in its file.
POS = "_pos"
_FIELD_ID = b"PARQUET:field_id"

T = TypeVar("T")


class Unreadable(Exception):
    """A file cannot give a definite answer for an upsert (the entry is decided REFUSED)."""


@dataclass
class Reads:
    """What one commit read (cache misses: data, delete and key files; manifests apart) and reused (hits)."""

    files: int = 0
    bytes: int = 0
    cached: int = 0
    manifests: int = 0


class _ByteLru:
    """A least-recently-used cache bounded by the bytes of its values."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any, load: Callable[[], tuple[T, int]], reads: Reads, manifest: bool = False) -> T:
        found = self.peek(key)
        if found is not None:
            reads.cached += 0 if manifest else 1
            return found  # type: ignore[no-any-return]
        value, size = load()
        if manifest:
            reads.manifests += 1
        else:
            reads.files += 1
            reads.bytes += size
        self.put(key, value, size)
        return value

    def peek(self, key: Any) -> Any:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        """Keep ``value`` (``size`` bytes) for ``key`` unless a value is kept for it; evict the least recently used."""
        with self._lock:
            if key not in self._items:
                self._items[key] = (value, size)
                self._bytes += size
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


_KEYS = _ByteLru(CACHE_BYTES)
_DELETES = _ByteLru(CACHE_BYTES)
_MANIFESTS = _ByteLru(CACHE_BYTES // 4)


def clear_caches() -> None:
    """Forget everything read (tests)."""
    for cache in (_KEYS, _DELETES, _MANIFESTS):
        cache.clear()


def column_name(field_id: int) -> str:
    """The name of field ``field_id``'s column in a :func:`key_table`."""
    return f"f{field_id}"


def arrow_type(field_type: IcebergType) -> pa.DataType:
    """The Arrow type key and order columns are compared in (a UUID as its 16 bytes)."""
    if isinstance(field_type, UUIDType):
        return pa.binary(16)
    return schema_to_pyarrow(field_type)


def physical(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Python values in Iceberg's physical form (dates, times, timestamps as integers), comparable with bounds."""
    if pa.types.is_date32(column.type):
        column = column.cast(pa.int32())
    elif pa.types.is_timestamp(column.type) or pa.types.is_time64(column.type):
        column = column.cast(pa.int64())
    return column.to_pylist()  # type: ignore[no-any-return]


def _ids_of(pf: pq.ParquetFile, mapping: NameMapping | None, path: str) -> dict[int, str]:
    """Top-level field id -> column name of a Parquet file (through the name mapping if it has no ids)."""
    out = {}
    for field in pf.schema_arrow:
        fid = (field.metadata or {}).get(_FIELD_ID)
        if fid is not None:
            out[int(fid)] = field.name
    if out or not pf.schema_arrow.names:
        return out
    if mapping is None:
        raise Unreadable(f"data file {path} has no Iceberg field ids and the table has no name mapping")
    for mapped in mapping.root:
        for name in mapped.names:
            if name in pf.schema_arrow.names and mapped.field_id is not None:
                out[mapped.field_id] = name
    return out


def _open(io: FileIO, path: str) -> Any:
    try:
        return io.new_input(path).open()
    except FileNotFoundError as e:
        raise Unreadable(f"file {path} is missing from storage (deleted by another tool?)") from e


def _load_keys(
    io: FileIO, path: str, ids: Sequence[int], types: Sequence[pa.DataType], mapping: NameMapping | None
) -> tuple[pa.Table, int]:
    with _open(io, path) as stream:
        pf = pq.ParquetFile(stream)
        by_id = _ids_of(pf, mapping, path)
        present = sorted({by_id[i] for i in ids if i in by_id})
        read = pf.read(columns=present) if present else None
        rows = pf.metadata.num_rows
    columns = []
    for fid, target in zip(ids, types, strict=True):
        if fid not in by_id or read is None:
            columns.append(pa.nulls(rows, target))  # a column added after the file was written: null
            continue
        column = read.column(by_id[fid])
        if isinstance(column.type, pa.ExtensionType):
            column = column.cast(column.type.storage_type)
        try:
            columns.append(column.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise Unreadable(
                f"column {by_id[fid]!r} (field id {fid}) of {path} holds {column.type}, which no longer casts "
                f"to the table's {target}: {e}"
            ) from e
    names = [column_name(i) for i in ids]
    table = pa.table([*columns, pa.array(np.arange(rows, dtype=np.int64))], names=[*names, POS])
    return table, table.nbytes


def key_table(
    io: FileIO, path: str, ids: Sequence[int], schema: Schema, mapping: NameMapping | None, reads: Reads
) -> pa.Table:
    """Columns ``f<id>`` of file ``path`` for ``ids`` (the table's types; null where it lacks one), and ``_pos``.

    Raises:
        Unreadable: see the module docstring.
    """
    try:
        types = [arrow_type(schema.find_field(i).field_type) for i in ids]
    except ValueError as e:
        raise Unreadable(f"a key or order column (field ids {list(ids)}) is no longer in the table: {e}") from e
    key = (path, tuple(ids), tuple(str(t) for t in types))
    return _KEYS.get(key, lambda: _load_keys(io, path, ids, types, mapping), reads)


def positions_by_data_file(table: pa.Table, owner: Any, paths: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """Position delete rows (``file_path``, ``pos``) per delete file of ``paths``: data file path -> sorted positions.

    ``owner``: each row's index in ``paths``. Each data file's positions are distinct. Rows without a
    ``file_path`` name no data file and are dropped; a null ``pos`` reads as -1 (no row has it).
    """
    names = table.column("file_path").combine_chunks().dictionary_encode()
    data_names = names.dictionary.to_pylist()
    codes = np.asarray(names.indices.fill_null(-1), np.int64)
    positions = np.asarray(table.column("pos").combine_chunks().fill_null(-1), np.int64)
    named = codes >= 0
    group = np.asarray(owner, np.int64)[named] * max(1, len(data_names)) + codes[named]
    positions = positions[named]
    order = np.lexsort((positions, group))
    group, positions = group[order], positions[order]
    distinct = np.ones(len(group), bool)
    distinct[1:] = (group[1:] != group[:-1]) | (positions[1:] != positions[:-1])
    group, positions = group[distinct], positions[distinct]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]).tolist() if len(group) else []
    ends = [*starts[1:], len(group)] if starts else []
    out: dict[str, dict[str, np.ndarray]] = {p: {} for p in paths}
    for start, end in zip(starts, ends, strict=True):
        number, code = divmod(int(group[start]), max(1, len(data_names)))
        out[paths[number]][data_names[code]] = positions[start:end]
    return out


def _load_positions(io: FileIO, path: str) -> tuple[dict[str, np.ndarray], int]:
    with _open(io, path) as stream:
        table = pq.ParquetFile(stream).read(columns=["file_path", "pos"])
    return positions_by_data_file(table, np.zeros(table.num_rows, np.int64), [path])[path], table.nbytes


def delete_positions(io: FileIO, delete_file: DataFile, reads: Reads) -> dict[str, np.ndarray]:
    """Data file path -> the sorted positions a position delete file deletes in it.

    Raises:
        Unreadable: the delete file is missing.
    """
    path = delete_file.file_path
    return _DELETES.get(path, lambda: _load_positions(io, path), reads)


def known_delete_positions(paths: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """What :func:`delete_positions` keeps for those of ``paths`` read before in this process (reads nothing)."""
    known = {path: _DELETES.peek(path) for path in paths}
    return {path: positions for path, positions in known.items() if positions is not None}


def keep_delete_positions(path: str, positions: dict[str, np.ndarray]) -> None:
    """Keep a position delete file's positions read elsewhere (data file path -> sorted distinct positions)."""
    _DELETES.put(path, positions, sum(p.nbytes for p in positions.values()) + sum(len(k) for k in positions))


def manifest_entries(io: FileIO, manifest: ManifestFile, reads: Reads) -> list[ManifestEntry]:
    """The live entries of ``manifest`` (cached by its path)."""

    def load() -> tuple[list[ManifestEntry], int]:
        entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
        return entries, max(1, manifest.manifest_length)

    return _MANIFESTS.get(manifest.manifest_path, load, reads, manifest=True)


def live_mask(rows: int, dead: Sequence[np.ndarray]) -> pa.Array | None:
    """A boolean mask of the rows not in ``dead`` (None if nothing is dead)."""
    if not dead or not any(len(d) for d in dead):
        return None
    mask = np.ones(rows, dtype=bool)
    for positions in dead:
        mask[positions[positions < rows]] = False
    return pa.array(mask)


def drop_null_keys(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose key columns are all set (a null key matches nothing)."""
    valid = None
    for name in names:
        ok = pc.is_valid(table.column(name))
        valid = ok if valid is None else pc.and_(valid, ok)
    return table if valid is None else table.filter(valid)
