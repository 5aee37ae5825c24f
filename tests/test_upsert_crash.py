"""Kill matrix over the upsert fail points (PROTOCOL.md §5.5, §9): crash, then a peer or recover finishes.

A victim process runs a real upsert (driver + executor code, ``testing.harness``)
with one fail point armed ``crash`` (``os._exit``: what ``kill -9`` leaves). Then
the next writer — a peer's upsert, or ``recover`` — must apply the victim's entry
exactly once if it was durable and never otherwise; the table must equal the
serial oracle (per key, the greatest order wins; deletes remembered); ``gc``
must remove what the dead attempt left (delete files, merged tombstone files,
delete-key files) and nothing a reader or a tombstone needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.gc import gc
from pyspark_fenced_sink.testing.harness import open_target, sink_write
from pyspark_fenced_sink.testing.invariants import check_table, duplicate_keys, pending_after_recover

ROOT = Path(__file__).resolve().parents[1]
TABLE = "db.upserts"
SCHEMA = StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("op", StringType())])
OPTIONS = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}

#: The upsert fail points (plus the WAL put) and whether the victim's entry is durable when they fire.
DURABLE_AT = {
    "upsert.after-key-file-written": False,
    "commit.after-wal-put": True,
    "upsert.after-deletes-written": True,
    "upsert.after-tombstones-merged": True,
}
SEED = [(k, 1, "U") for k in range(10)] + [(9, 2, "D")]
VICTIM = [(0, 5, "U"), (1, 5, "U"), (2, 0, "U"), (5, 5, "D"), (20, 5, "U"), (9, 1, "U")]
PEER = [(1, 7, "U"), (30, 1, "U")]

_SCRIPT = """
import json, sys
import pyarrow as pa
import pyspark_fenced_sink.iceberg.commit.tombstones as t
from pyspark.sql.types import LongType, StringType, StructField, StructType
from pyspark_fenced_sink.testing.harness import sink_write
t.TOMBSTONE_FILES_MAX = 1  # every commit with a remembered delete merges: the merge fail point fires
wh, table, rows, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
schema = StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("op", StringType())])
data = pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "ts": pa.array([r[1] for r in rows], pa.int64()),
                 "op": [r[2] for r in rows]})
sink_write(wh, table, data, options, schema=schema, tasks=1)
"""


def frame(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "op": [r[2] for r in rows],
        }
    )


def oracle(*writes: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    best: dict[int, tuple[int, int, str]] = {}
    for row in (r for w in writes for r in w):
        if row[0] not in best or row[1] >= best[row[0]][1]:
            best[row[0]] = row
    return sorted((k, t) for k, t, op in best.values() if op != "D")


def rows(wh: str) -> list[tuple[int, int]]:
    t = embedded_catalog(wh).load_table(TABLE)
    assert duplicate_keys(t, ["id"]) == []
    return sorted((r["id"], r["ts"]) for r in t.scan().to_arrow().to_pylist())


def _victim(wh: str, point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FENCEDLAKE_FAILPOINTS", None)
    options = {**OPTIONS, "test.failpoints": f"{point}=crash"}
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, wh, TABLE, json.dumps(VICTIM), json.dumps(options)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _check(wh: str) -> None:
    ctx = open_target(wh, TABLE).ctx
    table = ctx.port.table(ctx.port.load())
    assert check_table(table, ctx.wal, lambda p: Path(p.removeprefix("file://")).exists()) == []


@pytest.fixture
def wh(tmp_path: Path) -> str:
    sink_write(str(tmp_path), TABLE, frame(SEED), OPTIONS, schema=SCHEMA, tasks=1)
    return str(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.parametrize("point", sorted(DURABLE_AT))
@pytest.mark.parametrize("finisher", ["peer", "recover"])
def test_a_crash_at_each_upsert_step_is_finished_exactly_once(wh: str, point: str, finisher: str) -> None:
    """The victim dies at ``point``; its entry is applied once iff durable; the table equals the oracle; gc
    removes the dead attempt's files and keeps every file a reader or a remembered delete needs."""
    proc = _victim(wh, point)
    assert proc.returncode == 86, proc.stdout + proc.stderr
    victim = VICTIM if DURABLE_AT[point] else []
    if finisher == "peer":
        sink_write(wh, TABLE, frame(PEER), OPTIONS, schema=SCHEMA, tasks=1)
        expected = oracle(SEED, victim, PEER)
    else:
        assert pending_after_recover(open_target(wh, TABLE).ctx) == []
        expected = oracle(SEED, victim)
    assert rows(wh) == expected
    _check(wh)
    before = set(Path(wh).rglob("*.parquet"))
    report = gc(open_target(wh, TABLE).ctx, grace_s=0, now=lambda: time.time() + 60)
    removed = {Path(p.removeprefix("file://")) for p in report.orphans}
    assert removed <= before
    if point in ("upsert.after-deletes-written", "upsert.after-tombstones-merged"):
        assert removed, "the dead attempt's delete or tombstone files are orphans gc removes"
    assert rows(wh) == expected
    _check(wh)
    sink_write(wh, TABLE, frame([(9, 1, "U"), (5, 4, "U")]), OPTIONS, schema=SCHEMA, tasks=1)
    assert rows(wh) == oracle(SEED, victim, PEER if finisher == "peer" else [], [(9, 1, "U"), (5, 4, "U")])


@pytest.mark.parametrize("point", ["commit.after-wal-put", "upsert.after-deletes-written"])
def test_a_failed_upsert_commit_then_abort_keeps_the_durable_entrys_files(wh: str, point: str, tmp_path: Any) -> None:
    """An exception after the WAL put: abort() keeps every file the entry names (its delete-key file too)."""
    from pyspark_fenced_sink import failpoints

    try:
        with pytest.raises(failpoints.FailPointError):
            sink_write(wh, TABLE, frame(VICTIM), {**OPTIONS, "test.failpoints": f"{point}=raise"}, schema=SCHEMA)
    finally:
        failpoints.configure("")
    assert pending_after_recover(open_target(wh, TABLE).ctx) == []
    assert rows(wh) == oracle(SEED, VICTIM)
    _check(wh)
