"""Compaction through the WAL on a real catalog (PROTOCOL.md §5.2; SQLite catalog, pyiceberg, no Spark).

The rewrite runs in-process (``ops.compact.local_runner``); a runner that lets
another write land between the rewrite and the commit shows what a concurrent
append, overwrite or compaction does to it: appends survive, a removed input
refuses the compaction (its outputs removed), rows are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.compact import CompactionResult, compact_table, local_runner
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.testing.harness import open_target, plan, sink_write, write_tasks
from tests.read.rowdelta import commit_deletes, equality_delete_file, position_delete_file

TABLE = "db.events"
SCHEMA = StructType([StructField("id", LongType()), StructField("day", StringType())])


def append(wh: str, ids: range, day: str, **options: str) -> Any:
    data = pa.table({"id": pa.array(list(ids), pa.int64()), "day": [day] * len(ids)})
    return sink_write(wh, TABLE, data, options, schema=SCHEMA, partition_by="day", tasks=1)


def small_files(wh: str, per_day: int = 6, days: tuple[str, ...] = ("d1", "d2")) -> None:
    """``per_day`` one-file appends of 10 rows to each day (a streaming writer's small files)."""
    for i in range(per_day):
        for d, day in enumerate(days):
            base = (d * per_day + i) * 10
            append(wh, range(base, base + 10), day)


def table(wh: str) -> Any:
    return embedded_catalog(wh).load_table(TABLE)


def rows(wh: str) -> list[tuple[int, str]]:
    return sorted((r["id"], r["day"]) for r in table(wh).scan().to_arrow().to_pylist())


def live_paths(wh: str) -> set[str]:
    return {t.file.file_path for t in table(wh).scan().plan_files()}


def compact(wh: str, between: Callable[[], None] | None = None, name: str = TABLE, **kwargs: Any) -> CompactionResult:
    """One compaction; ``between`` runs after the rewrite, before the WAL put (a concurrent writer)."""

    def run(*args: Any) -> Any:
        results = local_runner(*args)
        if between is not None:
            between()
        return results

    return compact_table(open_target(wh, name), name, run, **kwargs)


def on_disk(paths: set[str]) -> set[str]:
    return {p for p in paths if Path(p.removeprefix("file://")).exists()}


def test_small_files_are_replaced_per_partition_with_the_same_rows(wh: str) -> None:
    """12 small files in 2 days become 2 files; rows unchanged; one 'replace' snapshot."""
    small_files(wh)
    before, inputs = rows(wh), live_paths(wh)
    result = compact(wh, min_input_files=3)
    assert (result.outcome, result.input_files, result.output_files, result.groups) == ("applied", 12, 2, 2)
    assert rows(wh) == before and len(before) == 120
    assert len(live_paths(wh)) == 2 and not live_paths(wh) & inputs
    assert table(wh).current_snapshot().summary.operation.value == "replace"


def test_partitions_below_min_input_files_and_dry_runs_change_nothing(wh: str) -> None:
    """Too few small files: nothing to do; a dry run plans but writes and commits nothing."""
    small_files(wh, per_day=3)
    snapshot = table(wh).current_snapshot().snapshot_id
    assert compact(wh, min_input_files=4).outcome == "nothing-to-do"
    dry = compact(wh, min_input_files=3, dry_run=True)
    assert (dry.outcome, dry.input_files) == ("dry-run", 6)
    assert table(wh).current_snapshot().snapshot_id == snapshot


def test_where_limits_the_compaction_to_matching_partitions(wh: str) -> None:
    """--where day = 'd1' rewrites d1's files only."""
    small_files(wh, per_day=4)
    result = compact(wh, where="day = 'd1'", min_input_files=2)
    assert (result.outcome, result.input_files) == ("applied", 4)
    assert len(live_paths(wh)) == 5


def test_bad_arguments_are_refused_before_anything_is_written(wh: str) -> None:
    """min-input-files below 2 and a non-positive target size are InvalidOptionsError."""
    small_files(wh, per_day=2)
    with pytest.raises(InvalidOptionsError, match="min-input-files"):
        compact(wh, min_input_files=1)
    with pytest.raises(InvalidOptionsError, match="target file size"):
        compact(wh, target_file_size=0)


def test_an_append_landing_during_compaction_survives_it(wh: str) -> None:
    """An append committed between rewrite and commit stays live; the compaction applies; rows exact."""
    small_files(wh, per_day=3)
    result = compact(wh, lambda: append(wh, range(1000, 1005), "d1"), min_input_files=3)
    assert result.outcome == "applied"
    expected = sorted([(i, "d1") for i in range(30)] + [(i, "d2") for i in range(30, 60)])
    assert rows(wh) == sorted(expected + [(i, "d1") for i in range(1000, 1005)])
    assert len(live_paths(wh)) == 3


def test_an_overwrite_of_an_input_refuses_the_compaction_and_removes_its_outputs(wh: str) -> None:
    """A dynamic overwrite of d1 lands first: the compaction is refused, its outputs deleted, d2 untouched."""
    small_files(wh, per_day=3)
    d2_files = {p for p in live_paths(wh) if "day=d2" in p}

    def overwrite() -> None:
        data = pa.table({"id": pa.array([7], pa.int64()), "day": ["d1"]})
        sink_write(
            wh, TABLE, data, {"overwrite-mode": "dynamic"}, schema=SCHEMA, partition_by="day", tasks=1, overwrite=True
        )

    before = set(Path(wh).rglob("*.parquet"))
    result = compact(wh, overwrite, min_input_files=3)
    assert result.outcome == "refused" and "no longer live" in result.detail
    assert rows(wh) == [(7, "d1"), *[(i, "d2") for i in range(30, 60)]]
    assert d2_files <= live_paths(wh)
    new = {str(p) for p in set(Path(wh).rglob("*.parquet")) - before}
    assert on_disk(new) == on_disk({p.removeprefix("file://") for p in live_paths(wh)}) & new


def test_two_racing_compactions_apply_one_and_refuse_the_other(wh: str) -> None:
    """A compaction that lands first wins; the other is refused; no row is lost or doubled."""
    small_files(wh, per_day=3)
    before = rows(wh)
    inner: list[CompactionResult] = []
    outer = compact(wh, lambda: inner.append(compact(wh, min_input_files=3)), min_input_files=3)
    assert (inner[0].outcome, outer.outcome) == ("applied", "refused")
    assert rows(wh) == before and len(live_paths(wh)) == 2


def test_a_compaction_commits_alone_and_an_append_behind_it_follows(wh: str) -> None:
    """An append put right after the compaction's entry: two commits, 'replace' then 'append'; rows exact."""
    small_files(wh, per_day=3)
    p = plan(wh, TABLE, schema=SCHEMA, partition_by="day")
    files = [
        f for m in write_tasks(p, pa.table({"id": pa.array([500], pa.int64()), "day": ["d1"]}), 1) for f in m.files
    ]
    assert p.identity is not None
    behind = data_entry(p.identity, files, rows=1, spec_id=p.spec.spec_id)
    ctx = open_target(wh, TABLE).ctx

    def put_append(point: str) -> None:
        if point == "commit.after-wal-put":
            failpoints.set_handler(None)
            ctx.wal.append(behind, start=0)

    failpoints.set_handler(put_append)
    try:
        assert compact(wh, min_input_files=3).outcome == "applied"
    finally:
        failpoints.set_handler(None)
    recover(ctx)
    assert [s.summary.operation.value for s in table(wh).snapshots()[-2:]] == ["replace", "append"]
    assert rows(wh) == sorted([(i, "d1") for i in range(30)] + [(500, "d1")] + [(i, "d2") for i in range(30, 60)])


# ---------------------------------------------------------------------------------------------- delete files

FLAT = "db.flat"


def flat_table(wh: str, files: int = 4) -> Any:
    """An unpartitioned table of ``files`` one-file appends of 10 rows each (ids 0..)."""
    for i in range(files):
        sink_write(wh, FLAT, rows_of(range(i * 10, i * 10 + 10)), tasks=1)
    return embedded_catalog(wh).load_table(FLAT)


def rows_of(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "writer": ["w"] * len(ids)})


