"""Other engines at the seams, and a stream reader of main (model-based test; PROTOCOL.md §5.4, §14.1).

Processes this module adds to a schedule (``spawn``), between any two protocol steps:

* **another engine** (in-memory catalog only) doing what other writers of an
  Iceberg table legitimately do: appends — some with a summary of only
  ``operation``, some of files without NaN counts or without any metrics, some
  with NaN rows —, deleting files from main, rolling main back, pointing main
  at the ``audit`` branch's head, resetting or removing that branch, renaming
  the column a replace-where filters on (and, mostly, renaming it back), and
  — a buggy writer — putting a malformed entry (a shape only the decoder's
  validation refuses) that the operator moves aside and ``skip``s;
* **a second publish**, so main's first publish record leaves its lineage;
* **a stream reader of main** that skips overwrite snapshots, follows main's
  lineage with the production ``iceberg.planning.lineage`` rules and records every file
  it delivers.

The oracle (``tests/model/oracle.replay``) replays these changes in their place
among the commits; :func:`check` adds what they promise: no malformed entry is
ever reconciled, and each stream delivers every appended row on main's lineage
exactly once, refusing only when main lost rows it delivered.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError, SkipRefused, StoreError, TableChangedError
from pyspark_fenced_sink.iceberg.planning import lineage
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, TOKEN_CHARS, EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import new_token
from pyspark_fenced_sink.protocol.filetag import FileTag
from pyspark_fenced_sink.protocol.layout import wal_key
from pyspark_fenced_sink.protocol.repair import skip_position

from . import harness, upserts
from .memory_port import NAME, Foreign, MemoryTable, Snap

__all__ = ["check", "coverage", "spawn"]

OPS = (
    "append",
    "append",
    "append-after-fork",
    "delete",
    "rollback",
    "rollback-bare",
    "rollback-bare",
    "replace-main",
    "replace-main",
    "reset-audit",
    "drop-audit",
    "rename",
    "malformed",
)
DAMAGED = "dmg"  # the token prefix of malformed entries (no committer may ever reconcile one)
_OTHER_TAG = FileTag("other-engine", True, None, 0, None, table="other")  # gc never judges another engine's files


def spawn(env: harness.Env, spawn_fn: Callable[..., None]) -> None:
    """Add this module's processes to a schedule (draws only from ``env.feat``, only with features on)."""
    if not env.features:
        return
    feat = env.feat
    if env.catalog_ops and feat.random() < 0.5:
        ops = [feat.choice(OPS) for _ in range(feat.randint(1, 3))]
        spawn_fn("tool.engine", lambda: engine(env, ops), crashable=False)
    if feat.random() < 0.3:
        reader = Reader(skip_overwrites=True)
        env.extra.setdefault("readers", []).append(reader)
        polls = feat.randint(2, 6)
        spawn_fn("reader", lambda: read_stream(env, reader, polls), crashable=False)
    if feat.random() < 0.3:
        delay = feat.uniform(0.4, 1.2)
        spawn_fn("publish2", lambda: harness.publish_process(env, "publish2", delay))


# ---------------------------------------------------------------------------------------------- another engine


def engine(env: harness.Env, ops: list[str]) -> None:
    """Another engine's operations on the table behind the name, each between protocol steps."""
    for op in ops:
        env.sched.sleep(env.feat.uniform(0.1, 0.8))
        if op == "malformed":
            # Moving an object aside deletes a WAL key, which a writer resolving an ambiguous put of the
            # same key (``store.base.create_resolved``: keys never deleted while in use) could race; an
            # operator acts long after such retries end, so the model does it only without lost responses.
            if env.faults.ambiguous_put == 0:
                _malformed_put(env)
            continue
        t = env.catalog.tables.get(NAME)
        if t is None:
            continue
        ready = _READY.get(op)
        for _ in range(10 if ready is not None else 0):  # wait (a little) for something to act on
            if ready is not None and ready(t):
                env.sched.sleep(env.feat.uniform(0.05, 0.3))  # (readers may read it meanwhile)
                break
            env.sched.sleep(0.15)
        env.sched.checkpoint()
        with t.lock:
            done = _OPERATIONS[op](env, t)
            if done is not None:
                t.version += 1
                t.foreign.append((t.version, done))
                env.injected[f"other engine: {op}"] += 1
        if op == "rename" and done is not None and env.feat.random() < 0.7:
            env.sched.sleep(env.feat.uniform(0.05, 0.5))
            with t.lock:
                t.columns[3], t.version = "v", t.version + 1  # renamed back (Iceberg keeps the field id)


