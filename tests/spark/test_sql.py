"""fencedlake from Spark SQL and the DataFrameWriterV2 face, on a real local Spark (spark/sql.py).

What Spark 4.x passes a Python data source decides what works: a catalog table
(``CREATE TABLE ... USING fencedlake``) reaches the sink with no options, a
temporary view declared ``USING fencedlake OPTIONS (...)`` with its options. The
tests pin both: the view path reads and writes, the catalog path fails with
the SQL statement that works (at CREATE where Spark asks the sink, at every
statement where it does not), and Spark's own refusals are what the README says. Also:
Iceberg's write option names set this write's file size, and ``tune_session``
names ``DATA_SOURCE_NOT_FOUND``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pyspark_fenced_sink import register_view, tune_session
from pyspark_fenced_sink.errors import FencedLakeError, InvalidOptionsError, fencedlake_error
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark.tuning import check_data_source
from tests.spark.support import ids_of

pytestmark = pytest.mark.spark


def _days(wh: str, table: str) -> list[tuple[int, str]]:
    rows = embedded_catalog(wh).load_table(table).scan().to_arrow().to_pylist()
    return sorted((r["id"], r["day"]) for r in rows)


def test_a_view_reads_inserts_and_overwrites_a_table_it_creates(spark: Any, wh: str) -> None:
    """register_view with the columns: the first INSERT creates the table; SELECT, INSERT OVERWRITE follow."""
    register_view(spark, "events", "sql.events", schema="id BIGINT, day STRING", warehouse=wh)
    spark.sql("INSERT INTO events VALUES (1, 'a'), (2, 'b')")
    spark.sql("INSERT INTO events SELECT id + 10, day FROM VALUES (1, 'a'), (2, 'b') AS t(id, day)")
    assert _days(wh, "sql.events") == [(1, "a"), (2, "b"), (11, "a"), (12, "b")]
    assert sorted(r.id for r in spark.sql("SELECT id FROM events WHERE day = 'a'").collect()) == [1, 11]
    spark.sql("INSERT OVERWRITE events VALUES (5, 'c')")
    assert _days(wh, "sql.events") == [(5, "c")]


def test_a_view_with_dynamic_overwrite_serves_insert_into_and_insert_overwrite(spark: Any, wh: str) -> None:
    """One view's options reach every statement: overwrite-mode=dynamic is ignored by INSERT INTO (an append)
    and makes INSERT OVERWRITE replace only the partitions written."""
    options = {"warehouse": wh, "partition-by": "day", "overwrite-mode": "dynamic"}
    register_view(spark, "daily", "sql.daily", schema="id BIGINT, day STRING", **options)
    spark.sql("INSERT INTO daily VALUES (1, 'a'), (2, 'b')")
    spark.sql("INSERT OVERWRITE daily VALUES (3, 'b')")
    assert _days(wh, "sql.daily") == [(1, "a"), (3, "b")]


def test_sql_declared_view_and_writeto_append(spark: Any, wh: str) -> None:
    """The plain SQL statement works as the helper does, and writeTo(view).append() appends through it."""
    spark.range(3).write.format("fencedlake").mode("append").option("warehouse", wh).save("sql.plain")
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW plain USING fencedlake OPTIONS (table 'sql.plain', warehouse '{wh}')")
    spark.range(3, 5).writeTo("plain").append()
    assert spark.sql("SELECT count(*) AS n FROM plain").collect()[0].n == 5
    assert ids_of(wh, "sql.plain") == [0, 1, 2, 3, 4]


def test_create_table_using_fencedlake_is_refused_naming_the_view(spark: Any, wh: str) -> None:
    """CREATE TABLE ... USING fencedlake would register a table Spark never passes options for: refused, the
    message gives the CREATE TEMPORARY VIEW statement; nothing lands in Spark's catalog."""
    spark.range(1).write.format("fencedlake").mode("append").option("warehouse", wh).save("sql.cat")
    with pytest.raises(Exception) as err:  # noqa: PT011 - Spark wraps the sink's error
        spark.sql(f"CREATE TABLE cat USING fencedlake OPTIONS (table 'sql.cat', warehouse '{wh}')")
    typed = fencedlake_error(err.value)
    assert isinstance(typed, InvalidOptionsError)
    assert "CREATE TEMPORARY VIEW <name> USING fencedlake OPTIONS (table 'sql.cat'" in str(typed)
    assert not spark.catalog.tableExists("cat")


