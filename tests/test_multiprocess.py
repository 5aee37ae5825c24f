"""32+ OS processes commit to one table on the embedded default at once.

Each process runs the sink's real driver and executor code (``python -m
pyspark_fenced_sink.testing.harness``) and makes several writes; a start file releases them all
together so their commits really contend on the SQLite catalog and the WAL.
Every row must land exactly once, no error may reach a writer (no 409
conflict surfaces), and I1-I7 hold on what is left behind. Group commit must
show up: fewer catalog commits than writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.iceberg.catalogs import open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.testing.harness import rows, sink_write, table_ids
from pyspark_fenced_sink.testing.invariants import check_table

ROOT = Path(__file__).resolve().parents[1]
TABLE = "db.many"
PROCESSES = int(os.environ.get("FENCEDLAKE_MP_PROCESSES", "32"))
WRITES = 3
ROWS = 20


def _spawn(wh: str, i: int, start_file: Path) -> subprocess.Popen[str]:
    # A quarter are stable writers with idempotent batch ids; the rest anonymous batch jobs.
    opts: dict[str, Any] = {"writer.id": f"etl-{i}", "writer.batch-id": 1} if i % 4 == 0 else {}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FENCEDLAKE_TEST_START": str(start_file)}
    args = [wh, TABLE, f"p{i}", str(i * 10_000), str(ROWS), json.dumps(opts), str(WRITES)]
    return subprocess.Popen(
        [sys.executable, "-m", "pyspark_fenced_sink.testing.harness", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.multiprocess
@pytest.mark.slow
def test_many_processes_commit_every_row_exactly_once(tmp_path: Path) -> None:
    wh = str(tmp_path)
    sink_write(wh, TABLE, rows("seed", -1, 1))
    start_file = tmp_path / "go"
    procs = [_spawn(wh, i, start_file) for i in range(PROCESSES)]
    start_file.touch()
    results: list[dict[str, Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(lines) == WRITES, out + err[-2000:]
        results.extend(lines)
    errors = [r for r in results if not r["ok"]]
    assert errors == []
    assert {r["outcome"] for r in results} == {"APPLIED"}
    expected = [-1] + [i * 10_000 + k for i in range(PROCESSES) for k in range(WRITES * ROWS)]
    assert table_ids(wh, TABLE) == sorted(expected)
    ctx = open_table(catalog_config(warehouse=wh), TABLE).ctx
    table = ctx.port.table(ctx.port.load())
    assert check_table(table, ctx.wal, lambda p: Path(p.removeprefix("file://")).exists()) == []
    catalog_commits = sum(r["catalog_commits"] for r in results)
    factor = len(results) / max(1, catalog_commits)
    print(
        f"{len(results)} writes, {catalog_commits} catalog commits: group-commit factor {factor:.2f}, "
        f"conflicts {sum(r['conflicts'] for r in results)}, by peer {sum(r['by_peer'] for r in results)}"
    )
    # Every write was decided by exactly one commit: its own or a peer's.
    assert catalog_commits + sum(r["by_peer"] for r in results) >= len(results)
    assert catalog_commits <= len(results)