def _append(env: harness.Env, t: MemoryTable, *, minimal: bool | None = None) -> Foreign | None:
    feat = env.feat
    path = f"{t.location}/data/other-{uuid.UUID(int=feat.getrandbits(128)).hex}.parquet"
    lo = feat.randint(0, 9)
    f: dict[str, Any] = {
        "p": path,
        "key": f"{harness.OTHER}{path}",
        "s": t.spec_id or 0,  # written under the table's partition spec now
        "pt": [f"p{feat.randint(0, 1)}"],
        "lo": lo,
        "hi": min(9, lo + feat.randint(0, 2)),
        "nan": feat.random() < 0.5,
        "st": feat.choice(["full", "no-nan", "no-nan", "none"]),  # pyiceberg itself writes no NaN counts
    }
    f["part"] = int(f["pt"][0][1])
    minimal = feat.random() < 0.5 if minimal is None else minimal
    counters = {"operation": "append"} if minimal else {"operation": "append", "added-data-files": "1"}
    env.disk[path] = _OTHER_TAG
    t.files = [*t.files, f]
    t.ever_referenced.add(path)
    t.snapshot(
        MAIN_BRANCH, True, Snap(op="append", added=(path,), appended=(path,), counters=counters, manifests=((1, 0),))
    )
    env.injected["other engine: minimal-summary appends"] += minimal
    return Foreign("append", file=f)


def _append_after_fork(env: harness.Env, t: MemoryTable) -> Foreign | None:
    """Fork ``audit`` from main if it does not exist (``CREATE BRANCH``), then append to main with a summary
    of only ``operation``: a publish of ``audit`` must now be refused (main changed data since the fork)."""
    if t.heads.get(MAIN_BRANCH) is None:
        return None
    if "audit" not in t.branches:
        t.branches["audit"] = list(t.files)
        t.heads["audit"] = t.heads[MAIN_BRANCH]
        t.deletes["audit"] = dict(t.deletes.get(MAIN_BRANCH, {}))
        t.version += 1
        t.foreign.append((t.version, Foreign("fork", branch="audit")))
    return _append(env, t, minimal=True)


def _delete(env: harness.Env, t: MemoryTable) -> Foreign | None:
    if not t.files:
        return None
    doomed = tuple(sorted(str(f["p"]) for f in env.feat.sample(t.files, min(len(t.files), env.feat.randint(1, 2)))))
    t.files = [f for f in t.files if str(f["p"]) not in doomed]
    counters = {"operation": "delete", "deleted-data-files": str(len(doomed))}
    t.snapshot(MAIN_BRANCH, True, Snap(op="delete", counters=counters, manifests=((0, len(doomed)),)))
    return Foreign("delete", paths=doomed)


def _bare(t: MemoryTable) -> int:
    """How many of main's newest snapshots added no file (fencedlake's barriers, marks, publish records)."""
    line = _history(t)
    return next((i for i, sid in enumerate(line) if t.snaps[sid].added), len(line) - 1)


def _rollback(env: harness.Env, t: MemoryTable) -> Foreign | None:
    line = _history(t)
    older = line[1:]
    if not older:
        return None
    target = env.feat.choice(older)
    return _roll_to(t, target)


def _rollback_bare(env: harness.Env, t: MemoryTable) -> Foreign | None:
    """Back over the newest snapshots that added nothing: a stream that read them has nothing to take back."""
    bare = _bare(t)
    return _roll_to(t, _history(t)[bare]) if bare > 0 else None


def _roll_to(t: MemoryTable, target: int) -> Foreign:
    t.heads[MAIN_BRANCH] = target
    t.files = list(t.snaps[target].files)
    t.deletes[MAIN_BRANCH] = dict(t.snaps[target].deletes)  # delete files are part of the snapshot too
    return Foreign("rollback", target=target)


def _reset_audit(env: harness.Env, t: MemoryTable) -> Foreign | None:
    if "audit" not in t.branches:
        return None
    t.branches["audit"] = list(t.files)
    t.heads["audit"] = t.heads[MAIN_BRANCH]
    t.deletes["audit"] = dict(t.deletes.get(MAIN_BRANCH, {}))
    return Foreign("reset", branch="audit")


def _replace_main(env: harness.Env, t: MemoryTable) -> Foreign | None:
    """``CALL set_current_snapshot`` to the audit branch's head: main's own snapshots since the fork leave it."""
    if "audit" not in t.branches:
        return None
    t.heads[MAIN_BRANCH] = t.heads["audit"]
    t.files = list(t.branches["audit"])
    t.deletes[MAIN_BRANCH] = dict(upserts.branch_deletes(t, "audit"))
    return Foreign("replace-main", branch="audit")


