"""fencedlake through a real Spark Connect server on 127.0.0.1 (pip's pyspark ships the server).

One server for the module (``integration/services/connect.sh``, started here and
stopped at the end), started in its own directory with Spark's temporary files in
another. The scenarios: the README's Quickstart as a Connect client (the default
warehouse lands where the server started, outlives the session, and never in a
session's artifact directory), batch and streaming writes, reads, ``compact``,
``read_table`` and SQL views, catalog tables failing with the SQL statement that
works, typed errors back through the client, and two clients writing one table
at once, exactly once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.sparkservices import STATE, connect_url, connect_workdir, service, start
from pyspark_fenced_sink import (
    InvalidOptionsError,
    ServiceError,
    WriteRejectedError,
    compact,
    fencedlake_error,
    read_table,
    register_view,
    tune_session,
    warm_workers,
)
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.testing.invariants import check_table

ROOT = Path(__file__).resolve().parents[1]
#: The environment variable pyspark sets once a Connect session was built in this process.
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The Connect server's URL; the server runs for this module only.

    A Connect client marks the whole process as Connect (``SPARK_CONNECT_MODE_ENABLED``), after which
    ``SparkSession.builder`` builds no classic session: the mark is taken back for the modules after this.
    """
    marked = os.environ.get(_CONNECT_MODE)
    try:
        start("connect.sh")
        yield connect_url()
    finally:
        service("connect.sh", "stop")
        if marked is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = marked


