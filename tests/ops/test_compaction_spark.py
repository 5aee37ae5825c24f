"""Compaction on real Spark: the Python API and the CLI (PROTOCOL.md §5.2).

Small files from several ``df.write.format("fencedlake")`` appends are rewritten by
Spark tasks (one per group) and read back with ``spark.read.format("fencedlake")``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import pyspark_fenced_sink
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.cli import main

pytestmark = pytest.mark.spark

TABLE = "db.compacted"


def small_appends(spark: Any, wh: str, table: str, count: int) -> None:
    for i in range(count):
        df = spark.range(i * 100, i * 100 + 100).selectExpr("id", "CAST(id % 2 AS STRING) AS part")
        df.coalesce(1).write.format("fencedlake").option("warehouse", wh).option("partition-by", "part").mode(
            "append"
        ).save(table)


def read_ids(spark: Any, wh: str, table: str) -> list[int]:
    df = spark.read.format("fencedlake").option("warehouse", wh).load(table)
    return sorted(r.id for r in df.select("id").collect())


def live_files(wh: str, table: str) -> int:
    return len(list(embedded_catalog(wh).load_table(table).scan().plan_files()))


def test_python_api_rewrites_small_files_on_spark_with_the_same_rows(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyspark_fenced_sink.compact: 8 files in 2 partitions -> 2 files, the same 400 rows, a replace snapshot,
    and progress lines while the Spark job runs."""
    from pyspark_fenced_sink.ops import compact as compact_module

    monkeypatch.setattr(compact_module, "PROGRESS_EVERY_S", 0.05)
    caplog.set_level(logging.INFO, logger="pyspark_fenced_sink.ops.compact")
    wh = str(tmp_path / "wh")
    small_appends(spark, wh, TABLE, 4)
    assert live_files(wh, TABLE) == 8
    result = pyspark_fenced_sink.compact(spark, TABLE, min_input_files=3, warehouse=wh)
    assert any("groups rewritten" in r.getMessage() for r in caplog.records)
    assert (result.outcome, result.input_files, result.output_files, result.rows) == ("applied", 8, 2, 400)
    assert read_ids(spark, wh, TABLE) == list(range(400))
    assert live_files(wh, TABLE) == 2
    snapshot = embedded_catalog(wh).load_table(TABLE).current_snapshot()
    assert snapshot.summary.operation.value == "replace"


def test_cli_compacts_with_the_active_session_and_reports_json(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fencedlake compact --dry-run` changes nothing; `compact` replaces the files (exit 0, JSON result)."""
    import json

    wh = str(tmp_path / "wh")
    small_appends(spark, wh, "db.cli", 3)
    assert main(["compact", "db.cli", "--warehouse", wh, "--min-input-files", "2", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert (dry["outcome"], dry["input_files"]) == ("dry-run", 6) and live_files(wh, "db.cli") == 6
    assert main(["compact", "db.cli", "--warehouse", wh, "--min-input-files", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["outcome"] == "applied" and "replaced 6 files by 2" in err
    assert read_ids(spark, wh, "db.cli") == list(range(300))
    assert live_files(wh, "db.cli") == 2


def test_compaction_beside_a_running_streaming_query_keeps_every_row_exactly_once(spark: Any, tmp_path: Path) -> None:
    """A streaming query appends micro-batches while compactions run from the driver: exact rows, invariants hold."""
    from tests.spark.streamutil import input_ids, start_query, write_input
    from tests.spark.support import assert_exact

    wh, inputs = str(tmp_path / "wh"), tmp_path / "in"
    for i in range(8):
        write_input(inputs, f"f{i:02d}", range(i * 10, i * 10 + 10))
    query = start_query(
        spark, input_dir=str(inputs), checkpoint=str(tmp_path / "ck"), warehouse=wh, table="db.stream", writer_id="s"
    )
    outcomes = []
    while query.isActive:
        if embedded_catalog(wh).table_exists("db.stream"):
            outcomes.append(pyspark_fenced_sink.compact(spark, "db.stream", min_input_files=2, warehouse=wh).outcome)
        time.sleep(0.2)
    query.awaitTermination(120)
    assert query.exception() is None
    outcomes.append(pyspark_fenced_sink.compact(spark, "db.stream", min_input_files=2, warehouse=wh).outcome)
    assert "applied" in outcomes
    assert_exact(wh, "db.stream", input_ids(inputs))
