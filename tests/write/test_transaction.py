"""The write transaction: one catalog read to begin, the table checked, typed errors, commit and abort cleanup."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.errors import TableChangedError, WriteRejectedError
from pyspark_fenced_sink.failpoints import FailPointError
from pyspark_fenced_sink.iceberg import catalogs
from pyspark_fenced_sink.options.write import SinkOptions
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.spark.messages import written
from pyspark_fenced_sink.testing.harness import (
    SCHEMA,
    commit,
    open_catalog,
    open_target,
    plan,
    rows,
    sink_write,
    table_ids,
    write_tasks,
)
from pyspark_fenced_sink.write.transaction import WriteTransaction

TABLE = "db.t"


class _CountingCatalog:
    """Counts the catalog requests a step makes (delegates everything else)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.loads = 0
        self.creates = 0

    def load_table(self, name: Any) -> Any:
        self.loads += 1
        return self.inner.load_table(name)

    def create_table(self, *args: Any, **kwargs: Any) -> Any:
        self.creates += 1
        return self.inner.create_table(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch, wh: str) -> _CountingCatalog:
    counter = _CountingCatalog(open_catalog(wh))
    monkeypatch.setattr(catalogs, "load_catalog", lambda config: counter)
    return counter


def test_begin_reads_an_existing_table_once(wh: str, counting: _CountingCatalog) -> None:
    """Planning a write of an existing table is one catalog read: resolve, check, open the writer."""
    sink_write(wh, TABLE, rows("a", 0, 3))
    counting.loads = counting.creates = 0
    plan(wh, TABLE)
    assert (counting.loads, counting.creates) == (1, 0)
    # A stable writer puts a fence barrier when it opens and reads the committed version once more to
    # check the barrier's position (PROTOCOL.md §7): one read more, no other.
    counting.loads = 0
    p = plan(wh, TABLE, writer_id="etl")
    assert (counting.loads, counting.creates) == (2, 0)
    assert p.identity is not None and p.identity.epoch is not None


def test_begin_creates_a_missing_table_with_one_read(wh: str, counting: _CountingCatalog) -> None:
    """A missing table costs the failed read and the create, nothing more."""
    p = plan(wh, TABLE)
    assert (counting.loads, counting.creates) == (1, 1)
    assert p.mode is WriteMode.APPEND and p.spec.table_uuid == str(
        open_catalog(wh).load_table(TABLE).metadata.table_uuid
    )


def test_the_transaction_pickles_for_tasks_and_the_commit_worker(wh: str) -> None:
    """Spark pickles the writer: the transaction survives it and commits from the copy."""
    p = pickle.loads(pickle.dumps(plan(wh, TABLE)))
    result = commit(p, write_tasks(p, rows("a", 0, 5)))
    assert result.outcome is Outcome.APPLIED
    assert table_ids(wh, TABLE) == list(range(5))


def test_a_table_dropped_between_planning_and_commit_is_a_retryable_table_change(wh: str) -> None:
    """Dropped while the tasks ran: TableChangedError (retryable), nothing durable, the task files removed."""
    sink_write(wh, TABLE, rows("a", 0, 3))
    p = plan(wh, TABLE)
    messages = write_tasks(p, rows("b", 10, 3))
    open_catalog(wh).drop_table(TABLE)
    with pytest.raises(TableChangedError, match="dropped while the write ran") as err:
        commit(p, messages)
    assert err.value.retryable
    assert [path for path in written(messages, TABLE).paths if os.path.exists(path.removeprefix("file://"))] == []


def test_a_recreated_table_refuses_the_commit_as_a_table_change(wh: str) -> None:
    """Another table behind the name at commit: TableChangedError, nothing committed to either table."""
    sink_write(wh, TABLE, rows("a", 0, 3))
    p = plan(wh, TABLE)
    messages = write_tasks(p, rows("b", 10, 3))
    catalog = open_catalog(wh)
    catalog.drop_table(TABLE)
    sink_write(wh, TABLE, rows("c", 100, 2))
    with pytest.raises(TableChangedError, match="is now table"):
        commit(p, messages)
    assert table_ids(wh, TABLE) == [100, 101]


