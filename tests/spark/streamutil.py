"""Drive real Spark Structured Streaming queries into the sink (tests and a subprocess driver).

A query reads JSON files (``id long, k string``) from an input directory, one
file per micro-batch (``maxFilesPerTrigger=1``), and writes them with
``writeStream.format("fencedlake")``. The file source is deterministic, as the
sink's exactly-once promise requires: a replayed batch re-reads the same files.
With ``source`` the query reads another fencedlake table instead
(``readStream.format("fencedlake")``, one data file per micro-batch): a
fencedlake -> fencedlake pipeline.

* :func:`write_input` drops a file into the input directory atomically (Spark's
  file source skips names starting with ``_`` or ``.``, so a rename publishes it).
* :func:`start_query` starts the query in a given SparkSession (the test module's).
* ``python -m tests.spark.streamutil ...`` (:func:`main`) runs one query in a fresh
  driver process — its own JVM and Python workers — so a test can kill the
  whole application at a fail point (``pause`` + ``kill -9`` of the process
  group) or run a second incarnation of a query next to the test's own.
  It prints one JSON line: ``{"ok": true}`` or the query's error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEMA_DDL = "id long, k string"

_last_mtime_ns = 0

__all__ = ["SCHEMA_DDL", "input_ids", "main", "start_query", "watch_query", "write_input"]


def write_input(input_dir: str | Path, name: str, ids: Sequence[int], key: str = "k") -> Path:
    """Publish one JSON-lines input file holding ``ids`` (``k`` = ``key``); empty ``ids`` makes an empty file."""
    directory = Path(input_dir)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i, "k": f"{key}{i % 3}"}) + "\n" for i in ids))
    # The file source takes new files oldest first (by modification time, in ms): make publication order it.
    global _last_mtime_ns
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 2_000_000)
    os.utime(tmp, ns=(_last_mtime_ns, _last_mtime_ns))
    final = directory / f"{name}.json"
    os.replace(tmp, final)
    return final


def input_ids(input_dir: str | Path) -> list[int]:
    """Every id in the input directory's published files, sorted (what the table must equal)."""
    out: list[int] = []
    for path in sorted(Path(input_dir).glob("*.json")):
        out.extend(json.loads(line)["id"] for line in path.read_text().splitlines() if line)
    return sorted(out)


def start_query(
    spark: Any,
    *,
    input_dir: str,
    checkpoint: str,
    warehouse: str,
    table: str | None,
    writer_id: str | None,
    trigger: str = "available-now",
    mode: str = "append",
    failpoints: str = "",
    options: dict[str, str] | None = None,
    table_option: bool = False,
    source: str | None = None,
) -> Any:
    """Start the streaming query; returns the StreamingQuery.

    ``trigger``: ``available-now`` or ``processing:MS``. ``mode``: ``append``, or
    ``complete`` / ``update`` over ``count()`` grouped by ``k``. With
    ``table_option`` the table is named by ``.option("table", ...)`` and
    ``start()`` gets no path. With ``source`` the rows come from that fencedlake table of the same
    warehouse, one data file per micro-batch, and ``input_dir`` is not used.
    """
    if source is not None:
        df = (
            spark.readStream.format("fencedlake")
            .option("warehouse", warehouse)
            .option("streaming-max-files-per-micro-batch", "1")
            .load(source)
        )
    else:
        Path(input_dir).mkdir(parents=True, exist_ok=True)  # the file source refuses a missing directory
        df = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", "1").json(input_dir)
    if mode in ("complete", "update"):
        df = df.groupBy("k").count()
    writer = df.writeStream.format("fencedlake").outputMode(mode).option("checkpointLocation", checkpoint)
    writer = writer.option("warehouse", warehouse)
    if writer_id is not None:
        writer = writer.option("writer.id", writer_id)
    if failpoints:
        writer = writer.option("test.failpoints", failpoints)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    if trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    elif trigger.startswith("processing:"):
        writer = writer.trigger(processingTime=f"{int(trigger.split(':', 1)[1])} milliseconds")
    else:
        raise ValueError(f"unknown trigger {trigger!r}: expected available-now or processing:MS")
    if table_option:
        return writer.option("table", table).start()
    return writer.start(table)


def watch_query(query: Any, until_file: str, timeout: float) -> Any:
    """Let ``query`` run until it ends, ``until_file`` exists (if given) or ``timeout`` s pass; then stop it.

    Returns:
        The query's exception (Spark's ``StreamingQueryException``), or None if it did not fail.
    """
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        if until_file and os.path.exists(until_file):
            query.stop()
            break
        try:
            query.awaitTermination(0.2)
        except Exception:  # noqa: BLE001 - a failed query raises here; query.exception() reports it
            break
    error = query.exception()
    if query.isActive:
        query.stop()
    return error


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.spark.streamutil", description="Run one streaming query.")
    p.add_argument("--input", default="", help="JSON input directory (unless --source)")
    p.add_argument("--source", default=None, help="read this fencedlake table of the warehouse instead")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--writer", required=True)
    p.add_argument("--trigger", default="available-now")
    p.add_argument("--failpoints", default="")
    p.add_argument("--timeout", type=float, default=300.0, help="stop the query after this many seconds")
    p.add_argument("--until-file", default="", help="with a processing trigger: stop once this file exists")
    return p.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    """Run one query to its end (availableNow), a stop file, a failure or the timeout; 0 = ok, 3 = failed."""
    args = _parse(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.spark.support import error_text, start_spark

    spark = start_spark("fencedlake-streamutil")
    query = start_query(
        spark,
        input_dir=args.input,
        checkpoint=args.checkpoint,
        warehouse=args.warehouse,
        table=args.table,
        writer_id=args.writer,
        trigger=args.trigger,
        failpoints=args.failpoints,
        source=args.source,
    )
    print(json.dumps({"started": True, "run": str(query.runId), "query": str(query.id)}), flush=True)
    error = watch_query(query, args.until_file, args.timeout)
    if error is not None:
        text = error_text(error)
        kind = next(
            (k for k in ("FencedWriterError", "WriteRejectedError", "CommitOutcomeUnknownError") if k in text),
            type(error).__name__,
        )
        print(json.dumps({"ok": False, "error": kind, "message": text[-4000:]}), flush=True)
        return 3
    print(json.dumps({"ok": True, "batches": len(query.recentProgress)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
