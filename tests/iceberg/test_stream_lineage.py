"""A stream offset follows main's lineage however main moves forward (PROTOCOL.md §14.1).

Fast-forward publishes, appends grouped with a replace, rollbacks: every
appended row is delivered exactly once, or the stream fails naming the
snapshot. The planner is driven as Spark drives it (``latest`` then ``plan``).
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest

from pyspark_fenced_sink.errors import ReadRefusedError
from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamOffset, StreamPlanner
from pyspark_fenced_sink.iceberg.planning.scan import open_read_table
from pyspark_fenced_sink.protocol.publish import publish_branch
from pyspark_fenced_sink.testing.harness import open_target
from tests.iceberg import foreign
from tests.iceberg.test_write_modes import TABLE, days, prepared, write
from tests.read import tables
from tests.read.tables import read_options

UNBOUNDED = StreamLimits()
SKIP_OVERWRITES = {"streaming-skip-overwrite-snapshots": "true"}


@pytest.fixture
def wh(tmp_path: Any) -> str:
    return str(tmp_path / "wh")


def planner(wh: str, **options: str) -> StreamPlanner:
    opts = read_options(wh, TABLE, streaming=True, **options)
    return StreamPlanner(opts, open_read_table(opts).schema(), lambda: open_read_table(opts))


def drain(p: StreamPlanner, start: StreamOffset) -> tuple[list[int], StreamOffset]:
    """Micro-batches until no progress: the ids delivered (in order) and the last end offset."""
    ids: list[int] = []
    while True:
        p.refresh()
        end = p.latest(start, UNBOUNDED, p.current())
        if end == start:
            return ids, start
        for task in p.plan(start, end):
            ids.extend(_ids(p, task.file.file_path))
        start = end


def _ids(p: StreamPlanner, path: str) -> list[int]:
    with p.table.io.new_input(path).open() as f:
        return [int(i) for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]


def test_a_stream_of_main_survives_a_second_publish(wh: str) -> None:
    """Write audit, publish, write audit, publish: a stream of main delivers every row once, no refusal."""
    write(wh, days(d1=[1, 2]), branch="audit")
    publish_branch(open_target(wh, TABLE).ctx, "audit")
    p = planner(wh)
    first, offset = drain(p, START)
    write(wh, days(d2=[3, 4]), branch="audit")
    publish_branch(open_target(wh, TABLE).ctx, "audit")
    second, offset = drain(p, offset)
    assert sorted(first) == [1, 2] and sorted(second) == [3, 4]
    restarted, _ = drain(planner(wh), offset)  # the restart from the last delivered offset works too
    assert restarted == []


def test_appends_after_a_pending_overwrite_reach_a_stream_that_skips_overwrites(wh: str) -> None:
    """A dynamic overwrite durable (its driver died), then an append: the append's rows are streamed."""
    write(wh, days(d1=[1]))
    p = planner(wh, **SKIP_OVERWRITES)
    first, offset = drain(p, START)
    open_target(wh, TABLE).ctx.wal.append(
        prepared(wh, days(d1=[9]), overwrite=True, **{"overwrite-mode": "dynamic"}), start=0
    )
    write(wh, days(d2=[5]))  # its commit applies the overwrite first, then the append
    second, _ = drain(p, offset)
    assert first == [1] and second == [5]


# ---------------------------------------------------------------------------------------------- other engines

PLAIN = "db.t"


def plain_planner(wh: str, **options: str) -> StreamPlanner:
    opts = read_options(wh, PLAIN, streaming=True, **options)
    return StreamPlanner(opts, open_read_table(opts).schema(), lambda: open_read_table(opts))


def drain_limited(p: StreamPlanner, start: StreamOffset, limits: StreamLimits) -> tuple[list[int], StreamOffset]:
    ids: list[int] = []
    while True:
        p.refresh()
        end = p.latest(start, limits, p.current())
        if end == start:
            return ids, start
        for task in p.plan(start, end):
            ids.extend(_ids(p, task.file.file_path))
        start = end


def added_files(table: Any, snapshot_id: int) -> list[Any]:
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    return [
        e.data_file
        for m in snapshot.manifests(table.io)
        if m.added_snapshot_id == snapshot_id
        for e in m.fetch_manifest_entry(table.io)
    ]


