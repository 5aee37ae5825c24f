"""Every documented error type reaches user code typed, through real Spark (batch and streaming).

Spark hands the caller ``AnalysisException``, ``Py4JJavaError`` or
``StreamingQueryException`` carrying text only; ``fencedlake_error(e)``
returns the original error with its class, message and fields.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink import (
    CommitOutcomeUnknownError,
    FencedLakeError,
    FencedWriterError,
    InvalidOptionsError,
    SchemaMismatchError,
    WriteRejectedError,
    activate_session,
    fencedlake_error,
)
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import fence_writer, new_token
from pyspark_fenced_sink.testing.harness import open_target

pytestmark = pytest.mark.spark


def _save(frame: Any, wh: str, table: str, **options: str) -> None:
    writer = frame.write.format("fencedlake").mode("append").option("warehouse", wh)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(table)


def _caught(call: Callable[[], Any]) -> FencedLakeError:
    """The typed error inside the exception ``call`` raises (it must raise, through Spark)."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - whatever Spark wraps it in
        call()
    assert not isinstance(info.value, FencedLakeError), "the test must see Spark's wrapper, not the sink's error"
    err = fencedlake_error(info.value)
    assert err is not None, f"no fencedlake error in {type(info.value).__name__}: {str(info.value)[:500]}"
    assert "[fencedlake-error" not in str(err)  # the marker line is not part of the message
    return err


def _frame(spark: Any, start: int, count: int, id_type: str = "long") -> Any:
    return spark.range(start, start + count).selectExpr(
        f"CAST(IF(id < 0, NULL, id) AS {id_type}) AS id",
        "IF(id < 0, NULL, 'x') AS source",  # both nullable
    )


def _occupy_the_next_but_one_position(wh: str, table: str) -> int:
    """Leave the position at the upper missing with one after it taken: a write behind it cannot finish."""
    opened = open_target(wh, table)
    upper = opened.view.state.upper
    skip = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer="operator", reason="test gap")
    assert opened.ctx.wal.put_skip(upper + 1, skip)
    return upper


