"""The sink end to end on the real services: a PostgreSQL-backed catalog and S3 storage.

The multi-machine configuration: pyiceberg ``SqlCatalog`` on PostgreSQL (a real
compare-and-swap of the metadata location), data files and the WAL on S3 with
put-if-absent (``If-None-Match: *``). Most tests drive exactly the calls Spark
makes — ``WriteTransaction.begin`` on the driver, ``write.task.write_task`` per task,
``WriteTransaction.commit`` in the commit worker — in-process (``pyspark_fenced_sink/testing/harness.py``);
the last one is a real ``df.write.format("fencedlake")`` with the same options.
After each scenario ``pyspark_fenced_sink/testing/invariants.check_table`` reads what it left
behind (catalog metadata, commit records, WAL objects, data files on S3).
"""

from __future__ import annotations

import posixpath
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pytest

from pyspark_fenced_sink.errors import FencedWriterError
from pyspark_fenced_sink.iceberg.catalogs import load_catalog
from pyspark_fenced_sink.options.write import parse_write_options
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import (
    commit,
    open_target,
    plan_options,
    rows,
    write_planned,
    write_tasks,
)
from pyspark_fenced_sink.testing.invariants import check_table

pytestmark = pytest.mark.integration


@pytest.fixture
def sink_options(pg_uri: str, s3_prefix: str, pyiceberg_s3_properties: dict[str, str]) -> dict[str, str]:
    """Options of a fresh table in the PostgreSQL catalog with its warehouse on S3 (what a user passes)."""
    options = {
        "table": f"it_{uuid.uuid4().hex[:12]}.events",
        "catalog.type": "sql",
        "catalog.uri": pg_uri,
        "catalog.warehouse": f"s3://{s3_prefix}/warehouse",
    }
    options.update({f"catalog.{k}": v for k, v in pyiceberg_s3_properties.items()})
    return options


def _write(options: Mapping[str, str], data: pa.Table, *, overwrite: bool = False, **extra: str) -> Any:
    """One batch write as Spark runs it (plan on the driver, two tasks, the commit worker)."""
    return write_planned(plan_options({**options, **extra}, overwrite=overwrite), data)


def _table(options: Mapping[str, str]) -> Any:
    opts = parse_write_options(options)
    return load_catalog(opts.catalog).load_table(opts.table)


def _ids(options: Mapping[str, str]) -> list[int]:
    return sorted(_table(options).scan().to_arrow().column("id").to_pylist())


def _violations(options: Mapping[str, str], fs: Any) -> list[str]:
    opened = open_target(options, options["table"])
    return check_table(opened.table, opened.ctx.wal, lambda path: fs.exists(path))


def test_writes_land_on_s3_through_the_postgres_catalog_exactly_once(
    sink_options: dict[str, str], s3fs_fs: Any
) -> None:
    """Two writers' batches land once; a re-run batch id is a duplicate; data and WAL live on S3."""
    first = _write(sink_options, rows("a", 0, 100), **{"writer.id": "a", "writer.batch-id": "0"})
    _write(sink_options, rows("b", 1000, 50), **{"writer.id": "b", "writer.batch-id": "0"})
    _write(sink_options, rows("a", 100, 100), **{"writer.id": "a", "writer.batch-id": "1"})
    rerun = _write(sink_options, rows("a", 100, 100), **{"writer.id": "a", "writer.batch-id": "1"})

    assert first.outcome is Outcome.APPLIED
    assert rerun.outcome is Outcome.DUPLICATE
    assert _ids(sink_options) == [*range(200), *range(1000, 1050)]

    table = _table(sink_options)
    location = table.metadata.location
    assert location.startswith("s3://"), location
    data_files = table.inspect.files().column("file_path").to_pylist()
    assert data_files, "no data files"
    assert all(p.startswith(f"{location}/data/") and s3fs_fs.exists(p) for p in data_files), data_files
    state = CommittedState.decode(table.properties[STATE_PROPERTY])
    assert state.root == f"{location}/_fencedlake/{table.metadata.table_uuid}"
    wal_objects = s3fs_fs.ls(f"{state.root}/wal/")
    assert state.writers["a"].batches.intervals == ((0, 1),)
    # 3 applied entries and the duplicate (jobs with a batch id put no fence barrier: PROTOCOL.md §7). The
    # applied ones lie below the upper; the duplicate was decided at the upper without a commit of its own
    # (§6), so it may still wait there for the next commit to record it. The upper may pass more positions
    # than there are objects: a claim on a busy table draws its position from a window above the tail, and
    # a position nobody filled is a hole the next commit voids (PROTOCOL.md §3, step 3).
    seqs = sorted(int(posixpath.basename(key).split(".")[0]) for key in wal_objects)
    assert len(seqs) >= 4 and rerun.seq in seqs, (seqs, rerun.seq)
    assert all(seq < state.upper for seq in seqs if seq != rerun.seq), (seqs, state.upper)
    assert rerun.seq <= state.upper, (rerun.seq, state.upper)
    assert _violations(sink_options, s3fs_fs) == []


