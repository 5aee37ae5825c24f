"""``warm_workers`` / ``tune_session(writers=N)``: the planning and commit pools hold N settled workers before N writes.

The rendezvous is tested with threads (each arrival is its own file, so threads
stand in for Spark's worker processes); the pools with the module's real
SparkSession, by listing the Python worker processes Spark's daemons forked.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import activate_session, tune_session, warm_workers
from pyspark_fenced_sink.errors import FencedLakeError, InvalidOptionsError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark import warmup
from pyspark_fenced_sink.spark.warmup import MAX_WRITERS, WARM_UP, WarmUp, checked_writers


@pytest.fixture
def tmpdir_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rendezvous directories under this test's tmp_path."""
    monkeypatch.setattr(warmup.tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("value", ["0:abc", f"{MAX_WRITERS + 1}:abc", "x:abc", "4:", "4:ab/c", "4", ""])
def test_a_bad_warm_up_spec_is_refused_naming_the_option(value: str) -> None:
    with pytest.raises(InvalidOptionsError, match=WARM_UP):
        WarmUp.parse({WARM_UP: value})


def test_an_ordinary_writes_options_are_no_warm_up() -> None:
    assert WarmUp.parse({"table": "db.t"}) is None
    assert WarmUp.parse({WARM_UP: "4:ab12"}) == WarmUp(4, "ab12")


@pytest.mark.parametrize("writers", [0, -1, MAX_WRITERS + 1, True, 2.0, "4", None])
def test_writers_must_be_an_int_in_range(writers: Any) -> None:
    with pytest.raises(ValueError, match="writers="):
        checked_writers(writers)


def test_tune_session_refuses_bad_writers_before_touching_the_session() -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"tune_session touched spark.{name} before validating writers")

    with pytest.raises(ValueError, match="writers=0"):
        tune_session(Untouchable(), writers=0)


def test_n_workers_meet_at_each_step_and_the_last_one_out_removes_the_rendezvous(tmpdir_here: Path) -> None:
    warm = WarmUp(3, "t1")
    arrived: list[float] = []
    lock = threading.Lock()

    def worker(delay: float) -> float:
        time.sleep(delay)
        with lock:
            arrived.append(time.monotonic())
        warm.meet("plan", seconds=10)
        left_plan = time.monotonic()
        assert warm.directory.exists()  # only the last step removes it
        warm.meet("commit", seconds=10)
        return left_plan

    with ThreadPoolExecutor(3) as pool:
        left = list(pool.map(worker, [0.0, 0.1, 0.3]))
    assert min(left) >= max(arrived) - 0.01  # nobody left the plan step before the third arrived
    assert not warm.directory.exists()


def test_a_step_that_cannot_gather_n_gives_up_and_the_rest_do_not_wait(tmpdir_here: Path) -> None:
    warm = WarmUp(3, "t2")
    t0 = time.monotonic()
    with pytest.raises(FencedLakeError, match="1 of 3 Python workers were in the plan step"):
        warm.meet("plan", seconds=0.3)
    assert 0.3 <= time.monotonic() - t0 < 5
    t1 = time.monotonic()
    with pytest.raises(FencedLakeError, match="2 of 3"):
        warm.meet("plan", seconds=30)  # the first one's mark: no second wait
    assert time.monotonic() - t1 < 1


# ---- with Spark ------------------------------------------------------------------------------------------------

POOLS = ("pyspark.sql.worker.write_into_data_source", "pyspark.sql.worker.commit_data_source_write")
TASKS = "pyspark.worker"  # the executors' pool (local mode: a daemon of the same JVM)


def _pooled_workers(jvm_pid: int) -> dict[str, set[int]]:
    """Per pool: the worker processes its daemon (a child of the JVM) has forked and not reaped."""
    procs: dict[int, tuple[int, str]] = {}
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = status.read_text()
            cmdline = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        procs[int(status.parent.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), cmdline)
    daemons = {pid: cmd.split() for pid, (ppid, cmd) in procs.items() if ppid == jvm_pid and "pyspark.daemon" in cmd}
    return {
        pool: {pid for pid, (ppid, _) in procs.items() if ppid in daemons and daemons[ppid][-1] == pool}
        for pool in (*POOLS, TASKS)
    }


@pytest.fixture
def jvm_pid(spark: Any) -> int:
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to list Spark's Python workers")
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


@pytest.mark.spark
def test_a_warm_up_write_touches_no_table(spark: Any, tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    spark.range(0).write.format("fencedlake").option(WARM_UP, "1:solo").option("warehouse", str(wh)).mode(
        "append"
    ).save("db.t")
    assert not wh.exists() or not any(wh.rglob("*"))


@pytest.mark.spark
def test_a_bad_warm_up_option_fails_the_write_naming_it(spark: Any, tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    with pytest.raises(Exception, match=WARM_UP):
        spark.range(3).write.format("fencedlake").option(WARM_UP, "lots").option("warehouse", str(wh)).mode(
            "append"
        ).save("db.t")
    assert not wh.exists() or not any(wh.rglob("*"))


@pytest.mark.spark
def test_after_warming_n_concurrent_writes_start_no_planning_or_commit_worker(
    spark: Any, jvm_pid: int, tmp_path: Path
) -> None:
    """Six at once (more than any other test of the session runs): the warm-up grows both pools to six, and
    six concurrent writes afterwards are served by the workers it started; the executor workers the
    warm-up's tasks ran in are still there after them (a task that leaves its input unread loses its worker)."""
    n = 6
    result = warm_workers(spark, n)
    assert result["met"] is True and result["writers"] == n
    warmed = _pooled_workers(jvm_pid)
    assert all(len(warmed[pool]) >= n for pool in POOLS), warmed
    wh = str(tmp_path / "wh")

    def write(i: int) -> None:
        spark.range(i * 10, (i + 1) * 10, 1, 1).write.format("fencedlake").option("warehouse", wh).mode("append").save(
            "db.warm"
        )

    with ThreadPoolExecutor(n, initializer=activate_session, initargs=(spark,)) as pool:
        list(pool.map(write, range(n)))
    after = _pooled_workers(jvm_pid)
    assert all(after[pool] <= warmed[pool] for pool in POOLS), (warmed, after)
    assert warmed[TASKS] and warmed[TASKS] <= after[TASKS], (warmed, after)
    table = embedded_catalog(wh).load_table("db.warm")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(n * 10))
