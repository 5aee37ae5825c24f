"""Streaming read planning: offsets over the snapshot lineage, limits, refusals, replays (PROTOCOL.md §14.1).

The planner is driven the way Spark drives the stream reader: ``latest(start)``
for a batch's end, ``plan(start, end)`` for its files, the end becoming the
next start. A fresh planner stands for a restarted query.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.table.snapshots import Operation

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamOffset, StreamPlanner
from pyspark_fenced_sink.iceberg.planning.scan import open_read_table
from tests.read.rowdelta import commit_deletes, position_delete_file
from tests.read.tables import append, events, make_table, read_options, ten_rows_per_file

UNBOUNDED = StreamLimits()


def _planner(wh: str, **options: str) -> StreamPlanner:
    opts = read_options(wh, streaming=True, **options)
    table = open_read_table(opts)
    return StreamPlanner(opts, table.schema(), lambda: open_read_table(opts))


def _drain(planner: StreamPlanner, start: StreamOffset, limits: StreamLimits = UNBOUNDED) -> tuple[list[str], Any]:
    """Run micro-batches until no progress: every planned file path in order, and the batches' ends."""
    paths: list[str] = []
    ends = []
    while True:
        planner.refresh()
        end = planner.latest(start, limits, planner.current())
        if end == start:
            return paths, ends
        paths.extend(t.file.file_path for t in planner.plan(start, end))
        ends.append(end)
        start = end


def _all_files(table: Any) -> list[str]:
    return sorted(t.file.file_path for t in table.scan().plan_files())


def test_offsets_survive_a_json_round_trip_and_foreign_ones_are_refused() -> None:
    """Spark stores offsets as JSON; an offset of another source (another checkpoint) is refused."""
    offset = StreamOffset(123, 4, True, False, 9)
    assert StreamOffset.from_json(offset.to_json()) == offset
    assert StreamOffset.from_json(START.to_json()).is_start
    for bad in ({"offset": 5}, {"snapshot_id": "x", "position": 0, "scan_all": False, "complete": True}, None):
        with pytest.raises(ReadRefusedError, match="not a fencedlake offset"):
            StreamOffset.from_json(bad)


def test_an_empty_table_has_nothing_then_streams_its_first_append(wh: str) -> None:
    """No snapshot: the start offset stays; after an append the stream delivers it."""
    table = make_table(wh)
    planner = _planner(wh)
    assert planner.latest(START, UNBOUNDED, planner.current()) == START
    table = append(table, events(range(5)))
    assert _drain(planner, START)[0] == _all_files(table)


def test_every_appended_file_is_delivered_once_in_batches_of_two(wh: str) -> None:
    """max 2 files per batch over 5 single-file appends: 3 batches, each file once, in commit order."""
    table = make_table(wh)
    for i in range(5):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    planner = _planner(wh)
    paths, ends = _drain(planner, START, StreamLimits(max_files=2))
    assert len(ends) == 3 and len(paths) == 5 and sorted(paths) == _all_files(table)
    order = [s.snapshot_id for s in table.metadata.snapshots]
    assert [e.snapshot_id for e in ends] == [order[1], order[3], order[4]]


def test_a_snapshot_with_many_files_is_cut_mid_snapshot(wh: str) -> None:
    """Positions inside one snapshot: 4 files of one append, one per batch under max 1 file."""
    table = make_table(wh, **ten_rows_per_file())
    table = append(table, events(range(40)))
    files = _all_files(table)
    assert len(files) == 4
    paths, ends = _drain(_planner(wh), START, StreamLimits(max_files=1))
    assert paths == files and [e.position for e in ends] == list(range(1, len(files) + 1))
    assert [e.complete for e in ends] == [False] * (len(files) - 1) + [True]


def test_max_rows_admits_at_least_one_file(wh: str) -> None:
    """A row bound below one file's rows still admits one file per batch."""
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    paths, ends = _drain(_planner(wh), START, StreamLimits(max_rows=5))
    assert len(ends) == 3 and sorted(paths) == _all_files(table)
    paths, ends = _drain(_planner(wh), START, StreamLimits(max_rows=25))
    assert len(ends) == 2


