"""``tune_session``: what it changes in a real SparkSession, and that Spark's Arrow transport obeys it.

Each test works on its own ``spark.newSession()`` (same SparkContext, its own
SQL conf), so the module's session keeps Spark's defaults. The batch-size test
reads the sizes of the Arrow batches a Python function receives through
a Python data source's writer, the path that feeds ``format("fencedlake")``
(Spark runs the writer as a ``mapInArrow`` function:
``pyspark/sql/worker/write_into_data_source.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import tune_session
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.spark.tuning import (
    ARROW_MAX_BYTES_PER_BATCH,
    PYTHON_FILTER_PUSHDOWN,
    UNBOUNDED_BATCH_BYTES,
    _bytes,
)

pytestmark = pytest.mark.spark

UNBOUNDED = str(UNBOUNDED_BATCH_BYTES)


@pytest.fixture
def session(spark: Any) -> Iterator[Any]:
    """A new session of the module's SparkContext, active while the test runs (Spark resolves formats there)."""
    jvm_session = spark._jvm.org.apache.spark.sql.SparkSession
    new = spark.newSession()
    jvm_session.setActiveSession(new._jsparkSession)
    yield new
    jvm_session.setActiveSession(spark._jsparkSession)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("67108864b", 64 * 2**20),
        ("64m", 64 * 2**20),
        ("64MB", 64 * 2**20),
        ("2147483647", UNBOUNDED_BATCH_BYTES),
        ("1k", 1024),
        ("lots", None),
        ("", None),
    ],
)
def test_byte_sizes_parse_like_spark(text: str, expected: int | None) -> None:
    assert _bytes(text) == expected


def test_default_session_is_tuned_once(session: Any) -> None:
    assert _bytes(session.conf.get(ARROW_MAX_BYTES_PER_BATCH)) == 64 * 2**20  # Spark's default, as the module says
    assert session.conf.get(PYTHON_FILTER_PUSHDOWN) == "false"  # Spark's default
    assert tune_session(session) == {ARROW_MAX_BYTES_PER_BATCH: UNBOUNDED, PYTHON_FILTER_PUSHDOWN: "true"}
    assert session.conf.get(ARROW_MAX_BYTES_PER_BATCH) == UNBOUNDED
    assert session.conf.get(PYTHON_FILTER_PUSHDOWN) == "true"
    assert tune_session(session) == {}
    assert session.conf.get(ARROW_MAX_BYTES_PER_BATCH) == UNBOUNDED


def test_a_value_the_user_chose_is_kept_unless_forced(session: Any) -> None:
    session.conf.set(ARROW_MAX_BYTES_PER_BATCH, "32m")
    assert tune_session(session) == {PYTHON_FILTER_PUSHDOWN: "true"}
    assert _bytes(session.conf.get(ARROW_MAX_BYTES_PER_BATCH)) == 32 * 2**20
    assert tune_session(session, force=True) == {ARROW_MAX_BYTES_PER_BATCH: UNBOUNDED}
    assert session.conf.get(ARROW_MAX_BYTES_PER_BATCH) == UNBOUNDED


def test_tuning_is_per_session(spark: Any, session: Any) -> None:
    tune_session(session)
    assert session.conf.get(ARROW_MAX_BYTES_PER_BATCH) == UNBOUNDED
    assert _bytes(spark.conf.get(ARROW_MAX_BYTES_PER_BATCH)) == 64 * 2**20


def _batch_sizes(session: Any, rows: int, row_bytes: int, marker: Path) -> list[int]:
    """Row counts of the Arrow batches a Python data source's writer receives for ``rows`` wide rows (one task)."""
    from dataclasses import dataclass

    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    # Defined here, not at module level, so cloudpickle ships the classes by value to the workers.
    @dataclass(frozen=True)
    class Sizes(WriterCommitMessage):
        sizes: list[int]

    class Writer(DataSourceArrowWriter):
        def write(self, iterator: Iterator[Any]) -> Sizes:
            return Sizes([batch.num_rows for batch in iterator])

        def commit(self, messages: Any) -> None:  # type: ignore[override]
            marker.write_text(json.dumps([n for m in messages if m is not None for n in m.sizes]))

    class BatchSizes(DataSource):
        @classmethod
        def name(cls) -> str:
            return "fencedlake_test_batch_sizes"

        def writer(self, schema: Any, overwrite: bool) -> Writer:
            return Writer()

    session.dataSource.register(BatchSizes)
    frame = session.range(0, rows, 1, 1).select(F.repeat(F.lit("x"), row_bytes).alias("payload"))
    frame.write.format("fencedlake_test_batch_sizes").mode("append").save()
    sizes: list[int] = json.loads(marker.read_text())
    marker.unlink()
    return sizes


