"""Position deletes as a bitmap filter over one scan: no join, no broadcast (PROTOCOL.md §14; driver).

Used by ``spark.native_deletes`` for the usual state (see its docstring for when). Dirty data file *i* (one
with deletes) owns bits ``base_i .. base_i + rows_i`` of one bitmap of its deleted row positions. Each row
finds its file's slot in a small open-addressed table keyed by Spark's ``hash`` of its
``_metadata.file_path`` (the slots hold each dirty file's name, first bit and row count; a name that is in no
slot is a clean file's, and its rows are kept) and is kept unless its bit is set. The bitmap and the slots'
numbers travel in the plan as ``array<bigint>`` literals in Spark's unsafe array format, which a printed plan
shows as one token (a literal made by the public ``lit`` is spelled out value by value in every printed plan,
which cost more than the anti-join it replaces); they are built through Spark's JVM classes on a classic
session, and :func:`bitmap_filter` answers None wherever it cannot build them exactly (the caller anti-joins).
A row position at or past its file's recorded row count fails the read: never another file's bit.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["bitmap_filter", "spark_hash"]

logger = logging.getLogger(__name__)

#: Slots a dirty file's name may sit past the slot its hash names (open addressing; the table doubles until they do).
_PROBES = 4
#: The slot table's size bound, per dirty file (past it the anti-join is used).
_MAX_SLOTS_PER_FILE = 64
#: Names whose Spark hash :func:`spark_hash` is checked against Spark's own once per process and Spark version.
_HASH_PROBES = ("", "a", "ab", "abc", "abcd", "file:/w/\u00e9.parquet", "s3://b/\u4e2d-\U0001f600.parquet")
_HASH_AGREES: dict[str, bool] = {}
_JVM_CLASSES: dict[int, tuple[Any, ...]] = {}
_MASK32 = 0xFFFFFFFF


def _bitmap_words(record_counts: Sequence[int], positions: Sequence[Any]) -> tuple[list[int], Any] | None:
    """(each dirty file's first bit, the bitmap as int64 words): bit ``base + pos`` is set for each deleted row.

    None when a delete file names a position outside its data file's recorded rows (the bitmap would give
    it another file's bit; the anti-join reads such a table exactly).
    """
    import numpy as np

    bases: list[int] = []
    bits: list[Any] = []
    base = 0
    for count, pos in zip(record_counts, positions, strict=True):
        if len(pos) and (int(pos.min()) < 0 or int(pos.max()) >= count):
            return None
        bases.append(base)
        bits.append(pos + base)
        base += count
    every = np.concatenate(bits) if bits else np.empty(0, np.int64)
    words = np.zeros((base + 63) // 64, np.uint64)
    np.bitwise_or.at(words, every >> 6, np.left_shift(np.uint64(1), (every & 63).astype(np.uint64)))
    return bases, words.view(np.int64)


def _slots(hashes: Sequence[int]) -> list[int | None] | None:
    """An open-addressed table of ``hashes``' indexes: i sits within :data:`_PROBES` slots after ``hashes[i] mod M``.

    ``M`` (the table's length less ``_PROBES - 1`` spill slots) starts at twice the entries and doubles until
    every entry fits; None if it would pass :data:`_MAX_SLOTS_PER_FILE` per entry (more than ``_PROBES``
    names sharing one hash never fit).
    """
    size = max(2, 2 * len(hashes))
    while size <= _MAX_SLOTS_PER_FILE * max(1, len(hashes)):
        table: list[int | None] = [None] * (size + _PROBES - 1)
        for index, h in enumerate(hashes):
            home = h % size
            free = next((home + k for k in range(_PROBES) if table[home + k] is None), None)
            if free is None:
                break
            table[free] = index
        else:
            return table
        size *= 2
    return None


def _jvm_classes(spark: Any) -> tuple[Any, ...]:
    """The JVM classes :func:`_long_array` uses, looked up once per gateway (each package step is a py4j call)."""
    jvm = spark._jvm
    key = id(jvm)
    if key not in _JVM_CLASSES:
        types = jvm.org.apache.spark.sql.types.DataTypes
        _JVM_CLASSES.clear()
        _JVM_CLASSES[key] = (
            jvm.java.nio.ByteBuffer,
            jvm.java.nio.LongBuffer,
            jvm.org.apache.spark.sql.catalyst.expressions.UnsafeArrayData,
            jvm.org.apache.spark.sql.catalyst.expressions.Literal,
            types.createArrayType(types.LongType, False),
            jvm.org.apache.spark.sql.classic.ExpressionColumnNode,
            jvm.org.apache.spark.sql.Column,
        )
    return _JVM_CLASSES[key]


def _long_array(spark: Any, values: Any) -> Any:
    """An ``array<bigint>`` literal Column of ``values`` (int64) held as Spark's UnsafeArrayData, or None.

    A literal made through the public API (``lit`` of a list) holds a generic array that every printed
    plan spells out value by value; this one prints as one token. Built through Spark's JVM classes (the
    classic session's py4j gateway); None where a Spark version lacks one of them.
    """
    from pyspark.sql import Column

    try:
        byte_buffer, long_buffer, unsafe_array, literal, array_type, column_node, column = _jvm_classes(spark)
        longs = long_buffer.allocate(len(values))
        longs.put(byte_buffer.wrap(bytearray(values.astype(">i8").tobytes())).asLongBuffer())
        value = literal(unsafe_array.fromPrimitiveArray(longs.array()), array_type)
        return Column(column(column_node.apply(value)))
    except Exception as e:  # noqa: BLE001 - py4j raises several kinds; any of them means "not on this Spark"
        logger.info("fencedlake: no unsafe array literal on this Spark (%s): position deletes are anti-joined", e)
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


def _separator(names: Sequence[str]) -> str | None:
    """A character none of ``names`` holds (joins them into one literal, split back by Spark), or None."""
    return next((c for c in ("\x00", "\x1f", "\n", "|") if not any(c in n for n in names)), None)


def bitmap_filter(
    spark: Any, scan: Any, names: Sequence[str], record_counts: Sequence[int], positions: Sequence[Any]
) -> Any:
    """``scan``'s rows (every planned file) without the deleted ones; None if the bitmap cannot be built here.

    ``names``: Spark's name (``_metadata.file_path``) of each data file with deletes; ``record_counts``: its
    recorded rows; ``positions``: its deleted row positions (an int64 numpy array each).
    """
    import numpy as np
    from pyspark.sql import functions as F  # noqa: N812

    separator = _separator(names)
    table = _slots([spark_hash(n) for n in names])
    laid_out = _bitmap_words(record_counts, positions)
    if separator is None or table is None or laid_out is None or not _hash_agrees(spark):
        return None
    bases, words = laid_out
    arrays = [
        _long_array(spark, values)
        for values in (
            words,
            np.array([-1 if i is None else bases[i] for i in table], np.int64),
            np.array([-1 if i is None else record_counts[i] for i in table], np.int64),
        )
    ]
    if any(a is None for a in arrays):
        return None
    bitmap, slot_bases, slot_rows = arrays
    size = len(table) - (_PROBES - 1)
    slot_names = F.split(F.lit(separator.join("" if i is None else names[i] for i in table)), F.lit(separator))
    path, row = F.col("_metadata.file_path"), F.col("_metadata.row_index")
    home = F.pmod(F.hash(path), F.lit(size))
    found = F.when(F.get(slot_names, home) == path, home)  # the slot holding this row's file; null: a clean file
    for k in range(1, _PROBES):
        found = found.when(F.get(slot_names, home + k) == path, home + k)
    bit = F.get(slot_bases, found) + row
    word = F.get(bitmap, F.call_function("shiftright", bit, F.lit(6)).cast("int"))
    deleted = F.call_function("shiftright", word, bit.bitwiseAND(F.lit(63)).cast("int")).bitwiseAND(F.lit(1))
    kept = (
        F.when(found.isNull(), F.lit(0))  # a clean file's row
        .when(row < F.get(slot_rows, found), deleted)
        .otherwise(F.raise_error(F.lit("fencedlake: a data file holds more rows than its manifest records")))
    )
    return scan.where(kept == 0)
