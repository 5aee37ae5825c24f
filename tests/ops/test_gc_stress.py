"""``gc`` in a loop while batch and streaming writers append and get killed (I6; issue: operations).

Writer lanes, each a sequence of OS processes running the sink's real driver
and executor code (``python -m pyspark_fenced_sink.testing.harness``):

* stable batch lanes: batches 0..N-1 with ``writer.id`` + ``writer.batch-id``;
  a process may be killed (``crash`` fail point) at any protocol step, and the
  lane re-runs the same batch in a new process until it succeeds — as a job
  scheduler would;
* streaming lanes: runs of micro-batches; a run may be killed anywhere, and
  the next run resumes from the lane's "checkpoint" (the last batch whose
  commit returned), replaying the batch in flight — as Spark does;
* an anonymous lane appending fresh rows.

Meanwhile ``fencedlake gc --grace 0s`` runs back to back in its own processes,
itself killed now and then between its steps. At the end: each batch of each
lane is in the table exactly once, every successful anonymous write once,
nothing else; I1-I7 hold; and after a last ``gc`` the WAL holds nothing below
the upper and no unreferenced data file is left (bounded WAL and orphans).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.testing.harness import rows, sink_write, table_ids
from pyspark_fenced_sink.testing.invariants import check_table
from tests.profile import FULL

ROOT = Path(__file__).resolve().parents[2]
TABLE = "db.gcstress"
#: How long the lanes and the gc loop run before they wind down. The CI profile runs 25 s: every lane and the
#: gc loop still run several processes, each killed at a random step with the same odds (35 % of the writers',
#: 20 % of gc's), and the checks after it are the same; ``FENCEDLAKE_FULL=1`` runs 45 s (more processes and
#: kills, a longer WAL for gc). ``FENCEDLAKE_GC_STRESS_SECONDS`` sets it in either profile.
SECONDS = float(os.environ.get("FENCEDLAKE_GC_STRESS_SECONDS", "45" if FULL else "25"))
ROWS = 5
KILL_POINTS = [
    "executor.after-file-written",
    "driver.after-open",
    "commit.after-wal-put",
    "commit.before-catalog-commit",
    "commit.after-manifests-written",
    "commit.after-catalog-commit",
]
GC_KILL_POINTS = ["gc.after-barrier", "gc.before-delete"]


def _run(args: list[str], failpoint: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FENCEDLAKE_FAILPOINTS", None)
    if failpoint:
        env["FENCEDLAKE_FAILPOINTS"] = f"{failpoint}=crash"
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode in (0, 86), proc.stderr[-3000:]
    lines = proc.stdout.splitlines() if args[1] == "pyspark_fenced_sink.testing.harness" else []
    return proc.returncode, [json.loads(line) for line in lines if line.startswith("{")]


class Lanes:
    def __init__(self, wh: str, deadline: float, rng: random.Random) -> None:
        self.wh, self.deadline, self.rng = wh, deadline, rng
        self.expected: list[int] = []
        self.kills = 0
        self.expired = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def _kill(self) -> str | None:
        with self.lock:
            return self.rng.choice(KILL_POINTS) if self.rng.random() < 0.35 else None

    def stable_batch(self, lane: int) -> None:
        """Batches until the deadline; a killed batch is re-run until it succeeds, even past the deadline."""
        writer, base = f"etl{lane}", 1_000_000 * (lane + 1)
        batch = 0
        while time.monotonic() < self.deadline:
            while True:
                opts = json.dumps({"writer.id": writer, "writer.batch-id": batch})
                point = self._kill() if time.monotonic() < self.deadline else None
                code, out = _run(
                    [
                        "-m",
                        "pyspark_fenced_sink.testing.harness",
                        self.wh,
                        TABLE,
                        writer,
                        str(base + batch * ROWS),
                        str(ROWS),
                        opts,
                    ],
                    point,
                )
                if code == 0:
                    break
                with self.lock:
                    self.kills += 1
            if not out[0]["ok"] or out[0]["outcome"] not in ("APPLIED", "DUPLICATE"):
                self.errors.append(f"{writer} batch {batch}: {out[0]}")
                return
            with self.lock:
                self.expected.extend(range(base + batch * ROWS, base + (batch + 1) * ROWS))
            batch += 1

    def streaming(self, lane: int) -> None:
        """Runs of 3 micro-batches until the deadline, then one clean run that replays the batch in flight."""
        writer, base = f"stream{lane}", 5_000_000 * (lane + 1)
        checkpoint = -1  # last batch whose commit returned (Spark's commit log)
        clean_runs = 0
        while clean_runs == 0:
            point = self._kill() if time.monotonic() < self.deadline else None
            clean_runs += time.monotonic() >= self.deadline
            code, out = _run(
                [
                    "-m",
                    "pyspark_fenced_sink.testing.harness",
                    "--stream",
                    self.wh,
                    TABLE,
                    writer,
                    str(base),
                    str(ROWS),
                    "{}",
                    str(checkpoint + 1),
                    "3" if point else "1",
                ],
                point,
            )
            for line in out:
                if not line["ok"]:
                    self.errors.append(f"{writer}: {line}")
                    return
                checkpoint = line["batch"]
            with self.lock:
                self.kills += code == 86
        with self.lock:
            self.expected.extend(range(base, base + (checkpoint + 1) * ROWS))

    def anonymous(self) -> None:
        """Never killed; with gc's grace of 0 s a write may be expired (rejected, zero rows): not acknowledged."""
        start = 9_000_000
        while time.monotonic() < self.deadline:
            _, out = _run(
                ["-m", "pyspark_fenced_sink.testing.harness", self.wh, TABLE, "anon", str(start), str(ROWS), "{}", "2"]
            )
            for i, line in enumerate(out):
                if line["ok"]:
                    with self.lock:
                        self.expected.extend(range(start + i * ROWS, start + (i + 1) * ROWS))
                elif line["error"] == "WriteRejectedError" and "expired" in line["message"]:
                    self.expired += 1
                else:
                    self.errors.append(f"anonymous: {line}")
                    return
            start += 2 * ROWS

    def gc_loop(self) -> None:
        while time.monotonic() < self.deadline:
            with self.lock:
                point = self.rng.choice(GC_KILL_POINTS) if self.rng.random() < 0.2 else None
            code, _ = _run(
                ["-m", "pyspark_fenced_sink.ops.cli", "gc", TABLE, "--warehouse", self.wh, "--grace", "0s", "--json"],
                point,
            )
            with self.lock:
                self.kills += code == 86


