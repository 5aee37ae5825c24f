"""Drive the sink's driver and executor steps without a JVM (tests and subprocess workers).

``sink_write`` runs exactly what Spark runs for ``df.write.format("fencedlake")``:
``driver.plan_write`` (planning, on the driver), ``executor.write_task`` per
task, then ``driver.commit_files`` (the commit worker) — only the transport
between them is missing. Used by in-process tests, multi-process stress tests
and crash tests (as ``python -m tests.sinkutil``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink.catalogs import embedded_catalog
from pyspark_fenced_sink.driver import WritePlan, abort_files, commit_files, plan_write
from pyspark_fenced_sink.executor import TaskInfo, write_task
from pyspark_fenced_sink.messages import FencedLakeCommitMessage

#: Fail points of a batch write, in protocol order, and whether the writer's WAL entry is durable when it fires
#: (a crash there leaves work the next committer must finish). Crash matrices in tests/ and integration/ use it.
DURABLE_AT = {
    "executor.after-file-written": False,
    "driver.after-open": False,
    "commit.before-wal-put": False,
    "commit.after-wal-put": True,
    "commit.before-catalog-commit": True,
    "commit.after-manifests-written": True,
    "commit.after-catalog-commit": True,
}

SCHEMA = StructType([StructField("id", LongType(), True), StructField("writer", StringType(), True)])


def rows(writer: str, start: int, count: int) -> pa.Table:
    """``count`` rows with ids ``start..`` tagged with ``writer``."""
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "writer": [writer] * count})


def plan(warehouse: str, table: str, *, overwrite: bool = False, **options: Any) -> WritePlan:
    opts = {"warehouse": warehouse, "table": table, **{k.replace("_", "-"): str(v) for k, v in options.items()}}
    if "writer-id" in opts:
        opts["writer.id"] = opts.pop("writer-id")
    if "writer-batch-id" in opts:
        opts["writer.batch-id"] = opts.pop("writer-batch-id")
    return plan_write(opts, SCHEMA, overwrite, streaming=False)


def task_messages(
    p: WritePlan, data: pa.Table, tasks: int = 2, *, batch: int | None = None, run: str = "", query: str = ""
) -> list[FencedLakeCommitMessage]:
    """Split ``data`` over ``tasks`` tasks and write each (executor step); streaming passes batch/run/query."""
    out = []
    step = max(1, -(-data.num_rows // tasks))
    for t in range(tasks):
        part = data.slice(t * step, step)
        result = write_task(p.spec, iter(part.to_batches()), TaskInfo(t, t, batch))
        out.append(
            FencedLakeCommitMessage(
                files=result.files, rows=result.rows, bytes=result.bytes, task=t, run=run or None, query=query or None
            )
        )
    return out


def stream_batch(
    warehouse: str, table: str, writer: str, batch: int, data: pa.Table, *, run: str, query: str, **options: Any
) -> Any:
    """Micro-batch ``batch`` of a streaming run, as Spark's planning side, executors and commit worker do it."""
    opts = {"warehouse": warehouse, "table": table, "writer.id": writer, **options}
    p = plan_write(opts, SCHEMA, False, streaming=True)
    messages = task_messages(p, data, batch=batch, run=run, query=query)
    try:
        return commit_files(p, messages, batch_id=batch)
    except BaseException:
        abort_files(p, messages, batch_id=batch)
        raise


def sink_write(warehouse: str, table: str, data: pa.Table, *, overwrite: bool = False, **options: Any) -> Any:
    """One complete batch write; returns the CommitResult (or raises the sink's error)."""
    return write_planned(plan(warehouse, table, overwrite=overwrite, **options), data)


def write_planned(p: WritePlan, data: pa.Table) -> Any:
    """The tasks and the commit of a planned batch write; a failed commit is aborted, as Spark does."""
    messages = task_messages(p, data)
    try:
        return commit_files(p, messages)
    except BaseException:
        abort_files(p, messages)
        raise


def table_ids(warehouse: str, table: str) -> list[int]:
    """All ids in the table, sorted (read back through pyiceberg)."""
    t = embedded_catalog(warehouse).load_table(table)
    return sorted(t.scan().to_arrow().column("id").to_pylist())


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
            "helped": result.helped,
            "latency_ms": result.latency_ms,
            "catalog_commits": result.catalog_commits,
        }
    )


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
            result = stream_batch(warehouse, table, writer, b, data, run=run, query=query, **options)
            print(_result_json(result, batch=b), flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the parent test, which asserts on it
            print(json.dumps({"ok": False, "batch": b, "error": type(e).__name__, "message": str(e)}), flush=True)
            return


def main(argv: list[str]) -> None:
    """``python -m tests.sinkutil WAREHOUSE TABLE WRITER START COUNT [OPTIONS_JSON [REPEAT]]``.

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
    first_batch = options.get("writer.batch-id")
    _wait_for_start()
    for i in range(repeat):
        if first_batch is not None:
            options["writer.batch-id"] = int(first_batch) + i
        lo = int(start) + i * int(count)
        try:
            print(_result_json(sink_write(warehouse, table, rows(writer, lo, int(count)), **options)), flush=True)
        except Exception as e:  # noqa: BLE001 - reported to the parent test, which asserts on it
            print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
