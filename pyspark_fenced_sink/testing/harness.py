"""Drive a write's driver and executor steps without a JVM (tests, integration, benchmarks; PROTOCOL.md §3).

The calls Spark makes for ``df.write.format("fencedlake")``, through the write
transaction: ``begin`` (planning), ``write.task.write_task`` per task, ``commit``
(the commit worker) and, after a failed commit, ``abort``. A *target* names the
catalog: a warehouse path (embedded SQLite) or ``catalog.*`` options.
``python -m pyspark_fenced_sink.testing.harness`` runs writes in a subprocess
(multi-process and crash tests): see :func:`main`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from pyspark_fenced_sink.options.catalog import WAREHOUSE, CatalogConfig, catalog_options
from pyspark_fenced_sink.options.common import TABLE, lowered
from pyspark_fenced_sink.options.write import WRITER_BATCH_ID, WRITER_ID
from pyspark_fenced_sink.spark.batch import begin_write
from pyspark_fenced_sink.spark.messages import FencedLakeCommitMessage, written
from pyspark_fenced_sink.write.task import TaskInfo, write_task
from pyspark_fenced_sink.write.transaction import WriteTransaction

__all__ = [
    "SCHEMA",
    "SPARK_BATCH_ROWS",
    "Target",
    "catalog_of",
    "commit",
    "open_catalog",
    "open_target",
    "plan",
    "plan_options",
    "postgres_target",
    "rows",
    "sink_write",
    "stream_batch",
    "table_ids",
    "target_options",
    "write_planned",
    "write_tasks",
]

#: A warehouse path (embedded SQLite catalog) or ``catalog.*`` sink options.
Target = str | Mapping[str, str]

#: Rows per Arrow batch, as Spark sends them (``spark.sql.execution.arrow.maxRecordsPerBatch``).
SPARK_BATCH_ROWS = 10_000

_KEYWORDS = {"writer_id": WRITER_ID, "writer_batch_id": WRITER_BATCH_ID}


def _spark_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("id", LongType(), True), StructField("writer", StringType(), True)])


#: The harness's default DataFrame schema: ``id`` long, ``writer`` string.
SCHEMA = _spark_schema()


def rows(writer: str, start: int, count: int) -> pa.Table:
    """``count`` rows of :data:`SCHEMA` with ids ``start..`` tagged with ``writer``."""
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "writer": [writer] * count})


def target_options(target: Target) -> dict[str, str]:
    """The sink options that select ``target``'s catalog."""
    return {WAREHOUSE: target} if isinstance(target, str) else dict(target)


def catalog_of(target: Target) -> CatalogConfig:
    """The validated catalog configuration of ``target``."""
    return catalog_options(lowered(target_options(target)))


def open_catalog(target: Target) -> Any:
    """The (per-process cached) catalog the sink uses for ``target``."""
    from pyspark_fenced_sink.iceberg.catalogs import load_catalog

    return load_catalog(catalog_of(target))


def open_target(target: Target, table: str, **kwargs: Any) -> Any:
    """``open_table`` for ``table`` of ``target``: an ``OpenedTable`` (commit context, port, view)."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table

    return open_table(catalog_of(target), table, **kwargs)


def postgres_target(uri: str, warehouse: str) -> dict[str, str]:
    """``catalog.*`` options for a pyiceberg SqlCatalog on PostgreSQL with a local warehouse."""
    return {"catalog.type": "sql", "catalog.uri": uri, "catalog.warehouse": f"file://{warehouse}"}


def _options(
    target: Target, table: str, options: Mapping[str, Any] | None, keywords: Mapping[str, Any]
) -> dict[str, str]:
    out = {**target_options(target), TABLE: table}
    out.update({str(k): str(v) for k, v in (options or {}).items()})
    out.update({_KEYWORDS.get(k, k.replace("_", "-")): str(v) for k, v in keywords.items()})
    return out


def plan(
    target: Target,
    table: str,
    options: Mapping[str, Any] | None = None,
    *,
    schema: Any = None,
    overwrite: bool = False,
    streaming: bool = False,
    **keywords: Any,
) -> WriteTransaction:
    """Begin a write to ``table`` of ``target`` with ``schema`` (default :data:`SCHEMA`), as Spark's planning does."""
    return plan_options(
        _options(target, table, options, keywords), schema=schema, overwrite=overwrite, streaming=streaming
    )


def plan_options(
    options: Mapping[str, Any], *, schema: Any = None, overwrite: bool = False, streaming: bool = False
) -> WriteTransaction:
    """Begin a write with the sink's raw ``options`` (as Spark passes them) and ``schema`` (default :data:`SCHEMA`)."""
    return begin_write(options, SCHEMA if schema is None else schema, overwrite, streaming=streaming)


