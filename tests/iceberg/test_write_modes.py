"""Write modes through the real catalog commit (PROTOCOL.md §5.1; SQLite catalog, pyiceberg).

Dynamic partition overwrite, replace-where, snapshot properties, branches and
publish, each through the WAL and the group commit, and the concurrency
semantics of docs/PROTOCOL.md §5.1: WAL order decides.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink.errors import WriteRejectedError
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.codec.row_filter import filter_field_ids
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.entry import WalEntry, WriteMode
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import SERIAL_REF, STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import commit, open_target, plan, sink_write, write_tasks

TABLE = "db.days"
SCHEMA = StructType([StructField("id", LongType()), StructField("day", StringType())])


def days(**by_day: list[int]) -> pa.Table:
    """Rows ``(id, day)`` for each day's ids."""
    ids = [i for d in by_day for i in by_day[d]]
    return pa.table({"id": pa.array(ids, pa.int64()), "day": [d for d in by_day for _ in by_day[d]]})


def write(wh: str, data: pa.Table, *, overwrite: bool = False, tasks: int = 1, **options: str) -> Any:
    return sink_write(wh, TABLE, data, options, schema=SCHEMA, overwrite=overwrite, partition_by="day", tasks=tasks)


def rows(wh: str, ref: str = "main") -> list[tuple[int, str]]:
    """Every row of the branch ``ref``, sorted."""
    table = embedded_catalog(wh).load_table(TABLE)
    snapshot = table.metadata.snapshot_by_name(ref)
    if snapshot is None:
        return []
    got = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
    return sorted((r["id"], r["day"]) for r in got)


def prepared(wh: str, data: pa.Table, *, overwrite: bool = False, **options: str) -> WalEntry:
    """The WAL entry of a planned write whose files are written (not yet put), as the driver builds it."""
    p = plan(wh, TABLE, options, schema=SCHEMA, overwrite=overwrite, partition_by="day")
    files = [f for m in write_tasks(p, data, 1) for f in m.files]
    assert p.identity is not None
    o = p.opts
    return data_entry(
        p.identity,
        files,
        mode=p.mode,
        spec_id=p.spec.spec_id,
        row_filter=o.replace_where,
        filter_ids=filter_field_ids(o.replace_where, p.spec.schema_json) if o.replace_where else (),
        branch=o.branch,
        properties=o.snapshot_properties,
    )


def in_wal_order(wh: str, *entries: WalEntry) -> list[str]:
    """Put ``entries`` into the WAL in this order and let one committer apply them; their outcome codes."""
    ctx = open_target(wh, TABLE).ctx
    seqs = [ctx.wal.append(e, start=0) for e in entries]
    records = recover(ctx)
    found = {r.first + i: code for r in records for i, (_, code) in enumerate(r.outcomes)}
    return [found[s] for s in seqs]


# ---------------------------------------------------------------------------------------------- dynamic


def test_dynamic_overwrite_replaces_exactly_the_partitions_written(wh: str) -> None:
    """Days the write has rows for are replaced; every other day keeps its rows (one snapshot)."""
    write(wh, days(d1=[1, 2], d2=[3, 4], d3=[5]))
    result = write(wh, days(d2=[30], d4=[40]), overwrite=True, **{"overwrite-mode": "dynamic"})
    assert result.outcome is Outcome.APPLIED
    assert rows(wh) == [(1, "d1"), (2, "d1"), (5, "d3"), (30, "d2"), (40, "d4")]
    assert embedded_catalog(wh).load_table(TABLE).current_snapshot().summary.operation.value == "overwrite"


def test_static_overwrite_stays_the_default(wh: str) -> None:
    """mode("overwrite") without overwrite-mode replaces the whole table, as before."""
    write(wh, days(d1=[1], d2=[2]))
    write(wh, days(d2=[20]), overwrite=True)
    assert rows(wh) == [(20, "d2")]


def test_an_empty_dynamic_overwrite_replaces_nothing(wh: str) -> None:
    """No rows, no partitions: the table is unchanged (a static overwrite would empty it)."""
    write(wh, days(d1=[1], d2=[2]))
    result = write(wh, days(), overwrite=True, **{"overwrite-mode": "dynamic"})
    assert result.outcome is Outcome.APPLIED and rows(wh) == [(1, "d1"), (2, "d2")]


