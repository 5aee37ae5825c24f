"""Crash at every protocol step, then recover: the kill-and-recover matrix (I1-I7).

A victim writer process runs the real driver + executor code (``python -m
pyspark_fenced_sink.testing.harness``) with one fail point armed ``crash`` (``os._exit(86)``: no
``finally``, no ``abort()``, exactly what ``kill -9`` leaves behind). Then the
next writer — a peer's ordinary write, or ``fencedlake recover`` — must finish
whatever the victim made durable, and a re-run of the victim's batch (same
``writer.id`` + ``writer.batch-id``) must be exactly-once. The in-process
``raise`` variants check the other half: ``abort()`` after a failed
``commit()`` never deletes files a durable WAL entry names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.failpoints import DURABLE_AT
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.testing.harness import open_target, rows, sink_write, table_ids
from pyspark_fenced_sink.testing.invariants import check_table, pending_after_recover

ROOT = Path(__file__).resolve().parents[1]
TABLE = "db.crash"

#: Fail points only a stable writer passes (anonymous batch writers claim no epoch).
STABLE_ONLY = {"driver.after-open"}
#: The victim's options by kind: anonymous; an idempotent job (writer.id + writer.batch-id: no barrier, its open
#: lists the WAL tail, PROTOCOL.md §7); a writer.id job without a batch id (a fence barrier at open).
KINDS: dict[str, dict[str, Any]] = {
    "anonymous": {},
    "job": {"writer.id": "etl", "writer.batch-id": 7},
    "barrier": {"writer.id": "etl"},
}
MATRIX = [(p, k) for p in sorted(DURABLE_AT) for k in KINDS if k != "anonymous" or p not in STABLE_ONLY]


def _victim(wh: str, point: str, action: str, **options: Any) -> subprocess.CompletedProcess[str]:
    opts = {"test.failpoints": f"{point}={action}", **options}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FENCEDLAKE_FAILPOINTS", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pyspark_fenced_sink.testing.harness",
            wh,
            TABLE,
            "victim",
            "1000",
            "50",
            json.dumps(opts),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _ctx(wh: str) -> Any:
    return open_target(wh, TABLE).ctx


def _assert_invariants(wh: str) -> None:
    ctx = _ctx(wh)
    table = ctx.port.table(ctx.port.load())
    violations = check_table(table, ctx.wal, lambda p: Path(p.removeprefix("file://")).exists())
    assert violations == []


@pytest.fixture
def wh(tmp_path: Path) -> str:
    sink_write(str(tmp_path), TABLE, rows("seed", 0, 10))
    return str(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.parametrize(("point", "kind"), MATRIX, ids=[f"{p}-{k}" for p, k in MATRIX])
def test_crash_then_peer_write_finishes_the_victims_durable_work(wh: str, point: str, kind: str) -> None:
    """The victim dies at ``point``; the next writer applies its entry iff it was durable (past a barrier the
    victim left, too); a re-run of an idempotent job is exactly-once."""
    victim_opts = KINDS[kind]
    proc = _victim(wh, point, "crash", **victim_opts)
    assert proc.returncode == 86, proc.stdout + proc.stderr
    result = sink_write(wh, TABLE, rows("peer", 2000, 5))
    assert result.outcome is Outcome.APPLIED
    victim_rows = list(range(1000, 1050))
    expected = list(range(10)) + (victim_rows if DURABLE_AT[point] else []) + list(range(2000, 2005))
    assert table_ids(wh, TABLE) == sorted(expected)
    if "writer.batch-id" in victim_opts:
        rerun = sink_write(wh, TABLE, rows("victim", 1000, 50), **victim_opts)
        assert rerun.outcome is (Outcome.DUPLICATE if DURABLE_AT[point] else Outcome.APPLIED)
        assert table_ids(wh, TABLE) == sorted(list(range(10)) + victim_rows + list(range(2000, 2005)))
    _assert_invariants(wh)


@pytest.mark.multiprocess
@pytest.mark.parametrize("point", [p for p, durable in sorted(DURABLE_AT.items()) if durable])
def test_crash_then_recover_applies_the_durable_entry(wh: str, point: str) -> None:
    """``recover`` (the CLI's core) alone finishes a dead driver's commit (I5)."""
    proc = _victim(wh, point, "crash")
    assert proc.returncode == 86, proc.stdout + proc.stderr
    assert pending_after_recover(_ctx(wh)) == []
    assert table_ids(wh, TABLE) == list(range(10)) + list(range(1000, 1050))
    _assert_invariants(wh)


@pytest.mark.parametrize("point", sorted(DURABLE_AT))
def test_failed_commit_then_abort_keeps_files_a_durable_entry_names(wh: str, point: str) -> None:
    """An exception at ``point``: ``abort()`` runs (as Spark does after a failed commit) and never
    deletes files the WAL names; the next writer then lands them (hard case: abort after commit)."""
    stable = {"writer.id": "etl"} if point in STABLE_ONLY else {}
    try:
        with pytest.raises(failpoints.FailPointError):
            sink_write(wh, TABLE, rows("victim", 1000, 50), **{"test.failpoints": f"{point}=raise"}, **stable)
    finally:
        failpoints.configure("")
    sink_write(wh, TABLE, rows("peer", 2000, 5))
    expected = list(range(10)) + (list(range(1000, 1050)) if DURABLE_AT[point] else []) + list(range(2000, 2005))
    assert table_ids(wh, TABLE) == sorted(expected)
    _assert_invariants(wh)


@pytest.mark.multiprocess
def test_zombie_victim_restarted_elsewhere_is_fenced(wh: str) -> None:
    """A writer.id whose old incarnation put a WAL entry and then a new one opened: the old entry,
    if after the barrier, is never applied (I4); here the old entry precedes the barrier and lands once."""
    proc = _victim(wh, "commit.after-wal-put", "crash", **{"writer.id": "etl", "writer.batch-id": 1})
    assert proc.returncode == 86
    second = sink_write(wh, TABLE, rows("victim", 1000, 50), **{"writer.id": "etl", "writer.batch-id": 1})
    assert second.outcome is Outcome.DUPLICATE
    third = sink_write(wh, TABLE, rows("victim", 3000, 5), **{"writer.id": "etl", "writer.batch-id": 2})
    assert third.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == list(range(10)) + list(range(1000, 1050)) + list(range(3000, 3005))
    _assert_invariants(wh)


def test_an_idempotent_job_paused_after_its_open_is_fenced_or_answered_duplicate_never_applied_twice(
    wh: str,
) -> None:
    """Idempotent jobs' drivers pause after their opens (no barrier: each only listed the tail). A copy of a batch
    that a job opened at the same tail applied is a duplicate (equal tails are not ordered, the batch id decides);
    once a job that opened later has landed, a paused job's own batch is fenced. Nothing lands twice, and the
    paused jobs' files are removed."""
    from pyspark_fenced_sink.errors import FencedWriterError
    from pyspark_fenced_sink.protocol.file_refs import encoded_path
    from pyspark_fenced_sink.testing.harness import commit, plan, write_tasks

    paused_own = plan(wh, TABLE, writer_id="etl", writer_batch_id=1)
    paused_copy = plan(wh, TABLE, writer_id="etl", writer_batch_id=2)
    first = plan(wh, TABLE, writer_id="etl", writer_batch_id=2)
    own, copy = write_tasks(paused_own, rows("own", 1000, 5)), write_tasks(paused_copy, rows("copy", 3000, 5))
    assert commit(first, write_tasks(first, rows("copy", 3000, 5))).outcome is Outcome.APPLIED
    assert commit(paused_copy, copy, abort=False).outcome is Outcome.DUPLICATE
    assert sink_write(wh, TABLE, rows("peer", 2000, 5)).outcome is Outcome.APPLIED  # the tail moves on
    later = sink_write(wh, TABLE, rows("later", 4000, 3), **{"writer.id": "etl", "writer.batch-id": 3})
    assert later.outcome is Outcome.APPLIED
    with pytest.raises(FencedWriterError, match="fenced by a job of the writer opened later"):
        commit(paused_own, own, abort=False)
    assert table_ids(wh, TABLE) == [*range(10), *range(2000, 2005), *range(3000, 3005), *range(4000, 4003)]
    paths = [encoded_path(f).removeprefix("file://") for m in (*own, *copy) for f in m.files]
    assert paths and not any(Path(p).exists() for p in paths)
    _assert_invariants(wh)


def test_restarted_stream_run_replaying_a_committed_batch_keeps_going(wh: str) -> None:
    """Spark died after the sink committed batch 0, before its commit log: the next run replays batch 0
    (a duplicate, and its epoch claim) and must then commit batch 1 — not be fenced by the dead run."""
    from pyspark_fenced_sink.testing.harness import stream_batch

    first = stream_batch(wh, TABLE, "orders", 0, rows("orders", 100, 3), run="run-a", query="q")
    assert first.outcome is Outcome.APPLIED
    replay = stream_batch(wh, TABLE, "orders", 0, rows("orders", 100, 3), run="run-b", query="q")
    assert replay.outcome is Outcome.DUPLICATE
    nxt = stream_batch(wh, TABLE, "orders", 1, rows("orders", 103, 3), run="run-b", query="q")
    assert nxt.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == list(range(10)) + list(range(100, 106))
    _assert_invariants(wh)
