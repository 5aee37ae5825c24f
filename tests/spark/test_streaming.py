"""Real Spark Structured Streaming tests of the sink: ``df.writeStream.format("fencedlake")``.

One local[2] SparkSession for the module; every test has its own warehouse,
input directory and checkpoint. Queries read JSON files one per micro-batch
(``tests/spark/streamutil.py``), so a replayed batch re-reads the same rows, as
Spark's exactly-once contract with a sink assumes. Every scenario ends with
the table compared to the input exactly (count and ids, so a duplicate or a
lost row fails) and with ``pyspark_fenced_sink/testing/invariants.check_table`` (I1-I7 on the
real table and WAL).

How batches get replayed here, as in production:

* the sink committed but Spark had not written its commit log: fail point
  ``commit.after-catalog-commit=raise`` (the query fails after the catalog
  commit landed), or the last ``commits/`` file deleted from the checkpoint;
* the whole application is killed (``kill -9`` of a driver subprocess, its JVM
  and Python workers) while paused at a protocol step — ``pause`` fail points
  in ``python -m tests.spark.streamutil``;
* the Python worker running a step dies (``crash`` = ``os._exit(86)``): Spark
  fails the task or the commit (then calls ``abort()``) and the query stops.

Facts about Spark 4.3 these tests rely on (checked here): Spark runs none of
the sink's code in ``start()`` — ``streamWriter()`` is first called when the
first micro-batch is planned, so option errors (a missing ``writer.id``)
terminate the query at its first batch; output mode ``update`` is refused by
Spark itself ("does not support Update mode"); ``complete`` mode reaches the
sink as ``overwrite=True``.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.failpoints import DURABLE_AT as BATCH_DURABLE_AT
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState, WriterState, decode_record
from tests.profile import FULL
from tests.spark.streamutil import input_ids, start_query, write_input
from tests.spark.support import (
    assert_exact,
    assert_invariants,
    ids_of,
    run_expecting_failure,
    run_to_end,
    wait_until,
)
from tests.spark.support import kill_application as _kill_application
from tests.spark.support import last_json as _last_json
from tests.spark.support import spawn_driver as _driver

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A fresh warehouse, input directory and checkpoint for one test."""
    return {"wh": str(tmp_path / "wh"), "inp": str(tmp_path / "in"), "chk": str(tmp_path / "chk")}


# ------------------------------------------------------------------ helpers


def _ctx(wh: str, table: str) -> Any:
    return open_table(catalog_config(warehouse=wh), table).ctx


def _table(wh: str, table: str) -> Any:
    return embedded_catalog(wh).load_table(table)


def state_of(wh: str, table: str) -> CommittedState:
    return CommittedState.decode(_table(wh, table).metadata.properties.get(STATE_PROPERTY))


def writer_state(wh: str, table: str, writer: str) -> WriterState | None:
    return state_of(wh, table).writers.get(writer)


def outcomes(wh: str, table: str) -> dict[int, str]:
    """WAL position -> recorded outcome code, from every commit record of the current ancestry."""
    t = _table(wh, table)
    out: dict[int, str] = {}
    snapshot = t.metadata.current_snapshot()
    while snapshot is not None:
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is not None:
            out.update({record.first + i: code for i, (_, code) in enumerate(record.outcomes)})
        parent = snapshot.parent_snapshot_id
        snapshot = t.metadata.snapshot_by_id(parent) if parent is not None else None
    return out


def wal_entries(wh: str, table: str) -> dict[int, WalEntry]:
    wal = _ctx(wh, table).wal
    return {seq: e for seq in wal.scan(0) if (e := wal.read(seq)) is not None}


def ids(lo: int, n: int) -> list[int]:
    return list(range(lo, lo + n))


