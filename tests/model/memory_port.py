"""An in-memory catalog table implementing ``commit.TablePort`` (model-based test).

A linearizable register: a commit lands only if the table is still at the
base version (the compare-and-swap a real catalog makes on the metadata
location). It can inject unknown commit outcomes, and — to prove the model
test catches it — emulate pyiceberg's own retry, which rebases a stale commit
onto the new head instead of failing (``rebase_on_conflict``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_fenced_sink.protocol.commit import CommitConflict, CommitUnknown, TableView
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.wal import WalEntry


@dataclass
class MemoryTable:
    """The catalog's view of one table: versions, state, live files, commit records."""

    version: int = 0
    state: CommittedState = field(default_factory=CommittedState)
    files: list[Mapping[str, Any]] = field(default_factory=list)
    records: list[tuple[int, CommitRecord]] = field(default_factory=list)
    states: list[CommittedState] = field(default_factory=lambda: [CommittedState()])
    ever_referenced: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryTablePort:
    """``TablePort`` over a shared :class:`MemoryTable`.

    ``fault()`` is asked before each commit and may return ``"unknown-before"``
    (nothing lands, the caller sees CommitUnknown) or ``"unknown-after"`` (the
    commit lands, the caller sees CommitUnknown).
    """

    name = "model.table"

    def __init__(
        self,
        table: MemoryTable,
        *,
        checkpoint: Callable[[], None] = lambda: None,
        fault: Callable[[], str | None] = lambda: None,
        rebase_on_conflict: bool = False,
    ) -> None:
        self.table = table
        self.checkpoint = checkpoint
        self.fault = fault
        self.rebase_on_conflict = rebase_on_conflict

    def load(self) -> TableView:
        self.checkpoint()
        with self.table.lock:
            return TableView(state=self.table.state, version=str(self.table.version))

    def find_record(self, view: TableView, seq: int) -> CommitRecord | None:
        self.checkpoint()
        with self.table.lock:
            for version, record in reversed(self.table.records):
                if version <= int(view.version) and record.first <= seq <= record.last:
                    return record
        return None

    def commit(
        self, base: TableView, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord
    ) -> TableView:
        self.checkpoint()
        fault = self.fault()
        with self.table.lock:
            t = self.table
            if base.version != str(t.version) and not self.rebase_on_conflict:
                raise CommitConflict(f"table is at version {t.version}, not {base.version}")
            if fault == "unknown-before":
                raise CommitUnknown("response lost before the commit reached the catalog")
            added = [f for s in plan.apply for f in entries[s].files]
            if plan.overwrite:
                t.files = []
            t.files.extend(added)
            t.ever_referenced.update(str(f["p"]) for f in added)
            t.version += 1
            t.state = plan.state
            t.states.append(plan.state)
            t.records.append((t.version, record))
            view = TableView(state=t.state, version=str(t.version))
        if fault == "unknown-after":
            raise CommitUnknown("response lost after the commit landed")
        return view
