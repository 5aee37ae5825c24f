"""Operators' ways out: skipping a lost WAL position, rebuilding a lost state (PROTOCOL.md §8.1; CLI).

``skip_position`` fills a missing WAL position (its object lost, or damaged
and moved aside) with a ``skip`` entry — put-if-absent at exactly that
position, so it can never overwrite an entry — and commits it; the position's
outcome SKIPPED, with the operator's reason, is recorded like any other.

The committed state is a function of the WAL and the recorded outcomes: start
from the newest state checkpoint ``gc`` left (or the empty state), and replay
every position from there to the newest commit record through
``reconcile.transition`` with the outcome the record holds — the same code
that changed the state when the commit was made. Every position replayed must
still have its WAL object and its commit record, with matching tokens (a hole
a commit voided has neither an entry nor a state change: it is passed over);
otherwise the rebuild refuses and says which position is missing, rather
than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark_fenced_sink.errors import SkipRefused, TableStateError
from pyspark_fenced_sink.protocol.commit import recorded_token, recover
from pyspark_fenced_sink.protocol.context import CommitConflict, CommitContext
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import new_token
from pyspark_fenced_sink.protocol.reconcile import Outcome, remembered, transition
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView

__all__ = ["Rebuilt", "rebuild_state", "repair_state", "skip_position"]


def skip_position(ctx: CommitContext, seq: int, reason: str) -> list[CommitRecord]:
    """Put a ``skip`` entry at missing position ``seq`` and commit; returns the commit records landed."""
    view = ctx.load()
    if seq < view.state.upper:
        raise SkipRefused(f"table {ctx.port.name}: position {seq} is below the committed upper {view.state.upper}")
    if ctx.wal.occupied(seq):
        raise SkipRefused(
            f"table {ctx.port.name}: position {seq} holds an object; if it is damaged, move it out of the WAL first"
        )
    entry = WalEntry(kind=EntryKind.SKIP, token=new_token(), writer="operator", reason=reason or "no reason given")
    if not ctx.wal.put_skip(seq, entry):
        raise SkipRefused(f"table {ctx.port.name}: a writer put its entry at position {seq} meanwhile")
    # A committer that had read the object before it was lost (or kept it: PROTOCOL.md §3 "Reads") may reconcile
    # the position before the skip's own commit, with the entry it read: the skip entry was never needed. Checked
    # before committing and again after (the copy's commit can land between the two): the position then holds
    # no object the record does not name.
    _refuse_if_reconciled(ctx, ctx.load(), seq, entry.token)
    records = recover(ctx)
    _refuse_if_reconciled(ctx, ctx.load(), seq, entry.token)
    return records


def _refuse_if_reconciled(ctx: CommitContext, view: TableView, seq: int, token: str) -> None:
    """Remove the skip at ``seq`` and refuse if a commit reconciled ``seq`` with another entry."""
    if seq < view.state.upper and recorded_token(ctx, view, seq) != token[:TOKEN_CHARS]:
        ctx.wal.remove(seq)
        raise SkipRefused(
            f"table {ctx.port.name}: position {seq} was reconciled meanwhile; nothing to skip. If its commit record "
            f"names the object you moved aside (`fencedlake wal {ctx.port.name} --from {seq} --limit 1`), copy that "
            "object back to the position, over anything put there since: `repair-state` replays it"
        )


@dataclass(frozen=True)
class Rebuilt:
    """A state rebuilt from the control data.

    Attributes:
        state: The rebuilt committed state.
        checkpoint: The upper of the checkpoint it started from (None: from the empty state).
        replayed: WAL positions replayed on top of it.
    """

    state: CommittedState
    checkpoint: int | None
    replayed: int


def rebuild_state(ctx: CommitContext, table_uuid: str, root: str) -> tuple[Rebuilt, TableView]:
    """Rebuild the committed state of the table at its current version; returns it and the view it is based on.

    Raises:
        TableStateError: a position to replay has no WAL object or no commit record, or their tokens differ.
    """
    view = ctx.port.load()
    records = ctx.port.records(view)
    upper = records[-1].last + 1 if records else 0
    checkpoint = ctx.wal.latest_checkpoint(upper)
    state = CommittedState(table_uuid=table_uuid, root=root)
    start = 0
    if checkpoint is not None:
        start, text = checkpoint
        state = replace(CommittedState.decode(text, where=f"checkpoint {start}"), table_uuid=table_uuid, root=root)
    outcomes = {r.first + i: pair for r in records for i, pair in enumerate(r.outcomes)}
    writers, expired, tombstones = dict(state.writers), state.expired_before, state.tombstones
    for seq in range(start, upper):
        found = outcomes.get(seq)
        if found is not None and found[1] == Outcome.VOID.value:
            continue  # a hole the commit voided: no entry, no state change (a put that landed later is inert)
        entry = ctx.wal.read(seq)
        if entry is None or found is None:
            what = "WAL object" if entry is None else "commit record (its snapshot expired)"
            raise TableStateError(
                f"table {ctx.port.name}: cannot rebuild the state: position {seq} has no {what} and no checkpoint "
                f"covers it; restore the {'object' if entry is None else 'state'} from a backup",
                table=ctx.port.name,
            )
        token, code = found
        if token != entry.token[:TOKEN_CHARS]:
            raise TableStateError(
                f"table {ctx.port.name}: cannot rebuild the state: the commit record of position {seq} names token "
                f"{token} but the WAL object holds {entry.token[:TOKEN_CHARS]}",
                table=ctx.port.name,
            )
        expired = transition(writers, expired, seq, entry, Outcome(code))
        tombstones = remembered(tombstones, entry, Outcome(code))
    rebuilt = replace(state, upper=upper, writers=writers, expired_before=expired, tombstones=tombstones)
    return Rebuilt(rebuilt, None if checkpoint is None else start, upper - start), view


def repair_state(ctx: CommitContext, table_uuid: str, root: str, *, dry_run: bool = False) -> Rebuilt:
    """Rebuild the state and commit it as the table's ``fencedlake.state`` (unless ``dry_run``).

    Retries when a writer commits meanwhile (the rebuild is redone on the new version).
    """
    for _ in range(10):
        rebuilt, view = rebuild_state(ctx, table_uuid, root)
        if dry_run:
            return rebuilt
        try:
            ctx.port.replace_state(view, rebuilt.state)
            return rebuilt
        except CommitConflict:
            continue
    raise TableStateError(
        f"table {ctx.port.name}: repair-state kept conflicting with concurrent commits; retry", table=ctx.port.name
    )
