"""Real Spark tests of the write modes (batch and streaming): dynamic overwrite, replace-where, snapshot
properties, branches and publish (docs/PROTOCOL.md §5.1).

Every table is read back twice, independently: with pyiceberg and with DuckDB's
iceberg extension (the metadata file of main), and compared to the exact rows.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T  # noqa: N812 - the usual pyspark idiom

from pyspark_fenced_sink.errors import InvalidOptionsError, WriteRejectedError, fencedlake_error
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.cli import main as cli
from tests.spark.streamutil import start_query, write_input
from tests.spark.support import duckdb_rows

pytestmark = pytest.mark.spark

UTC = dt.UTC
EVENTS = T.StructType([T.StructField("id", T.LongType()), T.StructField("ts", T.TimestampType())])


def at(day: int, hour: int = 12) -> dt.datetime:
    return dt.datetime(2026, 1, day, hour, tzinfo=UTC)


def events(spark: Any, rows: list[tuple[int, int]]) -> Any:
    """A DataFrame of (id, ts) with ``ts`` on January ``day`` 2026, for each (id, day)."""
    return spark.createDataFrame([(i, at(d)) for i, d in rows], EVENTS)


def save(df: Any, wh: str, table: str, mode: str, **options: str) -> None:
    writer = df.write.format("fencedlake").mode(mode).option("warehouse", wh)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(table)


def exact(wh: str, table: str, ref: str = "main") -> list[tuple[int, int]]:
    """(id, day) rows of ``ref`` read with pyiceberg; for main also with DuckDB, which must agree."""
    t = embedded_catalog(wh).load_table(table)
    snapshot = t.metadata.snapshot_by_name(ref)
    got = [] if snapshot is None else t.scan(snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
    rows = sorted((r["id"], r["ts"].day) for r in got)
    if ref == "main":
        assert sorted((r["id"], r["ts"].day) for r in duckdb_rows(t.metadata_location)) == rows
    return rows


def summary(wh: str, table: str, ref: str = "main") -> dict[str, str]:
    t = embedded_catalog(wh).load_table(table)
    return dict(t.metadata.snapshot_by_name(ref).summary.additional_properties)


def test_dynamic_overwrite_replaces_one_day_of_thirty_exactly(spark: Any, wh: str) -> None:
    """overwrite-mode=dynamic on a day(ts) table: day 2 holds the new rows, the other days are untouched."""
    base = [(d * 10 + k, d) for d in range(1, 31) for k in range(2)]
    save(events(spark, base), wh, "modes.days", "append", **{"partition-by": "day(ts)"})
    save(events(spark, [(900, 2), (901, 2), (902, 2)]), wh, "modes.days", "overwrite", **{"overwrite-mode": "dynamic"})
    assert exact(wh, "modes.days") == sorted([r for r in base if r[1] != 2] + [(900, 2), (901, 2), (902, 2)])


def test_replace_where_replaces_the_rows_of_its_filter(spark: Any, wh: str) -> None:
    """replace-where on day boundaries: the filtered days take the new rows; a row outside fails the write."""
    save(events(spark, [(1, 1), (2, 2), (3, 3)]), wh, "modes.rw", "append", **{"partition-by": "day(ts)"})
    where = {"replace-where": "ts >= '2026-01-02' AND ts < '2026-01-04'"}
    save(events(spark, [(20, 2), (30, 3)]), wh, "modes.rw", "overwrite", **where)
    assert exact(wh, "modes.rw") == [(1, 1), (20, 2), (30, 3)]
    with pytest.raises(Exception) as err:  # noqa: PT011 - Spark wraps the sink's error
        save(events(spark, [(40, 3), (50, 5)]), wh, "modes.rw", "overwrite", **where)
    assert isinstance(fencedlake_error(err.value), WriteRejectedError)
    assert "do not satisfy replace-where" in str(fencedlake_error(err.value))
    assert exact(wh, "modes.rw") == [(1, 1), (20, 2), (30, 3)]


def test_replace_where_on_an_append_fails_before_anything_runs(spark: Any, wh: str) -> None:
    """replace-where with mode("append") is InvalidOptionsError; nothing is written. overwrite-mode alone is
    ignored by an append (it says what an overwrite replaces), so one SQL view serves both kinds of INSERT."""
    with pytest.raises(Exception) as err:  # noqa: PT011 - Spark wraps the sink's error
        save(events(spark, [(1, 1)]), wh, "modes.none", "append", **{"replace-where": "id = 1"})
    assert isinstance(fencedlake_error(err.value), InvalidOptionsError)
    assert not embedded_catalog(wh).table_exists("modes.none")
    save(events(spark, [(1, 1)]), wh, "modes.none", "append", **{"overwrite-mode": "dynamic"})
    assert exact(wh, "modes.none") == [(1, 1)]


def test_snapshot_properties_and_a_branch_then_publish(spark: Any, wh: str) -> None:
    """Write-audit-publish: writes to a branch carry their snapshot properties; publish moves main to them."""
    save(events(spark, [(1, 1)]), wh, "modes.wap", "append", **{"partition-by": "day(ts)"})
    audit = {"branch": "audit", "snapshot-property.job": "backfill-7"}
    save(events(spark, [(2, 2)]), wh, "modes.wap", "append", **audit)
    save(events(spark, [(10, 1)]), wh, "modes.wap", "overwrite", **audit, **{"overwrite-mode": "dynamic"})
    assert exact(wh, "modes.wap") == [(1, 1)]
    assert exact(wh, "modes.wap", "audit") == [(2, 2), (10, 1)]
    assert summary(wh, "modes.wap", "audit")["job"] == "backfill-7"
    assert cli(["publish", "modes.wap", "audit", "--warehouse", wh]) == 0
    assert exact(wh, "modes.wap") == [(2, 2), (10, 1)]
    assert summary(wh, "modes.wap")["fencedlake.published"].startswith("audit@")


# ------------------------------------------------------------------ streaming


def test_streaming_complete_mode_with_dynamic_overwrite_keeps_other_partitions(
    spark: Any, wh: str, tmp_path: Path
) -> None:
    """Per micro-batch, complete + overwrite-mode=dynamic replaces the keys its result has; others stay."""
    seed = spark.createDataFrame([("z", 99)], "k string, count long")
    save(seed, wh, "modes.counts", "append", **{"partition-by": "k"})
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    write_input(inp, "f0", [0, 1, 2, 3])
    write_input(inp, "f1", [4, 5])
    query = start_query(
        spark,
        input_dir=inp,
        checkpoint=chk,
        warehouse=wh,
        table="modes.counts",
        writer_id="counts",
        mode="complete",
        options={"overwrite-mode": "dynamic", "snapshot-property.pipeline": "counts"},
    )
    assert query.awaitTermination(120) and query.exception() is None
    t = embedded_catalog(wh).load_table("modes.counts")
    rows = sorted((r["k"], r["count"]) for r in t.scan().to_arrow().to_pylist())
    assert rows == [("k0", 2), ("k1", 2), ("k2", 2), ("z", 99)]
    assert sorted((r["k"], r["count"]) for r in duckdb_rows(t.metadata_location, order_by="k")) == rows
    assert t.current_snapshot().summary.additional_properties["pipeline"] == "counts"


def test_streaming_append_to_a_branch_lands_on_the_branch_only(spark: Any, wh: str, tmp_path: Path) -> None:
    """writeStream with option branch: every micro-batch commits to the branch; main stays as it was."""
    save(spark.createDataFrame([(0, "k0")], "id long, k string"), wh, "modes.sbranch", "append")
    inp, chk = str(tmp_path / "in"), str(tmp_path / "chk")
    write_input(inp, "f0", [1, 2])
    write_input(inp, "f1", [3])
    query = start_query(
        spark,
        input_dir=inp,
        checkpoint=chk,
        warehouse=wh,
        table="modes.sbranch",
        writer_id="to-branch",
        options={"branch": "staging"},
    )
    assert query.awaitTermination(120) and query.exception() is None
    t = embedded_catalog(wh).load_table("modes.sbranch")
    main_ids = sorted(r["id"] for r in duckdb_rows(t.metadata_location))
    branch = t.metadata.snapshot_by_name("staging")
    assert main_ids == [0]
    assert sorted(t.scan(snapshot_id=branch.snapshot_id).to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]
