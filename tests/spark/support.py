"""Shared helpers for the Spark end-to-end tests (batch and streaming).

* :func:`start_spark` / :func:`stop_spark`: one small local SparkSession per
  test module (``local[2]``, two shuffle partitions, no UI, UTC session time
  zone). Spark's Python workers run this interpreter (``PYSPARK_PYTHON``), so
  they import the package exactly as the tests do — which is what makes
  ``format("fencedlake")`` resolve without ``spark.dataSource.register``.
* :func:`duckdb_rows`: reads a table's metadata file with DuckDB's iceberg
  extension, independently of pyiceberg (extensions loaded by file path from
  the ``duckdb-extension-*`` wheels: no network).
* :func:`warehouse_listing` / :func:`error_text`: what the bad-input tests
  compare and match on.
* :func:`ids_of` / :func:`assert_exact` / :func:`assert_invariants`: a sink
  table holds exactly the expected ids, and I1-I7 hold on it and its WAL;
  :func:`run_to_end` / :func:`run_expecting_failure` wait for a query.
* :func:`spawn_driver` / :func:`kill_application` / :func:`last_json`: a whole
  Spark application (``python -m tests.spark.streamutil``) in its own process
  group, killed with ``kill -9``; :func:`wait_until` polls a condition.

Nothing here registers the data source: a module that wants to prove
auto-registration must not register it either.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

__all__ = [
    "assert_exact",
    "assert_invariants",
    "duckdb_rows",
    "error_text",
    "ids_of",
    "kill_application",
    "last_json",
    "local_path",
    "run_expecting_failure",
    "run_to_end",
    "spawn_driver",
    "start_spark",
    "stop_spark",
    "wait_until",
    "warehouse_listing",
]

ROOT = Path(__file__).resolve().parents[2]

#: Files the embedded SQLite catalog touches on every read; not "new data" when they change.
_CATALOG_FILES = ("catalog.db", "catalog.db-wal", "catalog.db-shm", "catalog.db-journal", ".catalog.lock")


def start_spark(app_name: str, **conf: str) -> Any:
    """A local[2] SparkSession whose Python workers run this interpreter.

    One per process: a second call would get the running session back from ``getOrCreate`` and its
    caller's ``stop_spark`` would stop the run's shared session under every later module (take the
    ``spark`` fixture of tests/conftest.py, or ``spark.newSession()`` for other settings).

    Raises:
        RuntimeError: a SparkContext is already running in this process.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        raise RuntimeError(
            f"start_spark({app_name!r}): a SparkContext already runs in this process; use the shared `spark` "
            "fixture (tests/conftest.py) or spark.newSession(), never a second session that a module stops"
        )

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark: Any) -> None:
    """Stop the session (the JVM stays up; the next module's session starts faster)."""
    spark.stop()


def local_path(uri: str) -> str:
    """A ``file://`` URI (pyiceberg's locations) as a local path."""
    return uri.removeprefix("file://")


@functools.lru_cache(maxsize=1)
def duckdb_connection() -> Any:
    """A DuckDB connection with the iceberg and avro extensions loaded from their wheels, in UTC (one per process)."""
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{package} is not installed: pip install -e '.[test]'")
        extension = next(Path(spec.origin).parent.rglob("*.duckdb_extension"))
        con.execute(f"LOAD '{extension}'")
    con.execute("SET TimeZone = 'UTC'")
    return con


def duckdb_rows(metadata_location: str, order_by: str = "id") -> list[dict[str, Any]]:
    """Every row of the table version at ``metadata_location`` as DuckDB's iceberg_scan reads it."""
    sql = f"SELECT * FROM iceberg_scan('{local_path(metadata_location)}') ORDER BY {order_by}"
    result: pa.Table = duckdb_connection().cursor().execute(sql).to_arrow_table()
    return result.to_pylist()


def warehouse_listing(warehouse: str | Path) -> set[str]:
    """Every file under the warehouse (relative paths), except the SQLite catalog's own files."""
    root = Path(warehouse)
    if not root.exists():
        return set()
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name not in _CATALOG_FILES}


def error_text(error: BaseException) -> str:
    """The text a user sees for an error raised through Spark (the Python traceback is embedded)."""
    parts = [str(error)]
    desc = getattr(error, "desc", None)
    if desc:
        parts.append(str(desc))
    return "\n".join(parts)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``cond`` every 0.2 s; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def spawn_driver(args: list[str], out: Path, **env: str) -> subprocess.Popen[str]:
    """``python -m tests.spark.streamutil ARGS`` in its own process group (a whole Spark application).

    The test process's own ``FENCEDLAKE_FAILPOINTS`` is not inherited; ``env`` may set one.
    """
    inherited = {k: v for k, v in os.environ.items() if k != "FENCEDLAKE_FAILPOINTS"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.streamutil", *args],
        cwd=ROOT,
        env={**inherited, "PYTHONPATH": str(ROOT), **env},
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill_application(proc: subprocess.Popen[str], paused_pid: int | None = None) -> None:
    """``kill -9`` the driver's process group (driver, JVM) and the paused Python worker (the daemon's group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if paused_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(paused_pid, signal.SIGKILL)
    proc.wait(timeout=60)


def last_json(out: Path) -> dict[str, Any]:
    """The last JSON line a driver subprocess printed (``{}`` if none)."""
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def ids_of(wh: str, table: str) -> list[int]:
    """Every id in the table, sorted (duplicates kept, so they fail a comparison)."""
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    return sorted(embedded_catalog(wh).load_table(table).scan().to_arrow().column("id").to_pylist())


def assert_invariants(wh: str, table: str) -> None:
    """I1-I7 on the real table and its WAL (``testing.invariants.check_table``)."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table
    from pyspark_fenced_sink.options.catalog import catalog_config
    from pyspark_fenced_sink.testing.invariants import check_table

    ctx = open_table(catalog_config(warehouse=wh), table).ctx
    violations = check_table(ctx.port.table(ctx.port.load()), ctx.wal, lambda p: Path(local_path(p)).exists())
    assert violations == []


def assert_exact(wh: str, table: str, expected: list[int]) -> None:
    """The table holds exactly ``expected``: same count, same ids, no duplicates; I1-I7 hold."""
    found = ids_of(wh, table)
    assert len(found) == len(expected), f"{len(found)} rows, expected {len(expected)}"
    assert found == sorted(expected)
    assert len(set(found)) == len(found)
    assert_invariants(wh, table)


def run_to_end(query: Any, timeout: float = 120) -> None:
    """Wait for an availableNow query; re-raise its failure."""
    assert query.awaitTermination(timeout), "query did not finish in time"
    error = query.exception()
    if error is not None:
        raise error


def run_expecting_failure(query: Any, timeout: float = 120) -> str:
    """Wait for a query that must fail; return the error text the user sees."""
    from pyspark.errors import StreamingQueryException

    try:
        finished = query.awaitTermination(timeout)
    except StreamingQueryException as e:
        return error_text(e)
    query.stop()
    pytest.fail(f"query did not fail (finished={finished})")
