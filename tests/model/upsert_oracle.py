"""The row-level oracle of upserts: what every key must show after a schedule, stated apart from the code under test.

Two statements of docs/PROTOCOL.md §5.5, both on the model's rows (``[key, order, row id]``):

* :class:`RowOracle` follows the WAL-order replay of ``oracle.replay`` (which owns
  the files): at each applied upsert, for each of its keys, the entry's best row (greatest
  order, null lowest; a delete wins a tie inside the entry, then the later row) wins
  against the key's visible rows and its remembered deletes if its order is at least
  theirs — the entry is later in the WAL — and then every visible row of the key and the
  entry's other rows are gone (all of them for a winning delete); otherwise the entry's
  rows are gone. Without an order column the entry's row always wins, and a key twice
  in the entry must have refused it. A compaction must keep the visible rows of its
  inputs exactly, else it must have been refused. Other engines' changes move the dead
  positions with the files, as Iceberg keeps delete files in the snapshot: a rollback
  returns to the snapshot's, a branch reset or ``set_current_snapshot`` takes the
  other ref's; remembered deletes are the committed state's and stay. At the end each
  branch's visible rows must equal the table's.
* The serial oracle (:func:`greatest_wins`): on a main branch that only appends,
  upserts with an order column and compacts, the visible row of every key is, among all
  applied rows and deletes of the key, the greatest by (order, WAL position, delete,
  position in the write) — the key absent if that is a delete. It does not replay at all
  (and does not apply once another engine deleted files of main or moved it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, TOKEN_CHARS, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.reconcile import Outcome

from .memory_port import Foreign
from .upserts import rows_of, visible_rows

__all__ = ["RowOracle"]

Ref = tuple[str, int]


def _rank(order: Any) -> tuple[int, Any]:
    return (0, 0) if order is None else (1, order)


class RowOracle:
    """Dead row positions per branch and remembered deletes, as the WAL-order replay goes."""

    def __init__(self) -> None:
        self.dead: dict[str, set[Ref]] = {MAIN_BRANCH: set()}
        self.live: dict[str, dict[str, Mapping[str, Any]]] = {MAIN_BRANCH: {}}
        self.tomb: dict[Any, tuple[int, Any]] = {}
        self.files: dict[str, Mapping[str, Any]] = {}
        self.after: dict[int, set[Ref]] = {}  # dead positions of a snapshot's branch after it

    def fork(self, branch: str) -> None:
        self.dead[branch] = set(self.dead[MAIN_BRANCH])
        self.live[branch] = dict(self.live[MAIN_BRANCH])

    def publish(self, branch: str) -> None:
        self.dead[MAIN_BRANCH] = set(self.dead.get(branch, self.dead[MAIN_BRANCH]))
        self.live[MAIN_BRANCH] = dict(self.live.get(branch, self.live[MAIN_BRANCH]))

    def snap(self, sid: int, branch: str) -> None:
        self.after[sid] = set(self.dead.get(branch, self.dead[MAIN_BRANCH]))

    def foreign(self, change: Foreign, files: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        if change.kind == "rollback" and change.target is not None:
            self.dead[MAIN_BRANCH] = set(self.after[change.target])
        elif change.kind == "replace-main" and change.branch in self.dead:
            self.dead[MAIN_BRANCH] = set(self.dead[change.branch])
        elif change.kind == "reset" and change.branch in files:
            self.dead[change.branch] = set(self.dead[MAIN_BRANCH])
        elif change.kind == "drop-ref":
            self.dead.pop(change.branch, None)
        for branch_files in files.values():
            self.files.update(branch_files)
        self.live = {branch: dict(branch_files) for branch, branch_files in files.items()}

    def _visible(self, paths: Any, branch: str) -> dict[Ref, list[Any]]:
        dead = self.dead.get(branch, self.dead[MAIN_BRANCH])
        return {(p, i): r for p in paths for i, r in enumerate(rows_of(self.files.get(p, {}))) if (p, i) not in dead}

    def refusable(self, live: Mapping[str, Mapping[str, Any]], entry: WalEntry) -> bool:
        self.files.update(live)
        if entry.mode is WriteMode.UPSERT:
            if entry.upsert is None or entry.upsert.ordered:
                return False
            keys = Counter(r[0] for f in (*entry.files, *entry.deletes) for r in rows_of(f))
            return any(c > 1 for c in keys.values())
        if entry.mode is WriteMode.COMPACT:
            return not self._compaction_keeps_rows(entry, entry.target)
        return False

    def _compaction_keeps_rows(self, entry: WalEntry, branch: str) -> bool:
        before = sorted(r[2] for r in self._visible(entry.inputs, branch).values())
        after = sorted(r[2] for f in entry.files for r in rows_of(f))
        return before == after

    def applied(self, live: Mapping[str, Mapping[str, Any]], branch: str, entry: WalEntry, v: list[str]) -> bool:
        dead = self.dead.setdefault(branch, set(self.dead[MAIN_BRANCH]))
        changed = False
        if entry.mode is WriteMode.COMPACT and not self._compaction_keeps_rows(entry, branch):
            v.append(f"rows: a compaction of {list(entry.inputs)[:2]} applied although its inputs' rows changed")
        if entry.mode is WriteMode.UPSERT and entry.upsert is not None:
            changed = self._upsert(entry, branch, dead, v)
        self.files.update(live)
        self.live[branch] = dict(live)
        return changed

    def _upsert(self, entry: WalEntry, branch: str, dead: set[Ref], v: list[str]) -> bool:
        ordered = entry.upsert is not None and entry.upsert.ordered
        remembered = ordered and branch == MAIN_BRANCH
        mine = {str(f["p"]) for f in entry.files}
        visible = self._visible([p for p in self.live.get(branch, {}) if p not in mine], branch)
        by_key: dict[Any, list[Ref]] = {}
        for ref, row in visible.items():
            by_key.setdefault(row[0], []).append(ref)
        own: dict[Any, list[tuple[tuple[Any, ...], Ref | None]]] = {}
        for n, f in enumerate(entry.files):
            for i, r in enumerate(rows_of(f)):
                own.setdefault(r[0], []).append(((_rank(r[1]), False, n * 10_000 + i), (str(f["p"]), i)))
        deletes = [r for d in entry.deletes for r in rows_of(d)]
        for j, r in enumerate(deletes):
            own.setdefault(r[0], []).append(((_rank(r[1]), True, j), None))
        gone: list[Ref] = []
        for key, rows in own.items():
            best = max(rows, key=lambda row: row[0])
            if ordered:
                existing = [_rank(visible[ref][1]) for ref in by_key.get(key, [])]
                if remembered and key in self.tomb:
                    existing.append(self.tomb[key])
                wins = not existing or best[0][0] >= max(existing)
            else:
                if len(rows) > 1:
                    v.append(f"rows: an upsert without order applied although key {key} is in it twice")
                wins = True
            gone += [ref for _, ref in rows if ref is not None and (not wins or ref != best[1])]
            if wins:
                gone += by_key.get(key, [])
        if remembered:
            for r in deletes:
                self.tomb[r[0]] = max(self.tomb.get(r[0], _rank(r[1])), _rank(r[1]))
        dead.update(gone)
        return bool(gone)

    def compare(
        self, t: Any, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]
    ) -> list[str]:
        """Differences between the table's visible rows and the replay's, and the serial oracle's on main."""
        v: list[str] = []
        name = f"table {t.uuid[:8]}"
        for branch in sorted(set(self.live) | set(t.branches) | {MAIN_BRANCH}):
            table = visible_rows(t, branch)
            keys = Counter(r[0] for r in table)
            twice = sorted(k for k, c in keys.items() if c > 1)
            if twice:
                v.append(f"rows: {name}: branch {branch} shows keys {twice[:3]} more than once")
            live = self.live.get(branch, self.live[MAIN_BRANCH])
            expected = sorted(r[2] for r in self._visible(live, branch).values())
            if sorted(r[2] for r in table) != expected:
                got = sorted(r[2] for r in table)
                v.append(
                    f"rows: {name}: branch {branch} differs from the WAL-order replay: extra "
                    f"{sorted(set(got) - set(expected))[:3]}, missing {sorted(set(expected) - set(got))[:3]}"
                )
        v.extend(greatest_wins(t, outcome_at, by_token))
        return v