def write_tasks(
    p: WriteTransaction,
    data: pa.Table,
    tasks: int = 2,
    *,
    batch: int | None = None,
    run: str | None = None,
    query: str | None = None,
) -> list[FencedLakeCommitMessage]:
    """Split ``data`` over ``tasks`` tasks and write each as an executor would (Spark-sized Arrow batches)."""
    out = []
    step = max(1, -(-data.num_rows // tasks))
    for t in range(tasks):
        part = data.slice(t * step, step)
        result = write_task(p.spec, iter(part.to_batches(max_chunksize=SPARK_BATCH_ROWS)), TaskInfo(t, t, batch))
        out.append(
            FencedLakeCommitMessage(
                files=result.files,
                rows=result.rows,
                bytes=result.bytes,
                task=t,
                run=run or None,
                query=query or None,
                deletes=result.deletes,
            )
        )
    return out


def commit(
    p: WriteTransaction, messages: list[FencedLakeCommitMessage], *, batch_id: int | None = None, abort: bool = True
) -> Any:
    """The commit worker: commit the tasks' files; returns the CommitResult.

    With ``abort`` (default), Spark's ``abort()`` follows a failed commit, as Spark does.
    """
    done = written(messages, p.opts.table)
    try:
        return p.commit(done, batch_id=batch_id)
    except BaseException:
        if abort:
            p.abort(done, batch_id=batch_id)
        raise


def write_planned(p: WriteTransaction, data: pa.Table, tasks: int = 2) -> Any:
    """The tasks and the commit of a planned batch write; returns the CommitResult."""
    return commit(p, write_tasks(p, data, tasks))


def sink_write(
    target: Target,
    table: str,
    data: pa.Table,
    options: Mapping[str, Any] | None = None,
    *,
    overwrite: bool = False,
    tasks: int = 2,
    schema: Any = None,
    **keywords: Any,
) -> Any:
    """One complete batch write (plan, tasks, commit); returns the CommitResult or raises the sink's error."""
    p = plan(target, table, options, schema=schema, overwrite=overwrite, **keywords)
    return write_planned(p, data, tasks)


def stream_batch(
    target: Target,
    table: str,
    writer: str,
    batch: int,
    data: pa.Table,
    *,
    run: str,
    query: str,
    options: Mapping[str, Any] | None = None,
    **keywords: Any,
) -> Any:
    """Micro-batch ``batch`` of a streaming run, as Spark's planning side, executors and commit worker run it."""
    p = plan(target, table, {WRITER_ID: writer, **(options or {})}, streaming=True, **keywords)
    return commit(p, write_tasks(p, data, batch=batch, run=run, query=query), batch_id=batch)


def table_ids(target: Target, table: str) -> list[int]:
    """All ids in the table, sorted (read back through pyiceberg)."""
    t = open_catalog(target).load_table(table)
    return sorted(t.scan().to_arrow().column("id").to_pylist())


# ---------------------------------------------------------------------------------------------- subprocess


def _result_json(result: Any, **extra: Any) -> str:
    return json.dumps(
        {
            "ok": True,
            **extra,
            "outcome": result.outcome.name,
            "seq": result.seq,
            "group": result.group,
            "conflicts": result.conflicts,
            "attempts": result.attempts,
            "by_peer": result.by_peer,
            "for_peers": result.for_peers,
            "latency_ms": result.latency_ms,
            "catalog_commits": result.catalog_commits,
        }
    )


def _error_json(error: BaseException, **extra: Any) -> str:
    return json.dumps({"ok": False, **extra, "error": type(error).__name__, "message": str(error)})


def _wait_for_start() -> None:
    """Block until ``$FENCEDLAKE_TEST_START`` exists (lets a parent release many processes at once)."""
    start = os.environ.get("FENCEDLAKE_TEST_START")
    deadline = time.monotonic() + 120
    while start and not os.path.exists(start) and time.monotonic() < deadline:
        time.sleep(0.01)


def _stream_main(argv: list[str]) -> None:
    """``--stream WAREHOUSE TABLE WRITER BASE COUNT OPTIONS_JSON FIRST_BATCH BATCHES``: one streaming run.

    Batch b holds ids ``BASE + b*COUNT ..`` (the same rows on every replay, as Spark's sources guarantee).
    """
    warehouse, table, writer, base, count, options_json, first, batches = argv[:8]
    options: dict[str, Any] = json.loads(options_json)
    run, query = uuid.uuid4().hex, f"query-{writer}"
    _wait_for_start()
    for b in range(int(first), int(first) + int(batches)):
        data = rows(writer, int(base) + b * int(count), int(count))
        try:
            result = stream_batch(warehouse, table, writer, b, data, run=run, query=query, options=options)
            print(_result_json(result, batch=b), flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the parent test, which asserts on it
            print(_error_json(e, batch=b), flush=True)
            return


def main(argv: list[str]) -> None:
    """``python -m pyspark_fenced_sink.testing.harness WAREHOUSE TABLE WRITER START COUNT [OPTIONS_JSON [REPEAT]]``.

    Makes REPEAT (default 1) writes of COUNT rows each, ids contiguous from START; prints one
    JSON line per write. With ``writer.batch-id`` in the options, write i uses batch id + i.
    ``--stream ...`` runs a streaming run instead (:func:`_stream_main`).
    """
    if argv[:1] == ["--stream"]:
        _stream_main(argv[1:])
        return
    warehouse, table, writer, start, count = argv[:5]
    options: dict[str, Any] = json.loads(argv[5]) if len(argv) > 5 else {}
    repeat = int(argv[6]) if len(argv) > 6 else 1
    first_batch = options.get(WRITER_BATCH_ID)
    _wait_for_start()
    for i in range(repeat):
        if first_batch is not None:
            options[WRITER_BATCH_ID] = int(first_batch) + i
        lo = int(start) + i * int(count)
        try:
            print(_result_json(sink_write(warehouse, table, rows(writer, lo, int(count)), options)), flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the parent test, which asserts on it
            print(_error_json(e), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
