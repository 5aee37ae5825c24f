"""kill -9 at every step of a compaction, then recovery: exact rows, nothing leaked (PROTOCOL.md §5.2, §9).

A victim process runs ``fencedlake compact --no-spark`` (the real planning,
rewrite and commit code) with one fail point armed ``crash`` (``os._exit``: what
``kill -9`` leaves). Then a peer's ordinary append must finish whatever the
victim made durable (the compaction is applied iff its entry was put), the rows
must be exactly the appended ones, the real-table invariants must hold, and a
``gc`` with no grace must leave no data file on disk that the table does not
reference in some snapshot (the victim's unreferenced outputs are orphans it removes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_fenced_sink.failpoints import DURABLE_AT
from pyspark_fenced_sink.ops.gc import gc
from pyspark_fenced_sink.testing.harness import open_target, rows, sink_write, table_ids
from pyspark_fenced_sink.testing.invariants import check_table

ROOT = Path(__file__).resolve().parents[2]
TABLE = "db.compact_crash"
#: Compaction's steps in order, and whether its WAL entry is durable when the step's fail point fires.
STEPS = {
    "compact.after-plan": False,
    "executor.after-file-written": False,
    "compact.after-rewrite": False,
    **{p: d for p, d in DURABLE_AT.items() if p.startswith("commit.")},
}
SMALL_WRITES = 4


def _victim(wh: str, point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FENCEDLAKE_FAILPOINTS": f"{point}=crash"}
    argv = ["compact", TABLE, "--warehouse", wh, "--no-spark", "--min-input-files", "2"]
    return subprocess.run(
        [sys.executable, "-m", "pyspark_fenced_sink.ops.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _referenced(wh: str) -> set[str]:
    """Data files live in any snapshot of the table (older snapshots keep a compaction's inputs)."""
    table = open_target(wh, TABLE).table
    return {
        e.data_file.file_path.removeprefix("file://")
        for s in table.metadata.snapshots
        for m in s.manifests(table.io)
        for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    }


def _live(wh: str) -> set[str]:
    table = open_target(wh, TABLE).table
    return {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}


@pytest.mark.multiprocess
@pytest.mark.parametrize("point", list(STEPS))
def test_compaction_killed_at_each_step_leaves_exact_rows_and_no_leak(tmp_path: Path, point: str) -> None:
    """Crash at ``point``; a peer append applies the compaction iff it was durable; rows exact; gc leaves no orphan."""
    wh = str(tmp_path)
    for i in range(SMALL_WRITES):
        sink_write(wh, TABLE, rows("seed", i * 10, 10), tasks=1)
    inputs = _live(wh)
    proc = _victim(wh, point)
    assert proc.returncode == 86, proc.stdout + proc.stderr
    sink_write(wh, TABLE, rows("peer", 1000, 5), tasks=1)
    assert table_ids(wh, TABLE) == list(range(SMALL_WRITES * 10)) + list(range(1000, 1005))
    compacted = not (inputs & _live(wh))
    assert compacted is STEPS[point]
    opened = open_target(wh, TABLE)
    table = opened.ctx.port.table(opened.view)
    assert check_table(table, opened.ctx.wal, lambda p: Path(p.removeprefix("file://")).exists()) == []
    gc(open_target(wh, TABLE).ctx, grace_s=0)
    on_disk = {str(p) for p in Path(wh).rglob("*.parquet")}
    assert on_disk == _referenced(wh), f"orphans left: {sorted(on_disk - _referenced(wh))[:3]}"
