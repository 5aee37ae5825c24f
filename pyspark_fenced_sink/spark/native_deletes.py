"""Position deletes on read_table's native path: rows dropped by (data file, row position) (PROTOCOL.md §14; driver).

The planner scopes each position delete file to data files (a pyiceberg ``FileScanTask``'s
``delete_files``); a deleted position counts only for the data files its delete file is planned
for (a ``file_path`` row naming another file is ignored, as pyiceberg ignores it). Spark's Parquet
reader reads the data files with its hidden ``_metadata.file_path`` and ``_metadata.row_index``.
Two ways to drop the deleted rows, chosen by size:

* **A bitmap filter** (the usual case: the data files with deletes, "dirty", hold at most
  :data:`BITMAP_ROWS` rows, their delete files at most :data:`COLLECT_LIMIT`): the deleted positions
  are read on the driver with pyarrow (while Spark lists the files) and one scan of every planned file
  is filtered by a bitmap of them (``spark.delete_bitmap``): no join, no broadcast, no extra job.
* **A broadcast anti-join** (larger states): each row of a dirty file is keyed ``file number *
  2**32 + row index`` (the number from a small broadcast table of Spark's name for each dirty file)
  and left-anti-joined with the deleted keys: read on the driver up to :data:`COLLECT_LIMIT` delete
  rows (Spark pays a task's worth of work per small file, and upserts write many small ones), beyond
  that by Spark's Parquet reader and scoped by a join. Data files without deletes are read apart.

Spark names a file by a URI (``file:/data/x.parquet``) where Iceberg may write ``/data/x.parquet``
or ``file:///data/x.parquet``: :func:`spark_file_name` predicts Spark's name, and the prediction
is checked against the names Spark lists (``DataFrame.inputFiles()``, which spells local files
``file:///``) before any row is filtered; a mismatch leaves the read to the data source (:class:`NameMismatch`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.spark.delete_bitmap import ScannedFile, bitmap_condition
from pyspark_fenced_sink.spark.delete_positions import collected_positions
from pyspark_fenced_sink.spark.jvm_calls import free_separator, joined_input_files, parquet_scan

__all__ = [
    "BITMAP_ROWS",
    "COLLECT_LIMIT",
    "DirtyFile",
    "NameMismatch",
    "apply_deletes",
    "column",
    "delete_obstacle",
    "listed_name",
    "spark_file_name",
]

logger = logging.getLogger(__name__)

#: Delete files holding at most this many rows (positions) are read on the driver (the keys: 8 bytes a row).
COLLECT_LIMIT = 2_000_000
#: Dirty data files holding at most this many rows in all are filtered by a bitmap (8 MiB at most in the plan).
BITMAP_ROWS = 1 << 26
#: A row's key is ``file number << _ROW_BITS | row index``: a data file may hold up to 2**32 rows.
_ROW_BITS = 32
_FILE = "__fencedlake_file"
_ROW = "__fencedlake_row"
_KEY = "__fencedlake_key"
_NUMBER = "__fencedlake_number"
#: Runs a read's side steps (its bitmap filter's making, its names' check) beside the read's own thread: the
#: driver's steps spend most of their time waiting on the JVM. Threads live on (pyspark pins each Python
#: thread to a py4j connection of its own; a thread per read would open one per read).
_BUILDER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fencedlake-deletes")
#: Characters java.net.URI (so Hadoop's Path, so Spark's file names) escapes in a path; '%' first.
_ESCAPED = '% "<>\\^`{|}#?[]'
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(?=/)")


class NameMismatch(Exception):
    """Spark names some data file otherwise than predicted: the native path would not find its rows."""


@dataclass(frozen=True)
class DirtyFile:
    """A planned data file and the position delete files the planner applies to it.

    Attributes:
        path: The data file's path as Iceberg records it (and as its delete files name it).
        record_count: Its rows.
        delete_files: The delete files' paths.
        delete_rows: Rows in those delete files (all of them: a file may also name other data files).
    """

    path: str
    record_count: int
    delete_files: tuple[str, ...]
    delete_rows: int


def delete_obstacle(tasks: Sequence[Any]) -> str:
    """Why the native path cannot apply the delete files of ``tasks`` ("" if it can)."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    for task in tasks:
        for delete in task.delete_files:
            if delete.content != DataFileContent.POSITION_DELETES or delete.file_format != FileFormat.PARQUET:
                return (
                    f"delete file {delete.file_path!r} is {delete.content.name.lower()} in "
                    f"{delete.file_format.name}: the native path applies Parquet position deletes only"
                )
        if task.delete_files and task.file.record_count >= 1 << _ROW_BITS:
            return f"data file {task.file.file_path!r} has {task.file.record_count} rows (2**32 at most with deletes)"
    return ""


