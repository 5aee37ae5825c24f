"""A Spark application on the standalone cluster: a batch writer and a streaming writer at once, one table.

``python -m integration.cluster_app MASTER OPTIONS_JSON INPUT_DIR CHECKPOINT BATCH_ROWS`` (run by
``integration/test_cluster.py``, which kills a worker while this runs). The batch write appends ids
``0 .. BATCH_ROWS-1`` in 8 tasks; the stream copies every JSON file of INPUT_DIR (one file per
micro-batch, ``availableNow``) with ``writer.id`` ``cluster-stream``. Every data file a task writes
is followed by a pause (fail point ``executor.after-file-written=sleep``) so that tasks are running
when the worker dies. Prints ``{"event": "batch-started"}`` when the batch job is submitted and one
JSON line with the outcome at the end; exits non-zero if either writer failed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any


def _session(master: str) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("fencedlake-it-cluster")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.task.maxFailures", "8")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def main(argv: list[str]) -> int:
    """Run both writers; print the outcome as JSON; 0 if both succeeded."""
    master, options_json, input_dir, checkpoint, batch_rows = argv
    options: dict[str, str] = json.loads(options_json)
    table = options.pop("table")
    slow = {**options, "test.failpoints": "executor.after-file-written=sleep:3000"}
    spark = _session(master)
    from pyspark_fenced_sink import activate_session, fencedlake_error, tune_session

    tune_session(spark)
    # The table first, with the optional columns the stream's JSON rows need (no rows, no data file).
    spark.createDataFrame([], "id long, src string").write.format("fencedlake").mode("append").options(**options).save(
        table
    )
    errors: dict[str, str] = {}

    def batch() -> None:
        activate_session(spark)
        try:
            df = spark.range(0, int(batch_rows), 1, 8).selectExpr("id", "'batch' AS src")
            print(json.dumps({"event": "batch-started", "at": time.time()}), flush=True)
            df.write.format("fencedlake").mode("append").options(**slow).save(table)
        except Exception as e:
            errors["batch"] = str(fencedlake_error(e) or e)[:2000]

    thread = threading.Thread(target=batch)
    thread.start()
    try:
        query = (
            spark.readStream.schema("id long, src string")
            .option("maxFilesPerTrigger", 1)
            .json(input_dir)
            .writeStream.format("fencedlake")
            .options(**slow)
            .option("writer.id", "cluster-stream")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(table)
        )
        query.awaitTermination()
        if query.exception() is not None:
            errors["stream"] = str(query.exception())[:2000]
    except Exception as e:
        errors["stream"] = str(fencedlake_error(e) or e)[:2000]
    thread.join()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print(json.dumps({"event": "done", "errors": errors, "executors_at_end": executors}), flush=True)
    spark.stop()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
