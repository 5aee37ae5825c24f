"""The batch reader Spark calls (``spark.read.format("fencedlake")``): thin, over the planner (PROTOCOL.md §14).

:func:`open_reader` (driver: options, one catalog read, snapshot and schema) ->
``pushFilters`` (with ``spark.sql.python.filterPushdown.enabled``; only Spark's
pushdown planner gets the filtering reader) -> ``partitions`` (plan, prune,
pack into splits) -> ``read`` per split (executors, ``read.task``). A
user-given schema is the projection: Spark has no column-pruning hook for
Python sources.

Spark 4.1 to 4.3 keep the read planned for a relation's first query on the
relation itself and reuse it for every later query of the same DataFrame or SQL
view that pushes no filter (``PythonDataSourceV2.readInfo``; moved onto the scan
in a later Spark, together with its limit pushdown API): a read pruned by one
query's filters would return too few rows to the next (measured on 4.3.0:
``df.where("id < 10").count()`` then ``df.count()`` gave 10 and 10). So on those
versions (:data:`PUSHED_FILTERS_PRUNE` is false) pushed filters prune nothing,
and the ``filter`` read option — part of what the DataFrame *is*, so every query
of it agrees — is the way to skip files (``open_read``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.types import UUIDType
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pyspark_fenced_sink import logs
from pyspark_fenced_sink.errors import marked_errors
from pyspark_fenced_sink.options.read import ReadOptions, parse_read_options
from pyspark_fenced_sink.read.task import ReadSpec, read_files
from pyspark_fenced_sink.spark.workers import Role, settle

__all__ = [
    "PUSHED_FILTERS_PRUNE",
    "FencedLakeFilteringReader",
    "FencedLakeReader",
    "FencedLakeSplit",
    "ReadStats",
    "open_read",
    "open_reader",
    "split_tasks",
    "table_schema",
]

logger = logging.getLogger(__name__)

#: The module Spark runs ``pushFilters`` in (``spark.sql.python.filterPushdown.enabled=true``).
_PUSHDOWN_PLANNER = "pyspark.sql.worker.data_source_pushdown_filters"
#: True when Spark plans every scan anew, so a query's pushed filters may prune files (the Spark that has
#: the limit pushdown API keeps a pushdown's read plan on its scan, not on the relation: see the module docstring).
PUSHED_FILTERS_PRUNE = hasattr(DataSourceReader, "pushLimit")


class FencedLakeSplit(InputPartition):
    """One input split: data files (with their delete files) one task reads, in order.

    ``metadata``: the table metadata to read these files with, when it may be newer than the
    reader's (a stream's later micro-batches: files of a partition spec added after it started).
    """

    def __init__(self, index: int, tasks: Sequence[Any], metadata: Any = None) -> None:
        self.index = index
        self.tasks = tuple(tasks)
        self.metadata = metadata

    def __repr__(self) -> str:
        return f"FencedLakeSplit(index={self.index}, files={len(self.tasks)})"


@dataclass(frozen=True)
class ReadStats:
    """What a batch read planned (logged; tests check pruning with it).

    Attributes:
        files: Data files planned (after partition and statistics pruning).
        total_files: Data files in the snapshot read (its summary), or None if unknown.
        delete_files: Positional delete files attached to the planned files.
        splits: Input splits (Spark tasks).
        filtered: The pushed-down filter was not trivially true.
    """

    files: int
    total_files: int | None
    delete_files: int
    splits: int
    filtered: bool


def _in_pushdown_planner() -> bool:
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return _PUSHDOWN_PLANNER in sys.modules or getattr(main, "name", None) == _PUSHDOWN_PLANNER


def _has_uuid(schema: Any) -> bool:
    return any(isinstance(schema.find_type(i), UUIDType) for i in schema.field_ids)


def table_schema(options: Any) -> Any:
    """The Spark schema a read with ``options`` returns (``DataSource.schema()``; batch or stream from the keys)."""
    from pyspark_fenced_sink.iceberg.planning.scan import open_read_table, resolve_point
    from pyspark_fenced_sink.spark.schema_from_iceberg import spark_schema_from_iceberg

    with marked_errors():
        opts = parse_read_options(dict(options), streaming=None)
        table = open_read_table(opts)
        current = opts.streaming or opts.incremental
        return spark_schema_from_iceberg(table.metadata.schema() if current else resolve_point(table, opts).schema)


def open_read(options: Any, schema: Any, *, streaming: bool) -> tuple[ReadOptions, Any, Any, ReadSpec]:
    """Validate, read the table once, resolve the snapshot, map the schema: ``(opts, table, point, spec)``.

    ``schema`` is the Spark schema Spark asks for: the table's own (from ``DataSource.schema()``) or
    a user-given projection of it.
    """
    from pyspark_fenced_sink.iceberg.codec.fileio import io_properties
    from pyspark_fenced_sink.iceberg.planning.scan import ReadPoint, executor_metadata, open_read_table, resolve_point
    from pyspark_fenced_sink.spark.schema_from_iceberg import project_user_schema, spark_schema_from_iceberg

    logs.configure_from_env()
    opts = parse_read_options(dict(options), streaming=streaming)
    table = open_read_table(opts)
    if streaming or opts.incremental:
        point = ReadPoint(table.metadata.current_snapshot(), table.metadata.schema(), "the current schema")
    else:
        point = resolve_point(table, opts)
    full = spark_schema_from_iceberg(point.schema)
    projection = point.schema if schema == full else project_user_schema(schema, point.schema, opts.table)
    row_filter: BooleanExpression = AlwaysTrue()
    if opts.row_filter is not None:
        from pyspark_fenced_sink.iceberg.codec.row_filter import read_filter

        row_filter = read_filter(opts.row_filter, point.schema)
    spec = ReadSpec(
        table=opts.table,
        metadata=executor_metadata(table.metadata, point.schema),
        projection=projection,
        spark_schema_json=schema.json(),
        io_properties=io_properties(table),
        text_uuids=_has_uuid(projection),
        row_filter=row_filter,
    )
    return opts, table, point, spec


def split_tasks(table: Any, opts: ReadOptions, tasks: Sequence[Any], metadata: Any = None) -> list[FencedLakeSplit]:
    """Pack planned file tasks into Spark's input splits (statistics stripped for the trip to executors)."""
    from pyspark_fenced_sink.iceberg.planning.scan import executor_task, pack, split_sizing

    groups = pack(tasks, split_sizing(table.properties, opts, tasks))
    return [FencedLakeSplit(i, [executor_task(t) for t in group], metadata) for i, group in enumerate(groups)]