def _drop_audit(env: harness.Env, t: MemoryTable) -> Foreign | None:
    if "audit" not in t.branches:
        return None
    del t.branches["audit"]
    t.heads.pop("audit", None)
    t.deletes.pop("audit", None)
    return Foreign("drop-ref", branch="audit")


def _rename(env: harness.Env, t: MemoryTable) -> Foreign | None:
    t.columns[3] = "w"  # ALTER TABLE RENAME COLUMN v TO w: field id 3 keeps its data
    return Foreign("rename")


def _history(t: MemoryTable) -> list[int]:
    return lineage.ancestors(t.heads.get(MAIN_BRANCH), {sid: s.parent for sid, s in t.snaps.items()})


#: What an operation needs to find on the table to do anything.
_READY: dict[str, Callable[[MemoryTable], bool]] = {
    "rollback": lambda t: len(_history(t)) >= 3,
    "rollback-bare": lambda t: _bare(t) > 0,
    "append-after-fork": lambda t: t.heads.get(MAIN_BRANCH) is not None,
    "replace-main": lambda t: "audit" in t.branches,
    "reset-audit": lambda t: "audit" in t.branches,
    "drop-audit": lambda t: "audit" in t.branches,
}
_OPERATIONS: dict[str, Callable[[harness.Env, MemoryTable], Foreign | None]] = {
    "append": _append,
    "append-after-fork": lambda env, t: _append_after_fork(env, t),
    "delete": _delete,
    "rollback": _rollback,
    "rollback-bare": _rollback_bare,
    "replace-main": _replace_main,
    "reset-audit": _reset_audit,
    "drop-audit": _drop_audit,
    "rename": _rename,
}


def _malformed_put(env: harness.Env) -> None:
    """A buggy writer puts a malformed entry at the WAL's tail; the operator then moves it aside and skips it.

    The operator acts once it blocks the table (PROTOCOL.md §8.1). Only the decoder's validation tells the
    entry is malformed, and no committer may ever reconcile it.
    """
    try:
        ctx = env.ctx(keep=False)  # the buggy writer, then the operator's CLI: nothing kept
        upper = ctx.load().state.upper
    except harness.WRITE_ERRORS:
        return
    table = next(t for t in env.catalog.created if ctx.identity is not None and t.uuid == ctx.identity.uuid)
    store = ctx.wal.store
    raw = _malformed(env)
    for _ in range(5):
        seq = max(ctx.wal.scan(upper), default=upper - 1) + 1
        try:
            if store.put_if_absent(wal_key(seq), raw):
                break
        except StoreError:  # a lost response: ours if the object is there
            if store.get(wal_key(seq)) == raw:
                break
    else:
        return
    env.injected["malformed entries put"] += 1
    for _ in range(20):  # the operator notices once it blocks the table (or soon anyway)
        env.sched.sleep(env.feat.uniform(0.05, 0.2))
        with table.lock:
            upper = table.state.upper  # this table's, even if another one is behind the name now
        if upper >= seq:
            break
    if upper > seq:
        return  # reconciled: only a decoder that let it through can do that (check() reports it)
    store.delete(wal_key(seq))  # moved aside
    for _ in range(5):
        try:
            skip_position(ctx, seq, "malformed entry moved aside (model)")
            return
        except SkipRefused:
            return
        except TableChangedError:  # dropped or renamed meanwhile: its log still needs the skip entry
            ctx.wal.put_skip(seq, WalEntry(kind=EntryKind.SKIP, token=new_token(), writer="operator"))
            return
        except (CorruptControlDataError, *harness.WRITE_ERRORS):
            env.sched.sleep(0.1)


def _malformed(env: harness.Env) -> bytes:
    """An entry of a shape fencedlake never writes, that only field validation refuses."""
    token = f"{DAMAGED}{uuid.UUID(int=env.feat.getrandbits(128)).hex}"
    body: dict[str, Any] = {"v": 3, "token": token, "writer": "buggy", "created_ms": 1}
    shape = env.feat.choice(["publish-no-branch", "filter-lost", "strict-no-batch", "fence-batch", "expire-no-mark"])
    body.update(
        {
            "publish-no-branch": {"kind": "publish", "mode": "publish"},
            "filter-lost": {"kind": "data", "mode": "filter", "ephemeral": True},
            "strict-no-batch": {"kind": "data", "strict": True, "epoch": 0},
            "fence-batch": {"kind": "fence", "batch": 3},
            "expire-no-mark": {"kind": "expire"},
        }[shape]
    )
    return json.dumps(body).encode()


# ---------------------------------------------------------------------------------------------- stream reader


