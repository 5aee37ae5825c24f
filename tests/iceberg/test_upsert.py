"""Upserts through the real catalog commit (PROTOCOL.md §5.5; SQLite catalog, pyiceberg, DuckDB).

Each rule of the semantics table on a real table, read back by pyiceberg and by
DuckDB's iceberg reader; upserts grouped into one commit in WAL order (an
append between them commits apart); pruning by partition and by key bounds (the commit's files-read count);
the refusals that keep a table from ever being stuck; remembered deletes, their
merging and retention.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import pyspark_fenced_sink.iceberg.commit.tombstones as tombstones_module
from pyspark_fenced_sink.errors import InvalidOptionsError, WriteRejectedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.commit import key_index
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, SUMMARY_UPSERT, CommittedState
from pyspark_fenced_sink.testing.harness import open_target, plan, sink_write, write_tasks
from tests.spark.support import duckdb_rows

TABLE = "db.customers"
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("ts", LongType()),
        StructField("name", StringType()),
        StructField("op", StringType()),
    ]
)
#: A plain append into a table an upsert created: its key is a required column.
KEYED = StructType([StructField("id", LongType(), nullable=False), *SCHEMA.fields[1:]])
ORDERED = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}
UNORDERED = {"upsert-keys": "id", "upsert-delete-where": "op = 'D'"}

Row = tuple[int, int | None, str | None, str]


@pytest.fixture
def wh(tmp_path: Any) -> str:
    return str(tmp_path / "wh")


def frame(rows: Sequence[Row]) -> pa.Table:
    """``(id, ts, name, op)`` rows; op 'D' marks a delete row."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "name": pa.array([r[2] for r in rows], pa.string()),
            "op": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def upsert(wh: str, rows: Sequence[Row], options: dict[str, str] | None = None, **extra: Any) -> Any:
    return sink_write(wh, TABLE, frame(rows), options or ORDERED, schema=SCHEMA, **extra)


def table(wh: str) -> Any:
    return embedded_catalog(wh).load_table(TABLE)


def visible(wh: str) -> list[tuple[int, int | None, str | None]]:
    """The table's rows as pyiceberg reads them, and checked to be what DuckDB reads."""
    t = table(wh)
    got = sorted((r["id"], r["ts"], r["name"]) for r in t.scan().to_arrow().to_pylist())
    duck = sorted((r["id"], r["ts"], r["name"]) for r in duckdb_rows(t.metadata_location))
    assert duck == got, f"DuckDB reads {duck}, pyiceberg {got}"
    return got


def upsert_metrics(wh: str) -> dict[str, int]:
    summary = table(wh).current_snapshot().summary.additional_properties
    return {k: int(v) for k, v in (p.split("=") for p in summary[SUMMARY_UPSERT].split(","))}


def prepared(wh: str, rows: Sequence[Row], options: dict[str, str] | None = None) -> WalEntry:
    """The WAL entry of a planned upsert whose files are written (not yet put), as the driver builds it."""
    p = plan(wh, TABLE, options or ORDERED, schema=SCHEMA)
    messages = write_tasks(p, frame(rows), 1)
    assert p.identity is not None
    return data_entry(
        p.identity,
        [f for m in messages for f in m.files],
        mode=p.mode,
        spec_id=p.spec.spec_id,
        upsert=p.upsert,
        deletes=[d for m in messages for d in m.deletes],
    )


def in_wal_order(wh: str, *entries: WalEntry) -> list[str]:
    """Put ``entries`` into the WAL in this order, let one committer apply them; their outcome codes."""
    ctx = open_target(wh, TABLE).ctx
    seqs = [ctx.wal.append(e, start=0) for e in entries]
    records = recover(ctx)
    found = {r.first + i: code for r in records for i, (_, code) in enumerate(r.outcomes)}
    return [found[s] for s in seqs]


# ---------------------------------------------------------------------------------------------- semantics


