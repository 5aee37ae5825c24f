"""Manifest merging on append commits (iceberg.commit.manifests; PROTOCOL.md §5.3; I1, I2)."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from pyiceberg.manifest import ManifestEntryStatus

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.commit.manifests import MergeSettings, merge_settings
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import commit, plan, rows, sink_write, table_ids, write_tasks
from tests.iceberg.faults import fail_next_commits

TABLE = "db.events"
MIN_COUNT = {"table.commit.manifest.min-count-to-merge": "4"}


def _write(wh: str, i: int, options: dict[str, str] | None = None) -> None:
    result = sink_write(wh, TABLE, rows("w", 10 * i, 10), options, tasks=1)
    assert result.outcome is Outcome.APPLIED


def _manifests(wh: str) -> list[Any]:
    table = embedded_catalog(wh).load_table(TABLE)
    return list(table.current_snapshot().manifests(table.io))


def test_appends_merge_manifests_by_default_at_the_min_count(wh: str) -> None:
    """With no merge property, the 4th commit (min-count 4) folds the table's manifests into one; rows stay exact."""
    for i in range(3):
        _write(wh, i, MIN_COUNT)
    assert len(_manifests(wh)) == 3
    _write(wh, 3, MIN_COUNT)
    manifests = _manifests(wh)
    assert len(manifests) == 1
    table = embedded_catalog(wh).load_table(TABLE)
    assert table_ids(wh, TABLE) == list(range(40))
    assert CommittedState.decode(table.properties[STATE_PROPERTY]).upper == 4
    head = table.current_snapshot()
    assert head.summary.additional_properties["added-records"] == "10"
    assert head.summary.additional_properties["total-data-files"] == "4"
    statuses = sorted(
        (e.status, e.snapshot_id == head.snapshot_id) for e in manifests[0].fetch_manifest_entry(table.io)
    )
    # The merged manifest still says which file this snapshot added (streaming reads rely on it).
    assert statuses == [(ManifestEntryStatus.EXISTING, False)] * 3 + [(ManifestEntryStatus.ADDED, True)]


def test_merge_disabled_by_property_keeps_one_manifest_per_commit(wh: str) -> None:
    """``commit.manifest-merge.enabled=false`` is honoured: every append adds a manifest and none is merged."""
    options = {**MIN_COUNT, "table.commit.manifest-merge.enabled": "false"}
    for i in range(5):
        _write(wh, i, options)
    assert len(_manifests(wh)) == 5
    assert table_ids(wh, TABLE) == list(range(50))


def test_malformed_merge_property_fails_the_write_at_planning(wh: str) -> None:
    """A bad min-count fails the write on the driver, naming the property, before a table is created."""
    with pytest.raises(InvalidOptionsError, match=r"commit\.manifest\.min-count-to-merge"):
        sink_write(wh, TABLE, rows("w", 0, 10), {"table.commit.manifest.min-count-to-merge": "many"})
    with pytest.raises(InvalidOptionsError, match=r"commit\.manifest-merge\.enabled"):
        merge_settings({"commit.manifest-merge.enabled": "sometimes"}, strict=True)
    assert not embedded_catalog(wh).table_exists(TABLE)


def test_property_broken_after_planning_falls_back_to_a_fast_append(wh: str, caplog: pytest.LogCaptureFixture) -> None:
    """A malformed value set between planning and commit never fails the commit: it appends without merging."""
    options = {"table.commit.manifest.min-count-to-merge": "2"}
    _write(wh, 0, options)
    p = plan(wh, TABLE, options)
    messages = write_tasks(p, rows("w", 10, 10), tasks=1)
    table = embedded_catalog(wh).load_table(TABLE)
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "two"})
    with caplog.at_level(logging.WARNING, logger="pyspark_fenced_sink.iceberg.commit.manifests"):
        assert commit(p, messages).outcome is Outcome.APPLIED
    assert len(_manifests(wh)) == 2  # min-count 2 would have merged them
    assert "without merging" in caplog.text
    assert merge_settings({"commit.manifest.min-count-to-merge": "two"}) == MergeSettings(enabled=False)


def test_conflicting_merge_commit_leaves_no_merged_manifest_behind(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A merging commit that loses the compare-and-swap removes its merged manifest; the retry merges again."""
    options = {"table.commit.manifest.min-count-to-merge": "2"}
    _write(wh, 0, options)
    catalog = embedded_catalog(wh)
    fail_next_commits(monkeypatch, catalog)
    result = sink_write(wh, TABLE, rows("w", 10, 10), options, tasks=1)
    assert (result.outcome, result.conflicts) == (Outcome.APPLIED, 1)
    table = catalog.load_table(TABLE)
    referenced = {
        m.manifest_path.removeprefix("file://") for s in table.metadata.snapshots for m in s.manifests(table.io)
    }
    metadata_dir = os.path.join(table.metadata.location.removeprefix("file://"), "metadata")
    on_disk = {os.path.join(metadata_dir, n) for n in os.listdir(metadata_dir) if n.endswith(".avro") and "-m" in n}
    assert len(_manifests(wh)) == 1
    assert on_disk == referenced
    assert table_ids(wh, TABLE) == list(range(20))


def test_stream_reader_delivers_each_file_once_across_merged_manifests(wh: str) -> None:
    """A stream from the start reads every appended file exactly once, through snapshots that merged manifests."""
    from pyspark_fenced_sink.iceberg.planning.incremental import START, StreamLimits, StreamPlanner
    from pyspark_fenced_sink.iceberg.planning.scan import open_read_table
    from tests.read.tables import read_options

    options = {"table.commit.manifest.min-count-to-merge": "2"}  # commits 2, 4 and 6 merge
    sink_write(wh, TABLE, rows("w", 0, 10), options, tasks=1)
    opts = read_options(wh, TABLE, streaming=True)
    planner = StreamPlanner(opts, open_read_table(opts).schema(), lambda: open_read_table(opts))
    start, paths = START, []
    for i in range(1, 7):
        planner.refresh()
        end = planner.latest(start, StreamLimits(), planner.current())  # one micro-batch per commit
        paths += [t.file.file_path for t in planner.plan(start, end)]
        start = end
        if i < 6:
            sink_write(wh, TABLE, rows("w", 10 * i, 10), options, tasks=1)
    table = embedded_catalog(wh).load_table(TABLE)
    assert len(_manifests(wh)) < 6
    assert sorted(paths) == sorted(t.file.file_path for t in table.scan().plan_files())
    assert len(paths) == len(set(paths)) == 6