def _session(url: str) -> Any:
    """A new Connect session (its own artifact directory on the server)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()


def _ids(wh: str | Path, table: str) -> list[int]:
    return sorted(embedded_catalog(str(wh)).load_table(table).scan().to_arrow().column("id").to_pylist())


def _invariants(wh: str | Path, table: str) -> None:
    ctx = open_table(catalog_config(warehouse=str(wh)), table).ctx
    violations = check_table(
        ctx.port.table(ctx.port.load()), ctx.wal, lambda p: Path(p.removeprefix("file://")).exists()
    )
    assert violations == []


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Quickstart\n")
    return re.findall(r"```python\n(.*?)```", text[start:], re.DOTALL)[0]


def test_the_quickstart_through_spark_remote_keeps_its_table_where_the_server_started(
    server: str, tmp_path: Path
) -> None:
    """The README's first snippet, unchanged, with SPARK_REMOTE set: it prints 1000; the default warehouse is
    fencedlake-warehouse in the server's start directory (not the client's, not a session's artifact directory),
    and a new session reads the table back."""
    env = {k: v for k, v in os.environ.items() if k not in ("FENCEDLAKE_WAREHOUSE", "PYSPARK_SUBMIT_ARGS")}
    env["SPARK_REMOTE"] = server
    proc = subprocess.run(
        [sys.executable, "-c", _quickstart()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "1000"
    warehouse = connect_workdir() / "fencedlake-warehouse"
    assert (warehouse / "catalog.db").is_file()
    assert not (tmp_path / "fencedlake-warehouse").exists()
    assert not list((STATE / "connect" / "tmp").rglob("fencedlake-warehouse"))
    spark = _session(server)
    try:
        assert spark.read.format("fencedlake").load("db.events").count() == 1000
    finally:
        spark.stop()
    assert len(_ids(warehouse, "db.events")) == 1000


def test_batch_stream_compact_read_table_and_sql_over_connect(server: str, tmp_path: Path) -> None:
    """A Connect client: tune_session (its workers warmed for two writes: the rendezvous is on the server's host),
    six small appends, a streaming copy, compact (client-side planning with an absolute warehouse), read_table and
    a SQL view: exact rows throughout."""
    wh = str(tmp_path / "wh")
    spark = _session(server)
    try:
        tune_session(spark)
        assert warm_workers(spark, 2)["met"] is True
        for i in range(6):
            spark.range(i * 100, (i + 1) * 100).write.format("fencedlake").mode("append").option("warehouse", wh).save(
                "cx.events"
            )
        copy = (
            spark.readStream.format("fencedlake")
            .option("warehouse", wh)
            .load("cx.events")
            .writeStream.format("fencedlake")
            .option("warehouse", wh)
            .option("writer.id", "cx-copy")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start("cx.copy")
        )
        copy.awaitTermination(300)
        assert copy.exception() is None
        assert _ids(wh, "cx.copy") == list(range(600))

        with pytest.raises(InvalidOptionsError, match="on a Spark Connect session"):
            compact(spark, "cx.events")  # the client cannot know the server's default warehouse
        result = compact(spark, "cx.events", warehouse=wh, min_input_files=2)
        assert (result.outcome, result.rows) == ("applied", 600), result
        assert _ids(wh, "cx.events") == list(range(600))

        df = read_table(spark, "cx.events", warehouse=wh)
        assert df.count() == 600
        keyed = spark.range(100).selectExpr("id", "'a' AS v")
        keyed.write.format("fencedlake").mode("append").option("warehouse", wh).save("cx.keyed")
        changed = spark.range(90, 110).selectExpr("id", "'b' AS v")  # 10 updated keys (position deletes), 10 new
        changed.write.format("fencedlake").mode("append").option("warehouse", wh).option("upsert-keys", "id").save(
            "cx.keyed"
        )
        rows = {(r.id, r.v) for r in read_table(spark, "cx.keyed", warehouse=wh).collect()}
        assert rows == {(i, "a") for i in range(90)} | {(i, "b") for i in range(90, 110)}
        assert any(t.delete_files for t in embedded_catalog(wh).load_table("cx.keyed").scan().plan_files())
        register_view(spark, "cx_events", "cx.events", warehouse=wh)
        spark.sql("INSERT INTO cx_events SELECT id + 600 AS id FROM cx_events WHERE id < 10")
        register_view(spark, "cx_events", "cx.events", warehouse=wh)  # a view reads its first query's snapshot
        assert spark.sql("SELECT count(*) AS n FROM cx_events").collect()[0].n == 610
        assert spark.sql("SELECT count(*) AS n FROM cx_events WHERE id >= 600").collect()[0].n == 10
    finally:
        spark.stop()
    assert _ids(wh, "cx.events") == list(range(610))
    _invariants(wh, "cx.events")


def test_catalog_tables_over_connect_fail_with_the_sql_statement_that_works(server: str, tmp_path: Path) -> None:
    """On the Connect server as on a classic session: CREATE TABLE ... USING fencedlake without columns is refused
    at CREATE, and a table declared with columns fails every statement, in this client and another, naming the
    CREATE TEMPORARY VIEW that works (which then inserts and reads)."""
    wh = str(tmp_path / "wh")
    spark, other = _session(server), _session(server)
    try:
        with pytest.raises(Exception) as err:  # noqa: PT011 - the client's exception carries the sink's text
            spark.sql(f"CREATE TABLE cx_cat USING fencedlake OPTIONS (warehouse '{wh}', table 'cx.cat')")
        typed = fencedlake_error(err.value)
        assert isinstance(typed, InvalidOptionsError) and "CREATE TEMPORARY VIEW <name> USING fencedlake" in str(typed)
        spark.sql(
            f"CREATE TABLE cx_sqlt (id BIGINT, s STRING) USING fencedlake OPTIONS (warehouse '{wh}', table 'cx.t')"
        )
        for session, statement in [(spark, "INSERT INTO cx_sqlt VALUES (1, 'a')"), (other, "SELECT * FROM cx_sqlt")]:
            with pytest.raises(Exception) as err:  # noqa: PT011
                session.sql(statement).collect()
            typed = fencedlake_error(err.value)
            assert isinstance(typed, InvalidOptionsError), err.value
            assert "DROP TABLE <name>; CREATE TEMPORARY VIEW <name> (`id` BIGINT, `s` STRING)" in str(typed)
        spark.sql("DROP TABLE cx_sqlt")
        register_view(spark, "cx_sqlt", "cx.t", schema="id BIGINT, s STRING", warehouse=wh)
        spark.sql("INSERT INTO cx_sqlt VALUES (1, 'a')")
        assert spark.sql("SELECT count(*) AS n FROM cx_sqlt").collect()[0].n == 1
    finally:
        spark.sql("DROP TABLE IF EXISTS cx_sqlt")
        spark.stop()
        other.stop()
    assert _ids(wh, "cx.t") == [1]


def test_typed_errors_come_back_typed_through_the_client(server: str, tmp_path: Path) -> None:
    """fencedlake_error finds the typed error in what the Connect client raises: bad input, a rejected write, and a
    catalog that cannot be reached (retryable, its endpoint named)."""
    wh = str(tmp_path / "wh")
    spark = _session(server)
    try:

        def writer() -> Any:  # a fresh DataFrameWriter each time: option() changes the writer it is called on
            return spark.range(5).write.format("fencedlake").option("warehouse", wh)

        with pytest.raises(Exception) as err:  # noqa: PT011 - the client's exception carries the sink's text
            writer().mode("append").option("replaceWhere", "id < 5").save("cx.errors")
        typed = fencedlake_error(err.value)
        assert isinstance(typed, InvalidOptionsError) and "replacewhere -> replace-where" in str(typed)

        writer().mode("append").save("cx.errors")
        with pytest.raises(Exception) as err:  # noqa: PT011
            writer().mode("overwrite").option("replace-where", "id < 3").save("cx.errors")
        assert isinstance(fencedlake_error(err.value), WriteRejectedError)

        with pytest.raises(Exception) as err:  # noqa: PT011
            spark.range(1).write.format("fencedlake").mode("append").option("catalog.type", "sql").option(
                "catalog.uri", "postgresql+psycopg2://lake:pw-not-shown@127.0.0.1:9/lake"
            ).save("cx.down")
        typed = fencedlake_error(err.value)
        assert isinstance(typed, ServiceError) and typed.retryable is True, err.value
        assert "127.0.0.1:9" in str(typed) and "pw-not-shown" not in str(typed)
    finally:
        spark.stop()
    assert _ids(wh, "cx.errors") == list(range(5))


def test_two_clients_write_one_table_at_once_exactly_once(server: str, tmp_path: Path) -> None:
    """Two Connect clients (two sessions, two artifact directories) append 5 batches each, at once."""
    wh = str(tmp_path / "wh")
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def client(k: int) -> None:
        spark = _session(server)
        try:
            barrier.wait(timeout=60)
            for b in range(5):
                start = (k * 5 + b) * 200
                spark.range(start, start + 200).write.format("fencedlake").mode("append").option(
                    "warehouse", wh
                ).option("writer.id", f"client-{k}").option("writer.batch-id", str(b)).save("cx.shared")
        except BaseException as e:
            errors.append(e)
        finally:
            spark.stop()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == []
    assert _ids(wh, "cx.shared") == list(range(2000))
    _invariants(wh, "cx.shared")
