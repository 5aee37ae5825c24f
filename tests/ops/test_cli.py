"""The ``fencedlake`` CLI: each command's output and errors (issue: operations)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.ops.cli import main
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.layout import control_root, wal_key
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import plan, rows, sink_write, table_ids, write_tasks

TABLE = "db.ops"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    body = json.loads(out) if "--json" in argv and code == 0 else out
    return code, body, err


def _pending_entry(wh: str, start: int, count: int) -> None:
    """A durable WAL entry whose driver died before committing it."""
    p = plan(wh, TABLE)
    files = [f for m in write_tasks(p, rows("dead", start, count)) for f in m.files]
    ctx = open_table(catalog_config(warehouse=wh), TABLE).ctx
    assert p.identity is not None
    ctx.wal.append(data_entry(p.identity, files, rows=count), start=0)


def _data_files(wh: str) -> set[str]:
    return {str(p) for p in Path(wh).rglob("*.parquet")}


@pytest.fixture
def wh(tmp_path: Path) -> str:
    w = str(tmp_path)
    sink_write(w, TABLE, rows("a", 0, 10))
    sink_write(w, TABLE, rows("b", 10, 10), writer_id="etl", writer_batch_id=4)
    return w


def test_status_reports_upper_writers_pending_and_commits(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    _pending_entry(wh, 100, 3)
    code, body, _ = _run(capsys, "status", TABLE, "--warehouse", wh, "--json")
    assert code == 0
    assert body["committed_upper"] == 2  # anon write, etl's batch 4 (an idempotent job puts no barrier: §7)
    assert [(w["writer"], w["epoch"], w["tail"], w["batches"]) for w in body["writers"]] == [("etl", None, 1, "4")]
    assert [(e["seq"], e["position"], e["outcome"]) for e in body["pending_entries"]] == [
        (2, "at", "next commit: APPLIED")
    ]
    assert [c["seqs"] for c in body["recent_commits"]] == ["1-1", "0-0"]
    assert body["recent_commits"][0]["group"] == 1 and body["recent_commits"][0]["applied"] == 1  # numbers, not strings


def test_status_text_output_is_a_readable_table(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "status", TABLE, "--warehouse", wh)
    assert code == 0
    assert "committed_upper: 2" in out
    lines = out.splitlines()
    assert lines[lines.index("writers:") + 1].split() == ["writer", "epoch", "tail", "batches", "run", "query"]
    assert lines[lines.index("writers:") + 2].split()[:4] == ["etl", "-", "1", "4"]


def test_wal_classifies_reconciled_and_pending_entries(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    _pending_entry(wh, 100, 3)
    code, body, _ = _run(capsys, "wal", TABLE, "--warehouse", wh, "--json", "--from", "1")
    assert code == 0
    assert [(e["seq"], e["position"], e["kind"], e["outcome"]) for e in body["entries"]] == [
        (1, "below", "data", "APPLIED"),
        (2, "at", "data", "next commit: APPLIED"),
    ]


def test_recover_applies_a_dead_drivers_entry(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    _pending_entry(wh, 100, 3)
    code, body, _ = _run(capsys, "recover", TABLE, "--warehouse", wh, "--json")
    assert code == 0
    assert (body["upper_before"], body["committed_upper"]) == (2, 3)
    assert body["commits"] == [{"seqs": "2-2", "outcomes": "A"}]
    assert table_ids(wh, TABLE) == [*range(20), 100, 101, 102]
    code, body, _ = _run(capsys, "recover", TABLE, "--warehouse", wh, "--json")
    assert body["catalog_commits"] == 0


def test_fence_stops_the_running_incarnation(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pyspark_fenced_sink.errors import FencedWriterError
    from pyspark_fenced_sink.testing.harness import commit

    p = plan(wh, TABLE, writer_id="etl", writer_batch_id=5)  # a running job: opened, files written
    messages = write_tasks(p, rows("etl", 50, 5))
    code, body, _ = _run(capsys, "fence", TABLE, "etl", "--warehouse", wh, "--json")
    assert code == 0 and body["fenced_at_seq"] == 2  # the job listed tail 2 at its open: the barrier is not below it
    with pytest.raises(FencedWriterError, match="fenced"):
        commit(p, messages, abort=False)
    assert table_ids(wh, TABLE) == list(range(20))


def test_gc_removes_only_provably_orphaned_files(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    # An executor-side failure leaves an anonymous write's files behind (no commit message reached the driver).
    with pytest.raises(failpoints.FailPointError):
        sink_write(wh, TABLE, rows("lost", 200, 6), **{"test.failpoints": "executor.after-file-written=raise@2"})
    failpoints.configure("")
    # It opened at upper 3; only a commit after that proves (with grace 0) it is no longer in flight.
    sink_write(wh, TABLE, rows("later", 20, 1))
    live_before = _data_files(wh)
    orphan = {f for f in live_before if Path(f).name.startswith("e-") and f not in _referenced(wh)}
    assert len(orphan) == 1
    code, body, _ = _run(capsys, "gc", TABLE, "--warehouse", wh, "--json", "--grace", "0s", "--dry-run")
    assert code == 0 and {o["path"] for o in body["orphans"]} == orphan and _data_files(wh) == live_before
    code, body, _ = _run(capsys, "gc", TABLE, "--warehouse", wh, "--json", "--grace", "0s")
    assert code == 0 and {o["path"] for o in body["orphans"]} == orphan
    assert body["wal_truncated"] == 3  # 3 positions + the expire barrier, minus the one below the upper
    assert _data_files(wh) == live_before - orphan
    assert table_ids(wh, TABLE) == list(range(21))
    sink_write(wh, TABLE, rows("after", 300, 2))  # the table still takes writes after truncation
    assert table_ids(wh, TABLE) == [*range(21), 300, 301]


def test_gc_grace_keeps_young_files(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(failpoints.FailPointError):
        sink_write(wh, TABLE, rows("lost", 200, 6), **{"test.failpoints": "executor.after-file-written=raise@2"})
    failpoints.configure("")
    code, body, _ = _run(capsys, "gc", TABLE, "--warehouse", wh, "--json")  # default grace 24h
    assert code == 0 and body["orphans"] == [] and body["expired_before"] is None


def test_gc_expires_snapshots_but_keeps_the_committed_state(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, body, _ = _run(
        capsys, "gc", TABLE, "--warehouse", wh, "--json", "--expire-snapshots-older-than", "0s", "--retain-last", "1"
    )
    assert code == 0 and len(body["snapshots_expired"]) == 1
    out = sink_write(wh, TABLE, rows("b", 10, 10), writer_id="etl", writer_batch_id=4)
    assert out.outcome.name == "DUPLICATE"  # the writer state survived the expiry
    assert table_ids(wh, TABLE) == list(range(20))


def _referenced(wh: str) -> set[str]:
    table = embedded_catalog(wh).load_table(TABLE)
    return {p.removeprefix("file://") for p in table.inspect.files().column("file_path").to_pylist()}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "db.missing"], "table db.missing does not exist"),
        (["status", "nonamespace"], "table name 'nonamespace' is invalid"),
        (["fence", TABLE, "../etc"], "writer.id '../etc' is invalid"),
        (["status", TABLE, "--catalog-prop", "novalue"], "--catalog-prop 'novalue': expected KEY=VALUE"),
        (["status", TABLE, "--catalog-prop", "type=nosuchtype"], "cannot load catalog"),
    ],
)
def test_errors_are_clear_and_exit_2(
    wh: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    extra = ["--warehouse", wh] if "--catalog-prop" not in argv else []
    code, _, err = _run(capsys, *argv, *extra)
    assert code == 2
    assert message in err


def _wal_object(wh: str, seq: int) -> Path:
    table = embedded_catalog(wh).load_table(TABLE)
    root = control_root(table.location(), str(table.metadata.table_uuid)).removeprefix("file://")
    return Path(root) / wal_key(seq)


def test_corrupt_wal_entry_names_the_object(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _wal_object(wh, 2)
    bad.write_text("{not json")
    code, _, err = _run(capsys, "status", TABLE, "--warehouse", wh)
    assert code == 2 and f"{2:020d}.json" in err and "fencedlake skip TABLE 2" in err


def test_a_damaged_entry_is_moved_aside_and_skipped_then_the_table_moves_on(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Damaged position 2 blocks position 3; recover says so (exit 3) until the operator skips 2; then 3 lands."""
    _pending_entry(wh, 100, 3)  # seq 2
    _pending_entry(wh, 200, 2)  # seq 3
    bad = _wal_object(wh, 2)
    bad.write_text("{not json")
    code, _, err = _run(capsys, "recover", TABLE, "--warehouse", wh)
    assert code == 2 and "skip TABLE 2" in err
    bad.rename(bad.with_name("damaged-2.json.aside"))
    code, body, err = _run(capsys, "recover", TABLE, "--warehouse", wh, "--json")
    assert code == 3 and "wait behind WAL position 2" in err
    code, body, _ = _run(capsys, "skip", TABLE, "3", "--warehouse", wh, "--reason", "x", "--json")
    assert code == 2  # position 3 holds an object: only a missing position can be skipped
    code, body, _ = _run(capsys, "skip", TABLE, "2", "--warehouse", wh, "--reason", "disk fault", "--json")
    assert code == 0 and body["commits"] == [{"seqs": "2-3", "outcomes": "KA"}] and body["waiting"] == 0
    assert table_ids(wh, TABLE) == [*range(20), 200, 201]
    code, body, _ = _run(capsys, "wal", TABLE, "--warehouse", wh, "--json", "--from", "2")
    assert [(e["seq"], e["kind"], e["outcome"]) for e in body["entries"]] == [
        (2, "skip", "SKIPPED"),
        (3, "data", "APPLIED"),
    ]
    code, _, err = _run(capsys, "skip", TABLE, "2", "--warehouse", wh, "--reason", "again")
    assert code == 2 and "below the committed upper" in err


