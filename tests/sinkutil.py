"""Drive the sink's driver and executor steps without a JVM (tests and subprocess workers).

``sink_write`` runs exactly what Spark runs for ``df.write.format("fencedlake")``:
``driver.plan_write`` (planning, on the driver), ``executor.write_task`` per
task, then ``driver.commit_files`` (the commit worker) — only the transport
between them is missing. Used by in-process tests, multi-process stress tests
and crash tests (as ``python -m tests.sinkutil``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink.catalogs import embedded_catalog
from pyspark_fenced_sink.driver import WritePlan, abort_files, commit_files, plan_write
from pyspark_fenced_sink.executor import TaskInfo, write_task
from pyspark_fenced_sink.messages import FencedLakeCommitMessage

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


def task_messages(p: WritePlan, data: pa.Table, tasks: int = 2) -> list[FencedLakeCommitMessage]:
    """Split ``data`` over ``tasks`` tasks and write each (executor step)."""
    out = []
    step = max(1, -(-data.num_rows // tasks))
    for t in range(tasks):
        part = data.slice(t * step, step)
        result = write_task(p.spec, iter(part.to_batches()), TaskInfo(t, t, None))
        out.append(FencedLakeCommitMessage(files=result.files, rows=result.rows, bytes=result.bytes, task=t))
    return out


def sink_write(warehouse: str, table: str, data: pa.Table, *, overwrite: bool = False, **options: Any) -> Any:
    """One complete batch write; returns the CommitResult (or raises the sink's error)."""
    p = plan(warehouse, table, overwrite=overwrite, **options)
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


def main(argv: list[str]) -> None:
    """``python -m tests.sinkutil WAREHOUSE TABLE WRITER START COUNT [OPTIONS_JSON]``: one write, result as JSON."""
    warehouse, table, writer, start, count = argv[:5]
    options: Mapping[str, Any] = json.loads(argv[5]) if len(argv) > 5 else {}
    try:
        result = sink_write(warehouse, table, rows(writer, int(start), int(count)), **options)
        print(json.dumps({"ok": True, "outcome": result.outcome.name, "seq": result.seq, "group": result.group,
                          "conflicts": result.conflicts, "attempts": result.attempts, "by_peer": result.by_peer,
                          "latency_ms": result.latency_ms, "catalog_commits": result.catalog_commits}))
    except Exception as e:  # reported to the parent test, which asserts on it
        print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}))


if __name__ == "__main__":
    main(sys.argv[1:])