def test_a_rerun_of_a_dynamic_overwrite_batch_id_is_a_duplicate(wh: str) -> None:
    """The same writer.batch-id again succeeds as a duplicate and changes nothing (its files removed)."""
    opts = {"overwrite-mode": "dynamic", "writer.id": "backfill", "writer.batch-id": "7"}
    write(wh, days(d1=[1], d2=[2]))
    assert write(wh, days(d1=[10]), overwrite=True, **opts).outcome is Outcome.APPLIED
    write(wh, days(d1=[11]))
    assert write(wh, days(d1=[10]), overwrite=True, **opts).outcome is Outcome.DUPLICATE
    assert rows(wh) == [(2, "d2"), (10, "d1"), (11, "d1")]


def test_dynamic_overwrite_removes_what_is_live_when_it_is_applied(wh: str) -> None:
    """A file that landed in the partition after the overwrite was written but before it applied is replaced too."""
    write(wh, days(d1=[1], d2=[2]))
    p = plan(wh, TABLE, {"overwrite-mode": "dynamic"}, schema=SCHEMA, overwrite=True)
    messages = write_tasks(p, days(d1=[100]), 1)
    write(wh, days(d1=[50], d2=[60]))  # lands first: WAL order puts it before the overwrite
    commit(p, messages, abort=False)
    assert rows(wh) == [(2, "d2"), (60, "d2"), (100, "d1")]


# ---------------------------------------------------------------------------------------------- concurrency


def test_append_before_an_overwrite_of_its_partition_is_replaced(wh: str) -> None:
    """Append then dynamic overwrite of the same day, committed together: the overwrite's rows win."""
    write(wh, days(d1=[1]))
    append = prepared(wh, days(d1=[2], d2=[3]))
    dynamic = prepared(wh, days(d1=[9]), overwrite=True, **{"overwrite-mode": "dynamic"})
    assert in_wal_order(wh, append, dynamic) == ["A", "A"]
    assert rows(wh) == [(3, "d2"), (9, "d1")]


def test_append_after_an_overwrite_of_its_partition_adds_to_it(wh: str) -> None:
    """Dynamic overwrite then append of the same day: both writes' rows are there."""
    write(wh, days(d1=[1]))
    dynamic = prepared(wh, days(d1=[9]), overwrite=True, **{"overwrite-mode": "dynamic"})
    append = prepared(wh, days(d1=[2], d2=[3]))
    assert in_wal_order(wh, dynamic, append) == ["A", "A"]
    assert rows(wh) == [(2, "d1"), (3, "d2"), (9, "d1")]


def test_two_overwrites_of_different_partitions_both_land(wh: str) -> None:
    """Concurrent dynamic overwrites of d1 and d2: each replaces its own day."""
    write(wh, days(d1=[1], d2=[2], d3=[3]))
    o1 = prepared(wh, days(d1=[10]), overwrite=True, **{"overwrite-mode": "dynamic"})
    o2 = prepared(wh, days(d2=[20]), overwrite=True, **{"overwrite-mode": "dynamic"})
    assert in_wal_order(wh, o1, o2) == ["A", "A"]
    assert rows(wh) == [(3, "d3"), (10, "d1"), (20, "d2")]


def test_two_overwrites_of_the_same_partition_the_later_one_wins(wh: str) -> None:
    """Concurrent dynamic overwrites of d1: both succeed, the one later in the WAL holds the day."""
    write(wh, days(d1=[1], d2=[2]))
    o1 = prepared(wh, days(d1=[10]), overwrite=True, **{"overwrite-mode": "dynamic"})
    o2 = prepared(wh, days(d1=[20]), overwrite=True, **{"overwrite-mode": "dynamic"})
    assert in_wal_order(wh, o2, o1) == ["A", "A"]
    assert rows(wh) == [(2, "d2"), (10, "d1")]


# ---------------------------------------------------------------------------------------------- replace-where


def test_replace_where_replaces_the_rows_its_filter_matches(wh: str) -> None:
    """Files whose rows all match the filter are removed whole; others are untouched."""
    write(wh, days(d1=[1], d2=[2], d3=[3]))
    result = write(wh, days(d2=[20], d3=[30]), overwrite=True, **{"replace-where": "day >= 'd2'"})
    assert result.outcome is Outcome.APPLIED
    assert rows(wh) == [(1, "d1"), (20, "d2"), (30, "d3")]


def test_a_row_outside_the_filter_fails_the_write_with_nothing_durable(wh: str) -> None:
    """The task checks every row before it is written; the write fails before any WAL entry."""
    write(wh, days(d1=[1]))
    with pytest.raises(WriteRejectedError, match=r"do not satisfy replace-where \"day = 'd2'\".*'day': 'd1'"):
        write(wh, days(d2=[2], d1=[3]), overwrite=True, **{"replace-where": "day = 'd2'"})
    ctx = open_target(wh, TABLE).ctx
    assert ctx.wal.scan(0) == [0] and rows(wh) == [(1, "d1")]