def test_a_schema_merge_that_keeps_losing_is_a_retryable_table_change(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent schema changes on every attempt: a typed, retryable error, not 'invalid options'."""
    from pyiceberg.exceptions import CommitFailedException
    from pyspark.sql.types import StringType, StructField, StructType

    sink_write(wh, TABLE, rows("a", 0, 3))
    wider = StructType([*SCHEMA.fields, StructField("extra", StringType(), True)])

    def conflict(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise CommitFailedException("a concurrent schema change")

    from pyiceberg.table.update.schema import UpdateSchema

    monkeypatch.setattr(UpdateSchema, "commit", conflict)
    with pytest.raises(TableChangedError, match="kept conflicting with concurrent schema changes") as err:
        plan(wh, TABLE, schema=wider, merge_schema="true")
    assert err.value.retryable
    assert [f.name for f in open_catalog(wh).load_table(TABLE).schema().fields] == ["id", "writer"]


def test_abort_before_the_wal_step_removes_the_files_and_after_it_keeps_them(wh: str) -> None:
    """Spark's abort(): files go only if commit() never reached the WAL (a driver-local marker says so)."""
    p = plan(wh, TABLE)
    done = written(write_tasks(p, rows("a", 0, 4)), TABLE)
    p.abort(done)
    assert [x for x in done.paths if Path(x.removeprefix("file://")).exists()] == []

    q = plan(wh, TABLE, {"test.failpoints": "commit.after-wal-put=raise"})
    later = written(write_tasks(q, rows("b", 10, 4)), TABLE)
    with pytest.raises(FailPointError):
        q.commit(later)
    q.abort(later)  # what Spark does after a failed commit(): the entry is durable, the files must stay
    assert later.paths and all(Path(x.removeprefix("file://")).exists() for x in later.paths)
    sink_write(wh, TABLE, rows("c", 100, 1))  # the next writer applies the durable entry
    assert table_ids(wh, TABLE) == [10, 11, 12, 13, 100]


def test_compaction_and_spark_writes_share_one_way_to_build_the_executor_spec(wh: str) -> None:
    """WriteTransaction.open builds every spec: properties overridden per write, the tag from the opened writer."""
    sink_write(wh, TABLE, rows("a", 0, 3))
    opened = open_target(wh, TABLE)
    txn = WriteTransaction.open(
        opened,
        SinkOptions(table=TABLE, catalog=opened.config),
        WriteMode.COMPACT,
        inputs=["b", "a"],
        properties={"write.target-file-size-bytes": "1234"},
    )
    assert txn.spec.properties["write.target-file-size-bytes"] == "1234"
    assert txn.inputs == ("a", "b")
    assert txn.identity is not None and txn.identity.ephemeral and txn.spec.tag.ephemeral
    assert txn.spec.tag.opened == txn.identity.opened


def test_a_replace_where_over_a_straddling_file_is_refused_while_planning(wh: str) -> None:
    """The target is checked when the write begins: refused before any task runs, nothing written."""
    sink_write(wh, TABLE, rows("a", 0, 3))
    with pytest.raises(WriteRejectedError):
        plan(wh, TABLE, overwrite=True, replace_where="id < 1")
    assert table_ids(wh, TABLE) == [0, 1, 2]


def test_catalog_failure_while_a_writer_id_opens_is_a_service_error_not_the_clients(
    wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence barrier's table read fails (PostgreSQL dropped the connection): a retryable ServiceError.
    (A writer.id job without a batch id: a job with one puts no barrier, PROTOCOL.md §7.)"""
    from sqlalchemy.exc import OperationalError

    from pyspark_fenced_sink.errors import ServiceError
    from pyspark_fenced_sink.iceberg.commit.table_port import IcebergTablePort

    sink_write(wh, TABLE, rows("a", 0, 5))

    def dropped(self: IcebergTablePort) -> Any:
        raise OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(IcebergTablePort, "load", dropped)  # open_table's read is the catalog's; the barrier's is this
    with pytest.raises(ServiceError) as raised:
        plan(wh, TABLE, {"writer.id": "orders"})
    assert raised.value.retryable and raised.value.service == "catalog", raised.value
