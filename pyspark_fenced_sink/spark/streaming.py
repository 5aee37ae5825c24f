"""The streaming writer Spark calls (``df.writeStream.format("fencedlake")``): thin, a client of the write transaction.

Spark calls ``streamWriter()`` for every micro-batch, on the planning side and
again in the commit worker, so nothing here may assume one instance per query.
Each micro-batch is one WAL entry keyed by (writer.id, epoch, batch id); a
run's first commit claims a new epoch, which fences the previous run of the
same ``writer.id`` (PROTOCOL.md §7). ``complete`` output mode replaces the
table's rows per batch; ``update`` is refused by Spark itself (this sink does
not declare it).

Spark 4.1+ has ``DataSourceStreamArrowWriter``: tasks receive Arrow batches.
On Spark 4.0 this writer falls back to ``DataSourceStreamWriter`` and converts
the rows it gets (:mod:`pyspark_fenced_sink.spark.rowbatch`); results are the same,
the row path is slower. ``ARROW_STREAM_WRITER`` says which one is in use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyspark.sql.datasource as _spark_ds

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import marked_errors
from pyspark_fenced_sink.spark.batch import begin_write
from pyspark_fenced_sink.spark.messages import FencedLakeCommitMessage, task_message, written
from pyspark_fenced_sink.spark.rowbatch import rows_to_batches
from pyspark_fenced_sink.spark.workers import Role, settle
from pyspark_fenced_sink.write.transaction import WriteTransaction

__all__ = ["ARROW_STREAM_WRITER", "FencedLakeStreamWriter"]

# Spark >= 4.1: Arrow batches; Spark 4.0: rows, converted by rowbatch.
ARROW_STREAM_WRITER = hasattr(_spark_ds, "DataSourceStreamArrowWriter")
_StreamWriterBase: Any = getattr(_spark_ds, "DataSourceStreamArrowWriter", _spark_ds.DataSourceStreamWriter)


class FencedLakeStreamWriter(_StreamWriterBase):  # type: ignore[misc]
    """Streaming writes with exactly-once results across restarts, replays and zombie runs."""

    def __init__(self, txn: WriteTransaction, spark_schema: Any = None) -> None:
        self.txn = txn
        self.spark_schema = spark_schema  # the row fallback converts rows of this schema

    @classmethod
    def open(cls, options: Any, schema: Any, overwrite: bool) -> FencedLakeStreamWriter:
        """Plan a micro-batch write on the driver (validates; writer.id is required)."""
        with marked_errors():
            return cls(begin_write(options, schema, overwrite, streaming=True), schema)

    def write(self, iterator: Iterator[Any]) -> FencedLakeCommitMessage:
        """Write this task's rows of the micro-batch as Iceberg data files (executor)."""
        settle(Role.WRITE_TASK)
        failpoints.configure(self.txn.opts.failpoints)
        batches = iterator if ARROW_STREAM_WRITER else rows_to_batches(iterator, self.spark_schema)
        with marked_errors():
            return task_message(self.txn.spec, batches)

    def commit(self, messages: Sequence[FencedLakeCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Commit micro-batch ``batchId`` exactly once (driver)."""
        settle(Role.DRIVER)
        with marked_errors():
            self.txn.commit(written(messages, self.txn.opts.table), batch_id=batchId)

    def abort(self, messages: Sequence[FencedLakeCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Remove the micro-batch's files unless a commit may reference them (driver)."""
        settle(Role.DRIVER)
        self.txn.abort(written(messages, self.txn.opts.table), batch_id=batchId)
