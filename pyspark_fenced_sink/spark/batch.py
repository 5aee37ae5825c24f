"""The batch writer Spark calls (``df.write.format("fencedlake")``): thin, a client of the write transaction.

``FencedLakeDataSource.writer()`` -> :meth:`FencedLakeBatchWriter.open` (driver,
when Spark plans the write: ``WriteTransaction.begin``) -> :meth:`write` per task
(executors: Arrow batches to Iceberg data files) -> :meth:`commit` (driver: the
fenced commit protocol) or :meth:`abort` (PROTOCOL.md §3).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import marked_errors
from pyspark_fenced_sink.options.write import parse_write_options
from pyspark_fenced_sink.spark.messages import FencedLakeCommitMessage, task_message, written
from pyspark_fenced_sink.spark.schema_to_iceberg import SparkWriteSchema
from pyspark_fenced_sink.spark.workers import Role, settle
from pyspark_fenced_sink.write.transaction import WriteTransaction

__all__ = ["FencedLakeBatchWriter", "begin_write"]


def begin_write(options: Any, schema: Any, overwrite: bool, *, streaming: bool) -> WriteTransaction:
    """``WriteTransaction.begin`` for Spark's options and a DataFrame's schema."""
    opts = parse_write_options(dict(options), streaming=streaming)
    return WriteTransaction.begin(opts, SparkWriteSchema(schema), overwrite=overwrite, streaming=streaming)


class FencedLakeBatchWriter(DataSourceArrowWriter):
    """Batch writes into an Iceberg table with exactly-once commits (see FencedLakeDataSource)."""

    def __init__(self, txn: WriteTransaction) -> None:
        self.txn = txn

    @classmethod
    def open(cls, options: Any, schema: Any, overwrite: bool) -> FencedLakeBatchWriter:
        """Plan the write on the driver: validate, resolve the table, open the writer."""
        with marked_errors():
            return cls(begin_write(options, schema, overwrite, streaming=False))

    def write(self, iterator: Iterator[Any]) -> FencedLakeCommitMessage:
        """Write this task's rows as Iceberg data files (executor)."""
        settle(Role.WRITE_TASK)
        failpoints.configure(self.txn.opts.failpoints)
        with marked_errors():
            return task_message(self.txn.spec, iterator)

    def commit(self, messages: Sequence[FencedLakeCommitMessage | None]) -> None:  # type: ignore[override]
        """Commit every task's files in one fenced, exactly-once commit (driver)."""
        settle(Role.DRIVER)
        with marked_errors():
            self.txn.commit(written(messages, self.txn.opts.table))

    def abort(self, messages: Sequence[FencedLakeCommitMessage | None]) -> None:  # type: ignore[override]
        """Remove the tasks' files unless a commit may reference them (driver)."""
        settle(Role.DRIVER)
        self.txn.abort(written(messages, self.txn.opts.table))
