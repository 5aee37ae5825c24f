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
"""

from __future__ import annotations

from pyspark_fenced_sink.commit import CommitContext, recover
from pyspark_fenced_sink.fencing import new_token
from pyspark_fenced_sink.naming import FileTag
from pyspark_fenced_sink.state import CommittedState
from pyspark_fenced_sink.wal import WAL_PREFIX, EntryKind, WalEntry, seq_of

__all__ = ["collectable", "expire_writes", "truncate_wal"]


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
    if tag.batch is not None and current.last_batch is not None and tag.batch <= current.last_batch:
        return True
    return tag.epoch is not None and tag.epoch < current.epoch


def truncate_wal(ctx: CommitContext) -> int:
    """Delete WAL entries below the committed upper; returns how many were deleted."""
    upper = ctx.port.load().state.upper
    deleted = 0
    for key in ctx.wal.store.list(WAL_PREFIX):
        seq = seq_of(key)
        if seq is None:
            continue
        if seq >= upper:
            break
        ctx.wal.store.delete(key)
        deleted += 1
    return deleted


def expire_writes(ctx: CommitContext, before_upper: int) -> int:
    """Put an ``expire`` barrier and reconcile through it; returns its seq.

    Once it is reconciled, anonymous writes opened before ``before_upper``
    that were not yet reconciled are rejected, so their files are collectable.
    """
    view = ctx.port.load()
    entry = WalEntry(kind=EntryKind.EXPIRE, token=new_token(), writer="gc", expire_before=before_upper)
    seq = ctx.wal.append(entry, start=view.state.upper)
    recover(ctx)
    return seq