def dirty_files(tasks: Sequence[Any]) -> tuple[DirtyFile, ...]:
    """The planned data files that have delete files, in plan order."""
    return tuple(
        DirtyFile(
            t.file.file_path,
            t.file.record_count,
            tuple(sorted(d.file_path for d in t.delete_files)),
            sum(d.record_count for d in t.delete_files),
        )
        for t in tasks
        if t.delete_files
    )


def spark_file_name(path: str) -> str:
    """The name Spark's file scan gives ``path`` in ``_metadata.file_path``: a Hadoop path URI.

    ``/a/b``, ``file:/a/b`` and ``file:///a/b`` are ``file:/a/b``; repeated and trailing slashes go;
    characters java.net.URI escapes are escaped (``%`` too: Hadoop reads none as an escape). A
    prediction, checked against Spark's listing (:func:`listed_name`) before use.
    """
    match = _SCHEME.match(path)
    scheme, rest = (match.group(1), path[match.end() :]) if match else ("file", path)
    authority = ""
    if rest.startswith("//"):
        authority, _, rest = rest[2:].partition("/")
        rest = "/" + rest
    while "//" in rest:
        rest = rest.replace("//", "/")
    if len(rest) > 1:
        rest = rest.rstrip("/")
    for char in _ESCAPED:
        rest = rest.replace(char, f"%{ord(char):02X}")
    if scheme.lower() == "file" or not authority:
        return f"{scheme}:{rest}"
    return f"{scheme}://{authority}{rest}"


def listed_name(name: str) -> str:
    """A ``_metadata.file_path`` name as ``DataFrame.inputFiles()`` spells it (local files: ``file:///``)."""
    if name.startswith("file:/") and not name.startswith("file://"):
        return "file://" + name[len("file:") :]
    return name