def flat_ids(wh: str) -> list[int]:
    return sorted(r["id"] for r in embedded_catalog(wh).load_table(FLAT).scan().to_arrow().to_pylist())


def test_file_scoped_position_deletes_are_folded_into_the_rewrite(wh: str) -> None:
    """A file whose position deletes name it is rewritten with them applied; the delete file is removed."""
    t = flat_table(wh)
    first = sorted(task.file.file_path for task in t.scan().plan_files())[0]
    commit_deletes(t, [position_delete_file(t, first, [0, 3])])
    before = flat_ids(wh)
    result = compact(wh, name=FLAT, min_input_files=2)
    assert (result.outcome, result.input_files, result.rows) == ("applied", 4, 38)
    after = embedded_catalog(wh).load_table(FLAT)
    assert flat_ids(wh) == before and len(before) == 38
    assert len(after.inspect.delete_files()) == 0
    assert after.current_snapshot().summary.additional_properties.get("removed-position-delete-files") == "1"


def test_a_large_file_with_deletes_is_rewritten_alone(wh: str) -> None:
    """Deletes to fold make even one file of any size worth rewriting (reads then skip no rows)."""
    t = flat_table(wh, files=1)
    only = next(task.file.file_path for task in t.scan().plan_files())
    commit_deletes(t, [position_delete_file(t, only, [1])])
    result = compact(wh, name=FLAT, min_input_files=5, target_file_size=1)
    assert (result.outcome, result.input_files, result.rows) == ("applied", 1, 9)
    assert flat_ids(wh) == [i for i in range(10) if i != 1]