_CATALOG_STATEMENTS = {
    "INSERT INTO": lambda spark: spark.sql("INSERT INTO sqlt VALUES (1, 'a')"),
    "INSERT OVERWRITE": lambda spark: spark.sql("INSERT OVERWRITE sqlt SELECT id, 'b' FROM range(2)"),
    "SELECT": lambda spark: spark.sql("SELECT count(*) FROM sqlt").collect(),
    "INSERT INTO, another session": lambda spark: spark.newSession().sql("INSERT INTO sqlt VALUES (1, 'a')"),
    "insertInto": lambda spark: spark.createDataFrame([(1, "a")], "id BIGINT, s STRING").write.insertInto("sqlt"),
    "writeTo": lambda spark: spark.createDataFrame([(1, "a")], "id BIGINT, s STRING").writeTo("sqlt").append(),
    "CREATE TABLE AS SELECT": lambda spark: spark.sql(
        "CREATE TABLE sqlt_ctas USING fencedlake OPTIONS (table 'sql.sqlt') AS SELECT 1L AS id, 'a' AS s"
    ),
}


@pytest.mark.parametrize("statement", list(_CATALOG_STATEMENTS))
def test_every_statement_on_a_catalog_table_names_the_sql_remedy(spark: Any, wh: str, statement: str) -> None:
    """CREATE TABLE with columns runs no fencedlake code (nothing can refuse it), and Spark passes none of its
    OPTIONS on: every statement on it fails with the view statement, columns filled in, before any DataFrame
    remedy; nothing is written to a guessed table."""
    spark.sql(f"CREATE TABLE sqlt (id BIGINT, s STRING) USING fencedlake OPTIONS (warehouse '{wh}', table 'sql.sqlt')")
    try:
        with pytest.raises(Exception) as err:  # noqa: PT011 - Spark wraps the sink's error
            _CATALOG_STATEMENTS[statement](spark)
        typed = fencedlake_error(err.value)
        assert isinstance(typed, InvalidOptionsError), err.value
        text = str(typed)
        sql_part = text.split("(A DataFrame")[0]
        assert "DROP TABLE <name>; CREATE TEMPORARY VIEW <name> (`id` BIGINT, `s` STRING) USING fencedlake" in text
        assert "no table given" in text and ".save(" not in sql_part and ".option(" not in sql_part
        assert not embedded_catalog(wh).table_exists("sql.sqlt")
    finally:
        spark.sql("DROP TABLE IF EXISTS sqlt")
        spark.sql("DROP TABLE IF EXISTS sqlt_ctas")


@pytest.mark.parametrize(
    ("statement", "spark_says"),
    [
        ("overwritePartitions", "does not support dynamic overwrite"),
        ("replace-where-sql", "does not support overwrite by filter"),
    ],
)
def test_what_spark_refuses_for_python_sources_is_refused_by_spark(
    spark: Any, wh: str, statement: str, spark_says: str
) -> None:
    """The README maps these Spark errors to fencedlake's options; pin Spark's wording so the map stays true."""
    register_view(spark, "refused", "sql.refused", schema="id BIGINT", warehouse=wh)
    run = {
        "overwritePartitions": lambda: spark.range(1).writeTo("refused").overwritePartitions(),
        "replace-where-sql": lambda: spark.sql("INSERT INTO refused REPLACE WHERE id = 1 VALUES (1)"),
    }[statement]
    with pytest.raises(Exception, match=spark_says):
        run()


def test_an_iceberg_write_option_sets_this_writes_target_file_size(spark: Any, wh: str) -> None:
    """Iceberg's target-file-size-bytes (and write.* properties) as options roll this write's files at that size
    (files roll between row groups, so the row group is made smaller too); the table's properties are untouched."""
    df = spark.range(0, 200_000, 1, 1).selectExpr("id", "uuid() AS pad")
    writer = df.write.format("fencedlake").mode("append").option("warehouse", wh)
    writer.save("sql.sized")
    small_groups = writer.option("write.parquet.row-group-size-bytes", str(128 * 1024))
    small_groups.option("target-file-size-bytes", str(512 * 1024)).save("sql.sized")
    table = embedded_catalog(wh).load_table("sql.sized")
    sizes = [t.file.file_size_in_bytes for t in table.scan().plan_files()]
    big = max(sizes)
    small = [s for s in sizes if s != big]
    assert len(small) >= 3 and all(s < 2 * 512 * 1024 for s in small), sizes
    assert not any(k.startswith("write.parquet.row-group") or "target-file" in k for k in table.properties)