def _literal(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _values(spark: Any, rows: Sequence[tuple[str | int, int]], names: tuple[str, str]) -> Any:
    """A local DataFrame of ``rows`` (a SQL ``VALUES`` relation: Spark broadcasts it without running a job)."""
    body = ", ".join(f"({_literal(a)}, {_literal(b)})" for a, b in rows)
    return spark.sql(f"SELECT * FROM VALUES {body} AS t(`{names[0]}`, `{names[1]}`)")


def _collected_keys(positions: Sequence[Any]) -> Any:
    """The deleted keys (file number * 2**32 + position) of ``collected_positions``: one int64 Arrow array."""
    import numpy as np
    import pyarrow as pa

    keys = [p + (number << _ROW_BITS) for number, p in enumerate(positions)]
    return pa.array(np.concatenate(keys) if keys else np.empty(0, np.int64), pa.int64())


def _spark_keys(spark: Any, dirty: Sequence[DirtyFile]) -> Any:
    """The deleted keys of ``dirty``, read by Spark's Parquet reader and scoped by a join: a DataFrame (_KEY)."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual pyspark idiom

    paths = sorted({p for f in dirty for p in f.delete_files})
    deletes = spark.read.schema("file_path string, pos long").parquet(*paths)
    _check_names(deletes, paths)
    ids = {p: i for i, p in enumerate(paths)}
    scope = _values(spark, [(f.path, n) for n, f in enumerate(dirty)], ("file_path", _NUMBER))
    pairs = _values(spark, [(spark_file_name(p), ids[p]) for p in paths], (_FILE, "delete_id"))
    allowed = _values(spark, [(ids[p], n) for n, f in enumerate(dirty) for p in f.delete_files], ("delete_id", _NUMBER))
    rows = deletes.select("file_path", "pos", F.col("_metadata.file_path").alias(_FILE))
    rows = rows.join(F.broadcast(pairs), _FILE).join(F.broadcast(scope), "file_path")
    rows = rows.join(F.broadcast(allowed), ["delete_id", _NUMBER])
    return rows.select((F.col(_NUMBER).cast("long") * F.lit(1 << _ROW_BITS) + F.col("pos")).alias(_KEY))


def _input_files(df: Any, names: set[str]) -> list[str]:
    """``df.inputFiles()``, in one py4j round trip where it can (pyspark's makes one per file, 0.3-0.7 ms each).

    On a classic session the JVM joins the names with a character none of ``names`` (the predicted ones) holds; a
    listed name holding it splits into more names than Spark listed files, which the caller's count refuses.
    """
    jdf = getattr(df, "_jdf", None)
    separator = free_separator(list(names))
    if jdf is None or separator is None:
        return list(df.inputFiles())
    try:
        joined = joined_input_files(df, separator)
    except Exception as e:  # noqa: BLE001 - py4j raises several kinds; any of them means "not on this Spark"
        logger.debug("fencedlake: Spark's names one by one (%s)", e)
        return list(df.inputFiles())
    return joined.split(separator) if joined else []


def _check_names(df: Any, paths: Sequence[str]) -> None:
    """Raise :class:`NameMismatch` unless Spark lists exactly the predicted names of ``paths``."""
    predicted = {listed_name(spark_file_name(p)) for p in paths}
    names = _input_files(df, predicted)
    listed = set(names)
    if len(predicted) != len(set(paths)) or len(names) != len(predicted) or predicted != listed:
        raise NameMismatch(
            f"Spark names the files otherwise than predicted: {len(set(paths))} files, {len(predicted)} names "
            f"predicted, {len(listed)} listed; predicted not listed: {sorted(predicted - listed)[:2]}, listed not "
            f"predicted: {sorted(listed - predicted)[:2]}"
        )


def apply_deletes(
    spark: Any, io: Any, reader: Any, files: Sequence[str], sizes: Sequence[int], dirty: Sequence[DirtyFile]
) -> Any:
    """The rows of ``files`` (read with ``reader``, a DataFrameReader) without those ``dirty``'s deletes remove.

    ``sizes``: each file's recorded ``file_size_in_bytes``.

    Raises:
        NameMismatch: Spark names a planned data file otherwise than :func:`spark_file_name` predicts.
    """
    delete_rows = sum(f.delete_rows for f in dirty)
    collected = delete_rows <= COLLECT_LIMIT
    if collected and sum(f.record_count for f in dirty) <= BITMAP_ROWS:
        # Each JVM step overlaps another: the filter is built while Spark lists the files, and the names
        # Spark lists are checked while it analyzes the filter.
        building = _BUILDER.submit(_bitmap_condition, spark, io, files, sizes, dirty)
        steps: list[Future[Any]] = [building]
        try:
            scan = parquet_scan(reader, files)
            checking = _BUILDER.submit(_check_names, scan, files)
            steps.append(checking)
            positions, condition = building.result()
            kept = None if condition is None else scan.where(condition)
            checking.result()  # NameMismatch
        finally:
            wait(steps)  # no py4j call of this read outlives it
        if kept is not None:
            logger.debug("fencedlake: %d data files with %d delete rows filtered by a bitmap", len(dirty), delete_rows)
            return kept
        return _anti_joined(spark, reader, files, dirty, _collected_keys(positions))
    return _anti_joined(
        spark, reader, files, dirty, _collected_keys(collected_positions(io, dirty)) if collected else None
    )


def _bitmap_condition(
    spark: Any, io: Any, files: Sequence[str], sizes: Sequence[int], dirty: Sequence[DirtyFile]
) -> tuple[list[Any], Any]:
    """(each dirty file's deleted positions, the bitmap filter or None): :func:`apply_deletes`' side step."""
    positions = collected_positions(io, dirty)
    deleted = {f.path: (f.record_count, p) for f, p in zip(dirty, positions, strict=True)}
    scanned = [
        ScannedFile(spark_file_name(path), size, *deleted.get(path, (0, None)))
        for path, size in zip(files, sizes, strict=True)
    ]
    return positions, bitmap_condition(spark, scanned)


def column(name: str) -> Any:
    """The Column named ``name`` (quoted: a dot or backtick in a name is part of it)."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.col("`" + name.replace("`", "``") + "`")


def _anti_joined(spark: Any, reader: Any, files: Sequence[str], dirty: Sequence[DirtyFile], keys: Any) -> Any:
    """``files``' rows without the deleted ones, by a broadcast anti-join.

    ``keys``: the collected keys (an int64 Arrow array), or None: Spark reads them.
    """
    from pyspark.sql import functions as F  # noqa: N812

    paths = [f.path for f in dirty]
    scan = reader.parquet(*paths)
    _check_names(scan, paths)
    columns = [column(name) for name in scan.columns]
    numbers = _values(spark, [(spark_file_name(p), n) for n, p in enumerate(paths)], (_FILE, _NUMBER))
    rows = scan.select(*columns, F.col("_metadata.file_path").alias(_FILE), F.col("_metadata.row_index").alias(_ROW))
    rows = rows.join(F.broadcast(numbers), _FILE)
    keyed = rows.select(*columns, (F.col(_NUMBER).cast("long") * F.lit(1 << _ROW_BITS) + F.col(_ROW)).alias(_KEY))
    if keys is not None:
        import pyarrow as pa

        deleted = F.broadcast(spark.createDataFrame(pa.table({_KEY: keys})))
    else:
        deleted = _spark_keys(spark, dirty)
    kept = keyed.join(deleted, _KEY, "left_anti").select(*columns)
    logger.debug(
        "fencedlake: %d data files with %d delete rows joined natively", len(paths), sum(f.delete_rows for f in dirty)
    )
    dirty_paths = set(paths)
    clean = [p for p in files if p not in dirty_paths]
    if not clean:
        return kept
    return reader.parquet(*clean).select(*columns).unionByName(kept)
