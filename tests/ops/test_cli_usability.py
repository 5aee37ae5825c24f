"""The CLI as a new user meets it: version, pipes, typos, dry runs, what "pending" means, numbers in JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.cli import main
from pyspark_fenced_sink.protocol.layout import control_root
from pyspark_fenced_sink.testing.harness import rows, sink_write, stream_batch
from pyspark_fenced_sink.version import __version__

TABLE = "db.usability"
_ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    # Block-buffered stdout, as a user's shell gives it (the test runner sets PYTHONUNBUFFERED).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(_ROOT)
    return subprocess.Popen([sys.executable, "-m", "pyspark_fenced_sink.ops.cli", *argv], env=env, text=True, **kwargs)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    return body


def _wal_objects(wh: str) -> list[str]:
    table = embedded_catalog(wh).load_table(TABLE)
    wal = Path(control_root(table.location(), str(table.metadata.table_uuid)).removeprefix("file://")) / "wal"
    return sorted(p.name for p in wal.iterdir())


@pytest.fixture
def wh(tmp_path: Path) -> str:
    w = str(tmp_path / "wh")
    for i in range(4):
        sink_write(w, TABLE, rows("a", i * 10, 10))
    return w


def test_version_prints_the_package_version() -> None:
    proc = _cli("--version", stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == f"fencedlake {__version__}"


def test_output_into_a_closed_pipe_ends_without_a_traceback(wh: str) -> None:
    """`fencedlake wal T | head -0`: the reader is gone before the output is flushed."""
    proc = _cli("wal", TABLE, "--warehouse", wh, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # like `head` exiting before the CLI has written anything
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 141


def test_a_warehouse_without_a_catalog_is_an_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "wharehouse"
    assert main(["status", TABLE, "--warehouse", str(typo)]) == 2
    err = capsys.readouterr().err
    assert f"no fencedlake catalog in {typo}" in err and "--warehouse" in err
    assert not typo.exists()  # a typo does not leave an empty catalog behind


def test_gc_dry_run_reports_what_it_would_truncate_and_deletes_nothing(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _wal_objects(wh)
    assert len(before) == 4
    body = _json(capsys, "gc", TABLE, "--warehouse", wh, "--dry-run")
    assert body["dry_run"] is True and body["wal_truncated"] == 3  # every position below upper - 1
    assert _wal_objects(wh) == before
    body = _json(capsys, "gc", TABLE, "--warehouse", wh)
    assert body["wal_truncated"] == 3 and len(_wal_objects(wh)) == 1


def test_status_reports_ages_as_numbers_and_explains_entries_pending_by_design(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stream's replayed micro-batch answered as a duplicate at the upper leaves a decided entry no commit
    recorded yet (a re-run behind its own barrier commits its answer instead: PROTOCOL.md §5)."""
    stream_batch(wh, TABLE, "q1", 0, rows("s", 100, 5), run="r1", query="q1")
    again = stream_batch(wh, TABLE, "q1", 0, rows("s", 100, 5), run="r1", query="q1")
    assert again.outcome.name == "DUPLICATE" and again.catalog_commits == 0
    body = _json(capsys, "status", TABLE, "--warehouse", wh)
    assert body["pending"] == 1 and body["pending_decided_awaiting_record"] == 1
    assert body["pending_to_apply"] == 0 and body["pending_blocked"] == 0
    assert isinstance(body["oldest_pending_age_s"], float) and 0 <= body["oldest_pending_age_s"] < 600
    assert isinstance(body["since_last_commit_s"], float) and 0 <= body["since_last_commit_s"] < 600
    commit = body["recent_commits"][0]
    assert isinstance(commit["added_rows"], int) and isinstance(commit["latency_ms"], int)
    assert main(["status", TABLE, "--warehouse", wh]) == 0
    assert "are not stuck" in capsys.readouterr().out


def test_a_rerun_answered_duplicate_behind_its_own_barrier_leaves_nothing_pending(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer.id job re-run (no batch id): its DUPLICATE answer rests on its own barrier, so it commits both."""
    sink_write(wh, TABLE, rows("job", 100, 5), writer_id="nightly")
    again = sink_write(wh, TABLE, rows("job", 100, 5), writer_id="nightly")
    assert again.outcome.name == "APPLIED" and again.catalog_commits == 1  # no batch id: nothing to dedupe by
    body = _json(capsys, "status", TABLE, "--warehouse", wh)
    assert body["pending"] == 0 and body["pending_decided_awaiting_record"] == 0


def test_an_idempotent_rerun_is_answered_duplicate_without_a_commit(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """writer.id + writer.batch-id: no barrier (PROTOCOL.md §7), so the re-run's DUPLICATE needs no catalog commit;
    its entry waits, decided, for the next commit to record it, and status says it is not stuck."""
    sink_write(wh, TABLE, rows("job", 100, 5), writer_id="nightly", writer_batch_id=7)
    again = sink_write(wh, TABLE, rows("job", 100, 5), writer_id="nightly", writer_batch_id=7)
    assert again.outcome.name == "DUPLICATE" and again.catalog_commits == 0
    body = _json(capsys, "status", TABLE, "--warehouse", wh)
    assert body["pending"] == 1 and body["pending_decided_awaiting_record"] == 1 and body["pending_blocked"] == 0


def test_gc_dry_run_text_says_what_it_would_do(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The text of a dry run speaks in the conditional: nothing reads as done that was not."""
    assert main(["gc", TABLE, "--warehouse", wh, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "wal_entries_would_truncate: 3" in out and "wal_truncated" not in out
    assert "orphan files (would remove)" in out and "snapshots (would expire)" in out
    assert out.rstrip().endswith("dry run: nothing was changed")


@pytest.mark.parametrize(
    ("argv", "code", "kind"),
    [
        (["status", "db.missing"], 2, "InvalidOptionsError"),
        (["status", "not-a-table-name"], 2, "InvalidOptionsError"),
        (["gc", TABLE, "--grace", "soon"], 2, "InvalidOptionsError"),
        (["fence", TABLE, "bad id!"], 2, "InvalidOptionsError"),
    ],
    ids=["missing-table", "bad-name", "usage-error", "bad-writer"],
)
def test_json_errors_are_json_on_stdout_with_the_exit_status(
    wh: str, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, kind: str
) -> None:
    """With --json every failure, usage errors included, is one JSON object: kind, message, retryable, exit status."""
    assert main([*argv, "--warehouse", wh, "--json"]) == code
    out, err = capsys.readouterr()
    body = json.loads(out)
    assert body["command"] == argv[0]
    assert (body["error"]["kind"], body["error"]["exit_status"], body["error"]["retryable"]) == (kind, code, False)
    assert body["error"]["message"] and err == ""


def test_help_lists_the_exit_statuses_and_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    """fencedlake --help and each command's --help end with the exit statuses; options say their defaults."""
    from pyspark_fenced_sink.ops.cli_args import EXIT_STATUSES

    for argv in (["--help"], ["gc", "--help"], ["compact", "--help"], ["status", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert "exit status:" in out
        for status in EXIT_STATUSES:
            assert f"\n  {status}  " in out
    with pytest.raises(SystemExit):
        main(["gc", "--help"])
    out = capsys.readouterr().out
    entries = re.split(r"\n  (?=-)", out[out.index("\noptions:") : out.index("exit status:")])
    for option in ("--grace", "--retain-last", "--warehouse", "--catalog", "--expire-snapshots-older-than"):
        entry = next(e for e in entries if e.startswith(option))
        assert "default" in entry, entry