def greatest_wins(t: Any, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]) -> list[str]:
    """The serial oracle on main, for schedules where it applies (module docstring)."""
    if any(change.kind in ("delete", "rollback", "replace-main") for _, change in t.foreign):
        return []  # another engine removed rows of main: only the replay states what is left
    applied = []
    for seq in sorted(outcome_at):
        token, outcome = outcome_at[seq]
        entry = by_token.get(token[:TOKEN_CHARS])
        if outcome is not Outcome.APPLIED or entry is None or entry.target != MAIN_BRANCH:
            continue
        if entry.mode not in (WriteMode.APPEND, WriteMode.UPSERT, WriteMode.COMPACT):
            return []  # an overwrite or a publish replaces rows by files: only the replay states it
        if entry.mode is WriteMode.UPSERT and not (entry.upsert and entry.upsert.ordered):
            return []
        applied.append((seq, entry))
    best: dict[Any, tuple[tuple[Any, ...], str | None]] = {}
    for seq, entry in applied:
        if entry.mode is not WriteMode.UPSERT:
            continue
        for n, f in enumerate(entry.files):
            for i, r in enumerate(rows_of(f)):
                rank = (_rank(r[1]), seq, False, n * 10_000 + i)
                if r[0] not in best or rank > best[r[0]][0]:
                    best[r[0]] = (rank, r[2])
        for j, r in enumerate(r for d in entry.deletes for r in rows_of(d)):
            rank = (_rank(r[1]), seq, True, j)
            if r[0] not in best or rank > best[r[0]][0]:
                best[r[0]] = (rank, None)
    expected = sorted(rid for _, rid in best.values() if rid is not None)
    got = sorted(r[2] for r in visible_rows(t, MAIN_BRANCH))
    if got != expected:
        return [
            f"rows: table {t.uuid[:8]}: main differs from 'per key, the greatest order wins': extra "
            f"{sorted(set(got) - set(expected))[:3]}, missing {sorted(set(expected) - set(got))[:3]}"
        ]
    return []