def delete_last_commit(checkpoint: str) -> int:
    """Remove Spark's newest ``commits/N``: the next run replays batch N (already committed by the sink)."""
    commits = [p for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()]
    last = max(commits, key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    return int(last.name)


# ------------------------------------------------------------------ contract


def test_missing_writer_id_fails_the_query_with_the_reason(spark: Any, env: dict[str, str]) -> None:
    """No writer.id: the query stops at its first batch with a message saying why it is needed; nothing written."""
    write_input(env["inp"], "f0", ids(0, 3))
    query = start_query(
        spark, input_dir=env["inp"], checkpoint=env["chk"], warehouse=env["wh"], table="db.noid", writer_id=None
    )
    text = run_expecting_failure(query)
    assert "InvalidOptionsError" in text
    assert "writer.id is required for streaming" in text
    assert "stable identity across restarts" in text
    assert not embedded_catalog(env["wh"]).table_exists("db.noid")


def test_update_mode_is_refused_by_spark(spark: Any, env: dict[str, str]) -> None:
    """outputMode("update") fails with Spark's own "does not support Update mode"; the table is never created."""
    write_input(env["inp"], "f0", ids(0, 3))
    query = start_query(
        spark,
        input_dir=env["inp"],
        checkpoint=env["chk"],
        warehouse=env["wh"],
        table="db.upd",
        writer_id="upd",
        mode="update",
    )
    text = run_expecting_failure(query)
    assert "fencedlake does not support Update mode" in text
    assert not embedded_catalog(env["wh"]).table_exists("db.upd")


def test_start_path_and_table_option_with_batch_options(spark: Any, env: dict[str, str]) -> None:
    """start("ns.table") and option("table") both work; partition-by, table.* and create-table apply as in batch."""
    wh, inp = env["wh"], env["inp"]
    for n in range(3):
        write_input(inp, f"f{n}", ids(10 * n, 4))
    opts = {"partition-by": "bucket(4, id)", "table.owner": "streaming-test", "create-table": "true"}
    query = start_query(
        spark, input_dir=inp, checkpoint=env["chk"], warehouse=wh, table="db.by_path", writer_id="by-path", options=opts
    )
    run_to_end(query)
    assert_exact(wh, "db.by_path", input_ids(inp))
    t = _table(wh, "db.by_path")
    assert [str(f.transform) for f in t.spec().fields] == ["bucket[4]"]
    assert t.properties["owner"] == "streaming-test"
    state = writer_state(wh, "db.by_path", "by-path")
    assert state is not None and state.batches.last == 2 and state.run == str(query.runId)
    assert state.query == str(query.id)

    query = start_query(
        spark,
        input_dir=inp,
        checkpoint=env["chk"] + "-b",
        warehouse=wh,
        table="db.by_option",
        writer_id="by-option",
        table_option=True,
    )
    run_to_end(query)
    assert_exact(wh, "db.by_option", input_ids(inp))

    query = start_query(
        spark,
        input_dir=inp,
        checkpoint=env["chk"] + "-c",
        warehouse=wh,
        table="db.absent",
        writer_id="absent",
        options={"create-table": "false"},
    )
    text = run_expecting_failure(query)
    assert "db.absent" in text
    assert not embedded_catalog(wh).table_exists("db.absent")


def test_writer_id_of_another_checkpoint_is_rejected(spark: Any, env: dict[str, str]) -> None:
    """A second query (new checkpoint) reusing a writer.id is rejected, not deduplicated against the first."""
    wh, inp = env["wh"], env["inp"]
    write_input(inp, "f0", ids(0, 5))
    run_to_end(
        start_query(spark, input_dir=inp, checkpoint=env["chk"], warehouse=wh, table="db.owned", writer_id="owned")
    )
    query = start_query(
        spark, input_dir=inp, checkpoint=env["chk"] + "-other", warehouse=wh, table="db.owned", writer_id="owned"
    )
    text = run_expecting_failure(query)
    assert "WriteRejectedError" in text and "belongs to streaming query" in text
    assert_exact(wh, "db.owned", ids(0, 5))


# ------------------------------------------------------------------ restarts and replays


def test_many_restarts_with_replayed_batches_equal_the_source(spark: Any, env: dict[str, str]) -> None:
    """Seven runs on one checkpoint; two replay a batch the sink committed after a failure past the catalog
    commit, one after its commits/ file was deleted: the table always equals the input, replays are duplicates."""
    wh, inp, chk, table = env["wh"], env["inp"], env["chk"], "db.restarts"

    def start(**kw: Any) -> Any:
        return start_query(
            spark,
            input_dir=inp,
            checkpoint=chk,
            warehouse=wh,
            table=table,
            writer_id="orders-ingest",
            **kw,
        )

    next_id = 0
    runs: list[str] = []

    def publish(n_files: int) -> None:
        nonlocal next_id
        for _ in range(n_files):
            write_input(inp, f"f{next_id:04d}", ids(next_id, 7))
            next_id += 7

    for _ in range(2):
        publish(2)
        query = start()
        run_to_end(query)
        runs.append(str(query.runId))
        assert_exact(wh, table, input_ids(inp))

        publish(2)  # the sink commits the first of them, then the run fails before Spark's commit log
        query = start(failpoints="commit.after-catalog-commit=raise")
        assert "fail point commit.after-catalog-commit fired" in run_expecting_failure(query)
        assert_exact(wh, table, input_ids(inp)[:-7])

        query = start()  # replays that batch (a duplicate), then the second file
        run_to_end(query)
        assert_exact(wh, table, input_ids(inp))

    replayed = delete_last_commit(chk)
    publish(1)
    query = start()
    run_to_end(query)
    assert_exact(wh, table, input_ids(inp))
    assert [p["batchId"] for p in query.recentProgress if p["numInputRows"]] == [replayed, replayed + 1]

    run_to_end(start())  # nothing new: no batch, nothing written
    assert_exact(wh, table, input_ids(inp))
    codes = Counter(outcomes(wh, table).values())
    assert codes["D"] == 3, codes  # the three replays, each dropped as a duplicate
    assert codes["A"] == len(list(Path(inp).glob("*.json")))
    assert writer_state(wh, table, "orders-ingest").batches.last == replayed + 1  # type: ignore[union-attr]


def test_a_restart_after_a_crash_in_the_file_sources_planning_merges_two_files_into_one_batch(
    spark: Any, env: dict[str, str]
) -> None:
    """Spark's file source logs a batch's files (``sources/0/N``) before the offset log (``offsets/N``); a driver
    killed between the two leaves a restart that plans files N and N+1 as one batch (docs/SEMANTICS.md,
    Streaming). The sink applies that batch once: 7 batches for 8 files, every row exactly once."""
    wh, inp, chk, table = env["wh"], env["inp"], env["chk"], "db.merged"

    def run(warehouse: str) -> None:
        run_to_end(start_query(spark, input_dir=inp, checkpoint=chk, warehouse=warehouse, table=table, writer_id="m"))

    for f in range(4):
        write_input(inp, f"f{f}", ids(f * 10, 5))
    run(wh)  # batches 0-3
    write_input(inp, "f4", ids(40, 5))
    run(str(Path(wh).parent / "elsewhere"))  # the file source logs f4 as its batch 4 (the sink writes elsewhere)
    for log in ("offsets", "commits"):  # the checkpoint as a kill -9 after sources/0/4, before offsets/4 leaves it
        for name in ("4", ".4.crc"):
            (Path(chk) / log / name).unlink(missing_ok=True)
    for f in range(5, 8):
        write_input(inp, f"f{f}", ids(f * 10, 5))
    run(wh)
    assert_exact(wh, table, input_ids(inp))
    assert sorted(int(p.name) for p in (Path(chk) / "commits").iterdir() if p.name.isdigit()) == list(range(7))
    assert '"logOffset":5' in (Path(chk) / "offsets" / "4").read_text()  # batch 4 = the source's batches 4 and 5
    codes = Counter(outcomes(wh, table).values())
    assert codes["A"] == 7 and codes["D"] == 0, codes


def test_processing_time_trigger_across_restarts(spark: Any, env: dict[str, str]) -> None:
    """processingTime trigger: files published while the query runs land once each; stop, publish, restart."""
    wh, inp, chk, table = env["wh"], env["inp"], env["chk"], "db.ticking"
    expected: list[int] = []
    for run in range(2):
        query = start_query(
            spark,
            input_dir=inp,
            checkpoint=chk,
            warehouse=wh,
            table=table,
            writer_id="ticker",
            trigger="processing:200",
        )
        try:
            for n in range(3):
                write_input(inp, f"r{run}-f{n}", ids(1000 * run + 10 * n, 5))
                expected += ids(1000 * run + 10 * n, 5)
                want = len(expected)
                landed = lambda want=want: embedded_catalog(wh).table_exists(table) and len(ids_of(wh, table)) == want  # noqa: E731
                wait_until(landed, 90, f"{want} rows")
        finally:
            query.stop()
        assert query.exception() is None
        assert_exact(wh, table, expected)
        write_input(inp, f"r{run}-late", ids(1000 * run + 500, 2))  # published while stopped
        expected += ids(1000 * run + 500, 2)
    run_to_end(start_query(spark, input_dir=inp, checkpoint=chk, warehouse=wh, table=table, writer_id="ticker"))
    assert_exact(wh, table, expected)


def test_empty_batches_commit_no_rows_and_keep_the_batch_count(spark: Any, env: dict[str, str]) -> None:
    """Batches with no rows (empty input files) commit empty entries; the writer's batch count keeps up."""
    wh, inp, table = env["wh"], env["inp"], "db.sparse"
    for n, count in enumerate([0, 3, 0, 0, 4, 0]):
        write_input(inp, f"f{n}", ids(100 * n, count))
    run_to_end(start_query(spark, input_dir=inp, checkpoint=env["chk"], warehouse=wh, table=table, writer_id="sparse"))
    assert_exact(wh, table, input_ids(inp))
    assert writer_state(wh, table, "sparse").batches.last == 5  # type: ignore[union-attr]
    assert [code for _, code in sorted(outcomes(wh, table).items())] == ["B"] + ["A"] * 6  # registration, 6 batches


def test_complete_mode_table_holds_exactly_the_latest_result(spark: Any, env: dict[str, str]) -> None:
    """Complete mode (count per key): every batch replaces the table's rows; a replay and an empty batch too."""
    wh, inp, chk, table = env["wh"], env["inp"], env["chk"], "db.counts"

    def expected() -> dict[str, int]:
        counter = Counter(f"k{i % 3}" for i in input_ids(inp))
        return dict(sorted(counter.items()))

    def found() -> dict[str, int]:
        rows = _table(wh, table).scan().to_arrow().to_pylist()
        assert len(rows) == len({r["k"] for r in rows}), f"duplicate keys: {rows}"
        return dict(sorted((r["k"], r["count"]) for r in rows))

    def start() -> Any:
        return start_query(
            spark,
            input_dir=inp,
            checkpoint=chk,
            warehouse=wh,
            table=table,
            writer_id="counter",
            mode="complete",
        )

    write_input(inp, "f0", [])
    write_input(inp, "f1", ids(0, 4))
    write_input(inp, "f2", ids(10, 5))
    run_to_end(start())
    assert found() == expected() == {"k0": 3, "k1": 3, "k2": 3}
    delete_last_commit(chk)
    write_input(inp, "f3", ids(20, 2))
    write_input(inp, "f4", [])
    run_to_end(start())
    assert found() == expected()
    assert_invariants(wh, table)
    assert Counter(outcomes(wh, table).values()) == {"A": 5, "D": 1, "B": 2}  # two runs registered
    ops = _snapshot_operations(wh, table)
    # Batch 0's result is empty and the new table has no rows to replace: a file-less append. The replayed batch
    # (D) of the second run is decided without a commit; the next batch's commit records it with the run's
    # registration barrier. Every other applied batch replaced the table's rows.
    assert ops[0] == ("append", ["B", "A"]) and ops[3][1][:2] == ["B", "D"], ops
    assert all(op == "overwrite" for op, codes in ops[1:] if "A" in codes), ops


def _snapshot_operations(wh: str, table: str) -> list[tuple[str, list[str]]]:
    """(operation, outcome codes of its commit record) of every snapshot, oldest first."""
    t = _table(wh, table)
    out = []
    for snap in t.metadata.snapshots:
        record = decode_record(snap.summary.additional_properties if snap.summary else {})
        codes = [c for _, c in record.outcomes] if record else []
        out.append((str(snap.summary.operation.value) if snap.summary else "", codes))
    return out


# ------------------------------------------------------------------ concurrency


def test_two_queries_and_a_batch_job_write_one_table_at_once(spark: Any, env: dict[str, str]) -> None:
    """Two streaming queries (different writer.ids) and batch appends run together: every row lands once."""
    wh, table = env["wh"], "db.shared"
    spark.createDataFrame([(-1, "seed")], "id long, k string").write.format("fencedlake").mode("append").option(
        "warehouse", wh
    ).save(table)
    inputs = [env["inp"] + "-s1", env["inp"] + "-s2"]
    queries = [
        start_query(
            spark,
            input_dir=inp,
            checkpoint=f"{env['chk']}-{n}",
            warehouse=wh,
            table=table,
            writer_id=f"stream-{n}",
            trigger="processing:100",
        )
        for n, inp in enumerate(inputs)
    ]
    expected = [-1]
    errors: list[BaseException] = []

    def batch_job() -> None:
        try:
            for n in range(4):
                rows = [(50_000 + 10 * n + i, "batch") for i in range(3)]
                spark.createDataFrame(rows, "id long, k string").write.format("fencedlake").mode("append").option(
                    "warehouse", wh
                ).save(table)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    try:
        batch = threading.Thread(target=batch_job)
        batch.start()
        for n in range(4):
            for q, inp in enumerate(inputs):
                lo = 10_000 * (q + 1) + 10 * n
                write_input(inp, f"f{n}", ids(lo, 5))
                expected += ids(lo, 5)
            time.sleep(0.3)
        batch.join(timeout=180)
        assert not errors, errors
        expected += [50_000 + 10 * n + i for n in range(4) for i in range(3)]
        wait_until(lambda: len(ids_of(wh, table)) >= len(expected), 120, f"{len(expected)} rows")
    finally:
        for q in queries:
            q.stop()
    assert [q.exception() for q in queries] == [None, None]
    assert_exact(wh, table, expected)
    for n in range(2):
        assert writer_state(wh, table, f"stream-{n}").batches.last == 3  # type: ignore[union-attr]


def _in_flight_checkpoint_files(directory: str, names: list[str]) -> set[str]:
    """Spark's checkpoint writes a file as a hidden `.name.<uuid>.tmp` (and its `.crc`), then renames it."""
    return {name for name in names if name.startswith(".") and ".tmp" in name}


def test_zombie_incarnation_is_fenced_and_lands_nothing_after_the_fence(spark: Any, env: dict[str, str]) -> None:
    """Two incarnations of one query (writer.id, query id) at once, in two applications: the newer one's first
    commit fences the older; the older's query fails with FencedWriterError and none of its later entries apply."""
    wh, inp, table, writer = env["wh"], env["inp"], "db.zombie", "zw"
    write_input(inp, "f0", ids(0, 5))
    out = Path(env["chk"] + "-old.out")
    # The old incarnation: its own driver and JVM, a 3 s pause before each WAL put (a slow zombie).
    old = _driver(
        [
            "--input",
            inp,
            "--checkpoint",
            env["chk"],
            "--warehouse",
            wh,
            "--table",
            table,
            "--writer",
            writer,
            "--trigger",
            "processing:200",
            "--timeout",
            "240",
            "--failpoints",
            "commit.before-wal-put=sleep:3000",
        ],
        out,
    )
    new = None
    try:
        wait_until(
            lambda: (
                old.poll() is not None or (embedded_catalog(wh).table_exists(table) and ids_of(wh, table) == ids(0, 5))
            ),
            180,
            "batch 0 of the old",
        )
        assert old.poll() is None, out.read_text()[-3000:]
        old_run = writer_state(wh, table, writer).run  # type: ignore[union-attr]
        # The new incarnation resumes a copy of the checkpoint (same query id): no Spark-level conflict, only ours.
        # The old one may be writing its checkpoint right now: wait for batch 0's commit file (Spark writes it after
        # our commit returns) and leave out in-flight files (`.N.<uuid>.tmp`, renamed away as we copy).
        wait_until(lambda: Path(env["chk"], "commits", "0").exists(), 60, "the old run's checkpoint commit of batch 0")
        shutil.copytree(env["chk"], env["chk"] + "-new", ignore=_in_flight_checkpoint_files)
        new = start_query(
            spark,
            input_dir=inp,
            checkpoint=env["chk"] + "-new",
            warehouse=wh,
            table=table,
            writer_id=writer,
            trigger="processing:200",
        )
        write_input(inp, "f1", ids(100, 5))
        wait_until(lambda: writer_state(wh, table, writer).run == str(new.runId), 120, "the new run's claim")
        write_input(inp, "f2", ids(200, 5))
        wait_until(lambda: old.poll() is not None, 120, "the old incarnation to stop")
        wait_until(lambda: len(ids_of(wh, table)) >= 15, 60, "all rows")
    finally:
        if new is not None:
            new.stop()
        if old.poll() is None:
            _kill_application(old)
    result = _last_json(out)
    assert old.returncode == 3 and result.get("error") == "FencedWriterError", out.read_text()[-3000:]
    assert "stop this incarnation" in result["message"]
    assert new.exception() is None
    assert_exact(wh, table, ids(0, 5) + ids(100, 5) + ids(200, 5))
    fence = writer_state(wh, table, writer).epoch  # type: ignore[union-attr]
    codes = outcomes(wh, table)
    late = [s for s, e in wal_entries(wh, table).items() if e.run == old_run and s > fence]
    assert all(codes.get(s) != "A" for s in late), {s: codes.get(s) for s in late}


# ------------------------------------------------------------------ crashes


#: Fail points a streaming write passes, and whether the batch's WAL entry is durable when it fires: the batch
#: table's, less driver.after-open (a run registers in its first commit, not at open) and commit.before-wal-put
#: (the same crash, as far as the table can tell, as executor.after-file-written), plus the run's registration
#: (its barrier is durable, its batch entry not yet).
DURABLE_AT = {p: d for p, d in BATCH_DURABLE_AT.items() if p not in ("driver.after-open", "commit.before-wal-put")}
DURABLE_AT["stream.after-register"] = False
#: Points the run passes once (its first batch); the others are paused at the run's second commit.
FIRST_BATCH_POINTS = ("executor.after-file-written", "stream.after-register")


#: The CI-sized profile kills the application at one point of each kind (the registration's barrier only; the
#: batch's entry just put; the catalog commit landed); ``FENCEDLAKE_FULL=1`` at every point. The Spark-free
#: kill matrix (tests/test_crash_recovery.py) covers every point in CI.
KILL_POINTS = sorted(DURABLE_AT) if FULL else ["commit.after-catalog-commit", "commit.after-wal-put"]
KILL_POINTS += [] if FULL else ["stream.after-register"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("point", KILL_POINTS)
def test_application_killed_at_failpoint_then_restart_is_exactly_once(
    spark: Any, env: dict[str, str], tmp_path: Path, point: str
) -> None:
    """The whole application (driver, JVM, workers) is killed -9 while paused at ``point`` in batch 1 (batch 0
    for the executor point); a restart on the checkpoint lands every row once and finishes the dead run's entry."""
    wh, inp, chk, table, writer = env["wh"], env["inp"], env["chk"], "db.killed", "orders-ingest"
    write_input(inp, "f0", ids(0, 5))
    write_input(inp, "f1", ids(100, 5))
    nth = "" if point in FIRST_BATCH_POINTS else "@2"  # commits: the run's second
    out = tmp_path / "victim.out"
    victim = _driver(
        [
            "--input",
            inp,
            "--checkpoint",
            chk,
            "--warehouse",
            wh,
            "--table",
            table,
            "--writer",
            writer,
            "--failpoints",
            f"{point}=pause{nth}",
            "--timeout",
            "200",
        ],
        out,
        FENCEDLAKE_FAILPOINT_DIR=str(tmp_path),
    )
    marker = tmp_path / f"{point}.hit"
    try:
        wait_until(lambda: marker.exists() or victim.poll() is not None, 200, f"the victim to pause at {point}")
        assert victim.poll() is None, f"the victim never reached {point}: {out.read_text()[-3000:]}"
        time.sleep(0.2)
    finally:
        _kill_application(victim, int(marker.read_text() or 0) if marker.exists() else None)
    dead_run = writer_state(wh, table, writer).run if point.startswith("commit") else None  # type: ignore[union-attr]
    # (stream.after-register: the dead run's barrier is durable and pending; the restart registers anew)
    before = wal_entries(wh, table) if embedded_catalog(wh).table_exists(table) else {}

    write_input(inp, "f2", ids(200, 5))
    query = start_query(spark, input_dir=inp, checkpoint=chk, warehouse=wh, table=table, writer_id=writer)
    run_to_end(query)
    assert_exact(wh, table, ids(0, 5) + ids(100, 5) + ids(200, 5))
    codes = outcomes(wh, table)
    entries = wal_entries(wh, table)
    dead = [s for s, e in before.items() if e.kind is EntryKind.DATA and e.run == dead_run and e.batch == 1]
    if DURABLE_AT[point]:
        assert len(dead) == 1 and codes[dead[0]] == "A"  # the dead run's durable batch 1, applied once
        replay = [s for s, e in entries.items() if e.run == str(query.runId) and e.batch == 1]
        assert [codes[s] for s in replay] == ["D"]
    else:
        assert dead == []
    assert writer_state(wh, table, writer).run == str(query.runId)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "point", ["executor.after-file-written", "commit.after-wal-put", "commit.after-manifests-written"]
)
def test_python_worker_crash_at_failpoint_then_restart_is_exactly_once(
    spark: Any, env: dict[str, str], point: str
) -> None:
    """The Python worker running ``point`` dies (``os._exit``): Spark fails the task, or fails the commit and
    calls ``abort()`` (which must keep files a durable entry names); the restart lands every row once."""
    wh, inp, chk, table, writer = env["wh"], env["inp"], env["chk"], "db.crashed", "crashy"

    def start(**kw: Any) -> Any:
        return start_query(
            spark,
            input_dir=inp,
            checkpoint=chk,
            warehouse=wh,
            table=table,
            writer_id=writer,
            **kw,
        )

    write_input(inp, "f0", ids(0, 5))
    run_to_end(start())
    write_input(inp, "f1", ids(100, 5))
    text = run_expecting_failure(start(failpoints=f"{point}=crash"))
    assert "crashed" in text or "exited unexpectedly" in text or "EOFException" in text, text[-2000:]
    assert ids_of(wh, table) == ids(0, 5)  # each point is before the catalog commit: batch 1 is not in the table
    pending = [e for e in wal_entries(wh, table).values() if e.kind is EntryKind.DATA and e.batch == 1]
    assert len(pending) == (1 if DURABLE_AT[point] else 0)  # ...but its WAL entry is durable past the WAL put
    write_input(inp, "f2", ids(200, 5))
    run_to_end(start())
    assert_exact(wh, table, ids(0, 5) + ids(100, 5) + ids(200, 5))