@pytest.mark.parametrize(
    ("first", "second", "options", "expected"),
    [
        ((1, 5, "u1", "U"), (1, 7, "u2", "U"), ORDERED, [(1, 7, "u2")]),
        ((1, 7, "u1", "U"), (1, 5, "u2", "U"), ORDERED, [(1, 7, "u1")]),
        ((1, 5, "u1", "U"), (1, 5, "u2", "U"), ORDERED, [(1, 5, "u2")]),
        ((1, 9, None, "D"), (1, 5, "u2", "U"), ORDERED, []),
        ((1, 9, "u1", "U"), (1, 5, None, "D"), ORDERED, [(1, 9, "u1")]),
        ((1, 9, "u1", "U"), (1, 5, "u2", "U"), UNORDERED, [(1, 5, "u2")]),
        ((1, 9, "u1", "U"), (1, 1, None, "D"), UNORDERED, []),
    ],
    ids=["newer-wins", "older-loses", "tie-later-wal", "delete-remembered", "older-delete-loses", "no-order", "del"],
)
def test_the_semantics_table(wh: str, first: Row, second: Row, options: dict[str, str], expected: list[Any]) -> None:
    """Each row of PROTOCOL.md §5.5's table: two upserts of one key, U1 first in the WAL."""
    upsert(wh, [(0, 0, "other", "U"), first], options)
    upsert(wh, [second], options)
    assert visible(wh) == [(0, 0, "other"), *expected]


def test_the_result_does_not_depend_on_which_write_commits_first(wh: str, tmp_path: Any) -> None:
    """With an order column, two writes of overlapping keys give the same rows in either WAL order."""
    a = [(1, 5, "a1", "U"), (2, 9, None, "D"), (3, 1, "a3", "U")]
    b = [(1, 6, "b1", "U"), (2, 3, "b2", "U"), (3, 2, None, "D"), (4, 1, "b4", "U")]
    other = str(tmp_path / "other")
    upsert(wh, a)
    upsert(wh, b)
    upsert(other, b)
    upsert(other, a)
    assert visible(wh) == visible(other) == [(1, 6, "b1"), (4, 1, "b4")]


def test_duplicate_keys_in_one_write_the_greatest_order_wins(wh: str) -> None:
    """Inside one write with an order: greatest wins; a delete wins a tie; rows of other tasks count too."""
    upsert(wh, [(1, 3, "a", "U"), (2, 1, "b", "U"), (1, 8, "c", "U"), (2, 4, "d", "U"), (2, 4, None, "D")], tasks=2)
    assert visible(wh) == [(1, 8, "c")]


def test_duplicate_keys_without_order_fail_the_write_with_nothing_durable(wh: str) -> None:
    """Without an order a key twice (in different tasks) is a WriteRejectedError naming it; no WAL entry."""
    upsert(wh, [(9, 0, "x", "U")], UNORDERED)
    with pytest.raises(WriteRejectedError, match=r"key \{'id': 1\} appears 2 times") as e:
        upsert(wh, [(1, 1, "a", "U"), (2, 1, "b", "U"), (3, 1, "c", "U"), (1, 2, "d", "U")], UNORDERED, tasks=2)
    assert e.value.fields.get("outcome") == "REFUSED"
    ctx = open_target(wh, TABLE).ctx
    assert ctx.wal.scan(ctx.load().state.upper) == [] and visible(wh) == [(9, 0, "x")]


def test_a_null_key_fails_the_write(wh: str) -> None:
    """A row (or a delete row) with a null key fails its task; nothing is committed."""
    upsert(wh, [(1, 1, "a", "U")])
    data = frame([(2, 1, "b", "U")]).set_column(0, "id", pa.array([None], pa.int64()))
    with pytest.raises(WriteRejectedError, match="null key"):
        sink_write(wh, TABLE, data, ORDERED, schema=SCHEMA)
    assert visible(wh) == [(1, 1, "a")]


def test_a_created_table_gets_its_keys_as_required_identifier_fields(wh: str) -> None:
    """upsert-keys on create: the keys become required identifier fields (the default keys afterwards)."""
    upsert(wh, [(1, 1, "a", "U")])
    schema = table(wh).schema()
    assert schema.identifier_field_names() == {"id"} and schema.find_field("id").required
    upsert(wh, [(1, 2, "b", "U")], {"upsert-order": "ts"})  # keys from the identifier fields
    assert visible(wh) == [(1, 2, "b")]


