"""``tune_session``: session settings for fast Python writes and pruned reads (README "Write throughput").

``spark.sql.execution.arrow.maxBytesPerBatch=2147483647`` turns off Spark's
per-row batch-size check that halves any Python sink's speed;
``spark.sql.python.filterPushdown.enabled=true`` gives Python sources the
query's filters. The sink cannot set either itself (it runs in Python workers
with no handle on the session). Measurements: docs/benchmarks.md §1. Imports
only the standard library: Spark imports the package in every Python worker.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = [
    "ARROW_MAX_BYTES_PER_BATCH",
    "PYTHON_FILTER_PUSHDOWN",
    "SPARK_DEFAULT_BATCH_BYTES",
    "UNBOUNDED_BATCH_BYTES",
    "batch_check_active",
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


def tune_session(spark: Any, *, force: bool = False) -> dict[str, str]:
    """Turn off Spark's per-row Arrow batch size check and turn on Python filter pushdown in ``spark``.

    Changes :data:`ARROW_MAX_BYTES_PER_BATCH` only while it holds Spark's default (64 MiB), so a
    value the user chose is kept unless ``force`` is true; sets :data:`PYTHON_FILTER_PUSHDOWN` to
    true (see the module docstring). Uses only ``spark.conf``, which Spark Connect sessions have as
    well (tested with classic sessions). Safe to call more than once.

    Args:
        spark: the SparkSession that will run the writes and reads.
        force: set the batch size even if the session holds a non-default one.

    Returns:
        The settings changed, ``{key: new value}`` (empty if nothing changed).
    """
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
