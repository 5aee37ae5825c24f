"""Upserts with real Spark, batch and streaming (PROTOCOL.md §5.5).

Every table is read back by pyiceberg, DuckDB's iceberg reader, ``spark.read.format("fencedlake")`` and
``read_table``, and compared to an oracle written apart from the code: per key, the change with the
greatest order value wins, and the key is absent if that change deletes it. The proof: three streaming
queries upsert overlapping keys with random order values, one is killed with ``kill -9`` after its
commit landed but before Spark recorded it and restarted (Spark replays that batch), another is forced
to replay its last batch; the final table equals the oracle row for row.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import read_table
from pyspark_fenced_sink.errors import InvalidOptionsError, WriteRejectedError, fencedlake_error
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.testing.invariants import duplicate_keys
from tests.spark.support import (
    ROOT,
    assert_invariants,
    duckdb_rows,
    kill_application,
    run_to_end,
    wait_until,
)
from tests.spark.upsertutil import OPTIONS, SCHEMA_DDL, Change, expected_rows, start_upsert_query, write_changes

pytestmark = pytest.mark.spark


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")


def save(df: Any, wh: str, table: str, mode: str = "append", **options: str) -> None:
    writer = df.write.format("fencedlake").mode(mode).option("warehouse", wh)
    for key, value in {**OPTIONS, **options}.items():
        writer = writer.option(key, value)
    writer.save(table)


def every_reader(spark: Any, wh: str, table: str) -> list[tuple[int, int, str]]:
    """The table's rows as pyiceberg reads them, after checking DuckDB, the data source and read_table agree."""
    t = embedded_catalog(wh).load_table(table)
    rows = sorted((r["id"], r["ts"], r["v"]) for r in t.scan().to_arrow().to_pylist())
    assert sorted((r["id"], r["ts"], r["v"]) for r in duckdb_rows(t.metadata_location)) == rows
    source = spark.read.format("fencedlake").option("warehouse", wh).load(table)
    assert sorted((r.id, r.ts, r.v) for r in source.collect()) == rows
    native = read_table(spark, table, warehouse=wh)
    assert sorted((r.id, r.ts, r.v) for r in native.collect()) == rows
    assert duplicate_keys(t, ["id"]) == []
    return rows


def test_batch_upserts_and_deletes_by_key_for_every_reader(spark: Any, wh: str) -> None:
    """Two batch writes: newer rows replace, an older one is ignored, a delete removes its key."""
    first = [(1, 1, "a", "U"), (2, 5, "b", "U"), (3, 1, "c", "U")]
    second = [(1, 2, "a2", "U"), (2, 4, "stale", "U"), (3, 2, None, "D"), (4, 1, "d", "U"), (4, 3, "d3", "U")]
    save(spark.createDataFrame(first, SCHEMA_DDL), wh, "db.batch")
    save(spark.createDataFrame(second, SCHEMA_DDL), wh, "db.batch")
    assert (
        every_reader(spark, wh, "db.batch")
        == expected_rows(first + second)
        == [(1, 2, "a2"), (2, 5, "b"), (4, 3, "d3")]
    )


def test_batch_upsert_errors_reach_the_caller_typed(spark: Any, wh: str) -> None:
    """Duplicate keys without an order: WriteRejectedError naming the key; upsert options on an overwrite refused."""
    df = spark.createDataFrame([(1, 1, "a", "U"), (1, 2, "b", "U")], SCHEMA_DDL)
    with pytest.raises(Exception) as e:  # noqa: PT011 - Spark wraps it; fencedlake_error unwraps it
        df.write.format("fencedlake").mode("append").option("warehouse", wh).option("upsert-keys", "id").save(
            "db.errors"
        )
    err = fencedlake_error(e.value)
    assert isinstance(err, WriteRejectedError) and "{'id': 1}" in str(err)
    with pytest.raises(Exception) as e:  # noqa: PT011
        save(df, wh, "db.errors", mode="overwrite")
    assert isinstance(fencedlake_error(e.value), InvalidOptionsError)


def test_a_streaming_upsert_replayed_by_spark_is_applied_once(spark: Any, wh: str, tmp_path: Path) -> None:
    """A micro-batch Spark replays (its commit log entry lost) is a duplicate: rows and outcomes exact."""
    inp, chk = tmp_path / "in", tmp_path / "chk"
    batches = [[(1, 1, "a", "U"), (2, 1, "b", "U")], [(1, 3, "a3", "U"), (2, 2, None, "D")]]
    for i, changes in enumerate(batches):
        write_changes(inp, f"b{i}", changes)
    common = {"input_dir": str(inp), "checkpoint": str(chk), "warehouse": wh, "table": "db.stream"}
    run_to_end(start_upsert_query(spark, writer_id="cdc", **common))
    _forget_commit(chk, 1)  # Spark forgets it committed batch 1: the restart replays it, then a new batch
    batches.append([(3, 1, "c", "U")])
    write_changes(inp, "b2", batches[-1])
    run_to_end(start_upsert_query(spark, writer_id="cdc", **common))
    assert every_reader(spark, wh, "db.stream") == expected_rows([c for b in batches for c in b])
    assert expected_rows([c for b in batches for c in b]) == [(1, 3, "a3"), (3, 1, "c")]
    assert "D" in _outcome_codes(wh, "db.stream")
    assert_invariants(wh, "db.stream")


