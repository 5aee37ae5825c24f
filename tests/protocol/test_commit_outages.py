"""A catalog outage after the WAL put (PROTOCOL.md §4, invariant I1).

Once a write's entry is durable, the write must end in a known outcome or in
``CommitOutcomeUnknownError`` -- never in a raw database error, which a user
would retry into a duplicate. The commit loop re-reads the table through
outages until ``commit.max-wait-ms``; past it, the write reports "outcome
unknown" and the next committer applies the entry exactly once. (The real
thing, a PostgreSQL restart mid-run, is integration/test_scenarios.py.)
"""

from __future__ import annotations

import pytest

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError
from pyspark_fenced_sink.protocol.commit import commit_entry
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitContext
from pyspark_fenced_sink.protocol.fencing import open_writer
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.wal import Wal
from pyspark_fenced_sink.store.memory import MemoryStore
from tests.model.memory_port import MemoryTable, MemoryTablePort


class DatabaseDown(Exception):
    """What a catalog's driver raises while its database restarts (e.g. sqlalchemy's OperationalError)."""


class FlakyPort(MemoryTablePort):
    """The first commit loses a race; then ``outage`` table reads fail before the catalog answers again."""

    def __init__(self, table: MemoryTable, outage: int) -> None:
        super().__init__(table)
        self.outage = outage
        self.commits = 0
        self.failed_loads = 0

    def load(self) -> TableView:
        if self.commits and self.outage:
            self.outage -= 1
            self.failed_loads += 1
            raise DatabaseDown("could not connect to server: Connection refused")
        return super().load()

    def commit(self, base, plan, entries, record):  # type: ignore[no-untyped-def]
        self.commits += 1
        if self.commits == 1:
            raise CommitConflict("a peer committed first")
        return super().commit(base, plan, entries, record)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(seconds, 0.5)  # every retry costs time, so an endless outage reaches the deadline


def _ctx(
    table: MemoryTable, store: MemoryStore, port: MemoryTablePort, clock: Clock, max_wait_s: float
) -> CommitContext:
    return CommitContext(
        port=port,
        wal=Wal(store, label="t", sleep=clock.sleep),
        max_wait_s=max_wait_s,
        sleep=clock.sleep,
        now=clock.now,
    )


def _entry(ctx: CommitContext, name: str):  # type: ignore[no-untyped-def]
    return data_entry(open_writer(ctx, None), [{"p": f"data/{name}.parquet", "s": 0}])


def test_a_short_outage_after_the_wal_put_is_ridden_out() -> None:
    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    port = FlakyPort(table, outage=3)
    ctx = _ctx(table, store, port, clock, max_wait_s=60)
    result = commit_entry(ctx, _entry(ctx, "a"))
    assert result.outcome is Outcome.APPLIED and result.conflicts == 1
    assert port.failed_loads == 3 and len(clock.slept) >= 4  # one backoff after the conflict, one per failed read
    assert [str(f["p"]) for f in table.files] == ["data/a.parquet"]


def test_an_outage_past_the_deadline_is_outcome_unknown_and_the_next_writer_applies_the_entry() -> None:
    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    ctx = _ctx(table, store, FlakyPort(table, outage=10_000), clock, max_wait_s=5)
    with pytest.raises(CommitOutcomeUnknownError) as info:
        commit_entry(ctx, _entry(ctx, "victim"))
    assert info.value.seq is not None and isinstance(info.value.__cause__, DatabaseDown)
    assert "is durable" in str(info.value) and "fencedlake wal" in str(info.value)
    assert table.files == []  # nothing landed yet, and nothing of it was deleted

    peer = _ctx(table, store, MemoryTablePort(table), Clock(), max_wait_s=5)
    result = commit_entry(peer, _entry(peer, "peer"))
    assert result.outcome is Outcome.APPLIED and result.for_peers == 1
    assert sorted(str(f["p"]) for f in table.files) == ["data/peer.parquet", "data/victim.parquet"]


def test_a_commit_that_waits_logs_a_progress_line_every_few_seconds(caplog: pytest.LogCaptureFixture) -> None:
    """Riding out an outage, the writer says so at INFO -- at most once per PROGRESS_EVERY_S, not per retry."""
    from pyspark_fenced_sink.protocol.progress import PROGRESS_EVERY_S

    table, store, clock = MemoryTable(), MemoryStore(), Clock()
    port = FlakyPort(table, outage=60)
    ctx = _ctx(table, store, port, clock, max_wait_s=600)
    with caplog.at_level("INFO", logger="pyspark_fenced_sink"):
        assert commit_entry(ctx, _entry(ctx, "a")).outcome is Outcome.APPLIED
    lines = [r.getMessage() for r in caplog.records if "still" in r.getMessage()]
    outage = [line for line in lines if "through a catalog outage" in line]
    assert outage and all("DatabaseDown" in line for line in outage)
    # once the catalog is back the same commit may still wait its turn; that line names why
    assert all(line in outage or "behind concurrent commits" in line for line in lines)
    assert len(lines) <= clock.t / PROGRESS_EVERY_S + 1 < port.failed_loads  # rate-limited, not one per retry
