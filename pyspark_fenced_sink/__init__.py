"""fencedlake: an exactly-once PySpark sink for Apache Iceberg tables written by many jobs at once.

``df.write.format("fencedlake")`` and ``df.writeStream.format("fencedlake")``
work with no registration: Spark imports top-level modules named
``pyspark_*`` and registers their ``DefaultSource``. This module stays light
(no pyiceberg, no catalog code) because Spark imports it in every Python
worker.

For write throughput, call :func:`tune_session` on the driver's SparkSession
once (see :mod:`pyspark_fenced_sink.spark.tuning`); to write from several
Python threads, :func:`activate_session` in each (see
:mod:`pyspark_fenced_sink.spark.session`); to get the typed error back from a
Spark exception, :func:`fencedlake_error`; to compact small data files,
:func:`compact` (see :mod:`pyspark_fenced_sink.ops.compact`); to read a table
through Spark's own Parquet reader where that is exact, :func:`read_table`
(see :mod:`pyspark_fenced_sink.spark.native_read`); to use a table from SQL,
:func:`register_view` (see :mod:`pyspark_fenced_sink.spark.sql`).
"""

from __future__ import annotations

from typing import Any

from pyspark_fenced_sink import errors
from pyspark_fenced_sink.errors import *  # noqa: F403 - the error kinds are part of the public API
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource
from pyspark_fenced_sink.spark.session import activate_session
from pyspark_fenced_sink.spark.sql import register_view
from pyspark_fenced_sink.spark.tuning import tune_session

__version__ = "0.1.0.dev0"

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
]
__all__ += errors.__all__
