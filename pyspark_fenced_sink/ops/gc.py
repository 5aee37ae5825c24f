"""Maintenance that is safe against concurrent appends (PROTOCOL.md §8; driver / CLI).

Maintenance never takes a lock — appends run on other machines. It is safe
because every step is ordered by the protocol itself:

* **WAL truncation** deletes only positions below the committed upper (already
  reconciled; their outcomes live in the commit records). A position deleted
  this way can be created again by a writer with a stale view, but such an
  entry is below the upper, so no plan ever reads it, and its writer detects
  the reuse — its catalog commit fails the compare-and-swap, and the commit
  record for that position carries another token (PROTOCOL.md §6).
* **Orphan data files** are removed only when no future WAL entry can
  reference them, which :func:`collectable` decides from the committed state
  alone: a fenced epoch, a batch id at or below the writer's last applied
  batch, or an anonymous write opened before ``gc``'s committed expiry mark
  (an ``expire`` barrier — writes that reach the WAL after it are rejected).
  In-flight writes match none of these, so their files are never collected.
* **Files of upserts** (PROTOCOL.md §5.5, §8): a position delete file a commit
  attempt wrote (``ApplyTag`` kind ``d``) is an orphan once no retained snapshot
  references it and the committed upper has passed the upper in its name (no
  attempt that could still land references it); under the control root's
  ``keys/``, a delete-key file is judged like a data file (its ``FileTag``) and
  is kept while the committed state lists it as a tombstone or a pending entry
  names it, and a merged tombstone file (kind ``t``) is an orphan once the state
  no longer lists it and the upper has passed its name.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.exceptions import CommitFailedException

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.iceberg.codec.fileio import io_properties
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import new_token, put_barrier
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.filetag import ApplyTag, FileTag, table_tag
from pyspark_fenced_sink.protocol.layout import KEYS_PREFIX
from pyspark_fenced_sink.protocol.reconcile import superseded
from pyspark_fenced_sink.protocol.state import CommittedState, decode_record
from pyspark_fenced_sink.store.registry import filesystem_path, open_filesystem

__all__ = ["GcReport", "collectable", "expire_writes", "gc", "truncate_wal"]

logger = logging.getLogger(__name__)


def collectable(tag: FileTag, state: CommittedState) -> bool:
    """True if no WAL entry reconciled after ``state`` can ever reference a file with ``tag``.

    The caller must also check the file is referenced by no retained snapshot
    and no pending entry (those were reconciled, or are pending, before).
    """
    if tag.ephemeral:
        return tag.opened is not None and tag.opened < state.expired_before
    current = state.writers.get(tag.writer)
    if current is None:
        return False
    if tag.batch is not None and (tag.batch in current.batches or not current.batches.known(tag.batch)):
        return True  # a pending entry of this batch id is a duplicate (or too old to judge): never applied
    if tag.epoch is None:
        return False  # an idempotent job's file (no epoch) is judged by its batch id only
    return superseded(tag.epoch, current) is not None  # a later barrier or a later job's tail was reconciled (§7)


def truncate_wal(ctx: CommitContext) -> int:
    """Checkpoint the committed state, then delete WAL entries below ``upper - 1``; returns how many.

    The checkpoint (put before anything is deleted) lets ``fencedlake repair-state``
    rebuild a lost state property without the truncated entries.
    """
    state = ctx.load().state
    if ctx.wal.truncatable(state.upper) == 0:
        return 0
    ctx.wal.put_checkpoint(state.upper, state.encode())
    return ctx.wal.truncate(state.upper)


def expire_writes(ctx: CommitContext, before_upper: int) -> int:
    """Put an ``expire`` barrier and reconcile through it; returns its seq.

    Once it is reconciled, anonymous writes opened before ``before_upper``
    that were not yet reconciled are rejected, so their files are collectable.
    """
    view = ctx.load()
    entry = WalEntry(kind=EntryKind.EXPIRE, token=new_token(), writer="gc", expire_before=before_upper)
    seq = put_barrier(ctx, entry, view.state.upper)
    recover(ctx)
    return seq


@dataclass
class GcReport:
    """What one ``gc`` run removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    expired_before: int | None = None
    wal_truncated: int = 0
    orphans: list[str] = field(default_factory=list)
    orphan_bytes: int = 0
    kept_young: int = 0
    snapshots_expired: list[int] = field(default_factory=list)