def test_rows_appended_with_duplicate_keys_are_cleaned_by_the_next_upsert(wh: str) -> None:
    """Plain appends add rows without key checks; an upsert of the key removes every live row but the winner."""
    upsert(wh, [(5, 1, "keep", "U")])
    sink_write(wh, TABLE, frame([(1, 1, "a", "U"), (1, 2, "b", "U")]), schema=KEYED)
    assert [r[0] for r in visible(wh)] == [1, 1, 5]
    upsert(wh, [(1, 3, "c", "U")])
    assert visible(wh) == [(1, 3, "c"), (5, 1, "keep")]


def test_composite_keys_match_on_every_column(wh: str) -> None:
    """upsert-keys "id, name": rows match only when both columns are equal."""
    opts = {"upsert-keys": "id, name", "upsert-order": "ts"}
    upsert(wh, [(1, 1, "eu", "U"), (1, 1, "us", "U")], opts)
    upsert(wh, [(1, 2, "eu", "U")], opts)
    assert visible(wh) == [(1, 1, "us"), (1, 2, "eu")]


# ---------------------------------------------------------------------------------------------- the commit


def test_upserts_share_a_commit_in_wal_order_and_an_append_commits_apart(wh: str) -> None:
    """Upserts join one commit, applied in WAL order (each sees the rows and deletes before it); an append
    between them commits alone, as an ``append`` snapshot, so a stream reader that skips the upserts'
    ``overwrite`` snapshots still reads its rows (PROTOCOL.md §5, §5.5)."""
    upsert(wh, [(1, 1, "a", "U")])
    first = prepared(wh, [(1, 5, "u1", "U"), (2, 5, "u1", "U")])
    p = plan(wh, TABLE, {}, schema=KEYED)
    assert p.identity is not None
    append = data_entry(p.identity, [f for m in write_tasks(p, frame([(3, 0, "app", "U")]), 1) for f in m.files])
    second = prepared(wh, [(2, 6, None, "D"), (3, 1, "u2", "U")])
    third = prepared(wh, [(4, 1, "u3", "U"), (1, 2, "old", "U")])
    assert in_wal_order(wh, first, append, second, third) == ["A", "A", "A", "A"]
    assert visible(wh) == [(1, 5, "u1"), (3, 1, "u2"), (4, 1, "u3")]
    snapshots = table(wh).snapshots()[-3:]
    records = [s.summary.additional_properties for s in snapshots]
    assert [r["fencedlake.outcomes"].count(":A") for r in records] == [1, 1, 2]
    assert [s.summary.operation.value for s in snapshots] == ["overwrite", "append", "overwrite"]


def test_the_snapshot_adds_file_scoped_position_deletes(wh: str) -> None:
    """An upsert commit is one overwrite snapshot with one position delete file per touched data file."""
    upsert(wh, [(1, 1, "a", "U"), (2, 1, "b", "U")])
    upsert(wh, [(1, 2, "c", "U")])
    t = table(wh)
    summary = t.current_snapshot().summary
    assert summary.operation.value == "overwrite"
    assert summary.additional_properties["added-position-delete-files"] == "1"
    assert upsert_metrics(wh)["upd"] == 1
    files = t.inspect.delete_files().to_pylist()
    assert len(files) == 1 and files[0]["file_path"].rsplit("/", 1)[-1].startswith("d-")
    named = pq.read_table(t.io.new_input(files[0]["file_path"]).open()).to_pylist()
    assert len(named) == 1 and named[0]["pos"] == 0


def test_only_files_whose_key_bounds_can_hold_the_keys_are_read(wh: str) -> None:
    """Keys that cluster: three files of disjoint id ranges, an upsert of one range reads one file."""
    for lo in (0, 100, 200):
        upsert(wh, [(lo + i, 1, "x", "U") for i in range(10)])
    upsert(wh, [(105, 2, "y", "U"), (150, 2, "new", "U")])
    assert upsert_metrics(wh)["candidates"] == 1
    assert (105, 2, "y") in visible(wh) and len(visible(wh)) == 31


