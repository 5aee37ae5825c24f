"""Another engine changes the table between a write's WAL put and its apply (PROTOCOL.md §5.4).

Each test makes a fencedlake entry durable (its driver "dies" after the put),
lets plain pyiceberg (``tests.iceberg.foreign``) change the table, then lets
the next committer (``recover``, or another write) reconcile it: the entry
must end APPLIED or REFUSED by one committed decision, and no row outside
what the entry replaces may be lost.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.types import LongType as LongType_
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from pyspark_fenced_sink.errors import WriteRejectedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.codec.row_filter import filter_field_ids
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.publish import publish_branch
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.testing.harness import open_target, plan, sink_write, write_tasks
from tests.iceberg import foreign
from tests.iceberg.test_write_modes import TABLE, days, prepared, rows, write


@pytest.fixture
def wh(tmp_path: Any) -> str:
    return str(tmp_path / "wh")


def durable(wh: str, entry: WalEntry) -> int:
    """Put ``entry`` into the WAL as a writer that dies right after its put; its seq."""
    return open_target(wh, TABLE).ctx.wal.append(entry, start=0)


def settle(wh: str) -> dict[int, str]:
    """``fencedlake recover``: every pending entry decided and committed; seq -> outcome code."""
    records = recover(open_target(wh, TABLE).ctx)
    return {r.first + i: code for r in records for i, (_, code) in enumerate(r.outcomes)}


def table(wh: str, name: str = TABLE) -> Any:
    return embedded_catalog(wh).load_table(name)


# ---------------------------------------------------------------------------------------------- failure 1


def test_a_column_rename_does_not_strand_a_durable_replace_where(wh: str) -> None:
    """replace-where on ``day`` durable, ``day`` renamed ``dt``: the entry applies (by field id); the table moves on."""
    write(wh, days(d1=[1], d2=[2]))
    seq = durable(wh, prepared(wh, days(d1=[9]), overwrite=True, **{"replace-where": "day = 'd1'"}))
    foreign.rename_column(table(wh), "day", "dt")
    assert settle(wh)[seq] == "A"
    got = sorted((r["id"], r["dt"]) for r in table(wh).scan().to_arrow().to_pylist())
    assert got == [(2, "d2"), (9, "d1")]


# ---------------------------------------------------------------------------------------------- failure 2

DOUBLES = StructType([StructField("id", LongType()), StructField("v", DoubleType())])


def doubles(wh: str, ids: list[int], values: list[float], **options: str) -> Any:
    data = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(values, pa.float64())})
    overwrite = "replace-where" in options
    return sink_write(wh, "db.n", data, options, schema=DOUBLES, overwrite=overwrite, tasks=1)


def test_a_nan_row_outside_the_filter_refuses_replace_where(wh: str) -> None:
    """A live file holds 1.0, 2.0, NaN: ``v < 100`` straddles it (NaN does not match), so the write is refused."""
    doubles(wh, [1, 2, 3], [1.0, 2.0, float("nan")])
    with pytest.raises(WriteRejectedError, match=r"has rows on both sides of the filter \(by its partition"):
        doubles(wh, [4], [5.0], **{"replace-where": "v < 100"})
    got = table(wh, "db.n").scan().to_arrow().column("id").to_pylist()
    assert sorted(got) == [1, 2, 3]


# ---------------------------------------------------------------------------------------------- failure 5


def test_publish_is_refused_after_a_minimal_summary_append_on_main(wh: str) -> None:
    """Another engine appends to main with a summary of only ``operation``: main changed data, publish refused."""
    write(wh, days(d1=[1]))
    write(wh, days(d2=[2]), branch="audit")
    foreign.append_minimal_summary(table(wh), pa.table({"id": pa.array([3], pa.int64()), "day": ["d3"]}))
    with pytest.raises(WriteRejectedError, match="changed data"):
        publish_branch(open_target(wh, TABLE).ctx, "audit")
    assert rows(wh) == [(1, "d1"), (3, "d3")]


# ---------------------------------------------------------------------------------------------- the class behind them

NOTES = StructType([StructField("id", LongType()), StructField("note", StringType()), StructField("n", IntegerType())])


def notes(wh: str, ids: list[int], note: str, **options: str) -> Any:
    data = pa.table({"id": pa.array(ids, pa.int64()), "note": [note] * len(ids), "n": pa.array(ids, pa.int32())})
    overwrite = "replace-where" in options or "overwrite-mode" in options
    return sink_write(
        wh, "db.notes", data, options, schema=NOTES, overwrite=overwrite, tasks=1, **{"partition-by": "n"}
    )


def prepared_notes(wh: str, ids: list[int], note: str, **options: str) -> WalEntry:
    p = plan(wh, "db.notes", options, schema=NOTES, overwrite=True, **{"partition-by": "n"})
    files = [
        f
        for m in write_tasks(
            p, pa.table({"id": pa.array(ids, pa.int64()), "note": [note] * len(ids), "n": pa.array(ids, pa.int32())}), 1
        )
        for f in m.files
    ]
    assert p.identity is not None
    text = p.opts.replace_where
    return data_entry(
        p.identity,
        files,
        mode=p.mode,
        spec_id=p.spec.spec_id,
        row_filter=text,
        filter_ids=filter_field_ids(text, p.spec.schema_json) if text else (),
    )


def settle_notes(wh: str) -> dict[int, str]:
    records = recover(open_target(wh, "db.notes").ctx)
    return {r.first + i: code for r in records for i, (_, code) in enumerate(r.outcomes)}


def note_rows(wh: str) -> list[tuple[int, int]]:
    got = table(wh, "db.notes").scan().to_arrow()
    return sorted(zip(got.column("id").to_pylist(), got.column("n").to_pylist(), strict=True))


def test_a_replace_where_whose_column_was_dropped_is_refused_not_stranded(wh: str) -> None:
    """The filter's column is gone: REFUSED (its rows kept), and the table moves on."""
    notes(wh, [1, 2], "x")
    entry = prepared_notes(wh, [5], "x", **{"replace-where": "note = 'x'"})
    seq = open_target(wh, "db.notes").ctx.wal.append(entry, start=0)
    foreign.drop_column(table(wh, "db.notes"), "note")
    assert settle_notes(wh)[seq] == "R"
    assert note_rows(wh) == [(1, 1), (2, 2)]
    notes_after = table(wh, "db.notes").schema().column_names
    assert "note" not in notes_after


