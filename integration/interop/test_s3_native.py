"""Object stores at Spark's native speed: hadoop-aws (S3A) for ``s3://`` tables and streaming checkpoints.

The session has hadoop-aws with the AWS SDK modules of iceberg-aws-bundle (integration/jvm/spark-pom.xml),
``fs.s3.impl`` = S3A and the suite's S3 endpoint (integration/interop/support.py):

* ``read_table(..., native=True)`` on a table whose files are on ``s3://`` reads them with Spark's own
  Parquet reader through S3A, and returns exactly the rows of ``format("fencedlake")`` and pyiceberg;
  ``native="auto"`` goes native too: the session's Hadoop serves ``s3://`` (S3A);
* an upserted ``s3://`` table (position deletes) reads natively with its deletes applied: the same rows as
  pyiceberg, the data source and Iceberg Java's reader;
* a streaming query's checkpoint lives on S3: a query stopped after its first run and restarted from
  the same ``s3://`` checkpoint processes only the new input, and the table holds every row once. On
  Spark 4.0 this is also the sink's row-writer path (no ``DataSourceStreamArrowWriter`` there).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from integration.conftest import Services
from integration.interop.compare import pyiceberg_rows, spark_rows
from integration.interop.support import make_catalog
from integration.interop.tables import frame

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_read_table_reads_s3_files_natively_through_s3a(spark: Any, services: Services, tmp_path: Path) -> None:
    """``read_table(native=True)`` on an ``s3://`` table: Spark's Parquet reader over S3A, the data source's rows."""
    from pyspark_fenced_sink import read_table
    from pyspark_fenced_sink.spark.native_read import plan_native_read

    cat = make_catalog(services, "pg-s3", tmp_path)
    table = f"{cat.namespace}.events"
    options = cat.options(table)
    for day in range(3):
        frame(spark, range(day * 100, day * 100 + 100), day).write.format("fencedlake").mode("append").options(
            **options, **{"partition-by": "day(ts)"}
        ).save()
    read_options = {k: v for k, v in options.items() if k != "table"}

    plan = plan_native_read(spark, table, native=True, **read_options)
    assert plan.native and plan.files and all(p.startswith("s3://") for p in plan.files), plan
    auto = plan_native_read(spark, table, **read_options)
    assert auto.native and auto.files == plan.files, auto  # the session has S3A for s3://: auto goes native

    native = read_table(spark, table, native=True, **read_options)
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()
    expected = spark_rows(spark.read.format("fencedlake").options(**options).load())
    assert spark_rows(native) == expected
    assert expected == pyiceberg_rows(cat.load().load_table(table))
    assert native.count() == 300


def test_an_upserted_s3_table_reads_natively_with_its_deletes_applied(
    spark: Any, services: Services, tmp_path: Path
) -> None:
    """Upserts leave position deletes on ``s3://``: read_table drops the replaced rows natively on this Spark."""
    from pyspark_fenced_sink import read_table
    from pyspark_fenced_sink.spark.native_read import plan_native_read

    cat = make_catalog(services, "pg-s3", tmp_path)
    table = f"{cat.namespace}.upserted"
    options = cat.options(table)
    frame(spark, range(100), 0).write.format("fencedlake").mode("append").options(**options).save()
    for day, ids in ((1, range(50, 150)), (2, range(90, 110))):
        frame(spark, ids, day).write.format("fencedlake").mode("append").options(
            **options, **{"upsert-keys": "id"}
        ).save()
    read_options = {k: v for k, v in options.items() if k != "table"}

    plan = plan_native_read(spark, table, native=True, **read_options)
    assert plan.native and plan.dirty, plan  # data files with position deletes
    native = read_table(spark, table, native=True, **read_options)
    executed = native._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in executed and "BroadcastHashJoin" not in executed  # the bitmap filter
    expected = pyiceberg_rows(cat.load().load_table(table))
    assert spark_rows(native) == expected == spark_rows(spark.read.format("fencedlake").options(**options).load())
    cat.register(spark)
    assert spark_rows(spark.table(cat.spark_name(table))) == expected  # Iceberg Java's reader, the same rows
    assert native.count() == 150


def test_streaming_checkpoint_on_s3_restarts_exactly_once(spark: Any, services: Services, tmp_path: Path) -> None:
    """A query with its checkpoint on ``s3://``, stopped and restarted on new input: every row lands once."""
    import s3fs

    cat = make_catalog(services, "pg-s3", tmp_path)
    table = f"{cat.namespace}.stream"
    source = tmp_path / "in"
    checkpoint = f"s3://{services.s3_bucket}/interop/checkpoints/{uuid.uuid4().hex[:12]}"
    schema = "id BIGINT, name STRING"

    def run() -> None:
        query = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(source))
            .writeStream.format("fencedlake")
            .options(**cat.options(table))
            .option("writer.id", "interop-s3-checkpoint")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300), "the query did not finish"
        assert query.exception() is None, query.exception()

    source.mkdir()

    def add_file(part: int, name: str) -> None:
        ids = list(range(part * 50, part * 50 + 50))
        pq.write_table(
            pa.table({"id": pa.array(ids, pa.int64()), "name": [name] * 50}), source / f"part-{part}.parquet"
        )

    add_file(0, "first")
    add_file(1, "first")
    run()
    add_file(2, "second")
    run()

    ids = sorted(cat.load().load_table(table).scan().to_arrow().column("id").to_pylist())
    assert ids == list(range(150))
    fs = s3fs.S3FileSystem(
        key=services.aws_access_key_id,
        secret=services.aws_secret_access_key,
        endpoint_url=services.s3_endpoint,
        client_kwargs={"region_name": services.aws_region},
        skip_instance_cache=True,
    )
    commits = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{checkpoint.removeprefix('s3://')}/commits"))
    assert [c for c in commits if c] == ["0", "1", "2"], commits  # three micro-batches, committed on S3