def _forget_commit(checkpoint: Path, batch: int) -> None:
    """Remove batch ``batch`` from a query's commit log (and its checksum): a restart replays the batch."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def _outcome_codes(wh: str, table: str) -> list[str]:
    t = embedded_catalog(wh).load_table(table)
    return [
        part.split(":")[1]
        for s in t.metadata.snapshots
        for part in (s.summary.additional_properties.get("fencedlake.outcomes", "") if s.summary else "").split(",")
        if part
    ]


# ---------------------------------------------------------------------------------------------- the proof

WRITERS = ("cdc-a", "cdc-b", "cdc-c")
BATCHES = 6
ROWS = 25
KEYS = 40


def _changes(seed: int) -> dict[str, list[list[Change]]]:
    """Per writer, BATCHES input files of ROWS changes: overlapping keys, unique random order values, 20% deletes."""
    rng = random.Random(seed)
    orders = iter(rng.sample(range(1, 10_000_000), len(WRITERS) * BATCHES * ROWS))
    out: dict[str, list[list[Change]]] = {}
    for w in WRITERS:
        out[w] = [
            [
                (rng.randrange(KEYS), next(orders), f"{w}/{b}/{r}", "D" if rng.random() < 0.2 else "U")
                for r in range(ROWS)
            ]
            for b in range(BATCHES)
        ]
    return out


@pytest.mark.multiprocess
def test_three_streams_with_a_kill_and_replays_equal_the_oracle_row_for_row(
    spark: Any, wh: str, tmp_path: Path
) -> None:
    """Three upserting queries, one killed -9 at commit.after-catalog-commit and restarted, one replaying its
    last batch: pyiceberg, DuckDB, the data source and read_table all read exactly the oracle's rows."""
    table = "db.cdc"
    changes = _changes(25)
    dirs = {w: (tmp_path / f"in-{w}", tmp_path / f"chk-{w}") for w in WRITERS}
    victim_w = WRITERS[1]
    for b in range(2):
        write_changes(dirs[victim_w][0], f"b{b}", changes[victim_w][b])
    out = tmp_path / "victim.out"
    args = ["--input", str(dirs[victim_w][0]), "--checkpoint", str(dirs[victim_w][1]), "--warehouse", wh]
    args += ["--table", table, "--writer", victim_w, "--failpoints", "commit.after-catalog-commit=pause@2"]
    victim = _spawn(args, out, tmp_path)
    marker = tmp_path / "commit.after-catalog-commit.hit"
    queries = {}
    try:
        for w in (WRITERS[0], WRITERS[2]):
            queries[w] = start_upsert_query(
                spark,
                input_dir=str(dirs[w][0]),
                checkpoint=str(dirs[w][1]),
                warehouse=wh,
                table=table,
                writer_id=w,
                trigger="processing:100",
            )
        for b in range(BATCHES):  # the two live queries get their files over time
            for w in queries:
                write_changes(dirs[w][0], f"b{b}", changes[w][b])
            time.sleep(0.3)
        wait_until(lambda: marker.exists() or victim.poll() is not None, 240, "the victim's second commit")
        assert victim.poll() is None, out.read_text()[-3000:]
    finally:
        kill_application(victim, int(marker.read_text() or 0) if marker.exists() else None)
    for b in range(2, BATCHES):
        write_changes(dirs[victim_w][0], f"b{b}", changes[victim_w][b])
    queries[victim_w] = start_upsert_query(
        spark,
        input_dir=str(dirs[victim_w][0]),
        checkpoint=str(dirs[victim_w][1]),
        warehouse=wh,
        table=table,
        writer_id=victim_w,
        trigger="processing:100",
    )
    for query in queries.values():
        query.processAllAvailable()
        query.stop()
    _forget_commit(dirs[WRITERS[2]][1], BATCHES - 1)  # a forced replay: Spark re-runs the last batch
    extra: list[Change] = [(k, 10_000_000 + k, f"{WRITERS[2]}/extra/{k}", "U") for k in range(0, KEYS, 7)]
    write_changes(dirs[WRITERS[2]][0], f"b{BATCHES}", extra)
    run_to_end(
        start_upsert_query(
            spark,
            input_dir=str(dirs[WRITERS[2]][0]),
            checkpoint=str(dirs[WRITERS[2]][1]),
            warehouse=wh,
            table=table,
            writer_id=WRITERS[2],
        )
    )
    oracle = expected_rows([*(c for w in WRITERS for batch in changes[w] for c in batch), *extra])
    assert every_reader(spark, wh, table) == oracle
    assert_invariants(wh, table)
    codes = _outcome_codes(wh, table)
    assert codes.count("D") >= 1  # the forced replay (and the victim's batch, if its own commit was the one killed)
    ctx = open_table(catalog_config(warehouse=wh), table).ctx
    upserts = [e for s in ctx.wal.scan(0) if (e := ctx.wal.read(s)) is not None and e.mode is WriteMode.UPSERT]
    assert len({(e.writer, e.batch) for e in upserts}) == len(WRITERS) * BATCHES + 1


def _spawn(args: list[str], out: Path, failpoint_dir: Path) -> Any:
    """``python -m tests.spark.upsertutil ARGS``: a whole Spark application in its own process group."""
    inherited = {k: v for k, v in os.environ.items() if k != "FENCEDLAKE_FAILPOINTS"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.upsertutil", *args, "--timeout", "240"],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), "FENCEDLAKE_FAILPOINT_DIR": str(failpoint_dir)},
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