def forked(wh: str) -> tuple[Any, int, int]:
    """main: rows 1, then rows 2; branch ``b`` forked at the first. Returns (table, fork, main's head)."""
    table = tables.append(tables.make_table(wh), tables.events([1]))
    fork = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(fork, "b").commit()
    table = tables.append(foreign.reload(table), tables.events([2]))
    return table, fork, table.current_snapshot().snapshot_id


def test_main_replaced_by_a_branch_that_cherry_picked_a_delivered_append_delivers_each_row_once(wh: str) -> None:
    """The delivered file reappears on the new lineage: skipped there; the branch's own rows are delivered."""
    table, _, head = forked(wh)
    p = plain_planner(wh)
    first, offset = drain(p, START)
    table = foreign.append_files(table, added_files(table, head), branch="b", data=tables.events([3]))
    table = foreign.set_main(table, table.refs()["b"].snapshot_id)
    second, _ = drain(p, offset)
    assert sorted(first) == [1, 2] and second == [3]


def test_main_replaced_by_a_branch_without_a_delivered_append_fails_naming_the_snapshot(wh: str) -> None:
    """Rows delivered that main no longer holds: the stream fails, naming the snapshot that delivered them."""
    table, _, head = forked(wh)
    p = plain_planner(wh)
    _, offset = drain(p, START)
    table = foreign.append_files(table, [], branch="b", data=tables.events([3]))
    foreign.set_main(table, table.refs()["b"].snapshot_id)
    with pytest.raises(ReadRefusedError, match=rf"snapshot {head} delivered file .* main no longer holds"):
        drain(p, offset)


def test_a_rollback_over_rows_delivered_fails_and_over_none_continues(wh: str) -> None:
    """Rolled back behind delivered rows: refused. Behind a snapshot that delivered nothing: the stream goes on."""
    table, fork, head = forked(wh)
    p = plain_planner(wh)
    _, offset = drain(p, START)
    foreign.rollback_main(table, fork)
    with pytest.raises(ReadRefusedError, match=f"snapshot {head} delivered file"):
        drain(p, offset)
    wh2 = wh + "-2"
    table = tables.append(tables.make_table(wh2), tables.events([1]))
    fork = table.current_snapshot().snapshot_id
    table = foreign.append_files(table, [])  # a snapshot that adds nothing (bookkeeping)
    p = plain_planner(wh2)
    first, offset = drain(p, START)
    table = foreign.rollback_main(table, fork)
    tables.append(table, tables.events([4]))
    second, _ = drain(p, offset)
    assert first == [1] and second == [4]


def first_in_order(table: Any, data: Any) -> Any:
    """A new data file of ``data`` whose path sorts before every pyiceberg-named file (``00000-...``)."""
    import shutil

    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.manifest import DataFile

    (written,) = _dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io)
    local = written.file_path.removeprefix("file://")
    moved = local.rsplit("/", 1)[0] + "/0-first.parquet"
    shutil.move(local, moved)
    fields = ("content", "file_format", "partition", "record_count", "file_size_in_bytes", "column_sizes")
    fields += ("value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds")
    copy = DataFile.from_args(file_path="file://" + moved, **{f: getattr(written, f) for f in fields})
    copy.spec_id = 0
    return copy


def test_a_rejoining_batch_reaches_past_every_snapshot_that_re_adds_a_delivered_file(wh: str) -> None:
    """Under max 1 file per batch the rejoin batch still runs past the cherry-pick, so no batch meets it again.

    The cherry-pick snapshot lists a new file before the re-added one: a batch cut between them would leave
    the re-added file to a later batch that no longer knows it was delivered.
    """
    table, _, head = forked(wh)
    p = plain_planner(wh)
    _, offset = drain(p, START)
    delivered = added_files(table, head)
    table = foreign.append_files(table, [], branch="b", data=tables.events([3]))
    table = foreign.append_files(table, [*delivered, first_in_order(table, tables.events([4]))], branch="b")
    foreign.set_main(table, table.refs()["b"].snapshot_id)
    rest, _ = drain_limited(p, offset, StreamLimits(max_files=1))
    assert rest == [3, 4]
