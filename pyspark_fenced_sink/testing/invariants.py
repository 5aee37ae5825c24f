"""I1-I7 checked on a real Iceberg table and its WAL after a scenario (PROTOCOL.md §11; tests and integration).

Commit records partition ``[0, upper)`` in order and match the WAL's tokens;
applied entries' files are live exactly once, rejected ones' are not; every live
file exists. The model test checks the same over in-memory fakes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, TOKEN_CHARS, EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommitRecord, CommittedState, decode_record
from pyspark_fenced_sink.protocol.wal import Wal

#: Modes whose applied entries never remove a live file (an upsert deletes rows by position).
_KEEP_FILES = (WriteMode.APPEND, WriteMode.UPSERT)


def _records(table: Any) -> list[CommitRecord]:
    """Commit records of every snapshot of the table (all branches), in position order."""
    out: dict[tuple[int, tuple[tuple[str, str], ...]], CommitRecord] = {}
    for snapshot in table.metadata.snapshots:
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is not None:  # a copy of a record (another tool's cherry-pick) counts once; a re-apply twice
            out.setdefault((record.first, record.outcomes), record)
    return sorted(out.values(), key=lambda r: r.first)


def _live_paths(table: Any, branch: str = MAIN_BRANCH) -> list[str]:
    snapshot = table.metadata.snapshot_by_name(branch)
    if snapshot is None:
        return []
    return [
        entry.data_file.file_path
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    ]


def check_table(table: Any, wal: Wal, exists: Callable[[str], bool], *, truncated: bool = False) -> list[str]:
    """Violations of I1-I3 and I6 visible in ``table`` (a loaded pyiceberg Table) and ``wal``.

    ``exists(path)`` tells whether a data file path is present in storage.
    Assumes no snapshot expiry ran (every position below the upper has a
    record). An object at a position a commit voided as a hole was put there
    later and is inert: its writer put its entry again. With ``truncated``
    (``gc`` ran), a position below the upper may
    hold an object a stale writer re-created after truncation (PROTOCOL.md
    §8), so record and object tokens are not compared and such entries are
    not judged.
    """
    v: list[str] = []
    state = CommittedState.decode(table.metadata.properties.get(STATE_PROPERTY))
    records = _records(table)
    # I2/I3: the records partition [0, upper) in order, each position reconciled exactly once.
    expected_first = 0
    for r in records:
        if r.first != expected_first:
            v.append(
                f"I3: commit record starts at {r.first}, expected {expected_first} (a position skipped or re-applied)"
            )
        expected_first = r.last + 1
    if expected_first != state.upper:
        v.append(f"I2: records end at {expected_first}, committed upper is {state.upper}")
    outcome: dict[int, tuple[str, str]] = {}
    for r in records:
        for i, pair in enumerate(r.outcomes):
            outcome[r.first + i] = pair
    # I1: applied entries' files are live once on their branch (unless a later applied entry replaced rows
    # there); files of entries not applied are live on no branch.
    entries: dict[int, WalEntry] = {}
    store = Wal(wal.store, label=wal.label)  # what the store holds now, not what this process kept (§3 "Reads")
    for seq in store.scan(0):
        entry = store.read(seq)
        if entry is not None:
            entries[seq] = entry
    branches = {MAIN_BRANCH, *(e.target for e in entries.values())}
    live_on = {b: Counter(_live_paths(table, b)) for b in branches}
    live = Counter({p: 1 for counts in live_on.values() for p in counts})
    for branch, counts in live_on.items():
        dup = [p for p, c in counts.items() if c > 1]
        if dup:
            v.append(f"I1: data files referenced twice on {branch}: {dup[:5]}")
    replaced_after = {
        b: max(
            (
                s
                for s, e in entries.items()
                if e.target == b and e.mode not in _KEEP_FILES and outcome.get(s, ("", ""))[1] == "A"
            ),
            default=-1,
        )
        for b in branches
    }
    for seq, entry in sorted(entries.items()):
        if seq >= state.upper:
            continue
        if seq not in outcome:
            v.append(f"I3: WAL position {seq} below the upper has no recorded outcome")
            continue
        token, code = outcome[seq]
        if code == "V":  # a hole the commit voided: an object there was put later and is inert (PROTOCOL.md §6)
            if entry.kind is EntryKind.DATA and any(encoded_path(f) in live for f in entry.files):
                applied_elsewhere = any(
                    t == entry.token[:TOKEN_CHARS] and c == "A" for s, (t, c) in outcome.items() if s != seq
                )
                if not applied_elsewhere:
                    v.append(f"I1: entry {seq} ({entry.writer}) landed in a voided hole but its files are live")
            continue
        if token != entry.token[:TOKEN_CHARS]:
            if not truncated:
                v.append(f"I7: record for {seq} names token {token}, the WAL object holds {entry.token[:TOKEN_CHARS]}")
            continue
        if entry.kind is not EntryKind.DATA:
            continue
        paths = [encoded_path(f) for f in entry.files]
        if code == "A" and seq >= replaced_after[entry.target]:
            missing = [p for p in paths if p not in live_on[entry.target]]
            if missing:
                v.append(f"I1: entry {seq} ({entry.writer}) applied but its files are not live: {missing[:3]}")
        elif code != "A":
            wrongly = [p for p in paths if p in live]
            if wrongly:
                v.append(f"I1/I4: entry {seq} ({entry.writer}) decided {code} but its files are live: {wrongly[:3]}")
    # I6: every live file exists.
    gone = [p for p in live if not exists(p)]
    if gone:
        v.append(f"I6: live data files missing from storage: {gone[:5]}")
    return v


def duplicate_keys(table: Any, keys: list[str]) -> list[tuple[Any, ...]]:
    """Keys (tuples of ``keys`` columns) that more than one live row of main holds (upserts: must be none)."""
    rows = table.scan(selected_fields=tuple(keys)).to_arrow()
    counts = Counter(zip(*(rows.column(k).to_pylist() for k in keys), strict=True))
    return sorted(k for k, c in counts.items() if c > 1)


def pending_after_recover(ctx: CommitContext) -> list[int]:
    """Run ``recover`` and return the WAL positions still at or above the upper (I5: must be none)."""
    recover(ctx)
    return ctx.wal.scan(ctx.load().state.upper)