def test_a_partitioning_on_the_key_prunes_to_the_keys_partitions(wh: str) -> None:
    """A table partitioned by bucket(8, id): an upsert of one key reads only the files of its bucket."""
    upsert(wh, [(i, 1, "x", "U") for i in range(64)], partition_by="bucket(8, id)", tasks=1)
    assert len(table(wh).inspect.files()) == 8
    upsert(wh, [(7, 2, "y", "U")])
    assert upsert_metrics(wh)["candidates"] == 1


def test_the_keys_are_read_once_per_process(wh: str) -> None:
    """Data files are immutable: a second upsert of the same keys finds the key columns cached."""
    upsert(wh, [(i, 1, "x", "U") for i in range(10)])
    upsert(wh, [(1, 2, "y", "U")])
    upsert(wh, [(2, 3, "z", "U")])
    metrics = upsert_metrics(wh)
    assert metrics["cached"] >= 1 and metrics["candidates"] >= 1


# ---------------------------------------------------------------------------------------------- never stuck


def test_a_key_column_renamed_by_another_engine_still_matches(wh: str) -> None:
    """Keys are field ids: after a rename the next upsert (naming the new column) matches old rows."""
    upsert(wh, [(1, 1, "a", "U")])
    with table(wh).update_schema() as update:
        update.rename_column("name", "label")
    renamed = StructType([*SCHEMA.fields[:2], StructField("label", StringType()), SCHEMA.fields[3]])
    data = frame([(1, 2, "b", "U")]).rename_columns(["id", "ts", "label", "op"])
    sink_write(wh, TABLE, data, ORDERED, schema=renamed)
    assert [(r["id"], r["label"]) for r in table(wh).scan().to_arrow().to_pylist()] == [(1, "b")]


def test_an_order_column_dropped_after_planning_is_refused_and_the_table_moves_on(wh: str) -> None:
    """A column dropped between the write and its apply: REFUSED (committed), later writes apply."""
    upsert(wh, [(1, 1, "a", "U")])
    p = plan(wh, TABLE, ORDERED, schema=SCHEMA)
    messages = write_tasks(p, frame([(1, 2, "b", "U")]), 1)
    with table(wh).update_schema() as update:
        update.delete_column("ts")
    from pyspark_fenced_sink.testing.harness import commit

    with pytest.raises(WriteRejectedError, match="no longer in the table") as e:
        commit(p, messages)
    assert e.value.fields.get("outcome") == "REFUSED"
    schema = StructType([SCHEMA.fields[0], SCHEMA.fields[2], SCHEMA.fields[3]])
    data = pa.table({"id": pa.array([2], pa.int64()), "name": ["c"], "op": ["U"]})
    assert sink_write(wh, TABLE, data, {"upsert-keys": "id"}, schema=schema).outcome is Outcome.APPLIED
    assert sorted((r["id"], r["name"]) for r in table(wh).scan().to_arrow().to_pylist()) == [(1, "a"), (2, "c")]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"upsert-keys": "nope"}, "no top-level column 'nope'"),
        ({"upsert-keys": "id", "upsert-order": "id"}, "is a key column"),
        ({"upsert-keys": "id", "upsert-delete-where": "nope = 1"}, "upsert-delete-where"),
        ({"upsert-order": "ts"}, "no identifier fields"),
        ({"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'", "branch": "b"}, "belong to"),
    ],
)
def test_bad_upsert_options_fail_at_planning(wh: str, options: dict[str, str], match: str) -> None:
    """Every refusal at planning is an InvalidOptionsError naming the problem; nothing is written."""
    sink_write(wh, TABLE, frame([(1, 1, "a", "U")]), schema=SCHEMA)
    with pytest.raises(InvalidOptionsError, match=match):
        plan(wh, TABLE, options, schema=SCHEMA)


