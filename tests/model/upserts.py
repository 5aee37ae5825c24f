"""Upserts in the model: writer processes with random keys and order values, and the in-memory apply.

A model upsert file carries ``rows``: ``[key, order, row id]`` triples (keys
0..5, orders 0..9 or null); its delete-key file (``deletes``) the same triples
for delete rows. The in-memory port applies an upsert commit the way the Iceberg
port does — in WAL order, the commit's upserts, candidates gathered from the
branch's live files minus their position deletes, the remembered deletes of the
committed state, the entry's own rows — and asks the production decision
(``protocol.upsert.resolve``) which rows lose; losers become one model delete
file per touched data file (``MemoryTable.deletes``: branch -> delete path ->
(data path, positions)). A compaction folds the delete files of its inputs and is
refused (``protocol.replace.check_folded``) if another applies to one meanwhile.

Only the in-memory catalog runs these processes (the SQLite backend's data files
hold no rows).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_fenced_sink.protocol import replace as rules
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.outcome import data_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome, ReconcilePlan, remembered
from pyspark_fenced_sink.protocol.replace import EntryRefused
from pyspark_fenced_sink.protocol.upsert import TOMBSTONE_ORDER_KEY, Source, UpsertSpec, resolve

__all__ = [
    "KEYS",
    "RowChanges",
    "branch_deletes",
    "compacted",
    "dead_positions",
    "row_changes",
    "spec",
    "upsert_process",
    "visible_rows",
]

#: The model's key space (small, so writers collide on keys).
KEYS = 6
#: Ranks of delete rows start here (after every data row of an entry).
_DELETE_RANK = 1_000_000

Deletes = dict[str, tuple[str, frozenset[int]]]


def spec(ordered: bool) -> UpsertSpec:
    """The model's key spec: key column ``k`` (field id 1), order column ``o`` (field id 2) if ordered."""
    return UpsertSpec(keys=((1, "k"),), order=(2, "o") if ordered else None, delete_where="op = 'D'")


def rows_of(f: Mapping[str, Any]) -> list[list[Any]]:
    """A model file's keyed rows (none for files of other writes)."""
    return [list(r) for r in f.get("rows", ())]


def dead_positions(deletes: Deletes, path: str) -> set[int]:
    """Positions of data file ``path`` that the branch's delete files delete."""
    return {p for data, positions in deletes.values() if data == path for p in positions}


def branch_deletes(t: Any, branch: str) -> Deletes:
    """The delete files of ``branch`` (a branch not created yet would fork main's)."""
    return t.deletes[branch] if branch in t.deletes else t.deletes.get(MAIN_BRANCH, {})


def visible_rows(t: Any, branch: str) -> list[tuple[Any, Any, str]]:
    """Every keyed row a reader of ``branch`` sees: (key, order, row id)."""
    deletes = branch_deletes(t, branch)
    out = []
    for f in t.live(branch):
        dead = dead_positions(deletes, str(f["p"]))
        out.extend((r[0], r[1], r[2]) for i, r in enumerate(rows_of(f)) if i not in dead)
    return out


@dataclass
class RowChanges:
    """What a commit does to a branch's delete files: added ones, folded (removed) ones."""

    added: Deletes = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)


def _tombstone_rows(tombstones: tuple[Mapping[str, Any], ...], order_id: int) -> Iterator[list[Any]]:
    for ref in tombstones:
        if int(ref[TOMBSTONE_ORDER_KEY]) == order_id:
            yield from rows_of(ref)


