"""One application under test, in its own OS process, writing through its own network links.

``python -m integration.faults.app < SPEC_JSON`` (the spec holds catalog URIs with passwords:
never on a command line). Every attempt of every write prints one history record
(:func:`integration.faults.history.attempt`) as a JSON line; ``{"ready": pid}`` once imports are done.
The app waits for ``start_file``, then writes until ``stop_file`` appears (at least ``min_writes``
per writer), then exits. Kinds:

* ``lane`` -- the sink's real driver and executor steps without a JVM (``testing.harness``):
  ``threads`` writers; ``stable`` ones are idempotent jobs (``writer.id`` + ``writer.batch-id``,
  re-run with the same batch id after any error, up to ``retries`` times), the others anonymous
  batch writers whose errors stand.
* ``spark`` -- a real Spark application (local[2]): idempotent batch jobs on a thread, a streaming
  query over one JSON file per input (``maxFilesPerTrigger`` 1, ``availableNow``; after a failure the
  query is started again from its checkpoint), and upserts by key with ``upsert-order`` on a second
  table.

Ids: app ``base`` + writer ``w`` x 100,000 + write ``i`` x ``rows``: every write carries its own ids.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from integration.faults.history import attempt

_out = threading.Lock()


def _emit(record: dict[str, Any]) -> None:
    with _out:
        print(json.dumps(record), flush=True)


def _writes(spec: dict[str, Any]) -> Callable[[int], bool]:
    """``more(i)``: whether a writer that did ``i`` writes goes on."""
    stop = Path(spec["stop_file"])
    least, most = int(spec.get("min_writes", 1)), int(spec.get("max_writes", 1000))
    return lambda i: i < most and (i < least or not stop.exists())


def _retrying(
    spec: dict[str, Any], op: str, ids: tuple[int, int], t0: float, fn: Callable[[], Any], **fields: Any
) -> None:
    """Attempt ``fn``; re-run it (the same write, the same batch id) after an error, up to ``retries`` times."""
    for n in range(int(spec.get("retries", 0)) + 1):
        record = attempt(op, ids, t0, fn, app=spec["app"], attempt=n, **fields)
        _emit(record)
        if record["ok"] or record.get("error") in ("FencedWriterError", "InvalidOptionsError"):
            return
        time.sleep(float(spec.get("retry_sleep_s", 1.0)))


# ------------------------------------------------------------------ lane: no JVM


def _lane(spec: dict[str, Any], t0: float) -> None:
    from pyspark_fenced_sink.spark.messages import written
    from pyspark_fenced_sink.testing.harness import commit, plan_options, rows, write_tasks

    more, count, base = _writes(spec), int(spec["rows"]), int(spec["base"])

    def write(options: dict[str, str], start: int) -> str:
        plan = plan_options(options)
        messages = write_tasks(plan, rows(spec["app"], start, count), 2)
        try:
            return commit(plan, messages, abort=False).outcome.name
        except BaseException:
            plan.abort(written(messages, plan.opts.table))  # what Spark does after a failed commit()
            raise

    def writer(w: int) -> None:
        stable = spec.get("stable", False)
        i = 0
        while more(i):
            start = base + w * 100_000 + i * count
            options = dict(spec["options"])
            if stable:
                options.update({"writer.id": f"{spec['app']}-w{w}", "writer.batch-id": str(i)})
                _retrying(spec, f"w{w}-{i}", (start, count), t0, lambda o=options, s=start: write(o, s))
            else:
                _emit(attempt(f"w{w}-{i}", (start, count), t0, lambda o=options, s=start: write(o, s), app=spec["app"]))
            i += 1
            time.sleep(float(spec.get("gap_s", 0.5)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(int(spec.get("threads", 1)))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


# ------------------------------------------------------------------ spark: a real Spark application


def _session() -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("fencedlake-network-faults")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def _spark(spec: dict[str, Any]) -> None:
    from pyspark_fenced_sink import activate_session, tune_session

    spark = _session()
    tune_session(spark)
    options, upsert_options = dict(spec["options"]), dict(spec["upsert_options"])
    table, upsert_table = options.pop("table"), upsert_options.pop("table")
    more, count, base, app = _writes(spec), int(spec["rows"]), int(spec["base"]), spec["app"]
    # Warm up before "ready" (Python workers started, the upsert table created with its key, no rows), so that
    # the writes the schedule meets are not a cold application's first ones.
    spark.range(0).selectExpr("id", "CAST(0 AS BIGINT) AS v").write.format("fencedlake").mode("append").options(
        **upsert_options
    ).save(upsert_table)
    _emit({"ready": os.getpid()})
    _wait_start(spec)
    t0 = time.monotonic()  # the schedule starts now: attempt times are relative to it, as the lanes' are

    def batch() -> None:
        activate_session(spark)
        i = 0
        while more(i):
            start = base + i * count
            opts = {**options, "writer.id": f"{app}-batch", "writer.batch-id": str(i)}

            def write(start: int = start, opts: dict[str, str] = opts) -> str:
                df = spark.range(start, start + count, 1, 2).selectExpr("id", f"'{app}' AS writer")
                df.write.format("fencedlake").mode("append").options(**opts).save(table)
                return "COMMITTED"

            _retrying(spec, f"batch-{i}", (start, count), t0, write, kind="batch")
            i += 1
            time.sleep(float(spec.get("gap_s", 0.5)))

    def upserts() -> None:
        activate_session(spark)
        keys = int(spec.get("upsert_keys", 20))
        i = 0
        while more(i):
            opts = {**upsert_options, "writer.id": f"{app}-upsert", "writer.batch-id": str(i)}

            def write(i: int = i, opts: dict[str, str] = opts) -> str:
                df = spark.range(0, keys, 1, 1).selectExpr("id", f"CAST({i} AS BIGINT) AS v")
                df.write.format("fencedlake").mode("append").options(**opts).save(upsert_table)
                return "COMMITTED"

            _retrying(spec, f"upsert-{i}", (0, keys), t0, write, kind="upsert", value=i)
            i += 1
            time.sleep(float(spec.get("gap_s", 0.5)) * 2)

    threads = [threading.Thread(target=batch), threading.Thread(target=upserts)]
    for th in threads:
        th.start()
    _stream(spark, spec, options, table, t0, more)
    for th in threads:
        th.join()
    spark.stop()


def _stream(spark: Any, spec: dict[str, Any], options: dict[str, str], table: str, t0: float, more: Any) -> None:
    """Feed one JSON file per input; after each, run the query until it has taken it (restarting after errors)."""
    inputs, checkpoint = Path(spec["stream_dir"]), spec["checkpoint"]
    inputs.mkdir(parents=True, exist_ok=True)
    count, base, app = int(spec["rows"]), int(spec["base"]) + 500_000, spec["app"]
    n = 0
    while more(n):
        start = base + n * count
        lines = "".join(json.dumps({"id": i, "writer": f"{app}-stream"}) + "\n" for i in range(start, start + count))
        (inputs / f".input-{n:05d}.json").write_text(lines)
        os.replace(inputs / f".input-{n:05d}.json", inputs / f"input-{n:05d}.json")

        def run() -> str:
            query = (
                spark.readStream.schema("id long, writer string")
                .option("maxFilesPerTrigger", 1)
                .json(str(inputs))
                .writeStream.format("fencedlake")
                .options(**options)
                .option("writer.id", f"{app}-stream")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start(table)
            )
            query.awaitTermination()
            return "COMMITTED"

        # The input's rows land exactly once whichever run of the query commits its micro-batch.
        _retrying({**spec, "retries": 20}, f"stream-{n}", (start, count), t0, run, kind="stream", input=n)
        n += 1
        time.sleep(float(spec.get("gap_s", 0.5)))
    _emit({"app": app, "stream_inputs": n, "writer_id": f"{app}-stream"})


# ------------------------------------------------------------------ main


def _wait_start(spec: dict[str, Any]) -> None:
    deadline = time.monotonic() + 600
    while not os.path.exists(spec["start_file"]) and time.monotonic() < deadline:
        time.sleep(0.02)


def main() -> int:
    """Run the app the spec on stdin describes."""
    spec = json.loads(sys.stdin.read())
    if spec["kind"] == "lane":
        for module in ("pyiceberg.catalog.sql", "s3fs", "pyspark_fenced_sink.testing.harness"):
            __import__(module)
        _emit({"ready": os.getpid()})
        _wait_start(spec)
        _lane(spec, time.monotonic())
    else:
        _spark(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
