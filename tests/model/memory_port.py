"""An in-memory catalog implementing ``commit.TablePort`` (model-based test).

A catalog maps names to tables; each table has a UUID, a location, a version
register with compare-and-swap (what a real catalog does on the metadata
location), an optional ``fencedlake.state`` property, a partition spec id, its
commit records, and per branch its live files and a lineage of snapshots
(:func:`apply_plan`: what a commit does, with the production decisions of
``protocol.replace`` — which files a replacing entry removes at apply time,
whether a publish may move main). Catalog operations other tools perform — drop and
re-create, rename, purge, removing or editing the state property, changing
and reverting the partition spec — are methods here, so the model can run
them between protocol steps. The port can inject unknown commit outcomes and,
to prove the model catches it, emulate pyiceberg's own retry, which rebases a
stale commit onto the new tip instead of failing (``rebase_on_conflict``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark_fenced_sink.errors import TableChangedError
from pyspark_fenced_sink.protocol import replace as rules
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitUnknown
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, Match
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView

from . import upserts

LOCATION = "mem://warehouse/model/table"
NAME = "model.table"


Files = list[Mapping[str, Any]]


@dataclass
class MemoryTable:
    """The catalog's view of one table: identity, versions, state, live files, commit records.

    ``files`` are main's live files; ``branches`` other branches'. ``heads`` and ``lineage``
    (snapshot id -> (parent, changed data)) are what a publish is judged on; ``history`` keeps
    (upper after the commit, branch, its live files) for each commit; ``commits`` the branch and
    snapshot properties of each commit record (by its first position).
    """

    uuid: str = field(default_factory=lambda: str(uuid.uuid4()))
    location: str = LOCATION
    version: int = 0
    state: CommittedState = field(default_factory=CommittedState)
    has_state: bool = False
    spec_id: int | None = None
    files: list[Mapping[str, Any]] = field(default_factory=list)
    records: list[tuple[int, CommitRecord]] = field(default_factory=list)
    states: list[CommittedState] = field(default_factory=lambda: [CommittedState()])
    ever_referenced: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    branches: dict[str, Files] = field(default_factory=dict)
    heads: dict[str, int | None] = field(default_factory=lambda: {MAIN_BRANCH: None})
    lineage: dict[int, tuple[int | None, bool]] = field(default_factory=dict)
    history: list[tuple[int, str, tuple[Mapping[str, Any], ...]]] = field(default_factory=list)
    commits: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    #: Position delete files per branch: delete path -> (data path, positions) (``upserts``).
    deletes: dict[str, dict[str, tuple[str, frozenset[int]]]] = field(default_factory=dict)
    #: Per snapshot: what a reader and a publish see of it (``Snap``); column names by field id (another
    #: engine may rename them); other engines' changes, each with the version it made (``Foreign``).
    snaps: dict[int, Snap] = field(default_factory=dict)
    columns: dict[int, str] = field(default_factory=lambda: dict(COLUMNS))
    foreign: list[tuple[int, Foreign]] = field(default_factory=list)

    def live(self, branch: str) -> Files:
        """The live files of ``branch`` (a branch that does not exist yet would fork main)."""
        return self.files if branch == MAIN_BRANCH else self.branches.get(branch, self.files)

    def all_live(self) -> Files:
        """Live files of every branch."""
        return [f for files in (self.files, *self.branches.values()) for f in files]

    def snapshot(self, branch: str, changed: bool, snap: Snap | None = None) -> int:
        """A new snapshot on ``branch`` (``snap``: its summary, manifests and files; default: a bare commit)."""
        sid = len(self.lineage) + 1
        parent = self.heads.get(branch)
        self.lineage[sid] = (parent, changed)
        deletes = dict(upserts.branch_deletes(self, branch))
        self.snaps[sid] = replace(snap or Snap(), parent=parent, files=tuple(self.live(branch)), deletes=deletes)
        self.heads[branch] = sid
        return sid

    def history_view(self) -> dict[int, tuple[int | None, bool]]:
        """Snapshot id -> (parent, changed data) as a publish judges it (``protocol.replace.changed_data``)."""
        return {
            sid: (s.parent, rules.changed_data(s.counters, lambda s=s: s.manifests))  # type: ignore[misc]
            for sid, s in self.snaps.items()
        }


#: The model table's columns: field id -> name (``v`` is a double: it may hold NaN).
COLUMNS = {1: "id", 2: "part", 3: "v"}


@dataclass(frozen=True)
class Snap:
    """A snapshot as readers and publish see it.

    Attributes:
        parent: Its parent snapshot.
        op: Its summary's operation (append, overwrite, replace, delete).
        added: Paths of the data files it added.
        appended: Paths of the files it added for appends (fencedlake append entries, other engines'
            appends): the rows a stream of appends must deliver (the model's truth).
        counters: Its summary's counters (``{"operation": ...}`` alone for a minimal summary).
        manifests: (added, deleted) file counts of the manifests it wrote itself.
        files: The branch's live files after it.
        deletes: The branch's position delete files after it (``upserts``; a rollback returns to them too).
    """

    parent: int | None = None
    op: str = "append"
    added: tuple[str, ...] = ()
    appended: tuple[str, ...] = ()
    counters: Mapping[str, str] = field(default_factory=lambda: {"operation": "append"})
    manifests: tuple[tuple[int, int], ...] = ()
    files: tuple[Mapping[str, Any], ...] = ()
    deletes: Mapping[str, tuple[str, frozenset[int]]] = field(default_factory=dict)


def commit_snap(op: str, added: Files, removed: int, appended: Files, deletes: tuple[int, int] = (0, 0)) -> Snap:
    """A fencedlake commit's snapshot: pyiceberg writes full summary counters and one manifest per change.

    ``deletes``: the position delete files it added and removed (upserts, compactions that fold them).
    """
    counters = {"operation": op}
    if added or removed:
        counters.update({"added-data-files": str(len(added)), "deleted-data-files": str(removed)})
    if any(deletes):
        counters.update({"added-delete-files": str(deletes[0]), "removed-delete-files": str(deletes[1])})
    manifests = ((len(added), removed),) if added or removed else ()
    manifests += (deletes,) if any(deletes) else ()
    paths = tuple(str(f["p"]) for f in added)
    return Snap(
        op=op, added=paths, appended=tuple(str(f["p"]) for f in appended), counters=counters, manifests=manifests
    )


@dataclass(frozen=True)
class Foreign:
    """A change another engine made to the table (the oracle replays it in its place among the commits).

    Attributes:
        kind: ``append`` (its file, possibly with a minimal summary), ``delete`` (paths removed from main),
            ``rollback`` (main back to ``target``), ``replace-main`` (main to branch ``branch``'s tip),
            ``reset`` (branch ``branch`` to main's tip), ``fork`` (branch ``branch`` created at main's
            tip), ``drop-ref`` (branch removed), ``rename`` (a column renamed; no change to files).
        branch: The branch it changed.
        file: ``append``: the file.
        paths: ``delete``: the paths removed.
        target: ``rollback``: the snapshot main moves to.
    """

    kind: str
    branch: str = MAIN_BRANCH
    file: Mapping[str, Any] | None = None
    paths: tuple[str, ...] = ()
    target: int | None = None


def model_match(row_filter: str) -> Callable[[Mapping[str, Any]], Match]:
    """The model's row filters, ``part = P`` and ``v >= K``, as the catalog side judges a model file.

    ``part`` is a partition: the partition decides. ``v`` goes by the file's *recorded* statistics
    (``st``: ``full``, ``no-nan`` — no NaN counts —, ``none`` — no metrics at all) through the protocol's
    rules (``missing_stats``, ``holds_unmatched``); a file may hold NaN rows in ``v`` (``nan``), which its
    ``lo..hi`` bounds do not cover and no comparison matches.
    """
    column, _, value = row_filter.split()
    k = int(value)
    if column == "part":
        return lambda f: Match.ALL if f["part"] == k else Match.NONE
    return lambda f: _by_statistics(f, k)


def _by_statistics(f: Mapping[str, Any], k: int) -> Match:
    recorded = f.get("st", "full")
    nans = int(bool(f.get("nan"))) if recorded == "full" else None
    counts = recorded != "none"
    column = rules.ColumnStats("v", True, True, 2 if counts else None, 0 if counts else None, nans)
    absent = rules.missing_stats([column])
    if absent is None and not rules.holds_unmatched([column]) and f["lo"] >= k:
        return Match.ALL
    if counts and f["hi"] < k:  # bounds exclude NaN, and NaN matches no comparison
        return Match.NONE
    return Match.UNPROVEN if absent is not None else Match.SOME


def filter_names(t: MemoryTable, lead: WalEntry) -> dict[str, str]:
    """The current names of a replace-where's columns, by the field ids it was planned with.

    Raises:
        EntryRefused: a column was dropped.
    """
    return rules.filter_columns_now(lead.filter_ids, t.columns)


def live_files(t: MemoryTable, branch: str, lead: WalEntry) -> Files:
    """The files a replacing ``head`` is applied against: those live on its branch now (apply time)."""
    return t.live(branch)


def apply_plan(t: MemoryTable, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord) -> None:
    """What one commit of ``plan`` does to ``t`` (caller holds ``t.lock``).

    Raises:
        EntryRefused: the plan's lead entry cannot be applied (``seq`` names it); nothing changed.
    """
    lead = entries[plan.lead] if plan.lead is not None else None
    branch = plan.branch
    added = [f for s in plan.apply for f in entries[s].files]
    doomed: set[str] = set()
    rows = upserts.RowChanges()
    if lead is not None and plan.mode is WriteMode.PUBLISH:
        source = str(lead.branch)
        try:
            target = rules.check_fast_forward(source, t.heads[MAIN_BRANCH], t.heads.get(source), t.history_view())
        except EntryRefused as e:
            raise EntryRefused(e.reason, plan.lead) from e
        files, changed = list(t.branches[source]), False
        t.heads[MAIN_BRANCH] = target
        t.deletes[MAIN_BRANCH] = dict(upserts.branch_deletes(t, source))
    else:
        live = live_files(t, branch, lead) if lead is not None and plan.mode.replaces_rows else t.live(branch)
        if lead is not None and plan.mode.replaces_rows:
            by_path = {str(f["p"]): f for f in live}
            described = [LiveFile(p, int(f.get("s", 0)), tuple(f.get("pt", ()))) for p, f in by_path.items()]
            if lead.row_filter:
                try:
                    filter_names(t, lead)
                except EntryRefused as e:
                    raise EntryRefused(e.reason, plan.lead) from e
            match = model_match(lead.row_filter) if lead.row_filter else None
            classify = (lambda x: match(by_path[x.path])) if match else None
            try:
                doomed = {x.path for x in rules.removals(lead, described, classify)}
            except EntryRefused as e:
                raise EntryRefused(e.reason, plan.lead) from e
        rows = upserts.row_changes(t, plan, entries, branch, t.live(branch))
        files = [f for f in t.live(branch) if str(f["p"]) not in doomed] + added
        changed = bool(added or doomed or rows.added)
        deletes = {k: v for k, v in upserts.branch_deletes(t, branch).items() if k not in rows.removed}
        t.deletes[branch] = {**deletes, **rows.added}
        if branch != MAIN_BRANCH and branch not in t.branches:
            if t.heads[MAIN_BRANCH] is None:  # an empty table: main gets an empty snapshot to fork from
                t.snapshot(MAIN_BRANCH, False)
            t.heads[branch] = t.heads[MAIN_BRANCH]
    if branch == MAIN_BRANCH:
        t.files = files
    else:
        t.branches[branch] = files
    appended = [f for s in plan.apply if entries[s].mode is WriteMode.APPEND for f in entries[s].files]
    op = {WriteMode.APPEND: "append", WriteMode.PUBLISH: "append", WriteMode.COMPACT: "replace"}.get(plan.mode)
    if plan.mode is WriteMode.UPSERT and not rows.added:
        op = "append"  # an upsert that deleted no row only added keys (PROTOCOL.md §5.5)
    deleted = (len(rows.added), len(rows.removed))
    t.snapshot(branch, changed, commit_snap(op or "overwrite", added, len(doomed), appended, deleted))
    t.ever_referenced.update(str(f["p"]) for f in added)
    t.version += 1
    t.state, t.has_state = plan.state, True
    t.states.append(plan.state)
    t.records.append((t.version, record))
    t.commits[record.first] = (branch, plan.properties)
    t.history.append((plan.state.upper, branch, tuple(files)))


@dataclass
class MemoryCatalog:
    """Names -> tables; every table ever created is kept in ``created`` (dropped ones too)."""

    tables: dict[str, MemoryTable] = field(default_factory=dict)
    created: list[MemoryTable] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, name: str = NAME, location: str = LOCATION) -> MemoryTable:
        table = MemoryTable(location=location)
        with self.lock:
            self.tables[name] = table
            self.created.append(table)
        return table

    def drop(self, name: str = NAME) -> MemoryTable | None:
        with self.lock:
            return self.tables.pop(name, None)

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            self.tables[new] = self.tables.pop(old)


class MemoryTablePort:
    """``TablePort`` over one name of a :class:`MemoryCatalog` (or a single :class:`MemoryTable`).

    ``fault()`` is asked before each commit and may return ``"unknown-before"``
    (nothing lands, the caller sees CommitUnknown) or ``"unknown-after"`` (the
    commit lands, the caller sees CommitUnknown).
    """

    def __init__(
        self,
        table: MemoryTable | MemoryCatalog,
        *,
        name: str = NAME,
        checkpoint: Callable[[], None] = lambda: None,
        fault: Callable[[], str | None] = lambda: None,
        rebase_on_conflict: bool = False,
        pace: float | None = None,
    ) -> None:
        self.catalog = table if isinstance(table, MemoryCatalog) else MemoryCatalog({name: table}, [table])
        self.name = name
        self.checkpoint = checkpoint
        self.fault = fault
        self.rebase_on_conflict = rebase_on_conflict
        self.pace = pace  # the view's claim/wait hint (TableView.pace): None, or a schedule's fixed value

    @property
    def table(self) -> MemoryTable:
        with self.catalog.lock:
            table = self.catalog.tables.get(self.name)
        if table is None:
            raise TableChangedError(f"table {self.name} no longer exists: it was dropped while in use", table=self.name)
        return table

    def load(self) -> TableView:
        self.checkpoint()
        t = self.table
        with t.lock:
            return TableView(
                state=t.state if t.has_state else CommittedState(),
                version=f"{t.uuid}:{t.version}",
                spec_id=t.spec_id,
                table_uuid=t.uuid,
                location=t.location,
                fresh=not t.has_state,
                pace=self.pace,
                recorded_upper=t.records[-1][1].last + 1 if t.records else None,
            )

    @staticmethod
    def _version(view: TableView) -> int:
        return int(view.version.rsplit(":", 1)[-1])

    def find_record(self, view: TableView, seq: int) -> CommitRecord | None:
        self.checkpoint()
        for record in reversed(self.records(view)):
            if record.first <= seq <= record.last:
                return record
        return None

    def records(self, view: TableView) -> list[CommitRecord]:
        t = self.table
        with t.lock:
            return [r for v, r in t.records if v <= self._version(view)] if t.uuid == view.table_uuid else []

    def _cas(self, t: MemoryTable, base: TableView) -> None:
        if base.table_uuid != t.uuid or (base.version != f"{t.uuid}:{t.version}" and not self.rebase_on_conflict):
            raise CommitConflict(f"table is at version {t.uuid}:{t.version}, not {base.version}")

    def commit(
        self, base: TableView, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord
    ) -> TableView:
        self.checkpoint()
        fault = self.fault()
        t = self.table
        with t.lock:
            self._cas(t, base)
            if fault == "unknown-before":
                raise CommitUnknown("response lost before the commit reached the catalog")
            apply_plan(t, plan, entries, record)
        if fault == "unknown-after":
            raise CommitUnknown("response lost after the commit landed")
        return self.load_unchecked()

    def replace_state(self, base: TableView, state: CommittedState) -> TableView:
        self.checkpoint()
        t = self.table
        with t.lock:
            self._cas(t, base)
            t.version += 1
            t.state, t.has_state = state, True
            t.states.append(state)
        return self.load_unchecked()

    def load_unchecked(self) -> TableView:
        """``load`` without a scheduler checkpoint (the view a commit returns)."""
        checkpoint, self.checkpoint = self.checkpoint, lambda: None
        try:
            return self.load()
        finally:
            self.checkpoint = checkpoint

    # Catalog operations other tools perform on the table behind the name.

    def lose_state(self) -> None:
        """A tool rewrites the properties without ``fencedlake.state``."""
        t = self.table
        with t.lock:
            t.has_state, t.version = False, t.version + 1

    def change_spec(self, spec_id: int) -> None:
        """Another engine sets the default partition spec (a revert reuses the old id, as Iceberg does)."""
        t = self.table
        with t.lock:
            t.spec_id, t.version = spec_id, t.version + 1