def test_a_filter_that_straddles_a_live_file_is_refused_before_anything_runs(wh: str) -> None:
    """A file with rows on both sides of the filter: refused at planning, no task, no WAL entry."""
    write(wh, days(d1=[1, 9]))
    with pytest.raises(WriteRejectedError, match="has rows on both sides of the filter"):
        plan(wh, TABLE, {"replace-where": "id >= 5"}, schema=SCHEMA, overwrite=True)
    assert open_target(wh, TABLE).ctx.wal.scan(0) == [0]


def test_a_straddling_file_that_lands_meanwhile_refuses_the_write_at_apply_time(wh: str) -> None:
    """The check is taken again when the entry is applied: REFUSED, recorded, its files removed, rows kept."""
    write(wh, days(d1=[1]))
    p = plan(wh, TABLE, {"replace-where": "id >= 5"}, schema=SCHEMA, overwrite=True)
    messages = write_tasks(p, days(d1=[7]), 1)
    write(wh, days(d1=[2, 8]))  # straddles id >= 5
    with pytest.raises(WriteRejectedError, match="refused: live file") as err:
        commit(p, messages, abort=False)
    assert err.value.fields["outcome"] == "REFUSED"
    assert rows(wh) == [(1, "d1"), (2, "d1"), (8, "d1")]


@pytest.mark.parametrize(
    ("bad", "match"),
    [("nope = 1", "nope"), ("id = 'x'", "id"), ("day >= ", "syntax error")],
    ids=["unknown-column", "wrong-type", "syntax"],
)
def test_a_bad_filter_fails_at_planning(wh: str, bad: str, match: str) -> None:
    """A filter that does not parse or bind to the table is InvalidOptionsError before any task."""
    write(wh, days(d1=[1]))
    with pytest.raises(ValueError, match=match):
        plan(wh, TABLE, {"replace-where": bad}, schema=SCHEMA, overwrite=True)


# ---------------------------------------------------------------------------------------------- snapshot properties


def test_snapshot_properties_land_in_the_commit_that_applies_the_entry(wh: str) -> None:
    """snapshot-property.<key> options are in the summary of the snapshot with the write's rows."""
    write(wh, days(d1=[1]), **{"snapshot-property.job": "nightly-42"})
    summary = embedded_catalog(wh).load_table(TABLE).current_snapshot().summary.additional_properties
    assert summary["job"] == "nightly-42" and summary["fencedlake.seqs"] == "0-0"


def test_entries_with_different_snapshot_properties_never_share_a_commit(wh: str) -> None:
    """Pending entries with other properties are applied in separate commits, each with its own keys."""
    write(wh, days(d0=[0]))
    a = prepared(wh, days(d1=[1]), **{"snapshot-property.job": "a"})
    b = prepared(wh, days(d2=[2]), **{"snapshot-property.job": "b"})
    c = prepared(wh, days(d3=[3]))
    assert in_wal_order(wh, a, b, c) == ["A", "A", "A"]
    table = embedded_catalog(wh).load_table(TABLE)
    jobs = [s.summary.additional_properties.get("job") for s in table.metadata.snapshots[-3:]]
    assert jobs == ["a", "b", None]


# ---------------------------------------------------------------------------------------------- branches


def test_a_branch_write_creates_the_branch_from_main_and_leaves_main_alone(wh: str) -> None:
    """The first write to a branch forks it from main's head; main's rows and head are unchanged."""
    write(wh, days(d1=[1]))
    head = embedded_catalog(wh).load_table(TABLE).current_snapshot().snapshot_id
    write(wh, days(d2=[2]), branch="audit")
    table = embedded_catalog(wh).load_table(TABLE)
    assert table.current_snapshot().snapshot_id == head
    assert rows(wh) == [(1, "d1")] and rows(wh, "audit") == [(1, "d1"), (2, "d2")]
    assert table.refs()[SERIAL_REF].snapshot_id == table.refs()["audit"].snapshot_id


def test_a_dynamic_overwrite_on_a_branch_replaces_the_branch_partitions_only(wh: str) -> None:
    """Modes apply to the branch's live files; main keeps the partition."""
    write(wh, days(d1=[1], d2=[2]))
    write(wh, days(d1=[10]), overwrite=True, branch="audit", **{"overwrite-mode": "dynamic"})
    assert rows(wh) == [(1, "d1"), (2, "d2")] and rows(wh, "audit") == [(2, "d2"), (10, "d1")]


def test_a_group_commit_never_mixes_branches(wh: str) -> None:
    """Pending writes to main and to a branch are applied by separate commits, one branch each."""
    write(wh, days(d0=[0]))
    m = prepared(wh, days(d1=[1]))
    b = prepared(wh, days(d2=[2]), branch="audit")
    assert in_wal_order(wh, m, b) == ["A", "A"]
    assert rows(wh) == [(0, "d0"), (1, "d1")] and rows(wh, "audit") == [(0, "d0"), (1, "d1"), (2, "d2")]


