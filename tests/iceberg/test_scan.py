"""Batch read planning: time travel, pruning (files counted), deletes, split packing (PROTOCOL.md §14).

Real SQLite catalog; tables written through pyiceberg's public API, row-level
deletes as a Java engine commits them (``tests/read/rowdelta.py``).
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
from pyiceberg.expressions import AlwaysTrue, EqualTo, GreaterThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import FileScanTask
from pyiceberg.transforms import IdentityTransform

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.iceberg.planning.scan import (
    SplitSizing,
    executor_metadata,
    executor_task,
    open_read_table,
    pack,
    plan_files,
    plan_incremental,
    resolve_point,
    split_sizing,
)
from tests.read.rowdelta import commit_deletes, equality_delete_file, position_delete_file
from tests.read.tables import EVENTS, append, events, make_table, read_options

BY_K = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="k"))


def _three_snapshots(wh: str) -> Any:
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    return table


def _paths(tasks: list[FileScanTask]) -> list[str]:
    return sorted(t.file.file_path for t in tasks)


def test_a_plain_read_sees_the_current_snapshot_and_schema(wh: str) -> None:
    """No option: the main branch's current snapshot, the table's current schema, every data file."""
    table = _three_snapshots(wh)
    opts = read_options(wh)
    point = resolve_point(open_read_table(opts), opts)
    assert point.snapshot == table.metadata.current_snapshot()
    assert point.schema == table.schema()
    assert len(plan_files(table, point, AlwaysTrue(), "db.t")) == 3


def test_missing_table_is_refused_naming_it(wh: str) -> None:
    """A table that does not exist is an InvalidOptionsError naming table and catalog."""
    make_table(wh)
    with pytest.raises(InvalidOptionsError, match=r"table db\.nope does not exist in the embedded catalog"):
        open_read_table(read_options(wh, "db.nope"))


def test_snapshot_id_reads_that_snapshot_with_its_own_schema(wh: str) -> None:
    """snapshot-id: that snapshot's files, and the schema it was written with (before a rename)."""
    table = _three_snapshots(wh)
    first = table.metadata.snapshots[0]
    with table.update_schema() as update:
        update.rename_column("v", "value")
    table = append(table.catalog.load_table("db.t"), events([99]).rename_columns(["id", "k", "value"]))
    point = resolve_point(table, read_options(wh, **{"snapshot-id": str(first.snapshot_id)}))
    assert point.snapshot == first
    assert point.schema.column_names == ["id", "k", "v"]
    assert len(plan_files(table, point, GreaterThan("v", 5), "db.t")) == 1  # binds the old name
    assert resolve_point(table, read_options(wh)).schema.column_names == ["id", "k", "value"]


def test_unknown_snapshot_id_is_refused_listing_recent_ones(wh: str) -> None:
    """A snapshot id the table does not have names the newest snapshots instead."""
    table = _three_snapshots(wh)
    newest = str(table.metadata.snapshots[-1].snapshot_id)
    with pytest.raises(InvalidOptionsError, match=f"snapshot-id 42: .* no such snapshot .*{newest}"):
        resolve_point(table, read_options(wh, **{"snapshot-id": "42"}))


def test_as_of_timestamp_reads_the_snapshot_current_at_that_time(wh: str) -> None:
    """as-of-timestamp (ms): the newest main-branch snapshot at or before it; before the first: refused."""
    table = make_table(wh)
    table = append(table, events(range(3)))
    between = int(time.time() * 1000)
    time.sleep(0.01)
    table = append(table, events(range(3, 6)))
    first, second = table.metadata.snapshots
    at = resolve_point(table, read_options(wh, **{"as-of-timestamp": str(between)}))
    assert at.snapshot == first
    assert resolve_point(table, read_options(wh, **{"as-of-timestamp": str(second.timestamp_ms)})).snapshot == second
    with pytest.raises(InvalidOptionsError, match="no snapshot of its main branch at or before"):
        resolve_point(table, read_options(wh, **{"as-of-timestamp": str(first.timestamp_ms - 1)}))