class FencedLakeReader(DataSourceReader):
    """Reads one snapshot of an Iceberg table (see FencedLakeDataSource for the options)."""

    def __init__(self, opts: ReadOptions, table: Any, point: Any, spec: ReadSpec) -> None:
        self.opts = opts
        self.spec = spec
        self.stats: ReadStats | None = None
        self._table = table  # driver only: not pickled to executors
        self._point = point

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_table", "_point")}

    @property
    def row_filter(self) -> BooleanExpression:
        """The pushed-down filter (always true unless Spark pushed filters)."""
        return self.spec.row_filter

    def partitions(self) -> list[FencedLakeSplit]:
        """Plan the read: files pruned by the pushed filter, packed into splits (driver)."""
        from pyspark_fenced_sink.iceberg.planning.scan import plan_files, plan_incremental

        settle(Role.DRIVER)
        with marked_errors():
            if self.opts.incremental:
                tasks, self._point = plan_incremental(self._table, self.opts, self.row_filter)
            else:
                tasks = plan_files(self._table, self._point, self.row_filter, self.opts.table)
            splits = split_tasks(self._table, self.opts, tasks)
        summary = self._point.snapshot.summary if self._point.snapshot is not None else None
        total = summary.additional_properties.get("total-data-files") if summary is not None else None
        self.stats = ReadStats(
            files=len(tasks),
            total_files=int(total) if total is not None and not self.opts.incremental else None,
            delete_files=len({d.file_path for t in tasks for d in t.delete_files}),
            splits=len(splits),
            filtered=self.row_filter != AlwaysTrue(),
        )
        logger.info(
            "fencedlake: read %s at %s: %d of %s data files (filter: %s), %d delete files, %d splits",
            self.opts.table,
            self._point.label,
            self.stats.files,
            self.stats.total_files if self.stats.total_files is not None else "?",
            self.row_filter,
            self.stats.delete_files,
            self.stats.splits,
        )
        return splits

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Stream one split's rows as Arrow batches (executor)."""
        settle(Role.READ_TASK)
        with marked_errors():
            yield from read_files(self.spec, getattr(partition, "tasks", ()))


class FencedLakeFilteringReader(FencedLakeReader):
    """The reader Spark's filter-pushdown planner gets: it prunes files with the query's filters."""

    def pushFilters(self, filters: list[Any]) -> list[Any]:  # noqa: N802 - Spark's name
        """Translate what can be translated for pruning; every filter stays with Spark to apply exactly.

        Prunes nothing where Spark reuses this plan for later queries of the relation (module docstring).
        """
        import dataclasses

        from pyiceberg.expressions import And

        from pyspark_fenced_sink.spark.filters_to_iceberg import to_iceberg

        if not PUSHED_FILTERS_PRUNE:
            logger.info(
                "fencedlake: %d pushed filters of %s prune nothing: this Spark reuses a relation's read plan for its "
                "later queries, which pruning would starve of rows; the read option filter skips files safely",
                len(filters),
                self.opts.table,
            )
            return list(filters)
        expression, used = to_iceberg(filters, self.spec.projection)
        self.spec = dataclasses.replace(self.spec, row_filter=And(self.spec.row_filter, expression))
        logger.info("fencedlake: %d of %d pushed filters prune files of %s", len(used), len(filters), self.opts.table)
        return list(filters)


def open_reader(options: Any, schema: Any) -> FencedLakeReader:
    """The reader for ``spark.read`` (filtering inside Spark's filter-pushdown planner, see the module docstring)."""
    with marked_errors():
        opts, table, point, spec = open_read(options, schema, streaming=False)
    cls = FencedLakeFilteringReader if _in_pushdown_planner() else FencedLakeReader
    return cls(opts, table, point, spec)
