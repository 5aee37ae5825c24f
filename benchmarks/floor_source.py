"""A bare Python Arrow data source over Parquet files: the cost of Spark's Python read path itself.

``spark.read.format("fencedlake_bench_floor").option("schema", DDL).option("paths", JSON list)
.option("splits", N).load()`` reads the files with plain pyarrow
(``ParquetFile.iter_batches``, the files dealt round-robin over ``N`` splits)
and hands Spark the batches cast to its Arrow schema: no catalog, no
planning, no Iceberg projection. Whatever a Python source does, Spark's
transport (Arrow IPC from the Python worker, Arrow -> rows in the JVM) costs
at least this much.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

__all__ = ["FloorDataSource"]


class _Files(InputPartition):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths


class _FloorReader(DataSourceReader):
    def __init__(self, paths: list[str], schema_json: str, splits: int) -> None:
        self.paths, self.schema_json, self.splits = paths, schema_json, splits

    def partitions(self) -> list[_Files]:  # type: ignore[override]
        return [_Files(self.paths[i :: self.splits]) for i in range(self.splits)]

    def read(self, partition: Any) -> Iterator[Any]:
        import pyarrow.parquet as pq

        from pyspark_fenced_sink.read.task import spark_arrow_schema

        target = spark_arrow_schema(self.schema_json)
        for path in partition.paths:
            for batch in pq.ParquetFile(path.removeprefix("file://")).iter_batches():
                yield batch.select(target.names).cast(target)


class FloorDataSource(DataSource):
    """Plain pyarrow Parquet reads through Spark's Python data source API (benchmark transport floor)."""

    @classmethod
    def name(cls) -> str:
        return "fencedlake_bench_floor"

    def schema(self) -> str:
        return str(self.options["schema"])

    def reader(self, schema: Any) -> _FloorReader:
        return _FloorReader(json.loads(self.options["paths"]), schema.json(), int(self.options.get("splits", "2")))