def test_branch_and_tag_resolve_and_wrong_kinds_are_refused(wh: str) -> None:
    """branch -> its head with the table schema; tag -> its snapshot; a tag named as a branch is refused."""
    table = _three_snapshots(wh)
    first = table.metadata.snapshots[0].snapshot_id
    table.manage_snapshots().create_tag(first, "v1").create_branch(first, "audit").commit()
    table = table.catalog.load_table("db.t")
    assert resolve_point(table, read_options(wh, tag="v1")).snapshot.snapshot_id == first
    branch = resolve_point(table, read_options(wh, branch="audit"))
    assert branch.snapshot.snapshot_id == first and "branch 'audit'" in branch.label
    with pytest.raises(InvalidOptionsError, match=r"branch 'v1': expected a branch of table db\.t, found none .*audit"):
        resolve_point(table, read_options(wh, branch="v1"))
    with pytest.raises(
        InvalidOptionsError, match=r"tag 'nope': expected a tag of table db\.t, found none \(its tags: v1"
    ):
        resolve_point(table, read_options(wh, tag="nope"))


def test_partition_filter_prunes_whole_partitions(wh: str) -> None:
    """k = 'b' on a table partitioned by k: only the files of partition b are planned."""
    table = make_table(wh, spec=BY_K)
    for k in "abcd":
        table = append(table, events(range(5), k=k))
    point = resolve_point(table, read_options(wh))
    assert len(plan_files(table, point, AlwaysTrue(), "db.t")) == 4
    pruned = plan_files(table, point, EqualTo("k", "b"), "db.t")
    assert [t.file.partition[0] for t in pruned] == ["b"]


def test_column_statistics_prune_files_of_an_unpartitioned_table(wh: str) -> None:
    """id > 25 over files holding 0-9, 10-19, 20-29: only the last file may match."""
    table = _three_snapshots(wh)
    point = resolve_point(table, read_options(wh))
    planned = plan_files(table, point, GreaterThan("id", 25), "db.t")
    assert len(planned) == 1
    assert planned[0].file.upper_bounds is not None


def test_positional_deletes_are_attached_to_the_data_file_they_delete_from(wh: str) -> None:
    """A v2 positional delete file travels with its data file to the executor."""
    table = _three_snapshots(wh)
    target = _paths(plan_files(table, resolve_point(table, read_options(wh)), AlwaysTrue(), "db.t"))[0]
    table = commit_deletes(table, [position_delete_file(table, target, [0, 1])])
    planned = plan_files(table, resolve_point(table, read_options(wh)), AlwaysTrue(), "db.t")
    with_deletes = [t for t in planned if t.delete_files]
    assert [t.file.file_path for t in with_deletes] == [target]


@pytest.mark.parametrize("summary_totals", [True, False], ids=["from-summary", "from-manifests"])
def test_equality_deletes_are_refused_naming_the_feature(wh: str, summary_totals: bool) -> None:
    """Equality deletes (pyiceberg 0.12 cannot apply them) fail the read; never rows that were deleted."""
    table = _three_snapshots(wh)
    before = table.metadata.current_snapshot()
    table = commit_deletes(table, [equality_delete_file(table, "id", [3])], summary_totals=summary_totals)
    with pytest.raises(ReadRefusedError, match=r"equality delete files .* cannot apply equality deletes") as err:
        plan_files(table, resolve_point(table, read_options(wh)), AlwaysTrue(), "db.t")
    assert err.value.retryable is False
    older = read_options(wh, **{"snapshot-id": str(before.snapshot_id)})
    assert len(plan_files(table, resolve_point(table, older), AlwaysTrue(), "db.t")) == 3


def test_an_empty_table_plans_nothing(wh: str) -> None:
    """A table with no snapshot reads as zero files, with its schema."""
    table = make_table(wh)
    point = resolve_point(table, read_options(wh))
    assert point.snapshot is None and point.schema.column_names == ["id", "k", "v"]
    assert plan_files(table, point, AlwaysTrue(), "db.t") == []


def test_incremental_read_plans_the_appends_between_two_snapshots(wh: str) -> None:
    """start-snapshot-id (exclusive) .. end-snapshot-id (inclusive): the files those appends added."""
    table = _three_snapshots(wh)
    s1, s2, s3 = (s.snapshot_id for s in table.metadata.snapshots)
    tasks, _ = plan_incremental(table, read_options(wh, **{"start-snapshot-id": str(s1)}), AlwaysTrue())
    assert len(tasks) == 2
    ranged = read_options(wh, **{"start-snapshot-id": str(s1), "end-snapshot-id": str(s2)})
    assert len(plan_incremental(table, ranged, AlwaysTrue())[0]) == 1
    assert plan_incremental(table, read_options(wh, **{"start-snapshot-id": str(s3)}), AlwaysTrue())[0] == []
    backwards = read_options(wh, **{"start-snapshot-id": str(s3), "end-snapshot-id": str(s1)})
    with pytest.raises(InvalidOptionsError, match=r"start-snapshot-id/end-snapshot-id of table db\.t"):
        plan_incremental(table, backwards, AlwaysTrue())


