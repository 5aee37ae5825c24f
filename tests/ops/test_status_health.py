"""``fencedlake status``: small files per partition, manifests, last compaction (ops.health; PROTOCOL.md §10)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update import AddSnapshotUpdate

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.commit.branches import live_data_files
from pyspark_fenced_sink.ops.cli import main
from pyspark_fenced_sink.testing.harness import rows, sink_write

TABLE = "db.health"
PARTITIONED = {"partition-by": "writer"}


def _status(capsys: pytest.CaptureFixture[str], wh: str, *extra: str) -> Any:
    code = main(["status", TABLE, "--warehouse", wh, *extra])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out) if "--json" in extra else out


def _wide(writer: str, count: int) -> pa.Table:
    """``count`` rows of the harness schema with random (incompressible) ids, so the file is large."""
    ids = [int.from_bytes(os.urandom(8), "little") >> 1 for _ in range(count)]
    return pa.table({"id": pa.array(ids, pa.int64()), "writer": [writer] * count})


@pytest.fixture
def wh(tmp_path: Path) -> str:
    """Partition writer=a: three 10-row files; writer=b: one file of a few KB (and one tiny one)."""
    w = str(tmp_path)
    for i in range(3):
        sink_write(w, TABLE, rows("a", 10 * i, 10), PARTITIONED, tasks=1)
    sink_write(w, TABLE, rows("b", 100, 1), PARTITIONED, tasks=1)
    sink_write(w, TABLE, _wide("b", 2000), PARTITIONED, tasks=1)
    return w


def _sizes(wh: str) -> dict[str, list[int]]:
    """On-disk sizes of the live data files per partition path (what status must count, without opening them)."""
    table = embedded_catalog(wh).load_table(TABLE)
    out: dict[str, list[int]] = {}
    for data_file in live_data_files(table, table.current_snapshot()):
        path = data_file.file_path.removeprefix("file://")
        part = f"writer={data_file.partition[0]}" if len(data_file.partition) else "(unpartitioned)"
        out.setdefault(part, []).append(os.path.getsize(path))
    return out


def test_status_counts_small_files_per_partition_below_the_threshold(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every partition is listed in --json, most small files first, with counts matching the files on disk."""
    sizes = _sizes(wh)
    threshold = (max(sizes["writer=a"]) + max(sizes["writer=b"])) // 2
    body = _status(capsys, wh, "--json", "--small-file-bytes", str(threshold))
    assert body["small_file_threshold_bytes"] == threshold
    expected = [
        {
            "partition": part,
            "files": len(s),
            "bytes": sum(s),
            "small_files": sum(1 for x in s if x < threshold),
            "small_bytes": sum(x for x in s if x < threshold),
        }
        for part, s in sorted(sizes.items())
    ]
    assert body["small_files_by_partition"] == expected  # a: 3 of 3 small; b: 1 of 2
    assert [p["small_files"] for p in expected] == [3, 1]
    assert (body["data_files"], body["small_files"], body["partitions_with_small_files"]) == (5, 4, 2)


def test_status_text_shows_only_the_top_partitions(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--top 1 prints the partition with the most small files and not the others."""
    out = _status(capsys, wh, "--top", "1")
    lines = out.splitlines()
    header = lines.index("small files by partition (top 1; all with --json):")
    assert lines[header + 1].split() == ["partition", "files", "small_files", "bytes", "small_bytes"]
    assert lines[header + 2].split()[:3] == ["writer=a", "3", "3"]
    assert not lines[header + 3].startswith("  writer=")


def test_default_threshold_is_a_quarter_of_the_target_file_size(tmp_path: Path, capsys: Any) -> None:
    """With write.target-file-size-bytes=4000 the threshold is 1000 bytes; judged from metadata, files never opened."""
    wh = str(tmp_path)
    options = {"table.write.target-file-size-bytes": "4000"}
    sink_write(wh, TABLE, rows("a", 0, 5), options, tasks=1)
    sink_write(wh, TABLE, _wide("a", 500), options, tasks=1)
    sizes = [s for v in _sizes(wh).values() for s in v]
    for parquet in Path(wh).rglob("*.parquet"):
        parquet.unlink()  # status reads metadata only: it must not notice
    body = _status(capsys, wh, "--json")
    assert body["small_file_threshold_bytes"] == 1000
    assert body["small_files"] == sum(1 for s in sizes if s < 1000) == 1
    assert body["small_files_by_partition"][0]["partition"] == "(unpartitioned)"


def test_status_reports_the_manifest_count_after_merging(tmp_path: Path, capsys: Any) -> None:
    """Two appends leave two manifests; the third (min-count 3) merges them into one, and status says so."""
    wh = str(tmp_path)
    options = {"table.commit.manifest.min-count-to-merge": "3"}
    for i in range(2):
        sink_write(wh, TABLE, rows("a", 10 * i, 10), options, tasks=1)
    assert _status(capsys, wh, "--json")["manifests"] == 2
    sink_write(wh, TABLE, rows("a", 20, 10), options, tasks=1)
    body = _status(capsys, wh, "--json")
    assert (body["manifests"], body["data_files"]) == (1, 3)


def _commit_replace_snapshot(wh: str) -> int:
    """A snapshot with operation ``replace`` (what a compaction commits): one file removed and added back."""
    table = embedded_catalog(wh).load_table(TABLE)
    victim = next(live_data_files(table, table.current_snapshot()))
    tx = table.transaction()
    with tx.update_snapshot().overwrite() as producer:
        producer.delete_data_file(victim)
        producer.append_data_file(victim)
    updates = []
    for update in tx._updates:
        if isinstance(update, AddSnapshotUpdate):
            props = update.snapshot.summary.additional_properties if update.snapshot.summary else {}
            summary = Summary(Operation.REPLACE, **props)
            update = AddSnapshotUpdate(snapshot=update.snapshot.model_copy(update={"summary": summary}))
            snapshot_id = update.snapshot.snapshot_id
        updates.append(update)
    table._do_commit(updates=tuple(updates), requirements=tuple(tx._requirements))
    return snapshot_id


def test_last_compaction_is_never_then_the_newest_replace_snapshot(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No replace snapshot: "never"; after one and a later append, status names the replace snapshot."""
    assert _status(capsys, wh, "--json")["last_compaction"] is None
    assert "last_compaction: never (no replace snapshot in the history kept" in _status(capsys, wh)
    replaced = _commit_replace_snapshot(wh)
    sink_write(wh, TABLE, rows("c", 500, 10), PARTITIONED, tasks=1)
    body = _status(capsys, wh, "--json")
    assert body["last_compaction"]["snapshot_id"] == replaced
    assert 0 <= body["last_compaction"]["age_s"] < 600
    assert f"ago), snapshot {replaced}" in _status(capsys, wh)
