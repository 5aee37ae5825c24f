"""What a new user does first, run in a fresh venv that holds only the built wheel (scripts/wheel_check.sh).

No test extras, no checkout on ``sys.path``: every import below must come from
the wheel's declared dependencies. Steps (each prints one line; any failure
exits non-zero naming the step):

1. import every module of the package (an undeclared runtime import fails here);
2. ``fencedlake --version`` and ``--help`` from the installed console script;
3. a batch write through real Spark: ``df.write.format("fencedlake")``, no
   ``register()`` call (the format registers itself), then a second write from
   a worker thread using the documented one-call way;
4. a streaming write (``writeStream.format("fencedlake")``, ``availableNow``);
5. both read back through pyiceberg (a dependency) with the exact ids;
6. both read back through ``spark.read.format("fencedlake")`` (with a pushed-down
   filter) and ``spark.readStream.format("fencedlake")``.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path


def step(name: str) -> None:
    print(f"[wheel] {name}", flush=True)


def main() -> int:
    import pyspark_fenced_sink

    here = Path(pyspark_fenced_sink.__file__).resolve().parent
    if "site-packages" not in str(here):
        raise SystemExit(f"[wheel] the package was imported from {here}, not from the installed wheel")
    step(f"installed at {here}")
    modules = [m.name for m in pkgutil.walk_packages([str(here)], "pyspark_fenced_sink.")]
    for name in modules:
        importlib.import_module(name)
    step(f"imported all {len(modules)} modules")

    cli = shutil.which("fencedlake")
    if cli is None:
        raise SystemExit("[wheel] the fencedlake console script is not on PATH")
    version = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([cli, "--help"], capture_output=True, text=True, check=True)
    step(f"console script: {version}")

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pyspark_fenced_sink import activate_session, tune_session

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tune_session(spark)
    work = Path(tempfile.mkdtemp(prefix="fencedlake-wheel-"))
    wh = str(work / "warehouse")

    spark.range(0, 1000).selectExpr("id", "'batch' AS source").write.format("fencedlake").mode("append").option(
        "warehouse", wh
    ).save("smoke.events")
    errors: list[BaseException] = []

    def from_a_thread() -> None:
        try:
            activate_session(spark)
            frame = spark.range(1000, 1500).selectExpr("id", "'thread' AS source")
            frame.write.format("fencedlake").mode("append").option("warehouse", wh).save("smoke.events")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=from_a_thread)
    worker.start()
    worker.join()
    if errors:
        raise SystemExit(f"[wheel] the write from a thread failed: {errors[0]}")
    step("batch writes landed (main thread and a worker thread)")

    inp = work / "in"
    inp.mkdir()
    (inp / "part-0.json").write_text("\n".join(json.dumps({"id": 5000 + i, "source": "stream"}) for i in range(300)))
    stream = spark.readStream.schema("id long, source string").json(str(inp))
    query = (
        stream.writeStream.format("fencedlake")
        .option("warehouse", wh)
        .option("writer.id", "smoke-stream")
        .option("checkpointLocation", str(work / "chk"))
        .trigger(availableNow=True)
        .start("smoke.stream")
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise SystemExit(f"[wheel] the streaming write failed: {query.exception()}")
    step("streaming write landed")

    from pyiceberg.catalog.sql import SqlCatalog

    # The embedded catalog is pyiceberg SqlCatalog "fencedlake" (tables are stored under the catalog name).
    catalog = SqlCatalog("fencedlake", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    batch_ids = sorted(catalog.load_table("smoke.events").scan().to_arrow().column("id").to_pylist())
    stream_ids = sorted(catalog.load_table("smoke.stream").scan().to_arrow().column("id").to_pylist())
    if batch_ids != list(range(1500)) or stream_ids != list(range(5000, 5300)):
        raise SystemExit(
            f"[wheel] read back {len(batch_ids)} batch rows (want 1500) and {len(stream_ids)} stream rows (want 300)"
        )
    status = subprocess.run(
        [cli, "status", "smoke.events", "--warehouse", wh, "--json"], capture_output=True, text=True, check=True
    )
    if json.loads(status.stdout)["committed_upper"] < 2:
        raise SystemExit(f"[wheel] fencedlake status reports too little: {status.stdout[:300]}")
    step("read back exactly (pyiceberg) and `fencedlake status` works")

    events = spark.read.format("fencedlake").option("warehouse", wh).load("smoke.events")
    read_ids = sorted(r.id for r in events.collect())
    thread_rows = events.where("source = 'thread'").count()
    replay = (
        spark.readStream.format("fencedlake")
        .option("warehouse", wh)
        .load("smoke.stream")
        .writeStream.format("memory")
        .queryName("smoke_replay")
        .trigger(availableNow=True)
        .start()
    )
    replay.awaitTermination(300)
    streamed = sorted(r.id for r in spark.table("smoke_replay").collect())
    if read_ids != list(range(1500)) or thread_rows != 500 or streamed != list(range(5000, 5300)):
        raise SystemExit(
            f"[wheel] fencedlake read {len(read_ids)} rows (want 1500), {thread_rows} thread rows (want 500), "
            f"streamed {len(streamed)} (want 300)"
        )
    step("read back exactly with spark.read and spark.readStream format('fencedlake')")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
