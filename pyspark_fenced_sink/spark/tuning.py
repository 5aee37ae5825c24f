"""``tune_session``: session settings for fast Python writes and pruned reads (README "Write throughput").

``spark.sql.execution.arrow.maxBytesPerBatch=2147483647`` turns off Spark's
per-row batch-size check that halves any Python sink's speed;
``spark.sql.python.filterPushdown.enabled=true`` gives Python sources the
query's filters. The sink cannot set either itself (it runs in Python workers
with no handle on the session). Measurements: docs/benchmarks.md §1.
:func:`tune_session` also checks that Spark finds ``format("fencedlake")`` at all
(:func:`check_data_source`): with Spark's Python workers on an interpreter
without the package, every read and write fails with ``DATA_SOURCE_NOT_FOUND``
and no hint. Imports only the standard library and ``errors``: Spark imports the
package in every Python worker.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

from pyspark_fenced_sink.errors import FencedLakeError

__all__ = [
    "ARROW_MAX_BYTES_PER_BATCH",
    "PYTHON_FILTER_PUSHDOWN",
    "SPARK_DEFAULT_BATCH_BYTES",
    "UNBOUNDED_BATCH_BYTES",
    "batch_check_active",
    "check_data_source",
    "tune_session",
]

logger = logging.getLogger(__name__)

#: The Spark SQL conf that bounds an Arrow batch's bytes (checked after every row).
ARROW_MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
#: ``Int.MaxValue``: the one value for which Spark skips the per-row size check.
UNBOUNDED_BATCH_BYTES = 2**31 - 1
#: The Spark SQL conf that lets Python data sources receive a query's filters (Spark's default: false).
PYTHON_FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
#: Spark's default for :data:`ARROW_MAX_BYTES_PER_BATCH` (64 MiB).
SPARK_DEFAULT_BATCH_BYTES = 64 * 1024 * 1024

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)


def _bytes(text: str | None) -> int | None:
    """A Spark byte-size string (``67108864b``, ``64m``, ``64MB``) in bytes; None if not one."""
    match = _SIZE.match(text or "")
    return int(match.group(1)) * _UNITS[match.group(2).lower()] if match else None


def batch_check_active(value: str | None) -> bool:
    """True if Spark's per-row Arrow batch size check runs with this conf value (None: Spark's default).

    Tasks see the session's explicitly set SQL confs as local properties: an
    untuned session shows None (the 64 MiB default) and the check is on.
    """
    return _bytes(value) != UNBOUNDED_BATCH_BYTES if value is not None else True


def _workers_python(spark: Any) -> str:
    """What is known here about the interpreter Spark's Python workers run."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return "the Python the Spark Connect server's workers run (PYSPARK_PYTHON where the server was started)"
    executable = getattr(getattr(spark, "sparkContext", None), "pythonExec", None)
    source = "PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON") else "PYSPARK_PYTHON is unset"
    return f"{executable or 'python3'} ({source}); this program runs {sys.executable}"


def check_data_source(spark: Any) -> None:
    """Raise if ``spark`` cannot find ``format("fencedlake")`` (``DATA_SOURCE_NOT_FOUND``), naming the fix.

    Spark looks a Python data source up in its Python workers (it imports every top-level
    ``pyspark_*`` module there): if their interpreter lacks the package, every read and write fails.
    A write also looks it up in the calling thread's active session, which a new Python thread lacks
    (reads use the session itself), so the probe is a write: of no rows and with no table, which the
    sink refuses ("no table given") before anything is created. One planning round trip to a
    Python worker.

    Raises:
        FencedLakeError: the data source is not found (not retryable: fix the workers' interpreter).
    """
    try:
        spark.range(0).write.format("fencedlake").mode("append").save()
    except Exception as e:  # noqa: BLE001 - Spark's wrapped errors: only DATA_SOURCE_NOT_FOUND matters here
        if "DATA_SOURCE_NOT_FOUND" not in str(e):
            return  # the source answered (with "no table given"): it is found
        raise FencedLakeError(
            "Spark cannot find the data source fencedlake (DATA_SOURCE_NOT_FOUND): Spark's Python workers must be "
            f"able to import pyspark_fenced_sink, and they run {_workers_python(spark)}. Set PYSPARK_PYTHON to an "
            "interpreter that has the package (e.g. the venv's bin/python) before the session starts, or install "
            "pyspark-fenced-sink where they run. In a thread other than the one that created the session, call "
            "pyspark_fenced_sink.activate_session(spark) first."
        ) from None


def tune_session(spark: Any, *, force: bool = False, check: bool = True, writers: int | None = None) -> dict[str, str]:
    """Turn off Spark's per-row Arrow batch size check and turn on Python filter pushdown in ``spark``.

    Changes :data:`ARROW_MAX_BYTES_PER_BATCH` only while it holds Spark's default (64 MiB), so a
    value the user chose is kept unless ``force`` is true; sets :data:`PYTHON_FILTER_PUSHDOWN` to
    true (see the module docstring). Uses only ``spark.conf`` and the DataFrame API, so it works on
    Spark Connect sessions too. Safe to call more than once.

    Args:
        spark: the SparkSession that will run the writes and reads.
        force: set the batch size even if the session holds a non-default one.
        check: first check that Spark finds ``format("fencedlake")`` (:func:`check_data_source`).
        writers: how many fencedlake writes the application runs at once: if given, start the
            Python workers that many concurrent writes need now (``warmup.warm_workers``), so the
            first writes that overlap do not wait for Spark to start them (1-3.5 s each on a 2-core
            host). Spark stops idle workers after a minute without requests: call it right before
            the writes. None (the default): the pools grow when the writes need it.

    Returns:
        The settings changed, ``{key: new value}`` (empty if nothing changed).

    Raises:
        FencedLakeError: ``check`` and Spark cannot find the data source (the message names the fix).
        ValueError: ``writers`` is not an int from 1 to ``warmup.MAX_WRITERS`` (nothing is changed).
    """
    from pyspark_fenced_sink.spark.warmup import checked_writers, warm_workers

    if writers is not None:
        checked_writers(writers)
    if check:
        check_data_source(spark)
    changed = _tune_confs(spark, force)
    if writers is not None:
        warm_workers(spark, writers)
    return changed


def _tune_confs(spark: Any, force: bool) -> dict[str, str]:
    """:func:`tune_session`'s settings: the ones it changed, ``{key: new value}``."""
    changed: dict[str, str] = {}
    if str(spark.conf.get(PYTHON_FILTER_PUSHDOWN, None)).lower() != "true":
        spark.conf.set(PYTHON_FILTER_PUSHDOWN, "true")
        changed[PYTHON_FILTER_PUSHDOWN] = "true"
    current = spark.conf.get(ARROW_MAX_BYTES_PER_BATCH, None)
    size = _bytes(current) if current is not None else SPARK_DEFAULT_BATCH_BYTES
    if size == UNBOUNDED_BATCH_BYTES:
        return changed
    if size != SPARK_DEFAULT_BATCH_BYTES and not force:
        logger.info(
            "fencedlake: leaving %s=%s as set (tune_session(force=True) overrides it)",
            ARROW_MAX_BYTES_PER_BATCH,
            current,
        )
        return changed
    spark.conf.set(ARROW_MAX_BYTES_PER_BATCH, str(UNBOUNDED_BATCH_BYTES))
    logger.info("fencedlake: set %s=%d (was %s)", ARROW_MAX_BYTES_PER_BATCH, UNBOUNDED_BATCH_BYTES, current)
    return {**changed, ARROW_MAX_BYTES_PER_BATCH: str(UNBOUNDED_BATCH_BYTES)}
