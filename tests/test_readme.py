"""Every Python snippet of the README runs as printed, in order: a user's copy-paste works.

All ``python`` blocks run in one fresh directory, in one Python process (one
Spark application, ``local[2]``: the snippets' ``SparkSession.builder.getOrCreate()``
gets it from ``PYSPARK_SUBMIT_ARGS``), in document order and one namespace, as a
user pasting them one after the other into one session would. A ``print(...)  # N``
line promises the number N: each snippet's printed numbers must be exactly its
promised ones. A block preceded by ``<!-- readme-test: not run (reason) -->`` is
skipped — only for what needs a service the hermetic suite has not (a named
catalog, PostgreSQL and S3, a Spark Connect server); ``integration/test_connect.py``
runs the Quickstart through a Connect server. Shell blocks are command references;
the CLI's own tests run the commands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
#: The documents whose snippets run, in this order (a page moved out of the README joins this list).
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "SEMANTICS.md"]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_NOT_RUN = re.compile(r"<!-- readme-test: not run \((.+?)\) -->\s*$")
_PROMISE = re.compile(r"^\s*print\(.*\)\s+#\s*(-?\d+)\s*$")
#: Blocks that may be skipped at most (each needs a service the hermetic suite lacks).
MAX_NOT_RUN = 3

_RUNNER = """
import json, sys
ns = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    print("<<<snippet " + block["where"] + ">>>", flush=True)
    exec(compile(block["code"], block["where"], "exec"), ns)
print("<<<done>>>", flush=True)
"""


@dataclass(frozen=True)
class Snippet:
    """One python block: where it is, its code, and why it is not run ("" if it is)."""

    where: str
    code: str
    not_run: str

    @property
    def promised(self) -> list[str]:
        """The numbers its ``print(...)  # N`` lines promise, in order."""
        return [m.group(1) for line in self.code.splitlines() if (m := _PROMISE.match(line))]


def snippets() -> list[Snippet]:
    """Every python block of :data:`DOCUMENTS`, in order."""
    out = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            reason = _NOT_RUN.search(before)
            out.append(Snippet(f"{path.name}:{line}", match.group(1), reason.group(1) if reason else ""))
    return out


def test_only_snippets_needing_a_service_are_skipped() -> None:
    """Skips are few, each with its reason, and never the Quickstart."""
    found = snippets()
    skipped = [s for s in found if s.not_run]
    assert len(found) >= 12 and len(skipped) <= MAX_NOT_RUN, [s.where for s in skipped]
    assert all(re.search(r"needs .*(server|catalog|endpoint)", s.not_run) for s in skipped), skipped
    assert not found[0].not_run and "tune_session(spark)" in found[0].code


def _run(blocks: list[Snippet], cwd: Path) -> dict[str, list[str]]:
    """Run ``blocks`` in one process in ``cwd``; each snippet's stdout lines (fails the test on an error)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for name in ("FENCEDLAKE_WAREHOUSE", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(name, None)
    env["PYSPARK_SUBMIT_ARGS"] = "--master local[2] --conf spark.ui.enabled=false pyspark-shell"
    payload = json.dumps([{"where": b.where, "code": b.code} for b in blocks])
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=payload,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    outputs: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        marker = re.fullmatch(r"<<<snippet (.+)>>>", line)
        if marker:
            current = marker.group(1)
            outputs[current] = []
        elif current is not None and line != "<<<done>>>":
            outputs[current].append(line)
    assert proc.returncode == 0 and "<<<done>>>" in proc.stdout, f"snippet {current} failed:\n{proc.stderr[-6000:]}"
    return outputs


def test_every_snippet_runs_as_printed_in_order(tmp_path: Path) -> None:
    """The README, pasted block by block into one fresh session, runs without an error and prints the numbers
    it promises; the Quickstart's table lands in ./fencedlake-warehouse of the program's directory."""
    blocks = [s for s in snippets() if not s.not_run]
    outputs = _run(blocks, tmp_path)
    for block in blocks:
        printed = [line.strip() for line in outputs[block.where] if re.fullmatch(r"-?\d+", line.strip())]
        assert printed == block.promised, f"{block.where} printed {printed}, promises {block.promised}"
    assert sum(len(b.promised) for b in blocks) >= 5
    assert (tmp_path / "fencedlake-warehouse" / "catalog.db").is_file()
    assert (tmp_path / "lake" / "catalog.db").is_file()