# ---------------------------------------------------------------------------------------------- packing


def _task(size: int) -> FileScanTask:
    from pyiceberg.manifest import DataFile, FileFormat
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(
        file_path=f"f{size}-{id(object())}", file_format=FileFormat.PARQUET, partition=Record(), record_count=1
    )
    data_file[5] = size  # file_size_in_bytes
    return FileScanTask(data_file)


def _sizes(splits: list[list[FileScanTask]]) -> list[list[int]]:
    return [[t.file.file_size_in_bytes for t in split] for split in splits]


def test_pack_spreads_files_over_even_splits_keeping_their_order() -> None:
    """ceil(360 / 100) = 4 splits; heaviest first into the lightest split; order kept inside a split."""
    sizes = [40, 40, 30, 100, 150, 10]
    splits = pack([_task(s) for s in sizes], SplitSizing(target=100, open_cost=0))
    assert _sizes(splits) == [[150], [100], [40, 30], [40, 10]]


def test_pack_makes_no_lone_straggler_split() -> None:
    """Nine equal files at a target of half their total: two splits (4 + 5), not 4 + 4 + 1."""
    splits = pack([_task(10) for _ in range(9)], SplitSizing(target=45, open_cost=0))
    assert [len(s) for s in splits] == [5, 4]


def test_pack_is_deterministic_and_never_makes_more_splits_than_files() -> None:
    """The same input packs the same way; a tiny target still makes one split per file at most."""
    tasks = [_task(s) for s in [5, 50, 7, 7, 30]]
    assert _sizes(pack(tasks, SplitSizing(target=40, open_cost=0))) == _sizes(pack(tasks, SplitSizing(40, 0)))
    assert len(pack(tasks, SplitSizing(target=1, open_cost=0))) == 5
    assert pack([], SplitSizing(target=1, open_cost=0)) == []


def test_small_files_weigh_at_least_the_open_cost() -> None:
    """Ten 1-byte files with open cost 25 weigh 250: three splits of 100."""
    splits = pack([_task(1) for _ in range(10)], SplitSizing(target=100, open_cost=25))
    assert sorted(len(s) for s in splits) == [3, 3, 4]


def test_split_sizing_takes_options_then_properties_then_adapts(wh: str) -> None:
    """split-size wins; else read.split.target-size; small scans shrink the target to spread over cores."""
    tasks = [_task(64 * 2**20) for _ in range(4)]  # 256 MiB
    opts = read_options(wh, **{"split-size": "1000", "file-open-cost": "7"})
    assert split_sizing({}, opts, tasks) == SplitSizing(1000, 7)
    plain = read_options(wh)
    fixed = {"read.split.target-size": "300000000", "read.split.adaptive-size.enabled": "false"}
    assert split_sizing(fixed, plain, tasks) == SplitSizing(300_000_000, 4 * 2**20)
    adaptive = split_sizing({}, plain, tasks)
    assert 16 * 2**20 <= adaptive.target <= 128 * 2**20


def test_executor_tasks_carry_no_statistics_and_stay_small(wh: str) -> None:
    """What travels to executors: the file, its spec id and partition, its deletes; no column bounds."""
    table = make_table(wh, spec=BY_K)
    table = append(table, events(range(50), k="x"))
    task = plan_files(table, resolve_point(table, read_options(wh)), AlwaysTrue(), "db.t")[0]
    slim = pickle.loads(pickle.dumps(executor_task(task)))
    assert slim.file.file_path == task.file.file_path and slim.file.partition == task.file.partition
    assert slim.file.spec_id == task.file.spec_id and slim.file.record_count == 50
    assert slim.file.lower_bounds is None and slim.file.upper_bounds is None and task.file.lower_bounds
    assert len(pickle.dumps(executor_task(task))) < len(pickle.dumps(task))


def test_executor_metadata_keeps_specs_and_drops_history(wh: str) -> None:
    """The metadata executors read with has the read schema current and no snapshots."""
    table = _three_snapshots(wh)
    schema = table.schema()
    slim = executor_metadata(table.metadata, schema)
    assert slim.schema() == schema and slim.snapshots == [] and slim.specs() == table.metadata.specs()
    assert len(pickle.dumps(slim)) < len(pickle.dumps(table.metadata))
    assert EVENTS.names == slim.schema().column_names