@pytest.mark.parametrize("check", ["location", "requirements"])
def test_a_stale_main_commit_conflicts_with_a_branch_commit_that_landed(
    wh: str, check: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serial tag: a commit planned before a branch commit landed fails the CAS, so the state never goes back.

    ``location``: the SQL catalog's compare-and-swap against the planned version catches it first;
    ``requirements``: without it (a REST catalog checks only the requirements), the serial tag's does.
    """
    if check == "requirements":
        from pyspark_fenced_sink.iceberg import sql_catalog

        monkeypatch.setattr(sql_catalog, "compare_against", lambda table: contextlib.nullcontext())
    write(wh, days(d0=[0]))
    ctx = open_target(wh, TABLE).ctx
    stale = ctx.port.load()
    write(wh, days(d1=[1]), branch="audit")  # moves audit and the serial tag, not main
    from pyspark_fenced_sink.protocol.context import CommitConflict
    from pyspark_fenced_sink.protocol.reconcile import reconcile
    from pyspark_fenced_sink.protocol.state import CommitRecord

    entry = prepared(wh, days(d2=[2]))
    plan_ = reconcile(stale.state, {stale.state.upper: entry})
    with pytest.raises(CommitConflict, match=SERIAL_REF if check == "requirements" else "updated by another"):
        ctx.port.commit(stale, plan_, {stale.state.upper: entry}, CommitRecord(plan_.base.upper, (("x" * 12, "A"),)))
    state = CommittedState.decode(embedded_catalog(wh).load_table(TABLE).properties[STATE_PROPERTY])
    assert state.upper == 2


# ---------------------------------------------------------------------------------------------- publish


def test_publish_fast_forwards_main_to_the_branch(wh: str) -> None:
    """Write-audit-publish: main gets exactly the branch's rows, through a WAL entry."""
    from pyspark_fenced_sink.protocol.publish import publish_branch

    write(wh, days(d1=[1]))
    write(wh, days(d2=[2]), branch="audit")
    write(wh, days(d1=[10]), overwrite=True, branch="audit", **{"overwrite-mode": "dynamic"})
    result = publish_branch(open_target(wh, TABLE).ctx, "audit")
    assert result.outcome is Outcome.APPLIED
    assert rows(wh) == rows(wh, "audit") == [(2, "d2"), (10, "d1")]
    summary = embedded_catalog(wh).load_table(TABLE).current_snapshot().summary.additional_properties
    assert summary["fencedlake.published"].startswith("audit@")


def test_publish_after_only_bookkeeping_commits_on_main_succeeds(wh: str) -> None:
    """A fence barrier committed on main (no data) does not stop a publish."""
    from pyspark_fenced_sink.protocol.fencing import fence_writer
    from pyspark_fenced_sink.protocol.publish import publish_branch

    write(wh, days(d1=[1]))
    write(wh, days(d2=[2]), branch="audit")
    fence_writer(open_target(wh, TABLE).ctx, "someone")
    publish_branch(open_target(wh, TABLE).ctx, "audit")
    assert rows(wh) == [(1, "d1"), (2, "d2")]


def test_publish_is_refused_when_main_changed_data_since_the_fork(wh: str) -> None:
    """Not a fast-forward: REFUSED with the reason, recorded, main unchanged."""
    from pyspark_fenced_sink.protocol.publish import publish_branch

    write(wh, days(d1=[1]))
    write(wh, days(d2=[2]), branch="audit")
    write(wh, days(d3=[3]))
    with pytest.raises(WriteRejectedError, match="not an ancestor of branch 'audit'"):
        publish_branch(open_target(wh, TABLE).ctx, "audit")
    assert rows(wh) == [(1, "d1"), (3, "d3")]


def test_publish_is_decided_in_wal_order_with_the_writes_around_it(wh: str) -> None:
    """A branch write before the publish is published; a main write after it lands on top of the branch's rows."""
    from pyspark_fenced_sink.protocol.publish import publish_entry

    write(wh, days(d1=[1]))
    write(wh, days(d2=[2]), branch="audit")
    before = prepared(wh, days(d3=[3]), branch="audit")
    after = prepared(wh, days(d4=[4]))
    assert in_wal_order(wh, before, publish_entry("audit"), after) == ["A", "A", "A"]
    assert rows(wh) == [(1, "d1"), (2, "d2"), (3, "d3"), (4, "d4")]
    assert WriteMode.PUBLISH.takes_appends is False
