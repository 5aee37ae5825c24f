"""fencedlake on a Spark standalone cluster: a master and two workers on 127.0.0.1, each its own JVM.

pip's pyspark has no ``start-master.sh``/``start-worker.sh``; ``integration/services/cluster.sh``
starts them with ``bin/spark-class`` (for this module only). One application
(``integration/cluster_app.py``) runs a batch writer and a streaming writer into one table
on PostgreSQL + S3 at once; while their tasks run, worker 1 is killed with its executors and
their Python workers (``kill -9`` of its process group: the machine goes away). Spark re-runs
the lost tasks on worker 2. Afterwards the table holds every row exactly once and the
protocol's invariants hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.conftest import Services
from integration.sparkservices import STATE, master_url, pid_of, service, start
from integration.targets import target_options
from pyspark_fenced_sink.iceberg.catalogs import load_catalog, open_table
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.testing.invariants import check_table

ROOT = Path(__file__).resolve().parents[1]
BATCH_ROWS = 40_000
STREAM_FILES, STREAM_ROWS = 6, 500


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The master's URL; master and workers run for this module only."""
    try:
        start("cluster.sh")
        yield master_url()
    finally:
        service("cluster.sh", "stop")


def _catalog(options: dict[str, str]) -> object:
    props = {k.removeprefix("catalog."): v for k, v in options.items() if k.startswith("catalog.")}
    return catalog_config(None, props)


def _stream_input(directory: Path) -> list[int]:
    directory.mkdir(parents=True)
    ids = []
    for f in range(STREAM_FILES):
        rows = range(1_000_000 + f * STREAM_ROWS, 1_000_000 + (f + 1) * STREAM_ROWS)
        (directory / f"part-{f}.json").write_text("".join(json.dumps({"id": i, "src": "stream"}) + "\n" for i in rows))
        ids.extend(rows)
    return ids


def _lines(proc: subprocess.Popen[str], deadline: float) -> Iterator[dict[str, object]]:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return
        if line.startswith("{"):
            yield json.loads(line)


def test_a_worker_killed_mid_write_loses_and_duplicates_nothing(
    cluster: str, services: Services, tmp_path: Path
) -> None:
    """Batch + streaming writers at once on two workers; worker 1 dies mid-write; exact rows after."""
    options = target_options(services, "pg-s3")
    stream_ids = _stream_input(tmp_path / "input")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.update(PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
    app = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "integration.cluster_app",
            cluster,
            json.dumps(options),
            str(tmp_path / "input"),
            str(tmp_path / "checkpoint"),
            str(BATCH_ROWS),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "app.log").open("w"),
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        events = _lines(app, deadline)
        started = next(e for e in events if e.get("event") == "batch-started")
        time.sleep(6)  # 8 batch tasks of >= 3 s each on 2 single-core workers: both are busy now
        worker = pid_of("cluster/worker-1")
        os.killpg(worker, signal.SIGKILL)  # the worker, its executors and their Python workers
        done = next(e for e in events if e.get("event") == "done")
        assert app.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, (tmp_path / "app.log").read_text()[-4000:]
    finally:
        if app.poll() is None:
            os.killpg(app.pid, signal.SIGKILL)
    assert started and done["errors"] == {}
    executor_dirs = list((STATE / "cluster" / "worker-1" / "work").glob("app-*/*"))
    assert executor_dirs, "worker 1 never ran an executor of the application: the kill proved nothing"
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)

    config = _catalog(options)
    table = load_catalog(config).load_table(options["table"])
    rows = table.scan().to_arrow()
    ids = sorted(rows.column("id").to_pylist())
    assert len(ids) == BATCH_ROWS + len(stream_ids), "rows lost or duplicated"
    assert ids == sorted([*range(BATCH_ROWS), *stream_ids])
    ctx = open_table(config, options["table"]).ctx
    live = ctx.port.table(ctx.port.load())
    assert check_table(live, ctx.wal, lambda p: bool(live.io.new_input(p).exists())) == []