@dataclass
class Reader:
    """A stream of main's appends: its offset (a snapshot read to its end), what it delivered, why it stopped."""

    skip_overwrites: bool
    offset: int | None = None
    delivered: list[str] = field(default_factory=list)
    refused: str | None = None
    lost: list[str] = field(default_factory=list)  # delivered files main no longer held when it refused
    rejoined: int = 0


def read_stream(env: harness.Env, reader: Reader, polls: int) -> None:
    """Poll main at least ``polls`` times, and on until every other process is done (at most 40 polls)."""
    for i in range(40):
        others = [p for p in env.sched.procs if p.name != "reader" and not p.done]
        if i >= polls and not others:
            return
        env.sched.sleep(env.feat.uniform(0.01, 0.1) if i == 0 else env.feat.uniform(0.1, 0.3))
        poll(env.table, reader)


def poll(t: MemoryTable, reader: Reader) -> None:
    """One micro-batch: main's snapshots after the offset (following lineage when main left it), appends read."""
    if reader.refused is not None:
        return
    with t.lock:
        head = t.heads.get(MAIN_BRANCH)
        snaps: Mapping[int, Snap] = dict(t.snaps)
    if head is None:
        return
    parents = {sid: s.parent for sid, s in snaps.items()}
    line = lineage.ancestors(head, parents)
    skip: set[str] = set()
    if reader.offset is None:
        newer = line
    elif reader.offset in line:
        newer = line[: line.index(reader.offset)]
    else:
        held_now = {p for s in line for p in snaps[s].added}
        try:
            found = lineage.rejoin(reader.offset, 0, True, head, parents, lambda s: _delivers(snaps[s]))
        except lineage.LineageLost as e:
            _refuse(reader, e.why, held_now)
            return
        newer = line[: line.index(found.ancestor)]
        skip = set(found.delivered)
        if skip - {p for s in newer for p in snaps[s].added}:
            _refuse(reader, "main no longer holds rows it delivered", held_now)
            return
        reader.rejoined += 1
    for sid in reversed(newer):
        reader.delivered.extend(p for p in _delivers(snaps[sid]) if p not in skip)
    reader.offset = head


def _delivers(snap: Snap) -> list[str]:
    return list(snap.added) if snap.op == "append" else []


def _refuse(reader: Reader, why: str, held: set[str]) -> None:
    reader.refused = why
    reader.lost = sorted(set(reader.delivered) - held)


# ---------------------------------------------------------------------------------------------- checks


def check(env: harness.Env, tables: list[MemoryTable]) -> list[str]:
    """What other engines and stream readers add to the invariants (after the final recover)."""
    v: list[str] = []
    for t in tables:
        damaged = [r.first for _, r in t.records for tok, _ in r.outcomes if tok.startswith(DAMAGED[:TOKEN_CHARS])]
        if damaged:
            v.append(f"I3/I9: a malformed WAL entry was decoded and reconciled (record at seq {damaged[0]})")
    _final_polls(env)
    for reader in env.extra.get("readers", []):
        t = env.table
        twice = sorted(p for p, c in Counter(reader.delivered).items() if c > 1)
        if twice:
            v.append(f"stream: files delivered more than once: {twice[:3]}")
        if reader.refused is not None and not reader.lost:
            v.append(f"stream: refused ({reader.refused}) although main still holds every row it delivered")
        if reader.refused is None:
            parents = {sid: s.parent for sid, s in t.snaps.items()}
            appended = {
                p for sid in lineage.ancestors(t.heads.get(MAIN_BRANCH), parents) for p in t.snaps[sid].appended
            }
            missing = sorted(appended - set(reader.delivered))
            if missing:
                v.append(
                    f"stream: appended rows on main's lineage never delivered (skipping overwrites): {missing[:3]}"
                )
    return v


def _final_polls(env: harness.Env) -> None:
    """Each stream reads up to main's final head (once, after the final recover)."""
    if not env.extra.get("polled"):
        env.extra["polled"] = True
        for reader in env.extra.get("readers", []):
            poll(env.table, reader)


def coverage(env: harness.Env, tables: list[MemoryTable]) -> Counter[str]:
    """Which of this module's cases a schedule reached."""
    _final_polls(env)
    c: Counter[str] = Counter()
    for key, count in env.injected.items():
        if key.startswith("other engine") or key == "malformed entries put":
            c[key] += count
    for reader in env.extra.get("readers", []):
        c["stream readers"] += 1
        c["stream rows delivered"] += len(reader.delivered)
        c["stream rejoined main's lineage"] += reader.rejoined
        c["stream refused (main lost delivered rows)"] += reader.refused is not None
    return c