def _apply_upsert(
    seq: int,
    entry: WalEntry,
    live: list[Mapping[str, Any]],
    dead: dict[str, set[int]],
    tombstones: tuple[Mapping[str, Any], ...],
    on_main: bool,
) -> dict[str, set[int]]:
    """The positions one upsert entry deletes (production rules: ``resolve``)."""
    upsert = entry.upsert
    if upsert is None:
        raise EntryRefused(f"WAL seq {seq}: an upsert entry names no key columns", seq)
    mine = {str(f["p"]) for f in entry.files}
    names = {r[0] for f in entry.files for r in rows_of(f)} | {r[0] for d in entry.deletes for r in rows_of(d)}
    keys: list[Any] = []
    orders: list[Any] = []
    sources: list[int] = []
    ranks: list[int] = []
    refs: list[tuple[str, int] | None] = []

    def add(key: Any, order: Any, source: Source, rank: int, ref: tuple[str, int] | None) -> None:
        keys.append(key)
        orders.append(order)
        sources.append(source)
        ranks.append(rank)
        refs.append(ref)

    for f in live:
        path = str(f["p"])
        if path in mine:
            continue
        for i, r in enumerate(rows_of(f)):
            if r[0] in names and i not in dead.get(path, ()):
                add(r[0], r[1], Source.LIVE, 0, (path, i))
    if upsert.order is not None and on_main:
        for r in _tombstone_rows(tombstones, upsert.order[0]):
            if r[0] in names:
                add(r[0], r[1], Source.TOMBSTONE, 0, None)
    for n, f in enumerate(entry.files):
        for i, r in enumerate(rows_of(f)):
            add(r[0], r[1], Source.ROW, n * 10_000 + i, (str(f["p"]), i))
    for j, r in enumerate(r for d in entry.deletes for r in rows_of(d)):
        add(r[0], r[1], Source.DELETE, _DELETE_RANK + j, None)
    distinct = list(dict.fromkeys(keys))
    groups = [distinct.index(k) for k in keys]
    ranked = [-1 if v is None else int(v) for v in orders]  # model orders are 0..9; a null is lowest
    out = resolve(groups, ranked, sources, ranks, ordered=upsert.ordered)
    if out.duplicate is not None:
        key = distinct[out.duplicate]
        raise EntryRefused(f"WAL seq {seq}: key {key!r} appears twice in an upsert without an order", seq)
    losers: dict[str, set[int]] = {}
    for i in out.losers:
        ref = refs[i]
        if ref is not None:
            losers.setdefault(ref[0], set()).add(ref[1])
    return losers


def row_changes(
    t: Any, plan: ReconcilePlan, entries: Mapping[int, WalEntry], branch: str, live: list[Mapping[str, Any]]
) -> RowChanges:
    """The delete files a commit of ``plan`` adds or folds on ``branch`` (``live``: its files before the commit).

    Raises:
        EntryRefused: an upsert cannot be applied (a duplicate key without an order), or a compaction's
            inputs have a delete file it did not fold.
    """
    current = branch_deletes(t, branch)
    changes = RowChanges()
    lead = entries[plan.lead] if plan.lead is not None else None
    if lead is not None and plan.mode is WriteMode.COMPACT:
        inputs = set(lead.inputs)
        applying = {d for d, (path, _) in current.items() if path in inputs}
        try:
            rules.check_folded(lead, applying)
        except EntryRefused as e:
            raise EntryRefused(e.reason, plan.lead) from e
        changes.removed = set(lead.folded)
        return changes
    if plan.mode is not WriteMode.UPSERT:
        return changes
    files = list(live)
    dead: dict[str, set[int]] = {}
    for path, positions in current.values():
        dead.setdefault(path, set()).update(positions)
    tombstones = plan.base.tombstones
    new: dict[str, set[int]] = {}
    for seq in plan.apply:
        entry = entries[seq]
        if entry.mode is WriteMode.UPSERT:
            for path, positions in _apply_upsert(seq, entry, files, dead, tombstones, branch == MAIN_BRANCH).items():
                dead.setdefault(path, set()).update(positions)
                new.setdefault(path, set()).update(positions)
            tombstones = remembered(tombstones, entry, Outcome.APPLIED)
        files.extend(entry.files)
    counter = itertools.count()
    changes.added = {f"d-{plan.base.upper}-{next(counter)}": (p, frozenset(s)) for p, s in sorted(new.items())}
    return changes


def compacted(deletes: Deletes, inputs: list[Mapping[str, Any]]) -> tuple[list[list[Any]], list[str]]:
    """A compaction's output rows (the inputs' visible rows under ``deletes``) and the delete files it folds."""
    paths = {str(f["p"]) for f in inputs}
    rows = []
    for f in inputs:
        dead = dead_positions(deletes, str(f["p"]))
        rows.extend(r for i, r in enumerate(rows_of(f)) if i not in dead)
    return rows, sorted(d for d, (path, _) in deletes.items() if path in paths)