def _in_thread(spark: Any, call: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        activate_session(spark)
        try:
            call()
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def _wait_for_barrier(wh: str, table: str, writer: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if embedded_catalog(wh).table_exists(table):
            ctx = open_target(wh, table).ctx
            if any((e := ctx.wal.read(s)) is not None and e.writer == writer for s in ctx.wal.scan(0)):
                return
        time.sleep(0.1)
    raise AssertionError(f"writer {writer} never opened")


def _paused_before_its_wal_put(spark: Any, wh: str, table: str, meanwhile: Callable[[], None]) -> Any:
    """Writer "etl" opens and pauses before its WAL put while ``meanwhile`` runs; the typed error it raised."""
    _save(_frame(spark, 0, 3), wh, table)
    options = {"writer.id": "etl", "test.failpoints": "commit.before-wal-put=sleep:4000"}
    thread, errors = _in_thread(spark, lambda: _save(_frame(spark, 10, 3), wh, table, **options))
    _wait_for_barrier(wh, table, "etl")
    meanwhile()
    thread.join(120)
    [raised] = errors
    return fencedlake_error(raised)


# ---------------------------------------------------------------------------------------------- batch


def test_batch_invalid_option_is_typed(spark: Any, tmp_path: Path) -> None:
    err = _caught(lambda: _save(_frame(spark, 0, 3), str(tmp_path), "db.opts", **{"writer.idd": "x"}))
    assert isinstance(err, InvalidOptionsError) and "writer.idd" in err.message


def test_batch_schema_mismatch_is_typed(spark: Any, tmp_path: Path) -> None:
    wh = str(tmp_path)
    _save(_frame(spark, 0, 3), wh, "db.schema")
    err = _caught(lambda: _save(_frame(spark, 3, 3, "string"), wh, "db.schema"))
    assert isinstance(err, SchemaMismatchError) and "'id'" in err.message


def test_batch_fenced_writer_is_typed_with_its_fields(spark: Any, tmp_path: Path) -> None:
    """A running job is fenced by an operator between its open and its WAL put: FencedWriterError, with seq."""
    wh, table = str(tmp_path), "db.fenced"
    err = _paused_before_its_wal_put(spark, wh, table, lambda: fence_writer(open_target(wh, table).ctx, "etl"))
    assert isinstance(err, FencedWriterError) and err.fields["table"] == table and err.fields["outcome"] == "FENCED"


def test_batch_write_rejected_after_a_spec_change_is_typed(spark: Any, tmp_path: Path) -> None:
    """Another engine changes the partition spec while the write runs: WriteRejectedError, outcome SPEC_CHANGED."""
    wh, table = str(tmp_path), "db.spec"

    def add_a_partition_field() -> None:
        with embedded_catalog(wh).load_table(table).update_spec() as update:
            update.add_identity("source")

    err = _paused_before_its_wal_put(spark, wh, table, add_a_partition_field)
    assert isinstance(err, WriteRejectedError) and err.fields["outcome"] == "SPEC_CHANGED"


def test_batch_outcome_unknown_is_typed_with_its_seq(spark: Any, tmp_path: Path) -> None:
    """A write behind a missing WAL position past its deadline: CommitOutcomeUnknownError naming its seq."""
    wh, table = str(tmp_path), "db.unknown"
    _save(_frame(spark, 0, 3), wh, table)
    upper = _occupy_the_next_but_one_position(wh, table)
    err = _caught(lambda: _save(_frame(spark, 10, 3), wh, table, **{"commit.max-wait-ms": "300"}))
    assert isinstance(err, CommitOutcomeUnknownError)
    assert (err.seq, err.table) == (upper + 2, table) and f"position {upper} is missing" in err.message


# ---------------------------------------------------------------------------------------------- streaming


def _stream(spark: Any, tmp_path: Path, name: str, rows: list[dict[str, Any]], **options: str) -> Any:
    inp = tmp_path / f"in-{name}"
    inp.mkdir(exist_ok=True)
    (inp / f"part-{len(list(inp.iterdir()))}.json").write_text("\n".join(json.dumps(r) for r in rows))
    writer = (
        spark.readStream.schema(options.pop("schema", "id long, source string"))
        .json(str(inp))
        .writeStream.format("fencedlake")
        .option("warehouse", str(tmp_path / "wh"))
        .option("checkpointLocation", str(tmp_path / f"chk-{options.pop('checkpoint', name)}"))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer


def _run(query: Any) -> None:
    query.awaitTermination(300)
    if query.exception() is not None:
        raise query.exception()


def _rows(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": start + i, "source": "s"} for i in range(count)]


def test_streaming_invalid_option_is_typed(spark: Any, tmp_path: Path) -> None:
    writer = _stream(spark, tmp_path, "noid", _rows(0, 2))
    err = _caught(lambda: _run(writer.trigger(availableNow=True).start("db.noid")))
    assert isinstance(err, InvalidOptionsError) and "writer.id" in err.message


def test_streaming_schema_mismatch_is_typed(spark: Any, tmp_path: Path) -> None:
    _save(_frame(spark, 0, 3), str(tmp_path / "wh"), "db.sschema")
    writer = _stream(spark, tmp_path, "schema", [{"id": "a", "source": "s"}], schema="id string, source string")
    err = _caught(lambda: _run(writer.option("writer.id", "s1").trigger(availableNow=True).start("db.sschema")))
    assert isinstance(err, SchemaMismatchError)


def test_streaming_run_fenced_by_an_operator_is_typed(spark: Any, tmp_path: Path) -> None:
    """A running query whose writer an operator fences fails with FencedWriterError at its next batch."""
    wh, table = str(tmp_path / "wh"), "db.sfenced"
    writer = _stream(spark, tmp_path, "fenced", _rows(0, 3), **{"writer.id": "ingest"})
    query = writer.trigger(processingTime="300 milliseconds").start(table)
    try:
        deadline = time.monotonic() + 120
        while not (embedded_catalog(wh).table_exists(table) and open_target(wh, table).view.state.upper >= 2):
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.2)
        fence_writer(open_target(wh, table).ctx, "ingest")
        (tmp_path / "in-fenced" / "part-9.json").write_text(json.dumps({"id": 99, "source": "s"}))
        err = _caught(lambda: _run(query))
    finally:
        query.stop()
    assert isinstance(err, FencedWriterError) and err.fields.get("writer") == "ingest"


def test_streaming_writer_id_of_another_query_is_rejected_typed(spark: Any, tmp_path: Path) -> None:
    """A second checkpoint reusing a query's writer.id: WriteRejectedError, outcome QUERY_MISMATCH."""
    first = _stream(spark, tmp_path, "q1", _rows(0, 2), **{"writer.id": "shared"})
    _run(first.trigger(availableNow=True).start("db.shared"))
    second = _stream(spark, tmp_path, "q2", _rows(10, 2), **{"writer.id": "shared"})
    err = _caught(lambda: _run(second.trigger(availableNow=True).start("db.shared")))
    assert isinstance(err, WriteRejectedError) and err.fields["outcome"] == "QUERY_MISMATCH"


def test_streaming_outcome_unknown_is_typed_with_its_seq(spark: Any, tmp_path: Path) -> None:
    wh, table = str(tmp_path / "wh"), "db.sunknown"
    _save(_frame(spark, 0, 3), wh, table)
    _occupy_the_next_but_one_position(wh, table)
    writer = _stream(spark, tmp_path, "unknown", _rows(10, 2), **{"writer.id": "u", "commit.max-wait-ms": "300"})
    err = _caught(lambda: _run(writer.trigger(availableNow=True).start(table)))
    assert isinstance(err, CommitOutcomeUnknownError) and err.seq is not None and err.table == table
