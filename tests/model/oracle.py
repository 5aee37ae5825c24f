"""The WAL-order replay oracle of the model-based test: what every branch must hold after a schedule.

Written apart from the code under test (``protocol.replace``, ``memory_port.apply_plan``,
the Iceberg port): it replays the recorded outcomes commit by commit, in WAL order, with
the semantics of docs/PROTOCOL.md §5.1 stated directly on the model's files —

* append adds; static overwrite removes every live file of its branch; dynamic
  overwrite removes the live files of the partitions its own files are in (none for an
  empty write); replace-where removes the live files whose ``v`` range or partition
  lies wholly inside its filter, and must have been refused if one straddles it or its
  metadata cannot prove where it lies (NaN rows, absent NaN counts, no metrics: ``truth``); a
  compaction removes its input files, and must have been refused if one is no longer
  live;
* the first commit on a branch forks it from main (an empty main snapshot first, on a
  table without one); each commit is one snapshot on its branch, "changed data" if it
  added or removed a file;
* a publish moves main to the branch's head, and must have been refused unless every
  main snapshot not in the branch's lineage changed no data;
* a commit writes one branch and carries the snapshot properties of every entry it
  applies (all equal);

— with other engines' changes (appends, deletes, rollbacks, ref moves: ``MemoryTable.foreign``)
replayed between the commits where they happened — then compares each branch's files and
every ref with the table's. Anything else — a file live at
write time but not at apply time treated as live, a straddling file removed or kept, a
commit on the wrong branch — shows up as a difference. Rows inside files (upserts and the
deletes they make) are replayed by an observer (``upsert_oracle.RowOracle``) this replay
calls at each fork, snapshot, publish, refusal, applied entry and other engine's change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.replace import Match

from .memory_port import Foreign, MemoryTable

__all__ = ["Observer", "replay"]


class Observer(Protocol):
    """Follows the replay row by row (``upsert_oracle.RowOracle``)."""

    def fork(self, branch: str) -> None:
        """``branch`` is created from main."""

    def publish(self, branch: str) -> None:
        """Main is moved to ``branch``."""

    def refusable(self, live: Mapping[str, Mapping[str, Any]], entry: WalEntry) -> bool:
        """True if ``entry`` may be refused on the branch's ``live`` files for reasons of rows."""

    def applied(self, live: Mapping[str, Mapping[str, Any]], branch: str, entry: WalEntry, v: list[str]) -> bool:
        """``entry`` was applied on ``branch``, whose files are now ``live``; True if it deleted rows."""

    def snap(self, sid: int, branch: str) -> None:
        """Snapshot ``sid`` was made on ``branch`` (a rollback may return to it)."""

    def foreign(self, change: Foreign, files: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """Another engine's ``change`` was replayed; ``files`` are every branch's live files now."""


@dataclass
class _Lake:
    """Each branch's live files (path -> file) and every snapshot's (parent, changed data)."""

    files: dict[str, dict[str, Mapping[str, Any]]] = field(default_factory=lambda: {MAIN_BRANCH: {}})
    heads: dict[str, int | None] = field(default_factory=lambda: {MAIN_BRANCH: None})
    snapshots: dict[int, tuple[int | None, bool]] = field(default_factory=dict)
    #: The branch's live files after each snapshot (a rollback returns to them).
    after: dict[int, dict[str, Mapping[str, Any]]] = field(default_factory=dict)
    #: Follows the rows inside the files (``upsert_oracle.RowOracle``), if any.
    observer: Observer | None = None

    def snap(self, branch: str, changed: bool) -> None:
        sid = len(self.snapshots) + 1
        self.snapshots[sid] = (self.heads.get(branch), changed)
        self.heads[branch] = sid
        self.after[sid] = dict(self.live(branch))
        if self.observer is not None:
            self.observer.snap(sid, branch)

    def fork(self, branch: str) -> None:
        if branch in self.files:
            return
        if self.observer is not None:
            self.observer.fork(branch)
        if self.heads[MAIN_BRANCH] is None:
            self.snap(MAIN_BRANCH, False)
        self.files[branch] = dict(self.files[MAIN_BRANCH])
        self.heads[branch] = self.heads[MAIN_BRANCH]

    def live(self, branch: str) -> dict[str, Mapping[str, Any]]:
        return self.files.get(branch, self.files[MAIN_BRANCH])

    def may_publish(self, branch: str | None) -> bool:
        if branch is None or branch not in self.files:
            return False
        lineage, node = set(), self.heads[branch]
        while node is not None:
            lineage.add(node)
            node = self.snapshots[node][0]
        node = self.heads[MAIN_BRANCH]
        while node is not None and node not in lineage:
            if self.snapshots[node][1]:
                return False
            node = self.snapshots[node][0]
        return True

    def straddles(self, entry: WalEntry) -> bool:
        """True if some live file cannot be proven, from the metadata it carries, to match all or none."""
        match = truth(str(entry.row_filter))
        return any(match(f) is Match.SOME for f in self.live(entry.target).values())

    def foreign(self, change: Foreign) -> None:
        """Another engine's change, replayed in its place."""
        if change.kind == "append" and change.file is not None:
            self.fork(change.branch)
            self.files[change.branch][str(change.file["p"])] = change.file
            self.snap(change.branch, True)
        elif change.kind == "delete":
            for path in change.paths:
                self.files[MAIN_BRANCH].pop(path, None)
            self.snap(MAIN_BRANCH, True)
        elif change.kind == "rollback" and change.target is not None:
            self.heads[MAIN_BRANCH] = change.target
            self.files[MAIN_BRANCH] = dict(self.after[change.target])
        elif change.kind == "fork":
            self.fork(change.branch)
        elif change.kind == "replace-main" and change.branch in self.files:
            self.heads[MAIN_BRANCH] = self.heads[change.branch]
            self.files[MAIN_BRANCH] = dict(self.files[change.branch])
        elif change.kind == "reset" and change.branch in self.files:
            self.files[change.branch] = dict(self.files[MAIN_BRANCH])
            self.heads[change.branch] = self.heads[MAIN_BRANCH]
        elif change.kind == "drop-ref":
            self.files.pop(change.branch, None)
            self.heads.pop(change.branch, None)
        if self.observer is not None:
            self.observer.foreign(change, self.files)


def truth(row_filter: str) -> Any:
    """The spec of a model filter on a model file, stated on what the file holds and what its metadata says.

    ``part = P``: the partition decides. ``v >= K``: every row matches iff ``lo >= K`` and the file has no
    NaN row, which only metadata with NaN counts (``st`` ``full``) can prove; no row matches iff
    ``hi < K`` (NaN matches no comparison), which bounds prove unless the file has no metrics (``none``).
    Anything else straddles: ``SOME``.
    """
    column, _, value = row_filter.split()
    k = int(value)

    def match(f: Mapping[str, Any]) -> Match:
        if column == "part":
            return Match.ALL if f["part"] == k else Match.NONE
        recorded = f.get("st", "full")
        if f["lo"] >= k and not f.get("nan") and recorded == "full":
            return Match.ALL
        if f["hi"] < k and recorded != "none":
            return Match.NONE
        return Match.SOME

    return match


def _apply(lake: _Lake, branch: str, entry: WalEntry, v: list[str], seq: int) -> bool:
    """Apply one data entry to ``branch``; True if it added or removed a file."""
    live = lake.files[branch]
    if entry.mode is WriteMode.OVERWRITE:
        doomed = set(live)
    elif entry.mode is WriteMode.DYNAMIC:
        parts = {f["part"] for f in entry.files}  # files of another partition spec are never selected
        doomed = {p for p, f in live.items() if f["part"] in parts and f.get("s", 0) == entry.spec_id}
    elif entry.mode is WriteMode.REPLACE_WHERE:
        match = truth(str(entry.row_filter))
        verdicts = {p: match(f) for p, f in live.items()}
        if Match.SOME in verdicts.values():
            v.append(f"model: WAL seq {seq} replace-where {entry.row_filter!r} applied over a straddling file")
        doomed = {p for p, m in verdicts.items() if m is Match.ALL}
    elif entry.mode is WriteMode.COMPACT:
        if not set(entry.inputs) <= set(live):
            v.append(f"model: WAL seq {seq} compaction applied although an input was no longer live")
        doomed = set(entry.inputs) & set(live)
    else:
        doomed = set()
    for path in doomed:
        del live[path]
    live.update({str(f["p"]): f for f in entry.files})
    return bool(doomed or entry.files)


def _commit(
    lake: _Lake,
    record_first: int,
    decided: list[tuple[int, Outcome, WalEntry]],
    t: MemoryTable,
    rows: Observer | None = None,
) -> list[str]:
    v: list[str] = []
    for seq, outcome, entry in decided:
        if outcome is Outcome.REFUSED:
            if entry.kind is EntryKind.PUBLISH:
                refusable = not lake.may_publish(entry.branch)
            elif entry.mode is WriteMode.COMPACT:
                live = lake.live(entry.target)
                refusable = not set(entry.inputs) <= set(live) or (rows is not None and rows.refusable(live, entry))
            elif entry.mode is WriteMode.UPSERT:
                refusable = rows is not None and rows.refusable(lake.live(entry.target), entry)
            else:
                refusable = lake.straddles(entry)
            if not refusable:
                v.append(f"model: WAL seq {seq} was refused, but replaying the WAL in order applies it")
    applied = [(s, e) for s, o, e in decided if o is Outcome.APPLIED and e.kind in (EntryKind.DATA, EntryKind.PUBLISH)]
    branch = applied[0][1].target if applied else MAIN_BRANCH
    props = applied[0][1].properties if applied else ()
    if any(e.target != branch or e.properties != props for _, e in applied):
        v.append(f"model: commit of WAL seq {record_first}- mixes branches or snapshot properties")
    if t.commits.get(record_first, (branch, props)) != (branch, props):
        v.append(f"model: commit of WAL seq {record_first}- went to {t.commits[record_first]}, not {(branch, props)}")
    changed = False
    for seq, entry in applied:
        if entry.kind is EntryKind.PUBLISH:
            if not lake.may_publish(entry.branch):
                v.append(f"model: WAL seq {seq} published {entry.branch} although main changed data since it forked")
            elif len(applied) == 1 and entry.branch is not None:
                lake.files[MAIN_BRANCH] = dict(lake.files[entry.branch])
                lake.heads[MAIN_BRANCH] = lake.heads[entry.branch]
                if rows is not None:
                    rows.publish(entry.branch)
            continue
        lake.fork(branch)
        changed = _apply(lake, branch, entry, v, seq) or changed
        if rows is not None:
            changed = rows.applied(lake.files[branch], branch, entry, v) or changed
    if len(applied) > 1 and any(e.kind is EntryKind.PUBLISH for _, e in applied):
        v.append(f"model: commit of WAL seq {record_first}- holds a publish and other entries")
    lake.snap(branch, changed)
    return v


def replay(
    t: MemoryTable,
    outcome_at: Mapping[int, tuple[str, Outcome]],
    by_token: Mapping[str, WalEntry],
    rows: Observer | None = None,
) -> list[str]:
    """Violations of the write modes' semantics in table ``t`` (commit records in commit order)."""
    lake = _Lake(observer=rows)
    v: list[str] = []
    events: list[tuple[int, int, Any]] = [(version, 0, record) for version, record in t.records]
    events += [(version, 1, change) for version, change in t.foreign]
    for _, kind, event in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 1:
            lake.foreign(event)
            continue
        decided = []
        for seq in range(event.first, event.last + 1):
            token, outcome = outcome_at[seq]
            entry = by_token.get(token)
            if entry is not None:
                decided.append((seq, outcome, entry))
        v.extend(_commit(lake, event.first, decided, t, rows))
    name = f"table {t.uuid[:8]}"
    if lake.heads != t.heads:
        v.append(f"model: {name}: refs differ from replaying the WAL and other engines in order: {lake.heads}")
    for branch in sorted(set(lake.files) | set(t.branches) | {MAIN_BRANCH}):
        expected = set(lake.files.get(branch, {}))
        actual = {str(f["p"]) for f in (t.files if branch == MAIN_BRANCH else t.branches.get(branch, []))}
        if expected != actual:
            v.append(
                f"I1: {name}: branch {branch} differs from replaying the WAL in order: extra "
                f"{sorted(actual - expected)[:3]}, missing {sorted(expected - actual)[:3]}"
            )
    return v
