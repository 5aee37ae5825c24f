"""The commit loop's vocabulary: its context, its result, and the catalog port it drives (PROTOCOL.md §3-§6).

``protocol.commit`` runs the loop over these; ``iceberg.commit.table_port`` implements
:class:`TablePort` over pyiceberg and the model test over an in-memory register.
A :class:`CommitContext` checks every table version it reads for the table's
identity (PROTOCOL.md §1.1).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pyspark_fenced_sink.errors import TableChangedError, TableStateError
from pyspark_fenced_sink.protocol.entry import WalEntry
from pyspark_fenced_sink.protocol.reconcile import MAX_GROUP_DEFAULT, Outcome, ReconcilePlan
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableIdentity, TableView, bind
from pyspark_fenced_sink.protocol.wal import Wal

__all__ = ["MAX_WAIT_MS_DEFAULT", "CommitConflict", "CommitContext", "CommitResult", "CommitUnknown", "TablePort"]

#: A commit waits this long for its entry's outcome before "outcome unknown" (option ``commit.max-wait-ms``).
MAX_WAIT_MS_DEFAULT = 300_000

#: Entries pending longer than this have their data files checked before they are applied: tools like
#: Iceberg's remove_orphan_files delete unreferenced files older than days (PROTOCOL.md §8).
VERIFY_FILES_AFTER_S = 3600.0


class CommitConflict(Exception):
    """The catalog rejected the commit: the table changed since the base view. Nothing landed."""


class CommitUnknown(Exception):
    """The catalog commit may or may not have landed (lost response, dropped connection)."""


class TablePort(Protocol):
    """The catalog side of the protocol: read the committed state, commit a plan."""

    name: str

    def load(self) -> TableView:
        """Read the table's current committed version."""

    def commit(
        self, base: TableView, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord
    ) -> TableView:
        """Apply ``plan`` on top of ``base`` in one catalog commit.

        Raises:
            CommitConflict: the table is no longer at ``base`` (nothing landed).
            CommitUnknown: the outcome is unknown.
            EntryRefused: the plan's lead entry cannot be applied on ``base`` (nothing was sent;
                ``seq`` names the entry).
        """

    def find_record(self, view: TableView, seq: int) -> CommitRecord | None:
        """The commit record that reconciled ``seq``, searching back from ``view``."""

    def records(self, view: TableView) -> list[CommitRecord]:
        """Every commit record of the table's current lineage at ``view``, oldest first."""

    def replace_state(self, base: TableView, state: CommittedState) -> TableView:
        """Set the committed state alone if the table is still at ``base`` (``repair-state``).

        Raises:
            CommitConflict: the table moved since ``base``.
            CommitUnknown: the outcome is unknown.
        """


@dataclass
class CommitContext:
    """Everything ``commit_entry`` needs; ``sleep``/``now``/``wall``/``rng`` are injectable for tests.

    Attributes:
        port: The catalog side.
        wal: The WAL under the table's control root.
        identity: The table (UUID and control root) the WAL belongs to; a version of
            the table under another UUID is refused (None: not checked).
        file_exists: Tells whether a data file exists (None: never checked).
        verify_files_after_s: Entries pending longer than this have their files'
            existence checked before they are applied (MISSING_FILES otherwise).
        poll_s: Seconds between table reads of a writer waiting for the head's commit, until
            it has seen the commit cadence (``protocol.waiting``).
        patience_s: The least time the committed upper must stand still before a waiting
            writer commits itself (helps).
    """

    port: TablePort
    wal: Wal
    identity: TableIdentity | None = None
    max_wait_s: float = MAX_WAIT_MS_DEFAULT / 1000
    max_group: int = MAX_GROUP_DEFAULT
    file_exists: Callable[[str], bool] | None = None
    verify_files_after_s: float = VERIFY_FILES_AFTER_S
    poll_s: float = 0.05
    patience_s: float = 0.5
    backoff_base_s: float = 0.02
    backoff_cap_s: float = 2.0
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)

    def load(self) -> TableView:
        """Read the table's current version and check its identity (PROTOCOL.md §1.1).

        Raises:
            TableStateError: the state is lost, foreign or edited.
            TableChangedError: the name now holds another table than this context's.
        """
        return self.check(self.port.load())

    def check(self, raw: TableView) -> TableView:
        """:meth:`load`'s checks on a view the port has just read; returns it bound."""
        view = bind(raw, self.port.name)
        if self.identity is not None and view.table_uuid is not None and view.table_uuid != self.identity.uuid:
            raise TableChangedError(
                f"table {self.port.name} is now table {view.table_uuid}, not {self.identity.uuid}: it was dropped "
                "and re-created, or renamed and replaced, meanwhile",
                table=self.port.name,
            )
        if view.fresh:
            checkpoint = self.wal.latest_checkpoint()
            if checkpoint is not None:
                # Read while the table had no commit yet, and the listing ran after writers committed and gc
                # checkpointed: that is no lost state. Only a table still without its state on a second read
                # is one.
                again = self.port.load()
                if not again.fresh:
                    return self.check(again)
                raise TableStateError(
                    f"table {self.port.name} has no fencedlake.state property, but gc checkpointed its state at "
                    f"upper {checkpoint[0]} before truncating its WAL: the property was removed; rebuild it with "
                    f"`fencedlake repair-state {self.port.name}`",
                    table=self.port.name,
                )
        return view


@dataclass(frozen=True)
class CommitResult:
    """The outcome of one entry and what it took.

    Attributes:
        seq: The WAL position of the entry (None if it was never written).
        outcome: What reconciliation decided.
        detail: Why, in words.
        latency_ms: From the start of ``commit_entry`` to the known outcome.
        attempts: Catalog commit attempts this writer made.
        conflicts: Attempts rejected because a peer committed first.
        unknowns: Attempts whose outcome was unknown (resolved by re-reading).
        catalog_commits: Catalog commits this writer landed.
        group: Positions reconciled by the commit that decided this entry, when this writer made it.
        for_peers: Peers' entries this writer's commits applied.
        by_peer: A peer's commit (or the committed state) decided this entry.
        waits: Table reads this writer made while it waited for the commits before its entry.
        helper: This writer committed as a helper: the upper stood still for its patience
            while an entry before its own waited (``protocol.waiting``).
        waited_for: Why it waited, if it did (``protocol.waiting.WaitCause`` value): ``commit`` (a
            live writer's commit ahead of it), ``stalled`` / ``slow`` (it then helped), ``position`` (a
            missing position before its entry), ``catalog`` (a conflict or an outage).
    """

    seq: int | None
    outcome: Outcome
    detail: str = ""
    latency_ms: float = 0.0
    attempts: int = 0
    conflicts: int = 0
    unknowns: int = 0
    catalog_commits: int = 0
    group: int = 0
    for_peers: int = 0
    by_peer: bool = False
    waits: int = 0
    helper: bool = False
    waited_for: str | None = None

    def summary(self) -> str:
        """A compact one-line form for logs."""
        return (
            f"seq={self.seq} outcome={self.outcome.name} latency_ms={self.latency_ms:.1f} attempts={self.attempts} "
            f"conflicts={self.conflicts} unknowns={self.unknowns} group={self.group} for_peers={self.for_peers} "
            f"by_peer={self.by_peer} waits={self.waits} helper={self.helper} waited_for={self.waited_for}"
        )
