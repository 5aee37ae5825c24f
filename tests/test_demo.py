"""`make demo` keeps working: concurrent Spark writers, an idempotent re-run, the exactly-once check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def test_demo_small_run_reports_exactly_once(tmp_path: Path) -> None:
    """The demo, scaled down, exits 0 and reports every writer's rows and the re-run as a duplicate."""
    warehouse = tmp_path / "wh"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyspark_fenced_sink.demo",
            "--writers",
            "2",
            "--batches",
            "2",
            "--rows",
            "300",
            "--warehouse",
            str(warehouse),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"demo exited {proc.returncode}\n{out}\n{proc.stderr[-4000:]}"
    assert "OK: exactly once -- 1200 rows from 2 concurrent writers x 2 batches" in out
    for writer in ("writer-0", "writer-1"):
        assert re.search(rf"^  {writer}\s+600\s+600$", out, re.MULTILINE), f"{writer}: expected 600 of 600 rows\n{out}"
    assert "DUPLICATE" in out
    assert (warehouse / "catalog.db").exists()


def test_demo_refuses_a_non_empty_warehouse(tmp_path: Path) -> None:
    """A warehouse that already holds something is refused before Spark starts (exit status non-zero)."""
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "catalog.db").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "pyspark_fenced_sink.demo", "--warehouse", str(tmp_path / "wh")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "is not empty" in proc.stderr


def test_the_closing_hint_runs_the_cli_from_a_shell_without_the_venv(tmp_path: Path) -> None:
    """The demo's "Inspect:" line names the fencedlake script of this interpreter's environment by path, so
    it works in a shell that never activated the venv: run it with a PATH that holds no fencedlake."""
    import shlex

    from pyspark_fenced_sink.demo import cli_command

    command = shlex.split(cli_command())
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([*command, "--version"], cwd=Path.cwd(), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fencedlake ")