# ---------------------------------------------------------------------------------------------- processes


def upsert_process(env: Any, name: str, ordered: bool, writes: int, delay: float) -> None:
    """An anonymous batch job making ``writes`` upsert writes of 1-4 rows of random keys and orders."""
    from .harness import Write, _open, _run_write, _tag

    env.sched.sleep(delay)
    for n in range(writes):
        write = Write(name, f"upsert:{name}:{n}")
        opened = _open(env, write, None)
        if opened is None:
            return
        ctx, view, ident = opened
        feat = env.feat
        rows = []
        for j in range(feat.randint(1, 4)):
            order = None if feat.random() < 0.1 else feat.randint(0, 9)
            rows.append([feat.randrange(KEYS), order, f"{write.key}:{j}", feat.random() < 0.25])
        data = [r[:3] for r in rows if not r[3]]
        doomed = [r[:3] for r in rows if r[3]]
        count = 0 if not data else feat.randint(1, min(2, len(data)))
        files = env.write_files(_tag(ctx, ident.writer, True, None, ident.opened, None), write.key, count)
        for i, f in enumerate(files):
            f["rows"] = data[i::count]
        deletes = [{"p": f"keys/{write.key}", "rows": doomed}] if doomed else []
        entry = data_entry(
            ident, files, mode=WriteMode.UPSERT, spec_id=view.spec_id, upsert=spec(ordered), deletes=deletes
        )
        _run_write(env, write, entry, ctx)


#: Tests set it to spawn upsert writers in every in-memory schedule (``test_upsert_model``), with this order mode.
FORCED: bool | None = None


def spawn(env: Any, spawn_process: Any) -> None:
    """Add 2-3 upsert writers to a schedule (most schedules with features; every one when :data:`FORCED`)."""
    if env.port_factory is not None:
        return  # the SQLite backend's data files hold no rows
    feat = env.feat
    if FORCED is None and not (env.features and env.upsert_draw.random() < 0.35):
        return  # drawn apart from ``feat``: a schedule without upserts draws as before they existed
    ordered = FORCED if FORCED is not None else feat.random() < 0.7
    for u in range(feat.randint(2, 3)):
        writes, delay = feat.randint(1, 3), feat.uniform(0.0, 0.8)
        spawn_process(f"upsert{u}", lambda u=u, w=writes, d=delay: upsert_process(env, f"upsert{u}", ordered, w, d))
    if feat.random() < 0.5:  # a compaction once upserts have deleted rows: it folds their delete files
        from .harness import compact_process

        spawn_process("compact-late", lambda: compact_process(env, "compact-late", 0.5, wait_for_deletes=True))


def coverage(env: Any, finals: list[Any]) -> dict[str, int]:
    """Which upsert cases a schedule reached (``harness.coverage`` adds them)."""
    from pyspark_fenced_sink.errors import WriteRejectedError

    c: dict[str, int] = {}

    def add(name: str, n: int) -> None:
        c[name] = c.get(name, 0) + n

    for w in env.writes:
        e = w.entry
        if e is None:
            continue
        if e.mode is WriteMode.UPSERT:
            kind = "ordered" if e.upsert is not None and e.upsert.ordered else "unordered"
            add(f"{kind} upserts applied", w.outcome is Outcome.APPLIED)
            refused = isinstance(w.error, WriteRejectedError) and w.error.fields.get("outcome") == "REFUSED"
            add("upserts refused (duplicate key)", refused)
        if e.mode is WriteMode.COMPACT and e.folded:
            add("compactions folding deletes applied", w.outcome is Outcome.APPLIED)
            refused = isinstance(w.error, WriteRejectedError) and w.error.fields.get("outcome") == "REFUSED"
            add("compactions folding deletes refused", refused)
    for final in finals:
        t = final.table
        add("rows deleted by position", sum(len(p) for d in t.deletes.values() for _, p in d.values()))
        add("tombstone files remembered", len(t.state.tombstones))
    return c