def test_concurrent_writers_on_postgres_and_s3_lose_and_duplicate_nothing(
    sink_options: dict[str, str], s3fs_fs: Any
) -> None:
    """Six writers released at once, three batches each: every row lands once, no conflict reaches a writer."""
    writers, batches, count = 6, 3, 40
    _write(sink_options, rows("seed", 100_000, 1))  # create the table first: the race is on commits
    barrier = threading.Barrier(writers)
    errors: list[Exception] = []

    def run(w: int) -> None:
        try:
            barrier.wait(timeout=60)
            for b in range(batches):
                start = (w * batches + b) * count
                _write(sink_options, rows(f"w{w}", start, count), **{"writer.id": f"w{w}", "writer.batch-id": str(b)})
        except Exception as e:  # asserted below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    assert errors == []
    assert _ids(sink_options) == [*range(writers * batches * count), 100_000]
    assert _violations(sink_options, s3fs_fs) == []


def test_zombie_incarnation_is_fenced_and_its_files_removed_from_s3(sink_options: dict[str, str], s3fs_fs: Any) -> None:
    """An older incarnation that commits after a newer one opened gets FencedWriterError; nothing of it lands."""
    writer = {"writer.id": "orders"}
    old = plan_options({**sink_options, **writer})
    old_messages = write_tasks(old, rows("old", 0, 30))
    paths = [encoded_path(f) for m in old_messages for f in m.files]
    assert paths, "the old incarnation wrote no files: the test would prove nothing"
    assert all(s3fs_fs.exists(p) for p in paths), "the old incarnation's files are not on S3"
    _write(sink_options, rows("new", 100, 30), **writer)  # the newer incarnation opens and commits

    with pytest.raises(FencedWriterError, match="orders"):
        commit(old, old_messages, abort=False)

    assert _ids(sink_options) == list(range(100, 130))
    assert not any(s3fs_fs.exists(p) for p in paths), "a fenced incarnation's data files were left on S3"
    assert _violations(sink_options, s3fs_fs) == []


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("fencedlake-integration")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.mark.spark
def test_spark_append_and_overwrite_through_postgres_catalog_on_s3(
    spark: Any, sink_options: dict[str, str], s3fs_fs: Any
) -> None:
    """df.write.format("fencedlake") with catalog.* options: an append, a re-run (no-op), an atomic overwrite."""
    df = spark.range(0, 500, 1, numPartitions=2).selectExpr("id", "concat('spark-', id % 3) AS writer")

    def save(frame: Any, mode: str, **extra: str) -> None:
        frame.write.format("fencedlake").mode(mode).options(**sink_options, **extra).save()

    save(df, "append", **{"writer.id": "spark-job", "writer.batch-id": "7"})
    save(df, "append", **{"writer.id": "spark-job", "writer.batch-id": "7"})  # a retried job: no duplicate
    assert _ids(sink_options) == list(range(500))

    snapshots_before = len(_table(sink_options).snapshots())
    save(df.where("id < 10"), "overwrite")
    table = _table(sink_options)
    assert _ids(sink_options) == list(range(10))
    assert len(table.snapshots()) == snapshots_before + 1, "the overwrite was not one snapshot"
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert table.metadata.location.startswith("s3://")
    assert _violations(sink_options, s3fs_fs) == []


# ---------------------------------------------------------------------------------------------- identity, operators


def _catalog(options: Mapping[str, str]) -> Any:
    return load_catalog(parse_write_options(options).catalog)


def _cli(options: Mapping[str, str], *argv: str) -> int:
    from pyspark_fenced_sink.ops.cli import main

    props = [a for k, v in options.items() if k.startswith("catalog.") for a in ("--catalog-prop", f"{k[8:]}={v}")]
    return main([argv[0], options["table"], *argv[1:], *props])


