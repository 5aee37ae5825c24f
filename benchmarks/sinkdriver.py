"""Drive the sink's driver and executor steps without a JVM (the Spark-free suites).

The same calls Spark makes for ``df.write.format("fencedlake")``:
``driver.plan_write`` (planning), ``executor.write_task`` per task, then
``driver.commit_files`` (the commit worker), with the benchmark schema of
:mod:`benchmarks.data`. Only the transport between them is missing.

A *target* says which catalog: a warehouse path (the embedded default, SQLite
at ``<warehouse>/catalog.db``) or a mapping of ``catalog.*`` sink options (e.g.
a PostgreSQL-backed SqlCatalog, :func:`postgres_target`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from benchmarks.data import SPARK_SCHEMA
from pyspark_fenced_sink.driver import WritePlan, abort_files, commit_files, plan_write
from pyspark_fenced_sink.executor import TaskInfo, write_task
from pyspark_fenced_sink.messages import FencedLakeCommitMessage

__all__ = ["Target", "commit", "open_catalog", "plan", "postgres_target", "target_options", "write", "write_tasks"]

#: A warehouse path (embedded SQLite catalog) or ``catalog.*`` sink options.
Target = str | Mapping[str, str]

#: Rows per Arrow batch, as Spark sends them (``spark.sql.execution.arrow.maxRecordsPerBatch``).
SPARK_BATCH_ROWS = 10_000


def target_options(target: Target) -> dict[str, str]:
    """The sink options that select ``target``'s catalog."""
    return {"warehouse": target} if isinstance(target, str) else dict(target)


def postgres_target(uri: str, warehouse: str) -> dict[str, str]:
    """``catalog.*`` options for a pyiceberg SqlCatalog on PostgreSQL with a local warehouse."""
    return {"catalog.type": "sql", "catalog.uri": uri, "catalog.warehouse": f"file://{warehouse}"}


def open_catalog(target: Target) -> Any:
    """The (per-process cached) catalog the sink uses for ``target``."""
    from pyspark_fenced_sink.catalogs import load_catalog
    from pyspark_fenced_sink.options import parse_options

    return load_catalog(parse_options({**target_options(target), "table": "bench.any"}))


def plan(
    warehouse: Target,
    table: str,
    options: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
    streaming: bool = False,
) -> WritePlan:
    """``driver.plan_write`` with the benchmark schema; ``options`` keyed as the sink spells them."""
    opts = {**target_options(warehouse), "table": table, **{k: str(v) for k, v in (options or {}).items()}}
    return plan_write(opts, SPARK_SCHEMA, overwrite, streaming=streaming)


def write_tasks(
    p: WritePlan,
    data: pa.Table,
    tasks: int = 1,
    *,
    batch: int | None = None,
    run: str | None = None,
    query: str | None = None,
) -> list[FencedLakeCommitMessage]:
    """Split ``data`` over ``tasks`` tasks and write each as an executor would (10k-row Arrow batches)."""
    out = []
    step = max(1, -(-data.num_rows // tasks))
    for t in range(tasks):
        part = data.slice(t * step, step)
        result = write_task(p.spec, iter(part.to_batches(max_chunksize=SPARK_BATCH_ROWS)), TaskInfo(t, t, batch))
        out.append(
            FencedLakeCommitMessage(
                files=result.files, rows=result.rows, bytes=result.bytes, task=t, run=run, query=query
            )
        )
    return out


def commit(p: WritePlan, messages: list[FencedLakeCommitMessage], *, batch_id: int | None = None) -> Any:
    """``driver.commit_files``, with Spark's ``abort()`` after a failed commit; returns the CommitResult."""
    try:
        return commit_files(p, messages, batch_id=batch_id)
    except BaseException:
        abort_files(p, messages, batch_id=batch_id)
        raise


def write(
    warehouse: Target, table: str, data: pa.Table, options: Mapping[str, Any] | None = None, *, tasks: int = 1
) -> Any:
    """One complete batch write (plan, tasks, commit); returns the CommitResult."""
    p = plan(warehouse, table, options)
    return commit(p, write_tasks(p, data, tasks))
