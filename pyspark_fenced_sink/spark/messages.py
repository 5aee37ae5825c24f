"""What a task sends back to the driver (executor -> driver; pickled by Spark; PROTOCOL.md steps 2-3).

Executors never import catalog code: a message carries the written data files
already encoded (``iceberg.codec.datafiles``), plus what the driver cannot
learn otherwise — the streaming run and query ids, which only tasks can read
from Spark's local properties. :func:`written` sums a write's messages for the
write transaction's commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from pyspark_fenced_sink.spark.tuning import ARROW_MAX_BYTES_PER_BATCH, batch_check_active
from pyspark_fenced_sink.write.task import WriteSpec, task_info_from_spark, write_task
from pyspark_fenced_sink.write.transaction import Written

__all__ = ["FencedLakeCommitMessage", "spark_run_ids", "task_message", "written"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FencedLakeCommitMessage(WriterCommitMessage):
    """One task's result.

    Attributes:
        files: Encoded DataFiles the task wrote (possibly none).
        rows: Rows written.
        bytes: Bytes written.
        task: Spark partition id.
        attempt: Spark task attempt id.
        run: Streaming run id (Spark's runId, the job group of the micro-batch), if any.
        query: Streaming query id (stable across restarts), if any.
        untuned: The task ran with Spark's per-row Arrow batch size check on (``tune_session`` not applied).
        deletes: An upsert's delete-key files (``write.upsert``).
    """

    files: tuple[dict[str, Any], ...] = ()
    rows: int = 0
    bytes: int = 0
    task: int = 0
    attempt: int = 0
    run: str | None = None
    query: str | None = None
    untuned: bool = False
    deletes: tuple[dict[str, Any], ...] = ()


def task_message(spec: WriteSpec, batches: Iterator[Any]) -> FencedLakeCommitMessage:
    """Write this task's Arrow batches (executor) and describe the files for the driver."""
    task = task_info_from_spark()
    result = write_task(spec, batches, task)
    run, query = spark_run_ids() if spec.streaming else (None, None)
    return FencedLakeCommitMessage(
        result.files,
        result.rows,
        result.bytes,
        task.partition_id,
        task.attempt_id,
        run,
        query,
        _untuned(),
        result.deletes,
    )


def _untuned() -> bool:
    """True if this task's session left Spark's per-row Arrow batch size check on (spark.tuning)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx is not None and batch_check_active(ctx.getLocalProperty(ARROW_MAX_BYTES_PER_BATCH))


def spark_run_ids() -> tuple[str | None, str | None]:
    """(run id, query id) of the streaming micro-batch this task belongs to, if any."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None
    return ctx.getLocalProperty("spark.jobGroup.id"), ctx.getLocalProperty("sql.streaming.queryId")


def written(messages: Sequence[FencedLakeCommitMessage | None], table: str) -> Written:
    """What every task of a write wrote (``None``: a task Spark did not collect); warns if it ran untuned."""
    collected = [m for m in messages if m is not None]
    untuned = any(m.untuned for m in collected)
    if untuned:
        logger.warning(
            "fencedlake: the write to %s ran with Spark's per-row Arrow batch size check on "
            "(%s at Spark's default): Python sinks write at about half speed that way; call "
            "pyspark_fenced_sink.tune_session(spark) once, or pass --conf %s=2147483647",
            table,
            ARROW_MAX_BYTES_PER_BATCH,
            ARROW_MAX_BYTES_PER_BATCH,
        )
    return Written(
        files=tuple(f for m in collected for f in m.files),
        rows=sum(m.rows for m in collected),
        untuned=untuned,
        run=next((m.run for m in collected if m.run), None),
        query=next((m.query for m in collected if m.query), None),
        deletes=tuple(d for m in collected for d in m.deletes),
    )