def test_files_with_partition_scoped_deletes_are_left_alone_and_their_rows_stay_deleted(wh: str) -> None:
    """A delete file naming no single file applies to its whole partition: every file of it is left alone."""
    t = flat_table(wh)
    first = sorted(task.file.file_path for task in t.scan().plan_files())[0]
    commit_deletes(t, [position_delete_file(t, first, [0], named=False)])
    before = flat_ids(wh)
    result = compact(wh, name=FLAT, min_input_files=2)
    assert (result.outcome, result.input_files) == ("nothing-to-do", 0)
    assert flat_ids(wh) == before and len(before) == 39


def test_a_delete_added_while_compacting_refuses_the_compaction(wh: str) -> None:
    """Another engine deletes a row of an input between rewrite and commit: REFUSED, the row stays deleted."""
    t = flat_table(wh)

    def delete_one() -> None:
        current = embedded_catalog(wh).load_table(FLAT)
        target = sorted(task.file.file_path for task in current.scan().plan_files())[0]
        commit_deletes(current, [position_delete_file(current, target, [0])])

    result = compact(wh, delete_one, name=FLAT, min_input_files=2)
    assert result.outcome == "refused" and "delete file" in result.detail
    assert len(flat_ids(wh)) == 39 and t.refresh() is not None
    assert len(list(embedded_catalog(wh).load_table(FLAT).scan().plan_files())) == 4  # the inputs stay


def test_equality_deletes_refuse_compaction_before_anything_is_written(wh: str) -> None:
    """A snapshot with equality deletes cannot be compacted by pyiceberg: ReadRefusedError, no file written."""
    t = flat_table(wh)
    commit_deletes(t, [equality_delete_file(t, "id", [3])])
    before = set(Path(wh).rglob("*.parquet"))
    with pytest.raises(ReadRefusedError, match="equality delete"):
        compact(wh, name=FLAT, min_input_files=2)
    assert set(Path(wh).rglob("*.parquet")) == before


def test_a_sorted_table_is_rewritten_in_its_sort_order(wh: str) -> None:
    """With a sort order on id (descending), each output file holds its rows sorted that way."""
    from pyiceberg.transforms import IdentityTransform

    t = flat_table(wh)
    with t.update_sort_order() as update:
        update.desc("id", IdentityTransform())
    result = compact(wh, name=FLAT, min_input_files=2)
    assert result.outcome == "applied"
    paths = [task.file.file_path for task in embedded_catalog(wh).load_table(FLAT).scan().plan_files()]
    ids = pq.read_table(paths[0].removeprefix("file://")).column("id").to_pylist()
    assert ids == sorted(range(40), reverse=True)


def test_a_stream_reading_the_table_skips_the_compaction_and_delivers_each_row_once(wh: str) -> None:
    """A stream that read the small files sees no new rows from the 'replace' snapshot, then the next append."""
    from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamPlanner
    from pyspark_fenced_sink.iceberg.planning.scan import open_read_table
    from tests.read.tables import read_options

    small_files(wh, per_day=3)
    opts = read_options(wh, TABLE, streaming=True)
    planner = StreamPlanner(opts, open_read_table(opts).schema(), lambda: open_read_table(opts))
    delivered: list[str] = []
    start = START

    def drain() -> None:
        nonlocal start
        while True:
            planner.refresh()
            end = planner.latest(start, StreamLimits(), planner.current())
            if end == start:
                return
            delivered.extend(t.file.file_path for t in planner.plan(start, end))
            start = end

    drain()
    assert compact(wh, min_input_files=3).outcome == "applied"
    append(wh, range(900, 901), "d2")
    drain()
    got = sorted(r["id"] for p in delivered for r in pq.read_table(p.removeprefix("file://")).to_pylist())
    assert got == [*range(60), 900]