def _mtime_s(info: Mapping[str, Any]) -> float:
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    return value.timestamp() if hasattr(value, "timestamp") else float(value or 0)


def _referenced(table: Any, progress: Callable[[str, int, int], None]) -> set[str]:
    """Every data file path any retained snapshot references (scheme-less, for comparison)."""
    seen_manifests: set[str] = set()
    paths: set[str] = set()
    snapshots = table.metadata.snapshots
    for i, snapshot in enumerate(snapshots, 1):
        progress("reading retained snapshots", i, len(snapshots))
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                paths.add(_bare(entry.data_file.file_path))
    return paths


def _expiry_mark(table: Any, cutoff_ms: int) -> int | None:
    """The committed upper of the newest fencedlake snapshot older than ``cutoff_ms``."""
    best: tuple[int, int] | None = None
    for snapshot in table.metadata.snapshots:
        record = decode_record(snapshot.summary.additional_properties if snapshot.summary else {})
        if record is None or snapshot.timestamp_ms >= cutoff_ms:
            continue
        if best is None or snapshot.timestamp_ms > best[0]:
            best = (snapshot.timestamp_ms, record.last + 1)
    return None if best is None else best[1]


def _expire_snapshots(ctx: CommitContext, older_than_ms: int, retain_last: int, dry_run: bool) -> list[int]:
    """Expire snapshots older than ``older_than_ms`` except the newest ``retain_last`` and those refs protect.

    The committed state is a table property, so it survives; tags and branches keep their snapshots.
    """
    for _ in range(5):
        table = ctx.port.table(ctx.load())  # type: ignore[attr-defined]
        newest = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)[-retain_last:] if retain_last else []
        # Snapshots a branch or tag points at are protected (pyiceberg refuses to expire them): keep them and
        # their files.
        keep = {s.snapshot_id for s in newest} | {ref.snapshot_id for ref in table.metadata.refs.values()}
        ids = [
            s.snapshot_id
            for s in table.metadata.snapshots
            if s.timestamp_ms < older_than_ms
            and s.snapshot_id not in keep
            and s.snapshot_id != table.metadata.current_snapshot_id
        ]
        if dry_run or not ids:
            return ids
        try:
            table.maintenance.expire_snapshots().by_ids(ids).commit()
            return ids
        except CommitFailedException:
            continue  # a writer committed meanwhile: recompute on the new metadata
    return []


