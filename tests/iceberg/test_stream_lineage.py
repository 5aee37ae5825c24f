"""A stream offset follows main's lineage however main moves forward (PROTOCOL.md §14.1).

Fast-forward publishes, appends grouped with a replace, rollbacks: every
appended row is delivered exactly once, or the stream fails naming the
snapshot. The planner is driven as Spark drives it (``latest`` then ``plan``).
"""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq
import pytest

from pyspark_fenced_sink.iceberg.incremental import START, StreamLimits, StreamOffset, StreamPlanner
from pyspark_fenced_sink.iceberg.scan import open_read_table
from pyspark_fenced_sink.protocol.publish import publish_branch
from pyspark_fenced_sink.testing.harness import open_target
from tests.iceberg.test_write_modes import TABLE, days, prepared, write
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


@pytest.mark.xfail(strict=True, reason="issue 24 failure 3: the offset must be on main's lineage, publish drops it")
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
