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

Nothing here registers the data source: a module that wants to prove
auto-registration must not register it either.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["duckdb_rows", "error_text", "local_path", "start_spark", "stop_spark", "warehouse_listing"]

#: Files the embedded SQLite catalog touches on every read; not "new data" when they change.
_CATALOG_FILES = ("catalog.db", "catalog.db-wal", "catalog.db-shm", "catalog.db-journal", ".catalog.lock")


def start_spark(app_name: str, **conf: str) -> Any:
    """A local[2] SparkSession whose Python workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

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
