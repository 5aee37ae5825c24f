"""The batch writer Spark calls (``df.write.format("fencedlake")``): thin, calls the core.

``FencedLakeDataSource.writer()`` -> :meth:`FencedLakeBatchWriter.open` (driver,
when Spark plans the write) -> :meth:`write` per task (executors: Arrow
batches to Iceberg data files) -> :meth:`commit` (driver: the fenced commit
protocol) or :meth:`abort`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import marked_errors
from pyspark_fenced_sink.spark.driver import WritePlan, abort_files, commit_files, plan_write
from pyspark_fenced_sink.spark.messages import FencedLakeCommitMessage, task_message

__all__ = ["FencedLakeBatchWriter"]


class FencedLakeBatchWriter(DataSourceArrowWriter):
    """Batch writes into an Iceberg table with exactly-once commits (see FencedLakeDataSource)."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    @classmethod
    def open(cls, options: Any, schema: Any, overwrite: bool) -> FencedLakeBatchWriter:
        """Plan the write on the driver: validate, resolve the table, open the writer."""
        with marked_errors():
            return cls(plan_write(options, schema, overwrite, streaming=False))

    def write(self, iterator: Iterator[Any]) -> FencedLakeCommitMessage:
        """Write this task's rows as Iceberg data files (executor)."""
        failpoints.configure(self.plan.opts.failpoints)
        with marked_errors():
            return task_message(self.plan.spec, iterator)

    def commit(self, messages: Sequence[FencedLakeCommitMessage | None]) -> None:  # type: ignore[override]
        """Commit every task's files in one fenced, exactly-once commit (driver)."""
        with marked_errors():
            commit_files(self.plan, messages)

    def abort(self, messages: Sequence[FencedLakeCommitMessage | None]) -> None:  # type: ignore[override]
        """Remove the tasks' files unless a commit may reference them (driver)."""
        abort_files(self.plan, messages)
