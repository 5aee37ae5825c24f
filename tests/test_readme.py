"""The README's quickstart runs as printed: a user's first copy-paste works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks(section: str, count: int) -> list[str]:
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    blocks = re.findall(r"```python\n(.*?)```", text[start:], re.DOTALL)[:count]
    assert len(blocks) == count, f"README section {section!r} has fewer than {count} python blocks"
    return blocks


def test_the_quickstart_first_snippets_write_tuned_and_read_back(tmp_path: Path) -> None:
    """Copied as is into a fresh directory, the first snippet writes 1,000 rows and reads 1000 back with
    spark.read; the second (pyiceberg, no Spark) then finds the same 1000 rows."""
    snippet, iceberg_snippet = _python_blocks("Quickstart", 2)
    assert "tune_session(spark)" in snippet  # the first thing a user copies makes the session fast
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("FENCEDLAKE_WAREHOUSE", None)
    # The user's SparkSession.builder has no master: give the subprocess the test suite's local[2].
    env["PYSPARK_SUBMIT_ARGS"] = "--master local[2] --conf spark.ui.enabled=false pyspark-shell"
    proc = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "1000"
    assert (tmp_path / "fencedlake-warehouse" / "catalog.db").is_file()
    proc = subprocess.run(
        [sys.executable, "-c", iceberg_snippet], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "1000"