def test_the_transport_obeys_the_setting(session: Any, tmp_path: Path) -> None:
    """With a 1 MiB bound, 1 KB rows arrive ~1,000 to a batch; tuned, they arrive maxRecordsPerBatch at a time."""
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5000")
    session.conf.set(ARROW_MAX_BYTES_PER_BATCH, "1m")
    bounded = _batch_sizes(session, 20_000, 1024, tmp_path / "sizes.json")
    assert sum(bounded) == 20_000
    assert max(bounded) < 1100, bounded  # the per-row check cut the batches at ~1 MiB
    tune_session(session, force=True)
    tuned = _batch_sizes(session, 20_000, 1024, tmp_path / "sizes.json")
    assert tuned == [5000] * 4


def test_a_tuned_session_writes_every_row_once(session: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    tune_session(session)
    session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "3000")
    frame = session.range(0, 25_000, 1, 2).select(
        F.col("id"), F.concat(F.lit("row-"), F.col("id").cast("string"), F.repeat(F.lit("y"), 200)).alias("s")
    )
    frame.write.format("fencedlake").mode("append").option("warehouse", str(tmp_path)).save("db.tuned")
    table = embedded_catalog(str(tmp_path)).load_table("db.tuned").scan().to_arrow()
    ids = table.column("id").to_pylist()
    assert len(ids) == 25_000
    assert sorted(ids) == list(range(25_000))
    assert all(s == f"row-{i}" + "y" * 200 for i, s in zip(ids, table.column("s").to_pylist(), strict=True))


def _untuned_counts(wh: str, table: str) -> list[int]:
    """Per recent fencedlake commit (newest first): how many applied writes ran untuned (commit metrics)."""
    from pyspark_fenced_sink.ops.inspect import recent_commits

    commits = recent_commits(embedded_catalog(wh).load_table(table), 10)
    return [int(c["untuned"]) for c in commits if c["seqs"] is not None]


def test_an_untuned_write_is_recorded_in_its_commit_and_a_tuned_one_is_not(
    session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tasks see the session's explicitly set SQL confs; Spark's default reads as untuned."""
    from pyspark_fenced_sink.ops.cli import main

    wh = str(tmp_path)
    session.range(0, 100, 1, 2).write.format("fencedlake").mode("append").option("warehouse", wh).save("db.flag")
    assert _untuned_counts(wh, "db.flag") == [1]
    tune_session(session)
    session.range(100, 200, 1, 2).write.format("fencedlake").mode("append").option("warehouse", wh).save("db.flag")
    assert _untuned_counts(wh, "db.flag") == [0, 1]
    assert main(["status", "db.flag", "--warehouse", wh, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["untuned_writes_in_recent_commits"] == 1
    assert main(["status", "db.flag", "--warehouse", wh]) == 0
    assert "tune_session(spark)" in capsys.readouterr().out


@pytest.mark.parametrize("untuned", [True, False])
def test_the_driver_warns_once_per_untuned_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, untuned: bool
) -> None:
    """The commit logs one warning naming the fix when any task reported the untuned setting."""
    from dataclasses import replace

    from pyspark_fenced_sink.testing.harness import commit, plan, rows, write_tasks

    p = plan(str(tmp_path), "db.warned")
    messages = [replace(m, untuned=untuned) for m in write_tasks(p, rows("w", 0, 10))]
    with caplog.at_level("WARNING", logger="pyspark_fenced_sink"):
        commit(p, messages)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if untuned:
        assert len(warnings) == 1 and "tune_session(spark)" in warnings[0] and "db.warned" in warnings[0]
    else:
        assert warnings == []