def test_a_partition_source_promoted_between_put_and_apply_keeps_dynamic_overwrite_exact(wh: str) -> None:
    """``n`` int -> long after a dynamic overwrite of partition n=2 was put: it replaces n=2 (by value), only."""
    notes(wh, [1, 2], "x")
    entry = prepared_notes(wh, [2], "y", **{"overwrite-mode": "dynamic"})
    seq = open_target(wh, "db.notes").ctx.wal.append(entry, start=0)
    foreign.promote_column(table(wh, "db.notes"), "n", LongType_())
    assert settle_notes(wh)[seq] == "A"
    got = table(wh, "db.notes").scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["note"]) for r in got) == [(1, "x"), (2, "y")]


def test_files_another_engine_wrote_without_metrics_refuse_a_replace_where_they_cannot_be_placed_by(wh: str) -> None:
    """An append with ``write.metadata.metrics.default=none``: a replace-where on a column they hold is refused
    before any task runs, naming the missing statistics; the filter on the partition still applies."""
    notes(wh, [1], "x")
    t = foreign.append(
        table(wh, "db.notes"),
        pa.table({"id": pa.array([3], pa.int64()), "note": ["x"], "n": pa.array([3], pa.int32())}),
        **{"write.metadata.metrics.default": "none"},
    )
    assert t.properties["write.metadata.metrics.default"] == "none"
    with pytest.raises(WriteRejectedError, match="lacks the column statistics"):
        notes(wh, [4], "x", **{"replace-where": "note = 'x'"})
    assert notes(wh, [3], "z", **{"replace-where": "n = 3"}).outcome is Outcome.APPLIED
    assert note_rows(wh) == [(1, 1), (3, 3)]