def test_drop_and_recreate_on_postgres_never_replays_the_old_log(sink_options: dict[str, str], s3fs_fs: Any) -> None:
    """DROP (files kept) on the PostgreSQL catalog, then write again: only the new rows, old batch ids apply."""
    for b in range(3):
        _write(sink_options, rows("old", b * 10, 10), **{"writer.id": "etl", "writer.batch-id": str(b)})
    _catalog(sink_options).drop_table(sink_options["table"])
    again = _write(sink_options, rows("new", 500, 5), **{"writer.id": "etl", "writer.batch-id": "1"})
    assert again.outcome is Outcome.APPLIED
    assert _ids(sink_options) == list(range(500, 505))
    assert _violations(sink_options, s3fs_fs) == []


def test_a_spec_change_and_revert_on_postgres_never_applies_a_rejected_write(
    sink_options: dict[str, str], s3fs_fs: Any
) -> None:
    """Another engine adds a partition field under a running write and reverts it: the write stays rejected."""
    from pyspark_fenced_sink.errors import WriteRejectedError
    from pyspark_fenced_sink.testing.harness import commit

    _write(sink_options, rows("a", 0, 5))
    running = plan_options(sink_options)
    messages = write_tasks(running, rows("late", 50, 5))
    with _table(sink_options).update_spec() as update:
        update.add_identity("writer")
    with pytest.raises(WriteRejectedError, match="partition spec"):
        commit(running, messages)
    with _table(sink_options).update_spec() as update:
        update.remove_field("writer")
    _write(sink_options, rows("b", 10, 5))
    assert _ids(sink_options) == [*range(5), *range(10, 15)]
    assert _violations(sink_options, s3fs_fs) == []


def test_a_damaged_wal_object_on_s3_is_skipped_by_the_operator(sink_options: dict[str, str], s3fs_fs: Any) -> None:
    """A damaged entry blocks the table (recover exits 2, then 3) until `fencedlake skip`; then it moves on."""
    from pyspark_fenced_sink.protocol.layout import wal_key
    from pyspark_fenced_sink.protocol.outcome import data_entry

    _write(sink_options, rows("a", 0, 5))
    opened = open_target(sink_options, sink_options["table"])
    upper = opened.view.state.upper
    for start in (100, 200):  # two durable entries of dead drivers
        dead = plan_options(sink_options)
        files = [f for m in write_tasks(dead, rows("dead", start, 2)) for f in m.files]
        assert dead.identity is not None
        opened.ctx.wal.append(data_entry(dead.identity, files, rows=2), start=upper)
    damaged = f"{opened.view.state.root}/{wal_key(upper)}"
    s3fs_fs.pipe_file(damaged, b"{damaged")
    assert _cli(sink_options, "recover") == 2
    s3fs_fs.rm_file(damaged)
    assert _cli(sink_options, "recover") == 3
    assert _cli(sink_options, "skip", str(upper), "--reason", "damaged in the integration test") == 0
    assert _ids(sink_options) == [*range(5), 200, 201]
    assert _violations(sink_options, s3fs_fs) == []


def test_a_removed_state_on_postgres_is_refused_and_repaired(sink_options: dict[str, str], s3fs_fs: Any) -> None:
    """The state property removed by another tool: writes refuse; repair-state rebuilds it from S3 and the records."""
    from pyspark_fenced_sink.errors import TableStateError

    for b in range(3):
        _write(sink_options, rows("w", b * 10, 10), **{"writer.id": "etl", "writer.batch-id": str(b)})
    assert _cli(sink_options, "gc", "--grace", "0s") == 0  # truncates and checkpoints
    _write(sink_options, rows("w", 30, 10), **{"writer.id": "etl", "writer.batch-id": "3"})
    before = _table(sink_options).properties[STATE_PROPERTY]
    with _table(sink_options).transaction() as tx:
        tx.remove_properties(STATE_PROPERTY)
    with pytest.raises(TableStateError, match="repair-state"):
        _write(sink_options, rows("x", 900, 1))
    assert _cli(sink_options, "repair-state") == 0
    assert CommittedState.decode(_table(sink_options).properties[STATE_PROPERTY]) == CommittedState.decode(before)
    rerun = _write(sink_options, rows("w", 30, 10), **{"writer.id": "etl", "writer.batch-id": "3"})
    assert rerun.outcome is Outcome.DUPLICATE
    assert _ids(sink_options) == list(range(40))