def gc(
    ctx: CommitContext,
    *,
    grace_s: float,
    dry_run: bool = False,
    snapshots_older_than_s: float | None = None,
    retain_last: int = 10,
    now: Callable[[], float] = time.time,
    progress: Callable[[str, int, int], None] = lambda label, done, total: None,
) -> GcReport:
    """Expire stale anonymous writes, truncate the WAL, remove orphan data files, expire snapshots.

    Order matters (PROTOCOL.md §8): the expiry barrier is committed first, then
    the committed state and the retained snapshots are read, and only then are
    data files listed — so a file listed is either referenced by what was read,
    named by a pending entry read after it, or provably never referenced.
    """
    report = GcReport(dry_run=dry_run)
    cutoff_ms = int((now() - grace_s) * 1000)
    table = ctx.port.table(ctx.load())  # type: ignore[attr-defined]
    mark = _expiry_mark(table, cutoff_ms)
    state = ctx.load().state
    if mark is not None and mark > state.expired_before:
        report.expired_before = mark
        if not dry_run:
            expire_writes(ctx, mark)
            failpoints.hit("gc.after-barrier")
    if dry_run:
        report.wal_truncated = ctx.wal.truncatable(state.upper)
    else:
        report.wal_truncated = truncate_wal(ctx)
    view = ctx.load()
    table = ctx.port.table(view)  # type: ignore[attr-defined]
    referenced = _referenced(table, progress)
    fs, root = open_filesystem(table.metadata.location, io_properties(table))
    listing = fs.find(f"{root.rstrip('/')}/data", detail=True) if fs.exists(f"{root.rstrip('/')}/data") else {}
    pending = _pending_paths(ctx, view.state.upper)
    judged = view.state
    if dry_run and report.expired_before is not None:
        judged = replace(judged, expired_before=report.expired_before)  # as if the barrier were committed
    own = table_tag(str(table.metadata.table_uuid))
    keys_fs, keys_root = open_filesystem(view.state.root or "", dict(getattr(table.io, "properties", {}) or {}))
    keys_dir = f"{keys_root.rstrip('/')}/{KEYS_PREFIX.rstrip('/')}"
    kept = {_bare(str(t["p"])) for t in judged.tombstones}
    keys_listing = keys_fs.find(keys_dir, detail=True) if view.state.root and keys_fs.exists(keys_dir) else {}
    judged_files = [(path, info, fs, referenced | pending) for path, info in sorted(listing.items())]
    judged_files += [(path, info, keys_fs, kept | pending) for path, info in sorted(keys_listing.items())]
    doomed: list[tuple[str, Any]] = []
    for i, (path, info, where, live) in enumerate(judged_files, 1):
        progress("judging data files", i, len(judged_files))
        if path in live or not _orphan(os.path.basename(path), own, judged):
            continue  # live, another engine's or another table's file, or one a future entry may reference
        if _mtime_s(info) * 1000 >= cutoff_ms:
            report.kept_young += 1
            continue
        report.orphans.append(path)
        report.orphan_bytes += int(info.get("size", 0) or 0)
        doomed.append((path, where))
    if not dry_run and doomed:
        failpoints.hit("gc.before-delete")
        for i, (path, where) in enumerate(doomed, 1):
            where.rm_file(path)
            progress("removing orphan files", i, len(doomed))
    if snapshots_older_than_s is not None:
        older_ms = int((now() - snapshots_older_than_s) * 1000)
        report.snapshots_expired = _expire_snapshots(ctx, older_ms, retain_last, dry_run)
    logger.info(
        "fencedlake: gc%s on %s: expired_before=%s wal_truncated=%d orphans=%d (%d bytes) snapshots_expired=%d",
        " (dry run)" if dry_run else "",
        ctx.port.name,
        report.expired_before,
        report.wal_truncated,
        len(report.orphans),
        report.orphan_bytes,
        len(report.snapshots_expired),
    )
    return report


def _orphan(name: str, own: str, state: CommittedState) -> bool:
    """True if a file named ``name``, referenced by nothing read, can never be referenced again."""
    tag = FileTag.parse(name)
    if tag is not None:
        return tag.table == own and collectable(tag, state)
    applied = ApplyTag.parse(name)  # a commit attempt's delete or tombstone file
    return applied is not None and applied.table == own and applied.upper < state.upper


def _pending_paths(ctx: CommitContext, upper: int) -> set[str]:
    """Scheme-less paths of files named by entries at or above ``upper`` (not reconciled yet)."""
    return {_bare(encoded_path(f)) for seq in ctx.wal.scan(upper) for f in _files(ctx, seq)}


def _files(ctx: CommitContext, seq: int) -> Iterable[Mapping[str, Any]]:
    entry = ctx.wal.read(seq)
    return (*entry.files, *entry.deletes) if entry is not None else ()


def _bare(path: str) -> str:
    return filesystem_path(path)
