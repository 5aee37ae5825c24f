"""The streaming writer Spark calls (``df.writeStream.format("fencedlake")``): thin, calls the core.

Spark calls ``streamWriter()`` for every micro-batch, on the planning side and
again in the commit worker, so nothing here may assume one instance per query.
Each micro-batch is one WAL entry keyed by (writer.id, epoch, batch id); a
run's first commit claims a new epoch, which fences the previous run of the
same ``writer.id`` (PROTOCOL.md §7). ``complete`` output mode replaces the
table's rows per batch; ``update`` is refused by Spark itself (this sink does
not declare it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.driver import WritePlan, abort_files, commit_files, plan_write
from pyspark_fenced_sink.executor import task_info_from_spark, write_task
from pyspark_fenced_sink.messages import FencedLakeCommitMessage, spark_run_ids

__all__ = ["FencedLakeStreamWriter"]


class FencedLakeStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes with exactly-once results across restarts, replays and zombie runs."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    @classmethod
    def open(cls, options: Any, schema: Any, overwrite: bool) -> FencedLakeStreamWriter:
        """Plan a micro-batch write on the driver (validates; writer.id is required)."""
        return cls(plan_write(options, schema, overwrite, streaming=True))

    def write(self, iterator: Iterator[Any]) -> FencedLakeCommitMessage:
        """Write this task's rows of the micro-batch as Iceberg data files (executor)."""
        failpoints.configure(self.plan.opts.failpoints)
        task = task_info_from_spark()
        result = write_task(self.plan.spec, iterator, task)
        run, query = spark_run_ids()
        return FencedLakeCommitMessage(
            files=result.files,
            rows=result.rows,
            bytes=result.bytes,
            task=task.partition_id,
            attempt=task.attempt_id,
            run=run,
            query=query,
        )

    def commit(self, messages: Sequence[FencedLakeCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        """Commit micro-batch ``batchId`` exactly once (driver)."""
        commit_files(self.plan, messages, batch_id=batchId)

    def abort(self, messages: Sequence[FencedLakeCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        """Remove the micro-batch's files unless a commit may reference them (driver)."""
        abort_files(self.plan, messages, batch_id=batchId)
