"""fencedlake: an exactly-once PySpark sink for Apache Iceberg tables written by many jobs at once.

``df.write.format("fencedlake")`` and ``df.writeStream.format("fencedlake")``
work with no registration: Spark imports top-level modules named
``pyspark_*`` and registers their ``DefaultSource``. This module stays light
(no pyiceberg, no catalog code) because Spark imports it in every Python
worker.
"""

from __future__ import annotations

from pyspark_fenced_sink.datasource import FencedLakeDataSource
from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    FencedLakeError,
    FencedWriterError,
    InvalidOptionsError,
    SchemaMismatchError,
    StoreError,
    WriteRejectedError,
)

__version__ = "0.1.0"

DefaultSource = FencedLakeDataSource

__all__ = [
    "CommitOutcomeUnknownError",
    "CorruptControlDataError",
    "DefaultSource",
    "FencedLakeDataSource",
    "FencedLakeError",
    "FencedWriterError",
    "InvalidOptionsError",
    "SchemaMismatchError",
    "StoreError",
    "WriteRejectedError",
    "__version__",
]
