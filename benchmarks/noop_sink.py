"""A Python Arrow data source that only reads its input: the cost of Spark's Python write path itself.

``df.write.format("fencedlake_bench_noop").option("marker", PATH).mode("append").save()``
streams every task's rows to a Python worker as Arrow batches (exactly as for
``fencedlake``), counts them and writes nothing; ``commit()`` writes the total
row count to ``marker`` so the benchmark can check that the rows arrived.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

__all__ = ["NoopDataSource"]


@dataclass(frozen=True)
class _Rows(WriterCommitMessage):
    rows: int


class _NoopWriter(DataSourceArrowWriter):
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def write(self, iterator: Iterator[Any]) -> _Rows:
        return _Rows(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: Sequence[_Rows | None]) -> None:  # type: ignore[override]
        with open(self.marker, "w") as f:
            json.dump({"rows": sum(m.rows for m in messages if m is not None)}, f)


class NoopDataSource(DataSource):
    """Consumes the rows, writes nothing (benchmark transport floor)."""

    @classmethod
    def name(cls) -> str:
        return "fencedlake_bench_noop"

    def writer(self, schema: Any, overwrite: bool) -> _NoopWriter:
        return _NoopWriter(self.options["marker"])
