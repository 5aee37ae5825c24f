"""Four readers agree on every table state fencedlake makes (issue 34): local files, real Spark.

``read_table(native=True)`` (Spark's Parquet reader, position deletes anti-joined),
``spark.read.format("fencedlake")`` (the Python data source), pyiceberg's
``scan().to_arrow()`` and DuckDB's ``iceberg_scan`` read the same table after appends,
upserts that write position deletes, a tag and a branch, schema evolution (an added
column), compaction and an overwrite, and at earlier snapshots by id (time travel).
Every state must read natively (no fallback), and the upserts must lower the row
count: a reader that ignored the deletes fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.types import LongType

from pyspark_fenced_sink import compact, read_table
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark.native_read import plan_native_read
from tests.spark.support import duckdb_connection, local_path
from tests.spark.upsertutil import OPTIONS as UPSERT

pytestmark = pytest.mark.spark

TABLE = "db.agree"
#: The upsert input (tests.spark.upsertutil) with the key non-null: an upsert makes the key column required.
SCHEMA_DDL = "id long not null, ts long, v string, op string"


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    return spark.newSession()


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("agree") / "wh")


def _save(session: Any, wh: str, rows: list[Any], ddl: str = SCHEMA_DDL, mode: str = "append", **options: str) -> None:
    writer = session.createDataFrame(rows, ddl).write.format("fencedlake").mode(mode).option("warehouse", wh)
    writer.options(**options).save(TABLE)


def _snapshot_id(table: Any, options: dict[str, str]) -> int:
    if "snapshot-id" in options:
        return int(options["snapshot-id"])
    ref = options.get("tag") or options.get("branch")
    return int(table.metadata.refs[ref].snapshot_id if ref else table.current_snapshot().snapshot_id)


def _rows(records: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in records), key=repr)


def every_reader(session: Any, wh: str, **options: str) -> list[tuple[Any, ...]]:
    """The rows of ``TABLE`` at ``options``' read point, after asserting all four readers return them natively."""
    plan = plan_native_read(session, TABLE, native=True, warehouse=wh, **options)
    native = read_table(session, TABLE, native=True, warehouse=wh, **options)
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()
    columns = native.columns
    ours = _rows([r.asDict() for r in native.collect()], columns)
    source = session.read.format("fencedlake").option("warehouse", wh).options(**options).load(TABLE)
    assert source.columns == columns
    assert _rows([r.asDict() for r in source.collect()], columns) == ours, ("data source", options)
    table = embedded_catalog(wh).load_table(TABLE)
    snapshot = _snapshot_id(table, options)
    pyiceberg = table.scan(snapshot_id=snapshot).to_arrow().to_pylist()
    assert _rows(pyiceberg, columns) == ours, ("pyiceberg", options)
    sql = f"SELECT * FROM iceberg_scan('{local_path(table.metadata_location)}', snapshot_from_id => {snapshot})"
    duck = duckdb_connection().cursor().execute(sql).to_arrow_table().to_pylist()
    assert _rows(duck, columns) == ours, ("duckdb", options)
    assert len(plan.files) >= 1
    return ours


def test_all_readers_agree_on_every_state_and_deletes_are_applied(session: Any, wh: str) -> None:
    """Appends, upserts (position deletes), tag, branch, added column, compaction, overwrite, time travel."""
    _save(session, wh, [(i, 1, f"a{i}", "U") for i in range(20)], **UPSERT)  # creates the keyed table
    _save(session, wh, [(i, 1, f"a{i}", "U") for i in range(20, 40)])
    assert len(every_reader(session, wh)) == 40
    table = embedded_catalog(wh).load_table(TABLE)
    appended = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(appended, "appended").commit()

    _save(session, wh, [(i, 2, f"b{i}", "U") for i in range(10)] + [(i, 2, None, "D") for i in (10, 11, 12)], **UPSERT)
    upserted = every_reader(session, wh)
    assert len(upserted) == 37  # three keys deleted: the count drops only if the deletes are applied
    assert plan_native_read(session, TABLE, warehouse=wh).dirty, "the upsert wrote position deletes"
    _save(session, wh, [(i, 3, f"c{i}", "U") for i in (0, 5, 30)] + [(40, 3, "new", "U"), (39, 3, None, "D")], **UPSERT)
    after_second = every_reader(session, wh)
    assert len(after_second) == 37 and ("c30" in {r[2] for r in after_second})
    table = embedded_catalog(wh).load_table(TABLE)
    with_deletes = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(with_deletes, "audit").commit()
    assert every_reader(session, wh, branch="audit") == after_second
    assert len(every_reader(session, wh, tag="appended")) == 40

    with table.update_schema() as update:
        update.add_column("extra", LongType())
    _save(session, wh, [(50, 4, "x", "U", 7)], ddl=SCHEMA_DDL + ", extra long")
    evolved = every_reader(session, wh)
    assert len(evolved) == 38 and sorted(r[4] for r in evolved if r[4] is not None) == [7]

    result = compact(session, TABLE, warehouse=wh, min_input_files=2)
    assert result.outcome != "refused", result
    assert every_reader(session, wh) == evolved
    assert not plan_native_read(session, TABLE, warehouse=wh).dirty, "compaction folded the deletes"

    _save(session, wh, [(100, 5, "o", "U", None)], ddl=SCHEMA_DDL + ", extra long", mode="overwrite")
    assert len(every_reader(session, wh)) == 1
    # Time travel after all that: the snapshot with deletes, by id, reads as it did.
    assert every_reader(session, wh, **{"snapshot-id": str(with_deletes)}) == after_second
