"""Position deletes as a bitmap filter over one scan: no join, no broadcast (PROTOCOL.md §14; driver).

Used by ``spark.native_deletes`` for the usual state (see its docstring for when). Dirty data file *i* (one
with deletes) owns the bits from word ``base_i`` of one bitmap of its deleted row positions (its first bit
on a word boundary, so a row's word is ``base_i + row_index / 64``). Each row finds its file in a small slot
table: a direct one where some length gives every key its own slot (``key mod length``: one lookup per row),
else open-addressed (a key within 4 slots of its hash's home; the table doubles until every key fits):

* **by size** where at most :data:`_NAMED_MAX` planned files share their recorded ``file_size_in_bytes``
  with a file with deletes: every other planned size has a slot, and a row looks up ``_metadata.file_size``,
  a number Spark holds per file (no per-row string work: the usual case, and the faster filter); a row whose
  size is in no slot compares ``_metadata.file_path`` with the names of the files sharing a size (only those
  rows compare names);
* **by name** otherwise: the files with deletes, keyed by Spark's ``hash`` of ``_metadata.file_path``
  (the driver's copy of that string hash is checked against Spark's own once per Spark version); a name in
  no slot is a clean file's.

A row is kept unless its bit is set. A row whose size is in no slot (the stored file's size is not the one its
manifest records) fails the read, and so does a row position at or past its file's recorded row count: never
another file's bit. The bitmap and the slots' numbers
travel in the plan as ``array<bigint>`` literals in Spark's unsafe array format, which a printed plan shows as
one token (a literal made by the public ``lit`` is spelled out value by value in every printed plan, which cost
more than the anti-join it replaces); they are built through Spark's JVM classes on a classic session, and
:func:`bitmap_condition` answers None wherever it cannot build them exactly (the caller anti-joins).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.spark.jvm_calls import free_separator, functions, long_array

__all__ = ["ScannedFile", "bitmap_condition", "spark_hash"]

logger = logging.getLogger(__name__)

#: Slots a key may sit past the slot its hash names (open addressing; the table doubles until they do).
_PROBES = 4
#: Keys a direct table (one slot per key, no probing) is searched for, and its length's bound per key.
_DIRECT_MAX_KEYS = 128
_DIRECT_SPAN = 9
#: Planned files sharing a size with a file with deletes that a read by size tells apart by name (more: by name).
_NAMED_MAX = 8
#: A slot table's size bound, per key (past it the anti-join is used).
_MAX_SLOTS_PER_FILE = 64
#: Names whose Spark hash :func:`spark_hash` is checked against Spark's own once per process and Spark version.
_HASH_PROBES = ("", "a", "ab", "abc", "abcd", "file:/w/\u00e9.parquet", "s3://b/\u4e2d-\U0001f600.parquet")
_HASH_AGREES: dict[str, bool] = {}
_MASK32 = 0xFFFFFFFF
#: A slot's first word for a file without deletes (its rows are kept), and for an empty slot.
_CLEAN = -1
_SIZE_DIFFERS = "fencedlake: a data file's size is not the one its manifest records (file_size_in_bytes)"
_MISCOUNTED = "fencedlake: a data file holds more rows than its manifest records"


def _bitmap_words(record_counts: Sequence[int], positions: Sequence[Any]) -> tuple[list[int], Any] | None:
    """(each dirty file's first word, the bitmap as int64 words): bit ``pos`` from word ``base`` is set per deleted row.

    Word 0 is left clear (a clean file's rows all read it); each file's bits start on a word boundary. None when
    a delete file names a position outside its data file's recorded rows (the bitmap would give it another file's
    bit; the anti-join reads such a table exactly).
    """
    import numpy as np

    bases: list[int] = []
    bits: list[Any] = []
    word = 1
    for count, pos in zip(record_counts, positions, strict=True):
        if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= count):
            return None
        bases.append(word)
        bits.append(pos + word * 64)
        word += (count + 63) // 64
    every = np.concatenate(bits) if bits else np.empty(0, np.int64)
    words = np.zeros(word, np.uint64)
    np.bitwise_or.at(words, every >> 6, np.left_shift(np.uint64(1), (every & 63).astype(np.uint64)))
    return bases, words.view(np.int64)


def _direct(keys: Sequence[int]) -> list[int | None] | None:
    """A table of ``keys``' indexes in which i sits at slot ``keys[i] mod len(table)``: one lookup, no probing.

    The shortest such length from ``len(keys)`` up to :data:`_DIRECT_SPAN` times it, or None (also past
    :data:`_DIRECT_MAX_KEYS` keys, where one is unlikely to exist and the search would cost more than it saves).
    ``keys`` are distinct.
    """
    import numpy as np

    if len(keys) > _DIRECT_MAX_KEYS:
        return None
    if not keys:
        return [None]
    values = np.asarray(keys, np.int64)
    lengths = np.arange(len(keys), _DIRECT_SPAN * len(keys) + 1)
    homes = np.sort(values % lengths[:, None], axis=1)  # every length at once: one row of homes per length
    fits = np.flatnonzero((np.diff(homes, axis=1) != 0).all(axis=1))
    if not fits.size:
        return None
    size = int(lengths[fits[0]])
    table: list[int | None] = [None] * size
    for index, home in enumerate((values % size).tolist()):
        table[home] = index
    return table


def _open_addressed(keys: Sequence[int]) -> list[int | None] | None:
    """An open-addressed table of ``keys``' indexes: i sits within :data:`_PROBES` slots after ``keys[i] mod M``.

    ``M`` (the table's length less ``_PROBES - 1`` spill slots) starts at twice the entries and doubles until
    every entry fits; None if it would pass :data:`_MAX_SLOTS_PER_FILE` per entry.
    """
    size = max(2, 2 * len(keys))
    while size <= _MAX_SLOTS_PER_FILE * max(1, len(keys)):
        table: list[int | None] = [None] * (size + _PROBES - 1)
        for index, key in enumerate(keys):
            home = key % size
            free = next((home + k for k in range(_PROBES) if table[home + k] is None), None)
            if free is None:
                break
            table[free] = index
        else:
            return table
        size *= 2
    return None


def _mix(h1: int, k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK32
    k1 = ((k1 << 15) | (k1 >> 17)) & _MASK32
    h1 ^= (k1 * 0x1B873593) & _MASK32
    h1 = ((h1 << 13) | (h1 >> 19)) & _MASK32
    return (h1 * 5 + 0xE6546B64) & _MASK32


def spark_hash(name: str) -> int:
    """Spark's ``hash(name)`` (Murmur3 x86_32, seed 42, as Spark applies it to a string's UTF-8 bytes).

    Spark mixes the bytes four at a time (little-endian words), then each trailing byte alone as a
    signed value, where the reference Murmur3 packs the tail into one word: this follows Spark.
    """
    data = name.encode("utf-8")
    aligned = len(data) - len(data) % 4
    h1 = 42
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix(h1, word)
    for byte in data[aligned:]:
        h1 = _mix(h1, (byte - 256 if byte > 127 else byte) & _MASK32)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def _hash_agrees(spark: Any) -> bool:
    """Whether :func:`spark_hash` computes what this Spark's ``hash`` does (asked once per Spark version; no job)."""
    from pyspark.sql import functions as F  # noqa: N812

    version = str(spark.version)
    if version not in _HASH_AGREES:
        row = spark.sql("SELECT 1").select(*[F.hash(F.lit(n)) for n in _HASH_PROBES]).first()
        _HASH_AGREES[version] = [int(v) for v in row] == [spark_hash(n) for n in _HASH_PROBES]
        if not _HASH_AGREES[version]:
            logger.warning("fencedlake: Spark %s hashes strings otherwise: position deletes are anti-joined", version)
    return _HASH_AGREES[version]


@dataclass(frozen=True)
class ScannedFile:
    """A planned data file as the scan's rows see it.

    Attributes:
        name: Spark's name of it (``_metadata.file_path``; checked against Spark's listing before use).
        size: Its recorded ``file_size_in_bytes`` (Spark's ``_metadata.file_size`` is the stored file's).
        record_count: Its recorded rows (read only for a file with deletes).
        positions: Its deleted row positions (an int64 numpy array), or None: a file without deletes.
    """

    name: str
    size: int
    record_count: int
    positions: Any = None


@dataclass(frozen=True)
class _Slots:
    """A slot table's columns: each slot's key (a size or a name), first bitmap word (or :data:`_CLEAN`) and rows.

    ``by_size``: keyed by ``_metadata.file_size`` (every planned file's size), else by ``_metadata.file_path``
    (the files with deletes only). ``modulus``: the length a key's hash is taken modulo; ``probes``: the slots a
    key may sit in from its home (1: a direct table). ``names``: by size, the files sharing a size with a file
    with deletes (their size has no slot), each with an entry after the slots (entry
    ``len(keys) - len(names) + j`` is ``names[j]``'s).
    """

    by_size: bool
    keys: list[Any]
    bases: list[int]
    counts: list[int]
    modulus: int
    probes: int
    names: tuple[str, ...] = ()


def _table(
    by_size: bool,
    keys: Sequence[Any],
    homes: Sequence[int],
    bases: Sequence[int],
    counts: Sequence[int],
    named: Sequence[tuple[ScannedFile, int]] = (),
) -> _Slots | None:
    """The :class:`_Slots` of ``keys`` (placed by ``homes``), then an entry per ``named`` (file, first word)."""
    probes, slots = 1, _direct(homes)
    if slots is None:
        probes, slots = _PROBES, _open_addressed(homes)
    if slots is None:
        return None
    empty = -1 if by_size else ""
    return _Slots(
        by_size,
        [empty if i is None else keys[i] for i in slots] + [f.size for f, _ in named],
        [_CLEAN if i is None else bases[i] for i in slots] + [base for _, base in named],
        [0 if i is None else counts[i] for i in slots] + [f.record_count for f, _ in named],
        len(slots) - (probes - 1),
        probes,
        tuple(f.name for f, _ in named),
    )


def _layout(files: Sequence[ScannedFile], bases: dict[int, int]) -> _Slots | None:
    """The slot table for ``files`` (by size unless too many share a size with a file with deletes), or None.

    None where it cannot be built. ``bases``: the first bitmap word of each dirty file (by index into ``files``).
    """
    by_size: dict[int, list[int]] = {}
    for index, f in enumerate(files):
        by_size.setdefault(f.size, []).append(index)
    shared = [same for same in by_size.values() if len(same) > 1 and any(j in bases for j in same)]
    named = [i for same in shared for i in same]
    if len(named) <= _NAMED_MAX and min(by_size) >= 0:
        first = [same[0] for same in by_size.values() if same not in shared]  # another shared size's files: clean
        sizes = [files[i].size for i in first]
        return _table(
            True,
            sizes,
            sizes,
            [bases.get(i, _CLEAN) for i in first],
            [files[i].record_count for i in first],
            [(files[i], bases.get(i, _CLEAN)) for i in named],
        )
    dirty = sorted(bases)
    names = [files[i].name for i in dirty]
    return _table(
        False, names, [spark_hash(n) for n in names], [bases[i] for i in dirty], [files[i].record_count for i in dirty]
    )


def bitmap_condition(spark: Any, files: Sequence[ScannedFile]) -> Any:
    """The filter keeping a scan's rows of ``files`` (every one, exactly those) but the deleted ones, or None.

    A pyspark Column; None where it cannot be built exactly. Needs no scan: built while Spark lists the files.
    """
    import numpy as np
    from pyspark.sql import Column

    dirty = [i for i, f in enumerate(files) if f.positions is not None]
    laid_out = _bitmap_words([files[i].record_count for i in dirty], [files[i].positions for i in dirty])
    table = _layout(files, dict(zip(dirty, laid_out[0], strict=True))) if laid_out is not None else None
    if laid_out is None or table is None:
        return None
    separator = "" if table.by_size else free_separator(table.keys)
    if separator is None or (not table.by_size and not _hash_agrees(spark)):
        return None
    parts = {"bases": table.bases, "counts": table.counts}
    if table.by_size:
        parts["keys"] = table.keys
    small = {label: np.asarray(values, np.int64) for label, values in parts.items()}
    offsets = dict(zip(small, np.cumsum([0] + [len(v) for v in small.values()]).tolist(), strict=False))
    # Two literals: the bitmap apart (the analyzer hashes and compares a literal at each place it is used, so
    # the large one is used once), the small tables together (each literal costs about ten py4j calls).
    words, numbers = long_array(spark, laid_out[1]), long_array(spark, np.concatenate(list(small.values())))
    if words is None or numbers is None:
        return None
    f = functions(spark)
    return Column(_kept(f, _Longs(f, words, numbers, offsets), table, separator))


@dataclass(frozen=True)
class _Longs:
    """The filter's numbers as ``array<bigint>`` literals (JVM Columns).

    ``words``: the bitmap; ``numbers``: the small tables in one array, each part from its ``offsets`` entry.
    """

    f: Any
    words: Any
    numbers: Any
    offsets: dict[str, int]

    def at(self, label: str, index: Any) -> Any:
        """Element ``index`` (a JVM Column) of part ``label`` (``"words"``: of the bitmap)."""
        if label == "words":
            return self.f.get(self.words, index)
        offset = self.offsets[label]
        return self.f.get(self.numbers, index.plus(self.f.lit(offset)) if offset else index)


def _kept(f: Any, longs: _Longs, table: _Slots, separator: str) -> Any:
    """The filter's condition, a JVM Column built with one py4j call per node through Spark's ``functions``.

    One CASE names a row's word of the bitmap: an arm per slot the row's key may sit in (the slot holding the
    row's key is its file's), then by size an arm per named file (its numbers inline); a row no arm takes fails
    the read by size and is a clean file's by name; a clean file's row reads word 0, which is clear. The row is
    kept unless its bit of that word is set. No lookup is spelled out twice (the analyzer's time grows with the
    condition's size) and the bitmap is used once (the analyzer hashes a literal at each place it is used).
    pyspark's Column API would make about ten calls per node to record the caller for error messages: most of
    the time it took to build this condition. ``f``: :func:`~pyspark_fenced_sink.spark.jvm_calls.functions`.
    """
    row = f.col("_metadata.row_index")
    miscounted = f.raise_error(f.lit(_MISCOUNTED))

    def word(base: Any, count: Any) -> Any:
        """The row's word if its file's bits start at word ``base`` and it holds ``count`` rows (Columns or ints)."""
        if isinstance(base, int):
            return f.lit(0) if base == _CLEAN else f.when(row.lt(f.lit(count)), f.shiftright(row, 6).plus(f.lit(base)))
        return f.when(base.lt(f.lit(0)), f.lit(0)).when(row.lt(count), base.plus(f.shiftright(row, 6)))

    if table.by_size:
        key = f.col("_metadata.file_size")
        home = f.pmod(key, f.lit(table.modulus)).cast("int")

        def key_at(slot: Any) -> Any:
            return longs.at("keys", slot)

    else:
        key = f.col("_metadata.file_path")
        home = f.pmod(f.expr("hash(_metadata.file_path)"), f.lit(table.modulus))
        names = f.split(f.lit(separator.join(table.keys)), separator)

        def key_at(slot: Any) -> Any:
            return f.get(names, slot)

    found = f  # the CASE's first arm is f.when, each further one the CASE's own when
    for k in range(table.probes):
        slot = home.plus(f.lit(k)) if k else home
        found = found.when(
            key_at(slot).equalTo(key), word(longs.at("bases", slot), longs.at("counts", slot)).otherwise(miscounted)
        )
    path, first = f.col("_metadata.file_path"), len(table.keys) - len(table.names)
    for j, name in enumerate(table.names, start=first):  # a size in no slot: the file so named
        named = word(table.bases[j], table.counts[j])
        found = found.when(
            path.equalTo(f.lit(name)), named if table.bases[j] == _CLEAN else named.otherwise(miscounted)
        )
    at = found.otherwise(f.raise_error(f.lit(_SIZE_DIFFERS)) if table.by_size else f.lit(0))
    return f.bit_get(longs.at("words", at.cast("int")), row.bitwiseAND(f.lit(63)).cast("int")).equalTo(f.lit(0))