def _unreferenced(wh: str) -> list[str]:
    table = embedded_catalog(wh).load_table(TABLE)
    live = {p.removeprefix("file://") for p in table.inspect.files().column("file_path").to_pylist()}
    return [str(p) for p in Path(wh).rglob("*.parquet") if str(p) not in live]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_gc_loop_with_writers_and_kills_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    wh = str(tmp_path)
    sink_write(wh, TABLE, rows("seed", 0, 1))
    lanes = Lanes(wh, time.monotonic() + SECONDS, random.Random(7))

    def guarded(fn: Any, *args: Any) -> threading.Thread:
        def body() -> None:
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - the test asserts errors == []
                lanes.errors.append(f"{fn.__name__}{args}: {type(e).__name__}: {e}")

        return threading.Thread(target=body)

    threads = [guarded(lanes.stable_batch, i) for i in range(2)] + [guarded(lanes.streaming, i) for i in range(2)]
    threads += [guarded(lanes.anonymous), guarded(lanes.gc_loop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=SECONDS + 600)
    assert lanes.errors == []
    ctx = open_table(catalog_config(warehouse=wh), TABLE).ctx
    recover(ctx)
    ids = table_ids(wh, TABLE)
    assert len(ids) == len(set(ids)), "duplicated rows"
    expected = sorted([0, *lanes.expected])
    assert sorted(set(expected) - set(ids))[:10] == [], "lost rows"
    assert sorted(set(ids) - set(expected))[:10] == [], "rows of a write that was never acknowledged"
    assert ids == expected
    table = ctx.port.table(ctx.load())
    exists = lambda p: Path(p.removeprefix("file://")).exists()  # noqa: E731
    assert check_table(table, ctx.wal, exists, truncated=True) == []
    # Bounded: one more commit, then gc leaves only the entry at upper - 1 below the upper, and no orphan file.
    sink_write(wh, TABLE, rows("last", 99_999_999, 1))
    subprocess.run(
        [sys.executable, "-m", "pyspark_fenced_sink.ops.cli", "gc", TABLE, "--warehouse", wh, "--grace", "0s"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    upper = ctx.load().state.upper
    assert [s for s in ctx.wal.scan(0) if s < upper] == [upper - 1]
    assert _unreferenced(wh) == []
    print(f"gc stress: {len(ids)} rows, {lanes.kills} kills, {lanes.expired} anonymous writes expired, upper {upper}")
