"""Real Spark Structured Streaming tests of the reader: ``spark.readStream.format("fencedlake")``.

The pipeline under test is fencedlake -> fencedlake: a query streams a source
table one data file per micro-batch (``streaming-max-files-per-micro-batch=1``)
into a sink table (``tests/spark/streamutil.py``, ``source=``). Every scenario
ends with the sink compared with the source exactly (count and ids) and with
the sink's invariants checked (``assert_exact``).

Restarts as in production: a later run on the same checkpoint; a replayed
batch (Spark's newest ``commits/`` entry removed: the batch is planned again
from its checkpointed offsets and must read the same files); and the whole
application killed with ``kill -9`` while a read task is paused inside a
micro-batch (fail point ``read.before-file``, a driver subprocess).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pyspark_fenced_sink import ReadRefusedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from tests.spark.streamutil import start_query
from tests.spark.support import (
    assert_exact,
    ids_of,
    kill_application,
    run_expecting_failure,
    run_to_end,
    spawn_driver,
    wait_until,
)

pytestmark = pytest.mark.spark

SOURCE, SINK, WRITER = "db.src", "db.dst", "pipeline"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A fresh warehouse and checkpoint for one test."""
    return {"wh": str(tmp_path / "wh"), "chk": str(tmp_path / "chk")}


def append(wh: str, lo: int, n: int = 5) -> list[int]:
    """One snapshot (one data file) of ``n`` rows ``id, k`` appended to the source with pyiceberg."""
    catalog = embedded_catalog(wh)
    if not catalog.table_exists(SOURCE):
        if not catalog.namespace_exists("db"):
            catalog.create_namespace("db")
        catalog.create_table(SOURCE, schema=pa.schema([("id", pa.int64()), ("k", pa.string())]))
    ids = list(range(lo, lo + n))
    catalog.load_table(SOURCE).append(pa.table({"id": ids, "k": [f"k{i % 3}" for i in ids]}))
    return ids


def pipeline(spark: Any, env: dict[str, str]) -> Any:
    return start_query(
        spark, input_dir="", checkpoint=env["chk"], warehouse=env["wh"], table=SINK, writer_id=WRITER, source=SOURCE
    )


def delete_last_commit(checkpoint: str) -> None:
    """Remove Spark's newest ``commits/N``: the next run replays batch N from its checkpointed offsets."""
    commits = [p for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)


def test_a_fencedlake_to_fencedlake_pipeline_is_exactly_once_across_restarts(spark: Any, env: dict[str, str]) -> None:
    """Three runs on one checkpoint — new appends between them, the last batch replayed — land every row once."""
    expected = append(env["wh"], 0) + append(env["wh"], 10) + append(env["wh"], 20)
    query = pipeline(spark, env)
    run_to_end(query)
    assert len(query.recentProgress) >= 3  # one data file per micro-batch
    assert_exact(env["wh"], SINK, expected)
    expected += append(env["wh"], 30) + append(env["wh"], 40)
    run_to_end(pipeline(spark, env))
    assert_exact(env["wh"], SINK, expected)
    delete_last_commit(env["chk"])
    expected += append(env["wh"], 50)
    run_to_end(pipeline(spark, env))
    assert_exact(env["wh"], SINK, expected)


def test_an_overwrite_in_the_source_stops_the_stream_unless_skipped(spark: Any, env: dict[str, str]) -> None:
    """A full overwrite of the source fails the stream with ReadRefusedError after the rows before it; the skip
    option passes over it and streams the appends after it."""
    wh = env["wh"]
    append(wh, 0)
    spark.range(100, 103).selectExpr("id", "'x' as k").write.format("fencedlake").mode("overwrite").option(
        "warehouse", wh
    ).save(SOURCE)
    append(wh, 200)

    def stream(name: str, **options: str) -> Any:
        reader = spark.readStream.format("fencedlake").option("warehouse", wh)
        for key, value in options.items():
            reader = reader.option(key, value)
        writer = reader.load(SOURCE).writeStream.format("memory").queryName(name)
        return writer.option("checkpointLocation", str(Path(env["chk"]) / name)).trigger(availableNow=True).start()

    text = run_expecting_failure(stream("refused"))
    assert ReadRefusedError.__name__ in text and "overwrite snapshot" in text
    assert sorted(r.id for r in spark.table("refused").collect()) == list(range(5))
    run_to_end(stream("skipped", **{"streaming-skip-overwrite-snapshots": "true"}))
    assert sorted(r.id for r in spark.table("skipped").collect()) == [*range(5), *range(200, 205)]


@pytest.mark.multiprocess
def test_the_pipeline_killed_mid_batch_then_restarted_delivers_every_row_once(
    spark: Any, env: dict[str, str], tmp_path: Path
) -> None:
    """kill -9 of the whole application while a read task is paused inside a micro-batch; more rows arrive; a
    restart on the checkpoint lands every source row in the sink exactly once."""
    wh = env["wh"]
    expected = [i for lo in range(0, 60, 10) for i in append(wh, lo)]
    out = tmp_path / "victim.out"
    args = ["--source", SOURCE, "--checkpoint", env["chk"], "--warehouse", wh, "--table", SINK, "--writer", WRITER]
    victim = spawn_driver(
        [*args, "--timeout", "200"],
        out,
        FENCEDLAKE_FAILPOINTS="read.before-file=pause@3",
        FENCEDLAKE_FAILPOINT_DIR=str(tmp_path),
    )
    marker = tmp_path / "read.before-file.hit"
    try:
        wait_until(lambda: marker.exists() or victim.poll() is not None, 200, "the victim to pause in a read task")
        assert victim.poll() is None, f"the victim never paused: {out.read_text()[-3000:]}"
        time.sleep(0.2)
    finally:
        kill_application(victim, int(marker.read_text() or 0) if marker.exists() else None)
    landed = ids_of(wh, SINK) if embedded_catalog(wh).table_exists(SINK) else []
    assert len(landed) < len(expected) and len(landed) % 5 == 0  # killed mid-stream, whole batches only
    expected += append(wh, 100) + append(wh, 110)
    run_to_end(pipeline(spark, env))
    assert_exact(wh, SINK, expected)
