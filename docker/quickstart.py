"""The README quickstart against the compose stack: Spark writes through Lakekeeper (REST) onto MinIO, then reads back.

Run by the ``quickstart`` service of docker/docker-compose.yml (never run by the project's CI:
there is no Docker engine there). Exits non-zero if the rows read back are not exactly the rows
written, or if a re-run of the same batch id added any.
"""

from __future__ import annotations

import os
import sys

from pyiceberg.catalog import load_catalog
from pyspark.sql import SparkSession

from pyspark_fenced_sink import tune_session

CATALOG = {
    "type": "rest",
    "uri": os.environ.get("FENCEDLAKE_REST_URI", "http://lakekeeper:8181/catalog"),
    "warehouse": os.environ.get("FENCEDLAKE_REST_WAREHOUSE", "fencedlake"),
}


def main() -> int:
    """Write, re-run, read back; 0 if the rows are there exactly once."""
    spark = SparkSession.builder.master("local[2]").appName("fencedlake-quickstart").getOrCreate()
    tune_session(spark)
    df = spark.range(0, 1000).selectExpr("id", "concat('user-', id % 10) AS user")
    writer = df.write.format("fencedlake").mode("append").options(**{f"catalog.{k}": v for k, v in CATALOG.items()})
    for _ in range(2):  # the second run is a retried job: same writer.id and batch id, adds nothing
        writer.option("writer.id", "quickstart").option("writer.batch-id", "1").save("demo.events")
    table = load_catalog("lakekeeper", **CATALOG).load_table("demo.events")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    spark.stop()
    if ids != list(range(1000)):
        print(  # noqa: T201 - a command-line report
            f"quickstart FAILED: read back {len(ids)} rows, {len(set(ids))} distinct",
            file=sys.stderr,
        )
        return 1
    print(  # noqa: T201 - a command-line report
        f"quickstart OK: {len(ids)} rows written once to {table.metadata.location} and read back"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
