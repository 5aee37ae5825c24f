"""fencedlake: an exactly-once PySpark sink for Apache Iceberg tables written by many jobs at once.

``df.write.format("fencedlake")`` / ``df.writeStream.format("fencedlake")`` work
with no registration (Spark registers ``DefaultSource`` of ``pyspark_*``
modules). The public API: :func:`tune_session`, :func:`activate_session`,
:func:`fencedlake_error` and the error kinds, :func:`compact`, :func:`read_table`,
:func:`register_view`, :func:`warm_workers` (README; the protocol is docs/PROTOCOL.md). This module stays light — no
pyiceberg, no catalog code — because Spark imports it in every Python worker.
"""

from __future__ import annotations

from typing import Any

from pyspark_fenced_sink import errors
from pyspark_fenced_sink.errors import *  # noqa: F403 - the error kinds are part of the public API
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource
from pyspark_fenced_sink.spark.session import activate_session
from pyspark_fenced_sink.spark.sql import register_view
from pyspark_fenced_sink.spark.tuning import tune_session
from pyspark_fenced_sink.spark.warmup import warm_workers
from pyspark_fenced_sink.version import __version__

DefaultSource = FencedLakeDataSource


def compact(spark: Any, table: str, **kwargs: Any) -> Any:
    """Compact ``table``'s small data files (``ops.compact.compact``; imported here lazily: workers stay light)."""
    from pyspark_fenced_sink.ops.compact import compact as run

    return run(spark, table, **kwargs)


def read_table(spark: Any, table: str, **kwargs: Any) -> Any:
    """Read ``table`` through Spark's Parquet reader where exact (``spark.native_read.read_table``; lazy import)."""
    from pyspark_fenced_sink.spark.native_read import read_table as run

    return run(spark, table, **kwargs)


__all__ = [
    "DefaultSource",
    "FencedLakeDataSource",
    "__version__",
    "activate_session",
    "compact",
    "read_table",
    "register_view",
    "tune_session",
    "warm_workers",
]
__all__ += errors.__all__
