"""Streaming upserts with real Spark: CDC-like input files, queries, and a subprocess driver (tests).

A query reads JSON-lines files (``id long, ts long, v string, op string``) from
an input directory, one file per micro-batch, and upserts them with
``writeStream.format("fencedlake")`` keyed by ``id``, ordered by ``ts``, rows
with ``op = 'D'`` deleting their key. ``python -m tests.spark.upsertutil ...``
runs one such query in a driver process of its own (a whole Spark application a
test can ``kill -9``); it prints one JSON line, ``{"ok": true}`` or the error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["OPTIONS", "SCHEMA_DDL", "expected_rows", "main", "start_upsert_query", "write_changes"]

SCHEMA_DDL = "id long, ts long, v string, op string"
OPTIONS = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}

Change = tuple[int, int, str, str]  # (id, ts, v, op)
_last_mtime_ns = 0


def write_changes(input_dir: str | Path, name: str, changes: Sequence[Change]) -> Path:
    """Publish one input file (atomically, newest modification time last: the file source's order)."""
    directory = Path(input_dir)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i, "ts": t, "v": v, "op": op}) + "\n" for i, t, v, op in changes))
    global _last_mtime_ns
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 2_000_000)
    os.utime(tmp, ns=(_last_mtime_ns, _last_mtime_ns))
    final = directory / f"{name}.json"
    os.replace(tmp, final)
    return final


def expected_rows(changes: Iterable[Change]) -> list[tuple[int, int, str]]:
    """The serial oracle: per key, the change with the greatest ts wins; absent if it is a delete (ts unique)."""
    best: dict[int, Change] = {}
    for change in changes:
        if change[0] not in best or change[1] > best[change[0]][1]:
            best[change[0]] = change
    return sorted((i, t, v) for i, t, v, op in best.values() if op != "D")


def start_upsert_query(
    spark: Any,
    *,
    input_dir: str,
    checkpoint: str,
    warehouse: str,
    table: str,
    writer_id: str,
    trigger: str = "available-now",
    failpoints: str = "",
) -> Any:
    """Start an upserting query (``trigger``: ``available-now`` or ``processing:MS``); returns the StreamingQuery."""
    Path(input_dir).mkdir(parents=True, exist_ok=True)
    df = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", "1").json(input_dir)
    writer = (
        df.writeStream.format("fencedlake")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .option("warehouse", warehouse)
        .option("writer.id", writer_id)
    )
    for key, value in OPTIONS.items():
        writer = writer.option(key, value)
    if failpoints:
        writer = writer.option("test.failpoints", failpoints)
    if trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(trigger.split(':', 1)[1])} milliseconds")
    return writer.start(table)


def main(argv: Sequence[str]) -> int:
    """Run one upserting query until the stop file exists, it fails, or the timeout; 0 = ok, 3 = failed."""
    p = argparse.ArgumentParser(prog="python -m tests.spark.upsertutil")
    for flag in ("--input", "--checkpoint", "--warehouse", "--table", "--writer"):
        p.add_argument(flag, required=True)
    p.add_argument("--trigger", default="processing:200")
    p.add_argument("--failpoints", default="")
    p.add_argument("--until-file", default="")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(list(argv))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.spark.streamutil import watch_query
    from tests.spark.support import error_text, start_spark

    spark = start_spark("fencedlake-upsertutil")
    query = start_upsert_query(
        spark,
        input_dir=args.input,
        checkpoint=args.checkpoint,
        warehouse=args.warehouse,
        table=args.table,
        writer_id=args.writer,
        trigger=args.trigger,
        failpoints=args.failpoints,
    )
    print(json.dumps({"started": True, "run": str(query.runId)}), flush=True)
    error = watch_query(query, args.until_file, args.timeout)
    if error is not None:
        print(json.dumps({"ok": False, "message": error_text(error)[-4000:]}), flush=True)
        return 3
    print(json.dumps({"ok": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
