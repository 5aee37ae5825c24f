"""The streaming reader Spark calls (``spark.readStream.format("fencedlake")``): thin (PROTOCOL.md §14.1).

Offsets, admission control and the plan of each micro-batch are
``iceberg.planning.incremental``'s; splits and executors' reads are the batch
reader's (``spark.reader``, ``read.task``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyspark.sql.streaming.datasource as _spark_stream
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pyspark_fenced_sink.errors import marked_errors
from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamOffset, StreamPlanner
from pyspark_fenced_sink.options.read import ReadOptions
from pyspark_fenced_sink.read.task import ReadSpec, read_files
from pyspark_fenced_sink.spark.reader import FencedLakeSplit, open_read, split_tasks
from pyspark_fenced_sink.spark.workers import Role, settle

__all__ = ["FencedLakeStreamReader"]

# Spark >= 4.2 (admission control, Trigger.AvailableNow for Python sources).
_AvailableNow: Any = getattr(_spark_stream, "SupportsTriggerAvailableNow", object)
_UNCAPPED = object()


class FencedLakeStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """Streams the rows each new snapshot of the main branch appends, exactly once across restarts."""

    def __init__(self, opts: ReadOptions, spec: ReadSpec, planner: StreamPlanner) -> None:
        self.opts = opts
        self.spec = spec
        self._planner = planner  # the source runner only: not pickled to executors
        self._cap: Any = _UNCAPPED

    @classmethod
    def open(cls, options: Any, schema: Any) -> FencedLakeStreamReader:
        """Validate the options and read the table once (driver, when the query starts)."""
        from pyspark_fenced_sink.iceberg.planning.scan import open_read_table

        with marked_errors():
            opts, table, point, spec = open_read(options, schema, streaming=True)
            loaded = [table]  # the first load is the one open_read made

            def load() -> Any:
                return loaded.pop() if loaded else open_read_table(opts)

            return cls(opts, spec, StreamPlanner(opts, point.schema, load))

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "spec": self.spec, "_cap": None}

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Before the first snapshot; the start is resolved when the first batch is planned."""
        return START.to_json()

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - Spark's name
        """The read limit the options set (files first, as Iceberg's reader)."""
        if self.opts.max_files_per_batch is not None:
            return _spark_stream.ReadMaxFiles(self.opts.max_files_per_batch)
        if self.opts.max_rows_per_batch is not None:
            return _spark_stream.ReadMaxRows(self.opts.max_rows_per_batch)
        return _spark_stream.ReadAllAvailable()

    def _limits(self, limit: Any) -> StreamLimits:
        if limit is None or isinstance(limit, _spark_stream.ReadAllAvailable):
            return StreamLimits()
        files = getattr(limit, "max_files", None) or self.opts.max_files_per_batch
        rows = getattr(limit, "max_rows", None) or self.opts.max_rows_per_batch
        return StreamLimits(files, rows)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Remember the current snapshot: this run stops there (Trigger.AvailableNow)."""
        with marked_errors():
            self._planner.refresh()
            current = self._planner.current()
            self._cap = current.snapshot_id if current is not None else None

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:  # noqa: N802
        """The end of the next micro-batch (``start`` itself when there is nothing new)."""
        with marked_errors():
            self._planner.refresh()
            if self._cap is _UNCAPPED:
                tip = self._planner.current()
            else:
                tip = self._planner.snapshot(self._cap) if self._cap is not None else None
            if start is None:  # Spark < 4.2: no start, no read limit
                return self._planner.latest(START, StreamLimits(), tip).to_json()
            offset = StreamOffset.from_json(start)
            return self._planner.latest(offset, self._limits(limit), tip).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FencedLakeSplit]:
        """The splits of the files between two offsets (the same on every replay).

        Each split carries the table's current metadata (with the stream's schema): executors run a
        copy of the reader made when the query started, which knows no partition spec added since.
        """
        from pyspark_fenced_sink.iceberg.planning.scan import executor_metadata

        settle(Role.DRIVER)
        with marked_errors():
            tasks = self._planner.plan(StreamOffset.from_json(start), StreamOffset.from_json(end))
            table = self._planner.table
            return split_tasks(table, self.opts, tasks, executor_metadata(table.metadata, self._planner.schema))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Stream one split's rows as Arrow batches (executor)."""
        metadata = getattr(partition, "metadata", None)
        spec = self.spec if metadata is None else dataclasses.replace(self.spec, metadata=metadata)
        settle(Role.READ_TASK)
        with marked_errors():
            yield from read_files(spec, getattr(partition, "tasks", ()))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark processed everything up to ``end``: forget older snapshots' file lists."""
        self._planner.forget_before(StreamOffset.from_json(end))
