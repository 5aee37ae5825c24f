"""The JVM side of the interop suite: pinned versions, the Spark session with Iceberg's runtime, catalogs.

One Iceberg catalog is described once (:class:`Catalog`) and used three ways: as the sink's
``catalog``/``catalog.<key>`` options (pyiceberg), as a Spark catalog of Iceberg's ``SparkCatalog``
(``spark.sql.catalog.<name>.*``, registered at run time), and as a pyiceberg catalog for the
reference reads. For SQL catalogs the two sides share the catalog *name*: Iceberg's ``JdbcCatalog``
and pyiceberg's ``SqlCatalog`` both key their rows by it, so a Spark catalog named like the
pyiceberg one sees exactly its tables.

Targets (``CATALOGS``):

* ``sqlite-local``    -- one SQLite file: pyiceberg ``SqlCatalog`` / Iceberg ``JdbcCatalog`` (sqlite-jdbc),
  warehouse on the local file system (Iceberg reads it through Spark's Hadoop);
* ``pg-s3``           -- the suite's PostgreSQL: ``SqlCatalog`` / ``JdbcCatalog`` (PostgreSQL JDBC), warehouse
  and WAL on the suite's S3 server (pyiceberg's and fencedlake's s3fs / Iceberg's ``S3FileIO``);
* ``iceberg-rest-s3`` -- Iceberg's own REST fixture (integration/services/iceberg_rest.sh) for both sides.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from integration.conftest import Services, iceberg_rest_properties

ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = ROOT / "integration" / "jvm" / "versions.env"
CATALOGS = ("sqlite-local", "pg-s3", "iceberg-rest-s3")
FULL = os.environ.get("FENCEDLAKE_INTEROP_FULL", "") == "1" or os.environ.get("FENCEDLAKE_IT_FULL", "") == "1"

__all__ = [
    "CATALOGS",
    "FULL",
    "Catalog",
    "jdbc_postgres",
    "make_catalog",
    "spark_classpath",
    "start_interop_spark",
    "versions",
]


def versions() -> dict[str, str]:
    """integration/jvm/versions.env as a dict (KEY=VALUE lines; ``#`` comments)."""
    out = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def spark_classpath() -> list[str]:
    """The Spark-side jars (integration/jvm/fetch.sh set ``spark``; fetched now if the cache lacks them)."""
    proc = subprocess.run(
        [str(ROOT / "integration" / "jvm" / "fetch.sh"), "--classpath", "spark"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"integration/jvm/fetch.sh --classpath spark failed:\n{proc.stderr[-2000:]}", pytrace=False)
    return [p for p in proc.stdout.strip().split(":") if p.endswith(".jar")]


def _check_pyspark() -> None:
    import pyspark

    want = versions()["PYSPARK_VERSION"]
    if pyspark.__version__ != want:
        pytest.fail(
            f"the interop suite needs pyspark {want} (Iceberg's Spark {versions()['SPARK_MINOR']} runtime), "
            f"this interpreter has {pyspark.__version__}: run it through integration/interop/run.sh",
            pytrace=False,
        )


def start_interop_spark(services: Services, app_name: str) -> Any:
    """A local[2] SparkSession with Iceberg's runtime, S3A for ``s3://`` paths, and fencedlake (tuned)."""
    import sys

    _check_pyspark()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from pyspark_fenced_sink import tune_session

    endpoint = urlsplit(services.s3_endpoint)
    conf = {
        "spark.jars": ",".join(spark_classpath()),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        # Spark's own file sources (read_table's native path, streaming checkpoints) on the S3 server:
        # hadoop-aws's S3A for both s3:// and s3a://, with the suite's endpoint and dummy keys.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": services.s3_endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": services.aws_region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.scheme == "https").lower(),
        "spark.hadoop.fs.s3a.access.key": services.aws_access_key_id,
        "spark.hadoop.fs.s3a.secret.key": services.aws_secret_access_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tune_session(spark)
    return spark


@dataclass
class Catalog:
    """One Iceberg catalog as both implementations see it.

    Attributes:
        target: Which of :data:`CATALOGS`.
        name: The catalog's name: pyiceberg's and Spark's (``spark.sql.catalog.<name>``).
        pyiceberg: pyiceberg catalog properties (the sink's ``catalog.<key>`` options without the prefix).
        spark: Iceberg ``SparkCatalog`` properties (``spark.sql.catalog.<name>.<key>``).
        namespace: A fresh namespace for this catalog's tables.
    """

    target: str
    name: str
    pyiceberg: dict[str, str]
    spark: dict[str, str]
    namespace: str = field(default_factory=lambda: f"ns_{uuid.uuid4().hex[:10]}")

    def options(self, table: str) -> dict[str, str]:
        """The sink's options for ``table`` (``namespace.name`` within this catalog)."""
        return {"table": table, "catalog": self.name, **{f"catalog.{k}": v for k, v in self.pyiceberg.items()}}

    def spark_name(self, table: str) -> str:
        """``table`` as Spark SQL names it through Iceberg's catalog."""
        return f"{self.name}.{table}"

    def register(self, spark: Any) -> None:
        """Add this catalog to ``spark`` (Spark loads a catalog on first use, so run-time conf works)."""
        spark.conf.set(f"spark.sql.catalog.{self.name}", "org.apache.iceberg.spark.SparkCatalog")
        for key, value in self.spark.items():
            spark.conf.set(f"spark.sql.catalog.{self.name}.{key}", value)

    def load(self) -> Any:
        """A pyiceberg catalog (a fresh one: no cached state)."""
        from pyiceberg.catalog import load_catalog

        return load_catalog(self.name, **self.pyiceberg)


def _s3_io(services: Services) -> tuple[dict[str, str], dict[str, str]]:
    """(pyiceberg, Iceberg Java) FileIO properties for the suite's S3 server."""
    py = {
        "s3.endpoint": services.s3_endpoint,
        "s3.access-key-id": services.aws_access_key_id,
        "s3.secret-access-key": services.aws_secret_access_key,
        "s3.region": services.aws_region,
        "s3.path-style-access": "true",
    }
    java = {
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": services.s3_endpoint,
        "s3.access-key-id": services.aws_access_key_id,
        "s3.secret-access-key": services.aws_secret_access_key,
        "client.region": services.aws_region,
        "s3.path-style-access": "true",
    }
    return py, java


def jdbc_postgres(pg_uri: str) -> dict[str, str]:
    """Iceberg JdbcCatalog properties for a ``postgresql+psycopg2://user:pw@host:port/db`` URI."""
    parts = urlsplit(pg_uri)
    return {
        "uri": f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}",
        "jdbc.user": unquote(parts.username or ""),
        "jdbc.password": unquote(parts.password or ""),
    }


def make_catalog(services: Services, target: str, tmp: Path, *, cache: bool = False) -> Catalog:
    """A fresh catalog on ``target`` (a unique name; its own SQLite file or warehouse prefix).

    ``cache``: Iceberg's SparkCatalog caches loaded tables (``cache-enabled``, its default, 30 s), so a
    table another process changed (the sink commits in a Python worker) reads stale until ``REFRESH
    TABLE``; off (the default here), every query loads the current metadata. Iceberg's row-level
    writes (MERGE, UPDATE, DELETE) need the cache: without it a concurrent commit fails them with
    "Runtime file filtering is not possible: the table has been concurrently modified".
    """
    name = f"ice_{target.split('-')[0]}_{uuid.uuid4().hex[:8]}"
    spark: dict[str, str] = {"cache-enabled": str(cache).lower()}
    if target == "sqlite-local":
        warehouse = tmp / f"{name}-warehouse"
        warehouse.mkdir(parents=True)
        db = warehouse / "catalog.db"
        return Catalog(
            target,
            name,
            {"type": "sql", "uri": f"sqlite:///{db}?timeout=60", "warehouse": warehouse.as_uri()},
            {**spark, "type": "jdbc", "uri": f"jdbc:sqlite:{db}", "warehouse": warehouse.as_uri()},
        )
    if target == "pg-s3":
        py_io, java_io = _s3_io(services)
        warehouse = f"s3://{services.s3_bucket}/interop/{name}"
        return Catalog(
            target,
            name,
            {"type": "sql", "uri": services.pg_uri, "warehouse": warehouse, **py_io},
            {**spark, "type": "jdbc", **jdbc_postgres(services.pg_uri), "warehouse": warehouse, **java_io},
        )
    if target == "iceberg-rest-s3":
        rest = iceberg_rest_properties(services)
        return Catalog(
            target,
            name,
            rest,
            {
                **spark,
                "type": "rest",
                "uri": rest["uri"],
                "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "s3.endpoint": services.s3_endpoint,
                "s3.path-style-access": "true",
                "client.region": services.aws_region,
            },
        )
    raise pytest.UsageError(f"unknown interop catalog {target!r}: expected one of {CATALOGS}")