def test_a_lost_entry_that_a_process_kept_lands_from_its_copy_and_the_skip_is_refused_after_the_fact(
    wh: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Position 2 is read by a process that keeps entries, then lost; the operator skips it, and the keeping
    process commits its copy between the skip's put and the skip's own commit: the skip entry is removed and
    the command says "reconciled meanwhile" (the position holds no object the commit record does not name)."""
    from pyspark_fenced_sink.protocol import repair
    from pyspark_fenced_sink.protocol.commit import recover

    before = table_ids(wh, TABLE)
    _pending_entry(wh, 100, 3)  # seq 2
    keeper = open_table(catalog_config(warehouse=wh), TABLE).ctx
    assert keeper.wal.keep is not None and keeper.wal.read(2) is not None  # kept by this "process"
    _wal_object(wh, 2).unlink()  # lost
    real_recover = repair.recover

    def the_copy_lands_first(ctx: Any, **kwargs: Any) -> Any:
        recover(keeper)  # a committer of the keeping process applies its copy of position 2
        return real_recover(ctx, **kwargs)

    monkeypatch.setattr(repair, "recover", the_copy_lands_first)
    code, _, err = _run(capsys, "skip", TABLE, "2", "--warehouse", wh, "--reason", "lost")
    assert code == 2 and "reconciled meanwhile" in err
    assert f"fencedlake wal {TABLE} --from 2 --limit 1" in err and "copy that object back" in err, err
    assert not _wal_object(wh, 2).exists(), "the skip entry was removed again"
    assert table_ids(wh, TABLE) == [*before, 100, 101, 102], "the copy's rows landed once"


def test_repair_state_rebuilds_a_removed_state_property(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """gc checkpoints, then another tool drops the property: writes refuse until repair-state rebuilds it."""
    from pyspark_fenced_sink.errors import TableStateError

    sink_write(wh, TABLE, rows("c", 20, 5), writer_id="etl", writer_batch_id=6)
    assert _run(capsys, "gc", TABLE, "--warehouse", wh, "--json", "--grace", "0s")[0] == 0
    sink_write(wh, TABLE, rows("d", 25, 5), writer_id="etl", writer_batch_id=7)
    table = embedded_catalog(wh).load_table(TABLE)
    before = CommittedState.decode(table.properties[STATE_PROPERTY])
    with table.transaction() as tx:
        tx.remove_properties(STATE_PROPERTY)
    with pytest.raises(TableStateError, match=f"fencedlake repair-state {TABLE}"):
        sink_write(wh, TABLE, rows("e", 30, 5))
    code, body, _ = _run(capsys, "repair-state", TABLE, "--warehouse", wh, "--json", "--dry-run")
    assert code == 0 and body["committed_upper"] == before.upper and body["from_checkpoint"] is not None
    assert STATE_PROPERTY not in embedded_catalog(wh).load_table(TABLE).properties
    code, body, _ = _run(capsys, "repair-state", TABLE, "--warehouse", wh, "--json")
    assert code == 0
    after = CommittedState.decode(embedded_catalog(wh).load_table(TABLE).properties[STATE_PROPERTY])
    assert after == before
    assert sink_write(wh, TABLE, rows("d", 25, 5), writer_id="etl", writer_batch_id=7).outcome.name == "DUPLICATE"
    assert table_ids(wh, TABLE) == list(range(30))


def test_gc_keeps_snapshots_that_tags_and_branches_protect(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Expiring old snapshots skips those a tag or a branch points at (and their files stay referenced)."""
    for i in range(3):
        sink_write(wh, TABLE, rows("t", 100 + i, 1))
    table = embedded_catalog(wh).load_table(TABLE)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    tagged, branched = snapshots[0].snapshot_id, snapshots[1].snapshot_id
    table.manage_snapshots().create_tag(tagged, "audit-2026").create_branch(branched, "backfill").commit()
    code, body, err = _run(
        capsys, "gc", TABLE, "--warehouse", wh, "--json", "--expire-snapshots-older-than", "0s", "--retain-last", "1"
    )
    assert code == 0, err
    expired = {s["snapshot_id"] for s in body["snapshots_expired"]}
    assert expired and not expired & {tagged, branched}
    kept = {s.snapshot_id for s in embedded_catalog(wh).load_table(TABLE).metadata.snapshots}
    assert {tagged, branched} <= kept
    assert table_ids(wh, TABLE) == [*range(20), 100, 101, 102]


@pytest.mark.parametrize("command", ["status", "wal", "recover", "gc", "fence", "skip", "repair-state"])
def test_help_says_what_each_command_does(command: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-m", "pyspark_fenced_sink.ops.cli", command, "--help"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--catalog" in out and "--json" in out and "table" in out
    words = {
        "status": "committed upper",
        "wal": "WAL entries",
        "recover": "pending WAL entry",
        "gc": "orphan",
        "fence": "fence barrier",
        "skip": "it never overwrites an entry",
        "repair-state": "newest checkpoint gc kept",
    }
    assert words[command] in " ".join(out.split())