def test_a_delete_row_may_leave_required_columns_empty_but_a_row_may_not(wh: str) -> None:
    """Delete rows need only key and order; an upserted row with a null in a required column fails."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    catalog = embedded_catalog(wh)
    catalog.create_namespace("db")
    catalog.create_table(
        TABLE,
        Schema(
            NestedField(1, "id", LongType_(), required=True),
            NestedField(2, "ts", LongType_(), required=False),
            NestedField(3, "name", StringType_(), required=True),
            NestedField(4, "op", StringType_(), required=False),
            identifier_field_ids=[1],
        ),
    )
    upsert(wh, [(1, 1, "a", "U"), (2, 1, "b", "U")])
    upsert(wh, [(1, 2, None, "D")])
    assert visible(wh) == [(2, 1, "b")]
    with pytest.raises(WriteRejectedError, match="required column 'name'"):
        upsert(wh, [(2, 3, None, "U")])


# ---------------------------------------------------------------------------------------------- tombstones


def _state(wh: str) -> CommittedState:
    return CommittedState.decode(table(wh).properties[STATE_PROPERTY])


def test_remembered_deletes_are_merged_past_the_bound(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """More tombstone files than the bound: one merged file, every deleted key still remembered."""
    monkeypatch.setattr(tombstones_module, "TOMBSTONE_FILES_MAX", 2)
    for k in range(4):
        upsert(wh, [(k, 10, None, "D")])
    state = _state(wh)
    assert len(state.tombstones) <= 2
    assert any(str(t["p"]).rsplit("/", 1)[-1].startswith("t-") for t in state.tombstones)
    upsert(wh, [(k, 5, "late", "U") for k in range(4)] + [(9, 1, "new", "U")])
    assert visible(wh) == [(9, 1, "new")]


def test_deletes_older_than_the_retention_are_forgotten(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past fencedlake.tombstone-retention-ms a merge drops a delete: a late lower-order row comes back."""
    monkeypatch.setattr(tombstones_module, "TOMBSTONE_FILES_MAX", 1)
    upsert(wh, [(1, 10, None, "D")], {**ORDERED, "table.fencedlake.tombstone-retention-ms": "1000"})
    now = tombstones_module.time.time()
    monkeypatch.setattr(tombstones_module.time, "time", lambda: now + 3600)
    upsert(wh, [(2, 10, None, "D")])  # the second file: the merge drops the first's old delete
    refs = _state(wh).tombstones
    assert len(refs) == 1 and json.dumps(refs[0]).count('"n": 1')
    upsert(wh, [(1, 5, "back", "U"), (2, 5, "no", "U")])
    assert visible(wh) == [(1, 5, "back")]


def LongType_() -> Any:  # noqa: N802 - pyiceberg's type, beside Spark's LongType imported above
    from pyiceberg.types import LongType as IcebergLong

    return IcebergLong()


def StringType_() -> Any:  # noqa: N802
    from pyiceberg.types import StringType as IcebergString

    return IcebergString()


# ---------------------------------------------------------------------------------------------- compaction


def _compact(wh: str, between: Any = None) -> Any:
    from pyspark_fenced_sink.ops.compact import compact_table, local_runner

    def run(*args: Any) -> Any:
        results = local_runner(*args)
        if between is not None:
            between()
        return results

    return compact_table(open_target(wh, TABLE), TABLE, run, min_input_files=2)


def test_compaction_folds_the_upserts_deletes_and_later_upserts_still_match(wh: str) -> None:
    """Upserts leave delete files; compaction folds them (rows unchanged); the next upsert finds the new files."""
    for lo in (0, 10):
        upsert(wh, [(lo + i, 1, "x", "U") for i in range(10)])
    upsert(wh, [(1, 2, "y", "U"), (11, 2, None, "D")])
    before = visible(wh)
    result = _compact(wh)
    assert result.outcome == "applied" and result.rows == 19
    assert visible(wh) == before and len(table(wh).inspect.delete_files()) == 0
    upsert(wh, [(1, 1, "stale", "U"), (2, 3, "z", "U"), (11, 1, "late", "U")])
    assert [r for r in visible(wh) if r[0] in (1, 2, 11)] == [(1, 2, "y"), (2, 3, "z")]


