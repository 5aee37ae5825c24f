"""Writing from several Python threads, using only what the README shows (``activate_session``)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import activate_session
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from tests.spark.support import error_text

pytestmark = pytest.mark.spark


def _write(spark: Any, wh: str, table: str, start: int, count: int) -> None:
    frame = spark.range(start, start + count).selectExpr("id", f"'{table}' AS source")
    frame.write.format("fencedlake").mode("append").option("warehouse", wh).save(table)


def _ids(wh: str, table: str) -> list[int]:
    return sorted(embedded_catalog(wh).load_table(table).scan().to_arrow().column("id").to_pylist())


def test_a_thread_without_an_active_session_fails_with_data_source_not_found(spark: Any, tmp_path: Path) -> None:
    """The failure users search for: a plain worker thread cannot resolve format("fencedlake")."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _write(spark, str(tmp_path), "db.bare", 0, 3)
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "DATA_SOURCE_NOT_FOUND" in error_text(errors[0])


def test_eight_concurrent_batch_writes_from_a_thread_pool(spark: Any, tmp_path: Path) -> None:
    """A pool whose initializer activates the session: 8 writes, 4 tables, 2 writers each; every row once."""
    wh = str(tmp_path)
    jobs = [(f"db.t{i % 4}", i * 100) for i in range(8)]
    with ThreadPoolExecutor(8, initializer=activate_session, initargs=(spark,)) as pool:
        list(pool.map(lambda job: _write(spark, wh, job[0], job[1], 100), jobs))
    for t in range(4):
        expected = sorted(i for start in (t * 100, (t + 4) * 100) for i in range(start, start + 100))
        assert _ids(wh, f"db.t{t}") == expected


def test_two_streaming_queries_started_from_threads(spark: Any, tmp_path: Path) -> None:
    """Two writeStream queries, each started from its own pool thread, land their rows once."""
    wh = str(tmp_path / "wh")

    def start(n: int) -> Any:
        inp = tmp_path / f"in{n}"
        inp.mkdir()
        (inp / "part.json").write_text("\n".join(json.dumps({"id": n * 1000 + i}) for i in range(50)))
        return (
            spark.readStream.schema("id long")
            .json(str(inp))
            .writeStream.format("fencedlake")
            .option("warehouse", wh)
            .option("writer.id", f"stream-{n}")
            .option("checkpointLocation", str(tmp_path / f"chk{n}"))
            .trigger(availableNow=True)
            .start(f"db.s{n}")
        )

    with ThreadPoolExecutor(2, initializer=activate_session, initargs=(spark,)) as pool:
        queries = list(pool.map(start, range(2)))
    for query in queries:
        query.awaitTermination(300)
        assert query.exception() is None
    for n in range(2):
        assert _ids(wh, f"db.s{n}") == list(range(n * 1000, n * 1000 + 50))
