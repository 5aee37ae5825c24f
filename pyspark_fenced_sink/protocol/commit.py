"""The commit loop's entry points (PROTOCOL.md §3-§6, steps 3-6; driver).

:func:`commit_entry` puts one entry into the WAL (a claim in a window above
the tail) and returns only when its outcome is known: its
``protocol.committer.Committer`` runs the loop as a state machine. One
committer at a time: the writer of the lowest pending entry whose writer
commits it (the head; barriers and skips hold nobody up) lists the WAL, reads
the pending entries it has not read (in parallel, cached across attempts),
reconciles them — voiding the holes entries declare — and makes one catalog
commit that applies every entry it can (group commit; peers' entries too).
Every other writer waits (``protocol.waiting``) and learns its outcome from the
commit record in the table it reloads; one that sees the upper stand still for
its patience helps. It is the only retry loop: after a conflict it re-reads and
re-plans, after an unknown outcome it re-reads and decides from what it finds —
never a blind retry. :func:`recover` commits every pending entry (what the next
writer would do).
"""

from __future__ import annotations

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    TableStateError,
)
from pyspark_fenced_sink.protocol.attempt import attempt_commit
from pyspark_fenced_sink.protocol.committer import Committer
from pyspark_fenced_sink.protocol.context import CommitContext, CommitResult
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.pending import read_and_plan
from pyspark_fenced_sink.protocol.progress import Progress, finish, unknown_error
from pyspark_fenced_sink.protocol.reconcile import Outcome, fenced_by
from pyspark_fenced_sink.protocol.replace import Refusals
from pyspark_fenced_sink.protocol.state import CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView

__all__ = ["commit_entry", "recorded_token", "recover"]


def _fenced_before_put(state: CommittedState, entry: WalEntry) -> str | None:
    """Why ``entry`` is already fenced by the committed state (epochs and tails only grow), or None.

    An entry whose barrier is not reconciled yet (its epoch above the committed one) is not judged here.
    """
    if entry.ephemeral or (entry.epoch is None and entry.tail is None) or entry.kind is not EntryKind.DATA:
        return None
    current = state.writers.get(entry.writer)
    if current is None or (entry.epoch is not None and (current.epoch is None or entry.epoch > current.epoch)):
        return None
    why = fenced_by(entry, current)
    by_barrier = (
        why is not None and entry.epoch is not None and current.epoch is not None and entry.epoch < current.epoch
    )
    return f"{why} at WAL seq {current.epoch}" if by_barrier else why


def commit_entry(ctx: CommitContext, entry: WalEntry, *, view: TableView | None = None) -> CommitResult:
    """Write ``entry`` to the WAL and return once its outcome is known (steps 3-6).

    ``view`` is a committed version the caller has just read (saves one catalog read).
    """
    progress = Progress(t0=ctx.now())
    view = view or ctx.load()
    fenced = _fenced_before_put(view.state, entry)
    if fenced is not None:
        return finish(ctx, progress, None, Outcome.FENCED, fenced, by_peer=True)
    failpoints.hit("commit.before-wal-put")
    claimed = ctx.wal.claim(entry, view.state.upper, pace=view.pace)
    failpoints.hit("commit.after-wal-put")
    seq = claimed.seq
    try:
        return Committer(ctx, claimed, view, progress).run()
    except TableStateError as e:  # the state went bad after our put: our entry waits for the repair
        raise unknown_error(ctx, seq, f"is durable but the table's state cannot be trusted now: {e}") from e
    except CorruptControlDataError as e:  # a damaged entry blocks the table: ours waits behind it
        raise unknown_error(ctx, seq, f"is durable but waits behind damaged control data: {e}") from e
    except (CommitOutcomeUnknownError, failpoints.FailPointError):
        raise  # FailPointError: tests inject it to see exactly that exception arrive
    except Exception as e:  # the entry is durable: any failure now leaves its outcome open (I1)
        raise unknown_error(
            ctx,
            seq,
            f"is durable but its commit failed ({type(e).__name__}: {e}); the next commit on the table applies it "
            f"exactly once: do not re-run the write blindly, look it up with "
            f"`fencedlake wal {ctx.port.name} --from {seq} --limit 1`",
        ) from e


def recorded_token(ctx: CommitContext, view: TableView, seq: int) -> str | None:
    """The token prefix the commit record of ``seq`` holds at ``view`` (None: no record remains)."""
    record = ctx.port.find_record(view, seq)
    found = record.find(seq) if record is not None else None
    return None if found is None else found[0]


def recover(ctx: CommitContext, *, through: int | None = None) -> list[CommitRecord]:
    """Reconcile and commit every pending entry now (what the next writer would do).

    With ``through``, only the entries up to that position (what lies above it is neither read nor
    waited for). Returns the commit records of the commits this call landed, in order.
    """
    records: list[CommitRecord] = []
    progress = Progress(t0=ctx.now())
    cache: dict[int, WalEntry] = {}
    refusals = Refusals()
    view = ctx.load()
    while ctx.now() <= progress.t0 + ctx.max_wait_s:
        if through is not None and view.state.upper > through:
            return records
        listed = ctx.wal.scan(view.state.upper)
        listed = [s for s in listed if s <= through] if through is not None else listed
        pending, plan = read_and_plan(ctx, view, cache, listed, refusals)
        if not plan.decisions:
            return records
        view, landed = attempt_commit(ctx, view, plan, pending, "", progress, refusals)
        if landed is not None:
            records.append(landed)
    raise CommitOutcomeUnknownError(
        f"table {ctx.port.name}: recover could not commit within {ctx.max_wait_s:.0f}s "
        f"({progress.conflicts} conflicts); the pending entries stay durable",
        table=ctx.port.name,
    )