def test_an_upsert_deleting_rows_of_a_compaction_input_refuses_the_compaction(wh: str) -> None:
    """An upsert lands between the compaction's read and its commit: the compaction is REFUSED, rows exact."""
    for lo in (0, 10):
        upsert(wh, [(lo + i, 1, "x", "U") for i in range(10)])
    result = _compact(wh, lambda: upsert(wh, [(3, 2, "new", "U")]))
    assert result.outcome == "refused" and "delete file" in result.detail
    assert (3, 2, "new") in visible(wh) and len(visible(wh)) == 20


def test_main_rolled_back_under_a_compaction_that_folded_deletes_refuses_it(wh: str) -> None:
    """Another engine rolls main back to before the upsert whose deletes the compaction folded: those rows are
    live again, and the compaction (its rewrite has them deleted) is REFUSED, never applied over them."""
    for lo in (0, 10):
        upsert(wh, [(lo + i, 1, "x", "U") for i in range(10)])
    before_deletes = table(wh).current_snapshot().snapshot_id
    upsert(wh, [(1, 2, None, "D"), (11, 2, None, "D")])
    assert len(visible(wh)) == 18

    def rollback() -> None:
        t = table(wh)
        t.manage_snapshots().set_current_snapshot(before_deletes).commit()

    result = _compact(wh, rollback)
    assert result.outcome == "refused" and "no longer applies" in result.detail
    assert len(visible(wh)) == 20  # the rolled-back rows are live, as the other engine left them


# ---------------------------------------------------------------------------------------------- stream readers


def test_a_stream_delivers_new_keys_and_refuses_or_skips_an_upsert_that_changes_rows(wh: str) -> None:
    """An upsert that only adds keys is an append snapshot (streamed); one that replaces or deletes is refused,
    naming it, or skipped with streaming-skip-overwrite-snapshots."""
    from pyspark_fenced_sink.errors import ReadRefusedError
    from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamPlanner
    from pyspark_fenced_sink.iceberg.planning.scan import open_read_table
    from pyspark_fenced_sink.options.read import parse_read_options

    upsert(wh, [(1, 1, "a", "U"), (2, 1, "b", "U")])
    assert table(wh).current_snapshot().summary.operation.value == "append"
    upsert(wh, [(1, 2, "a2", "U")])
    assert table(wh).current_snapshot().summary.operation.value == "overwrite"
    upsert(wh, [(3, 1, "c", "U")])

    def planner(**options: str) -> StreamPlanner:
        opts = parse_read_options({"warehouse": wh, "table": TABLE, **options}, streaming=True)
        return StreamPlanner(opts, open_read_table(opts).schema(), lambda: open_read_table(opts))

    plain = planner()
    first = plain.latest(START, StreamLimits(), plain.current())
    with pytest.raises(ReadRefusedError, match="is an upsert snapshot"):
        plain.latest(first, StreamLimits(), plain.current())
    skipping = planner(**{"streaming-skip-overwrite-snapshots": "true"})
    start, files = START, []
    while (end := skipping.latest(start, StreamLimits(), skipping.current())) != start:
        files += [t.file.file_path for t in skipping.plan(start, end)]
        start = end
    snapshots = table(wh).metadata.snapshots
    added = [
        {e.data_file.file_path for m in snap.manifests(table(wh).io) for e in m.fetch_manifest_entry(table(wh).io)}
        for snap in snapshots
    ]
    second_only = added[1] - added[0]
    assert files and not set(files) & second_only  # the second upsert's rows are not streamed
    assert set(files) == (added[0] | added[2]) - second_only - {f for f in added[2] if "/d-" in f}


def test_a_tombstone_file_gone_from_storage_is_forgotten_never_a_stuck_table(wh: str) -> None:
    """A listed tombstone file removed by another tool: its deletes are forgotten, upserts still apply."""
    upsert(wh, [(1, 1, "a", "U"), (2, 1, "b", "U")])
    upsert(wh, [(1, 9, None, "D")])
    for ref in _state(wh).tombstones:
        table(wh).io.delete(str(ref["p"]))
    key_index.clear_caches()  # a committer process that never read the file
    upsert(wh, [(1, 5, "back", "U"), (2, 2, "b2", "U")])  # the remembered delete of key 1 is gone
    assert visible(wh) == [(1, 5, "back"), (2, 2, "b2")]