def test_a_restarted_planner_replays_the_same_files_for_the_same_offsets(wh: str) -> None:
    """Exactly once, the reader's half: (start, end) from a checkpoint plan the same files after a restart."""
    table = make_table(wh)
    for i in range(4):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    first = _planner(wh)
    end = first.latest(START, StreamLimits(max_files=3), first.current())
    planned = [t.file.file_path for t in first.plan(START, end)]
    table = append(table, events(range(100, 110)))  # more data before the restart
    again = _planner(wh)
    assert [t.file.file_path for t in again.plan(START, end)] == planned
    assert len(planned) == 3


def test_overwrite_snapshots_are_refused_after_the_rows_before_them(wh: str) -> None:
    """Default: rows appended before an overwrite are delivered, then the stream fails naming it."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    table.overwrite(events(range(50, 55)))
    table = append(table.catalog.load_table("db.t"), events(range(60, 65)))
    planner = _planner(wh)
    end = planner.latest(START, UNBOUNDED, planner.current())
    assert end.snapshot_id == table.metadata.snapshots[0].snapshot_id and end.complete
    ops = [s.summary.operation for s in table.metadata.snapshots]
    assert Operation.DELETE in ops or Operation.OVERWRITE in ops
    with pytest.raises(ReadRefusedError, match=r"is a (delete|overwrite) snapshot.*set streaming-skip-") as err:
        planner.latest(end, UNBOUNDED, planner.current())
    assert "db.t" in str(err.value)


def test_skip_options_skip_overwrite_and_delete_snapshots(wh: str) -> None:
    """With both skip options the stream delivers only rows of append snapshots."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    table.overwrite(events(range(50, 55)))  # pyiceberg: a delete snapshot, then an append of the new rows
    table = append(table.catalog.load_table("db.t"), events(range(60, 65)))
    skip = {"streaming-skip-overwrite-snapshots": "true", "streaming-skip-delete-snapshots": "true"}
    paths, _ = _drain(_planner(wh, **skip), START)
    appends = [s for s in table.metadata.snapshots if s.summary.operation == Operation.APPEND]
    assert len(appends) == 3 and len(paths) == len(set(paths)) == 3