def test_check_data_source_names_data_source_not_found(spark: Any) -> None:
    """In a thread with no active session Spark cannot find the format: the check raises the hint instead of
    Spark's bare DATA_SOURCE_NOT_FOUND; in the session's own thread it passes (and tune_session runs it)."""
    check_data_source(spark)
    assert isinstance(tune_session(spark.newSession()), dict)  # a new session: the run shares `spark` untuned
    caught: list[BaseException] = []

    def probe() -> None:
        try:
            check_data_source(spark)
        except BaseException as e:  # noqa: BLE001 - asserted below
            caught.append(e)

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(timeout=120)
    assert len(caught) == 1 and isinstance(caught[0], FencedLakeError), caught
    text = str(caught[0])
    assert "DATA_SOURCE_NOT_FOUND" in text and "PYSPARK_PYTHON" in text and "activate_session" in text


def test_a_view_reads_the_snapshot_its_first_query_planned_until_declared_again(spark: Any, wh: str) -> None:
    """Spark 4.1-4.3 keep a Python source's read plan on the relation: a view (like a DataFrame) keeps reading
    the snapshot its first query planned; register_view again reads the current one. (If this starts failing,
    Spark plans every query anew: drop the caveat from the README's SQL section and docs/PROTOCOL.md §14.)"""
    from pyspark_fenced_sink.spark.reader import PUSHED_FILTERS_PRUNE

    register_view(spark, "frozen", "sql.frozen", schema="id BIGINT NOT NULL", warehouse=wh)
    spark.sql("INSERT INTO frozen VALUES (1), (2)")
    assert spark.sql("SELECT count(*) AS n FROM frozen").collect()[0].n == 2
    spark.sql("INSERT INTO frozen VALUES (3)")
    seen = spark.sql("SELECT count(*) AS n FROM frozen").collect()[0].n
    assert seen == (3 if PUSHED_FILTERS_PRUNE else 2)
    register_view(spark, "frozen", "sql.frozen", warehouse=wh)
    assert spark.sql("SELECT count(*) AS n FROM frozen").collect()[0].n == 3
    assert ids_of(wh, "sql.frozen") == [1, 2, 3]


def test_a_native_view_reads_through_sparks_parquet_scan_as_a_snapshot(spark: Any, wh: str) -> None:
    """register_view(native=True): Spark's file scan, the data source's rows; a later commit needs a new view."""
    session = spark.newSession()
    session.range(5).write.format("fencedlake").mode("append").option("warehouse", wh).save("sql.snap")
    register_view(session, "snap_native", "sql.snap", native=True, warehouse=wh)
    register_view(session, "snap_source", "sql.snap", warehouse=wh)
    rows = session.sql("SELECT id FROM snap_native WHERE id >= 2")
    assert "FileScan parquet" in rows._jdf.queryExecution().executedPlan().toString()
    assert sorted(r.id for r in rows.collect()) == [2, 3, 4]
    session.range(5, 8).write.format("fencedlake").mode("append").option("warehouse", wh).save("sql.snap")
    assert session.sql("SELECT count(*) AS n FROM snap_source").first().n == 8  # the data source: every query
    assert session.sql("SELECT count(*) AS n FROM snap_native").first().n == 5  # the snapshot planned at declaring
    register_view(session, "snap_native", "sql.snap", native="auto", warehouse=wh)
    assert session.sql("SELECT count(*) AS n FROM snap_native").first().n == 8
    with pytest.raises(Exception):  # noqa: B017, PT011 - Spark's own refusal (a DataFrame view is not insertable)
        session.sql("INSERT INTO snap_native VALUES (9)").collect()
    with pytest.raises(InvalidOptionsError, match="schema="):
        register_view(session, "snap_new", "sql.none", native=True, schema="id BIGINT", warehouse=wh)