def test_gc_on_postgres_keeps_tagged_snapshots(sink_options: dict[str, str], s3fs_fs: Any) -> None:
    """Snapshot expiry skips a tagged snapshot on the PostgreSQL catalog; its files stay."""
    for i in range(3):
        _write(sink_options, rows("t", i, 1))
    table = _table(sink_options)
    oldest = min(table.metadata.snapshots, key=lambda s: s.timestamp_ms).snapshot_id
    table.manage_snapshots().create_tag(oldest, "audit").commit()
    assert _cli(sink_options, "gc", "--expire-snapshots-older-than", "0s", "--retain-last", "1") == 0
    kept = {s.snapshot_id for s in _table(sink_options).metadata.snapshots}
    assert oldest in kept and len(kept) == 2
    assert _ids(sink_options) == [0, 1, 2]  # (the checker assumes no expiry: the table is checked by its rows)


@pytest.mark.spark
def test_spark_write_to_abfs_lands_exactly_once_and_reads_back(
    spark: Any, pg_uri: str, azure_properties: dict[str, str], services: Any
) -> None:
    """df.write.format("fencedlake") to a SQL catalog whose warehouse is on Azure Blob (Azurite, abfss://):
    a retried batch id adds nothing, the rows read back once, data files and the WAL live on Azure."""
    from pyspark_fenced_sink.store.registry import filesystem_path, open_filesystem

    container = services.azure_container
    options = {
        "table": f"az_{uuid.uuid4().hex[:12]}.events",
        "catalog.type": "sql",
        "catalog.uri": pg_uri,
        "catalog.warehouse": f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/it/{uuid.uuid4().hex[:12]}",
        **{f"catalog.{k}": v for k, v in azure_properties.items()},
    }
    df = spark.range(0, 300, 1, numPartitions=2).selectExpr("id", "concat('az-', id % 3) AS writer")
    for _ in range(2):  # the second run is a retried job: same writer.id and batch id
        df.write.format("fencedlake").mode("append").options(
            **options, **{"writer.id": "az-job", "writer.batch-id": "1"}
        ).save()

    table = _table(options)
    assert table.metadata.location.startswith("abfss://"), table.metadata.location
    assert _ids(options) == list(range(300))
    fs, _ = open_filesystem(table.metadata.location, table.io.properties)
    data = table.inspect.files().column("file_path").to_pylist()
    assert data and all(fs.exists(filesystem_path(p)) for p in data), data
    state = CommittedState.decode(table.properties[STATE_PROPERTY])
    assert fs.ls(filesystem_path(f"{state.root}/wal")), "no WAL objects on Azure"
    from integration.scenarios_support import violations

    assert violations(options) == []


# ---------------------------------------------------------------------------------------------- catalog connections


def _backend_pids(engine: Any) -> set[int]:
    """The PostgreSQL backends of ``engine``'s pooled connections (checked out one by one)."""
    with engine.connect() as connection:
        return {connection.exec_driver_sql("SELECT pg_backend_pid()").scalar()}


def test_postgres_connections_are_pinged_only_after_idle_and_a_killed_one_costs_no_write(
    sink_options: dict[str, str], pg_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load right after another costs one statement and no ping; PostgreSQL terminating the pooled
    connection (a restart, an admin, a proxy) between two writes is invisible to the next write."""
    import psycopg2

    first = _write(sink_options, rows("a", 0, 10))
    assert first.outcome is Outcome.APPLIED
    catalog = _catalog(sink_options)
    assert catalog.ping_after_idle_s is not None and not catalog.engine.pool._pre_ping
    catalog.engine.dispose()  # from here on the pool holds the one connection the loads below make
    pings: list[Any] = []
    real_ping = catalog.engine.dialect.do_ping
    monkeypatch.setattr(catalog.engine.dialect, "do_ping", lambda c: pings.append(c) or real_ping(c))
    catalog.load_table(sink_options["table"])
    catalog.load_table(sink_options["table"])
    assert pings == [], "a connection used moments ago is not pinged"

    victims = _backend_pids(catalog.engine)
    admin = psycopg2.connect(pg_uri.replace("postgresql+psycopg2://", "postgresql://"))
    try:
        admin.autocommit = True
        with admin.cursor() as cursor:
            for pid in victims:
                cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
                assert cursor.fetchone() == (True,)
    finally:
        admin.close()
    disconnects: list[bool] = []
    from sqlalchemy import event

    event.listen(catalog.engine, "handle_error", lambda context: disconnects.append(context.is_disconnect))
    second = _write(sink_options, rows("b", 10, 10))
    assert second.outcome is Outcome.APPLIED
    assert disconnects == [True], "the write's first statement met the terminated connection, once"
    assert _backend_pids(catalog.engine).isdisjoint(victims)
    assert _ids(sink_options) == list(range(20))