def test_position_delete_snapshot_is_refused_or_skipped(wh: str) -> None:
    """A row-level delete (another engine's merge-on-read) is a delete snapshot: refused, or skipped by option."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    table = commit_deletes(table, [position_delete_file(table, _all_files(table)[0], [0])])
    table = append(table, events(range(10, 20)))
    planner = _planner(wh)
    start = planner.latest(START, UNBOUNDED, planner.current())
    with pytest.raises(ReadRefusedError, match="delete snapshot"):
        planner.latest(start, UNBOUNDED, planner.current())
    paths, _ = _drain(_planner(wh, **{"streaming-skip-delete-snapshots": "true"}), START)
    assert len(paths) == 2


def test_start_snapshot_id_streams_only_later_appends(wh: str) -> None:
    """start-snapshot-id is exclusive; one that is not an ancestor is refused."""
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    s1, s2, s3 = table.metadata.snapshots
    paths, _ = _drain(_planner(wh, **{"start-snapshot-id": str(s1.snapshot_id)}), START)
    later = {t.file.file_path for s in (s2, s3) for t in table.scan(snapshot_id=s.snapshot_id).plan_files()}
    assert len(paths) == 2 and set(paths) <= later
    assert _drain(_planner(wh, **{"start-snapshot-id": str(s3.snapshot_id)}), START)[0] == []
    with pytest.raises(InvalidOptionsError, match="start-snapshot-id 7: expected an ancestor"):
        _drain(_planner(wh, **{"start-snapshot-id": "7"}), START)


def test_stream_from_timestamp_starts_at_the_first_snapshot_at_or_after_it(wh: str) -> None:
    """stream-from-timestamp: snapshots older than it are not streamed; one in the future waits."""
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    second = table.metadata.snapshots[1]
    paths, _ = _drain(_planner(wh, **{"stream-from-timestamp": str(second.timestamp_ms)}), START)
    assert len(paths) == 2
    future = str(table.metadata.snapshots[-1].timestamp_ms + 60_000)
    assert _drain(_planner(wh, **{"stream-from-timestamp": future}), START)[0] == []


def test_expired_history_is_read_whole_from_the_oldest_snapshot_left(wh: str) -> None:
    """Older snapshots expired: the first batch reads every live file of the oldest one left (nothing lost)."""
    table = make_table(wh)
    for i in range(4):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    old = [s.snapshot_id for s in table.metadata.snapshots[:2]]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table = table.catalog.load_table("db.t")
    paths, ends = _drain(_planner(wh), START)
    assert sorted(paths) == _all_files(table) and len(paths) == 4
    assert len(ends) == 1


def test_a_position_whose_snapshot_expired_mid_read_is_refused(wh: str) -> None:
    """An offset inside a snapshot that has since expired cannot be continued exactly: refused."""
    table = make_table(wh, **ten_rows_per_file())
    table = append(table, events(range(40)))
    table = append(table, events(range(50, 60)))
    planner = _planner(wh)
    end = planner.latest(START, StreamLimits(max_files=1), planner.current())
    assert not end.complete
    table.maintenance.expire_snapshots().by_id(end.snapshot_id).commit()
    fresh = _planner(wh)
    with pytest.raises(ReadRefusedError, match=r"no longer in the history .* start-snapshot-id"):
        fresh.latest(end, UNBOUNDED, fresh.current())


def test_a_fully_read_snapshot_may_expire(wh: str) -> None:
    """An offset at the end of a snapshot continues with its children after that snapshot expired."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    planner = _planner(wh)
    end = planner.latest(START, UNBOUNDED, planner.current())
    table = append(table, events(range(10, 20)))
    table.maintenance.expire_snapshots().by_id(end.snapshot_id).commit()
    paths, _ = _drain(_planner(wh), end)
    assert len(paths) == 1


def test_a_rollback_behind_the_stream_is_refused(wh: str) -> None:
    """The main branch rolled back past the stream's position: the stream refuses instead of skipping."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    table = append(table, events(range(10, 20)))
    planner = _planner(wh)
    end = planner.latest(START, UNBOUNDED, planner.current())
    table.manage_snapshots().rollback_to_snapshot(table.metadata.snapshots[0].snapshot_id).commit()
    table = append(table.catalog.load_table("db.t"), events(range(20, 30)))
    planner.refresh()
    with pytest.raises(ReadRefusedError, match="no longer in the history"):
        planner.latest(end, UNBOUNDED, planner.current())


def test_forget_before_drops_cached_file_lists(wh: str) -> None:
    """After Spark commits an offset, file lists of older snapshots are dropped."""
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    planner = _planner(wh)
    _, ends = _drain(planner, START, StreamLimits(max_files=1))
    assert len(planner._files) == 3
    planner.forget_before(ends[-1])
    assert list(planner._files) == [(ends[-1].snapshot_id, False)]


def test_an_expired_gap_in_the_lineage_is_refused(wh: str) -> None:
    """Two unread snapshots expired after a fully read one: the stream refuses rather than skip their rows."""
    table = make_table(wh)
    table = append(table, events(range(10)))
    planner = _planner(wh)
    end = planner.latest(START, UNBOUNDED, planner.current())
    for i in range(1, 4):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    unread = [s.snapshot_id for s in table.metadata.snapshots[:3]]
    table.maintenance.expire_snapshots().by_ids(unread).commit()
    fresh = _planner(wh)
    with pytest.raises(ReadRefusedError, match="no longer in the history"):
        fresh.latest(end, UNBOUNDED, fresh.current())
