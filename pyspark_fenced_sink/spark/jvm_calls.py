"""Spark's JVM through py4j on a classic session, in few round trips (driver).

Each py4j call is a round trip to the JVM (0.1 ms on an idle machine, 0.3-0.7 ms under load), and pyspark
makes several where one would do: one per path to build a ``Seq`` of paths, one per listed file, about ten
per Column node to record the caller for error messages. These helpers reach the same JVM objects in one or a
few calls: the planned paths joined into one string (:func:`parquet_scan`), Spark's listing joined
(:func:`joined_input_files`), an ``array<bigint>`` literal from raw bytes (:func:`long_array`), and Spark's
``functions`` called directly (:func:`functions`). Each raises or answers None where a Spark (or a Spark
Connect session, which has no JVM here) lacks what it uses; the callers then take pyspark's own way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["free_separator", "functions", "joined_input_files", "long_array", "parquet_scan"]

logger = logging.getLogger(__name__)

_JVM_CLASSES: dict[int, _JvmClasses] = {}


class _JvmClasses(NamedTuple):
    """The JVM classes this module's helpers use."""

    byte_buffer: Any
    long_buffer: Any
    unsafe_array: Any
    literal: Any
    long_array_type: Any
    column_node: Any
    column: Any
    array_seq: Any  # Scala 2.13's, as every Spark 4 is built
    pattern: Any
    functions: _Functions


def _jvm_classes(spark: Any) -> _JvmClasses:
    """:class:`_JvmClasses` of ``spark``'s gateway, looked up once per gateway (each package step is a py4j call)."""
    jvm = spark._jvm
    classes = _JVM_CLASSES.get(id(jvm))
    if classes is None:  # two threads may both look them up: each returns its own, equal, copy
        types = jvm.org.apache.spark.sql.types.DataTypes
        classes = _JvmClasses(
            jvm.java.nio.ByteBuffer,
            jvm.java.nio.LongBuffer,
            jvm.org.apache.spark.sql.catalyst.expressions.UnsafeArrayData,
            jvm.org.apache.spark.sql.catalyst.expressions.Literal,
            types.createArrayType(types.LongType, False),
            jvm.org.apache.spark.sql.classic.ExpressionColumnNode,
            jvm.org.apache.spark.sql.Column,
            jvm.scala.collection.immutable.ArraySeq,
            jvm.java.util.regex.Pattern,
            _Functions(jvm.org.apache.spark.sql.functions),
        )
        _JVM_CLASSES.clear()
        _JVM_CLASSES[id(jvm)] = classes
    return classes


class _Functions:
    """Spark's JVM ``org.apache.spark.sql.functions``, each member looked up once (py4j asks the JVM per lookup)."""

    def __init__(self, functions: Any) -> None:
        self._functions = functions
        self._members: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        member = self._members.get(name)
        if member is None:
            member = self._members[name] = getattr(self._functions, name)
        return member


def functions(spark: Any) -> _Functions:
    """The :class:`_Functions` of ``spark``'s gateway (kept while the gateway is)."""
    return _jvm_classes(spark).functions


def long_array(spark: Any, values: Any) -> Any:
    """An ``array<bigint>`` literal of ``values`` (int64) held as Spark's UnsafeArrayData: a JVM Column, or None.

    A literal made through the public API (``lit`` of a list) holds a generic array that every printed
    plan spells out value by value; this one prints as one token. Built through Spark's JVM classes (the
    classic session's py4j gateway); None where a Spark version lacks one of them.
    """
    try:
        jvm = _jvm_classes(spark)
        longs = jvm.long_buffer.allocate(len(values))
        longs.put(jvm.byte_buffer.wrap(bytearray(values.astype(">i8").tobytes())).asLongBuffer())
        value = jvm.literal(jvm.unsafe_array.fromPrimitiveArray(longs.array()), jvm.long_array_type)
        return jvm.column(jvm.column_node.apply(value))
    except Exception as e:  # noqa: BLE001 - py4j raises several kinds; any of them means "not on this Spark"
        logger.info("fencedlake: no unsafe array literal on this Spark (%s): position deletes are anti-joined", e)
        return None


def joined_input_files(df: Any, separator: str) -> str:
    """``df.inputFiles()`` joined by ``separator`` in the JVM: one py4j round trip, where pyspark makes one per file.

    Classic sessions only; raises what py4j raises where a Spark lacks a class it uses.
    """
    array_seq = _jvm_classes(df.sparkSession).array_seq
    return str(array_seq.unsafeWrapArray(df._jdf.inputFiles()).mkString(separator))


def parquet_scan(reader: Any, paths: Sequence[str]) -> Any:
    """``reader.parquet(*paths)`` with the paths sent in one py4j round trip (pyspark sends one per path).

    The JVM splits them apart at a character none holds. Where that cannot be done (a Spark Connect reader, no
    such character, a Spark lacking a class it uses), ``reader.parquet(*paths)`` itself.
    """
    separator = free_separator(paths)
    jreader = getattr(reader, "_jreader", None)
    if jreader is not None and separator is not None and paths:
        try:
            split = _jvm_classes(reader._spark).pattern.compile(separator).split(separator.join(paths))
            if len(split) == len(paths):
                return reader._df(jreader.parquet(split))
        except Exception as e:  # noqa: BLE001 - py4j raises several kinds; any of them means "not on this Spark"
            logger.debug("fencedlake: the paths one by one (%s)", e)
    return reader.parquet(*paths)


def free_separator(names: Sequence[str]) -> str | None:
    """A character none of ``names`` holds (to join them into one string and split it back), or None.

    None of them is special in a regular expression (Spark's ``split`` takes one).
    """
    return next((c for c in ("\x00", "\x01", "\x1f", "\n") if not any(c in n for n in names)), None)
