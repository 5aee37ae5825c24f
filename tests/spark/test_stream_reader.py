"""The stream reader's API as Spark drives it, without Spark: limits, AvailableNow, and executor copies.

Spark keeps one reader per query in its source runner (``latestOffset``,
``partitions``, ``commit``) and runs ``read`` in executors on a copy pickled
when the query started; these tests make the same calls in one process, with
the offsets as JSON dicts, as Spark passes them.
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
from pyiceberg.transforms import IdentityTransform
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

from pyspark_fenced_sink import FencedLakeDataSource
from pyspark_fenced_sink.spark.stream_reader import FencedLakeStreamReader
from tests.read.tables import append, events, make_table


def _open(wh: str, **options: str) -> tuple[FencedLakeStreamReader, FencedLakeStreamReader]:
    """The source runner's reader, and the copy executors get (pickled at the start)."""
    source = FencedLakeDataSource({"warehouse": wh, "path": "db.t", **options})
    reader = source.streamReader(source.schema())
    return reader, pickle.loads(pickle.dumps(reader))


def _ids(runner: FencedLakeStreamReader, executor: FencedLakeStreamReader, start: Any, end: Any) -> list[int]:
    splits = runner.partitions(start, end)
    batches = [b for split in splits for b in executor.read(pickle.loads(pickle.dumps(split)))]
    return sorted(pa.Table.from_batches(batches).column("id").to_pylist()) if batches else []


def test_the_default_read_limit_follows_the_options(wh: str) -> None:
    """Files bound first, then rows, else everything available (Spark >= 4.2 admission control)."""
    make_table(wh)
    assert _open(wh)[0].getDefaultReadLimit() == ReadAllAvailable()
    assert _open(wh, **{"streaming-max-rows-per-micro-batch": "7"})[0].getDefaultReadLimit() == ReadMaxRows(7)
    both = {"streaming-max-rows-per-micro-batch": "7", "streaming-max-files-per-micro-batch": "2"}
    assert _open(wh, **both)[0].getDefaultReadLimit() == ReadMaxFiles(2)


def test_the_limit_spark_passes_wins_over_the_options(wh: str) -> None:
    """ReadAllAvailable (Trigger.Once) ignores the configured bound; ReadMaxFiles(n) applies n."""
    table = make_table(wh)
    for i in range(3):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    runner, executor = _open(wh, **{"streaming-max-files-per-micro-batch": "1"})
    start = runner.initialOffset()
    everything = runner.latestOffset(start, ReadAllAvailable())
    assert _ids(runner, executor, start, everything) == list(range(30))
    two = runner.latestOffset(start, ReadMaxFiles(2))
    assert _ids(runner, executor, start, two) == list(range(20))
    assert runner.latestOffset(start, ReadMaxFiles(1)) != two


def test_available_now_stops_at_the_snapshot_current_when_it_started(wh: str) -> None:
    """prepareForTriggerAvailableNow caps the run: a later append waits for the next run."""
    table = append(make_table(wh), events(range(10)))
    runner, executor = _open(wh)
    runner.prepareForTriggerAvailableNow()
    append(table, events(range(10, 20)))
    start = runner.initialOffset()
    end = runner.latestOffset(start, ReadAllAvailable())
    assert _ids(runner, executor, start, end) == list(range(10))
    assert runner.latestOffset(end, ReadAllAvailable()) == end


def test_spark_before_4_2_gets_everything_from_the_start(wh: str) -> None:
    """latestOffset() without arguments (no admission control): the end of everything there is."""
    table = make_table(wh)
    for i in range(2):
        table = append(table, events(range(i * 10, i * 10 + 10)))
    runner, executor = _open(wh, **{"streaming-max-files-per-micro-batch": "1"})
    end = runner.latestOffset()
    assert _ids(runner, executor, runner.initialOffset(), end) == list(range(20))


def test_executor_copies_read_files_of_a_partition_spec_added_after_the_start(wh: str) -> None:
    """The table is partitioned after the query started; the executors' copy still reads the new files."""
    table = append(make_table(wh), events(range(5)))
    runner, executor = _open(wh)
    start = runner.initialOffset()
    first = runner.latestOffset(start, ReadAllAvailable())
    assert _ids(runner, executor, start, first) == list(range(5))
    with table.update_spec() as update:
        update.add_field("k", IdentityTransform(), "k")
    table = table.catalog.load_table("db.t")
    append(table, events(range(5, 10), k="z"))
    second = runner.latestOffset(first, ReadAllAvailable())
    assert _ids(runner, executor, first, second) == list(range(5, 10))
    runner.commit(second)
