"""Writer identities, epochs and fence barriers (PROTOCOL.md step 1, §7; driver).

An epoch is a WAL position: the seq of the entry that opened the incarnation
(a ``fence`` barrier, or a data entry that *claims*). Positions are totally
ordered and never reused below the committed upper, so epochs are too, and
"entries of an older epoch written after a newer epoch opened" is simply
"entries of epoch e at a seq above a later epoch's seq" — which
reconciliation marks FENCED (``reconcile._decide``).

* Batch writes with ``writer.id`` open an incarnation when the driver plans
  the write: :func:`open_writer` puts a fence barrier and the epoch travels to
  the commit inside the pickled writer.
* Batch writes without ``writer.id`` get an anonymous id, no epoch and no
  state: nothing else can ever use the id. They remember the upper they
  opened at, so ``gc`` can expire them (PROTOCOL.md §8).
* Streaming queries have no driver-side hook per run: Spark calls
  ``streamWriter()`` for every micro-batch. The run id (Spark's runId,
  reported by executors) identifies the incarnation; :func:`stream_epoch`
  makes a run's first commit *claim* (its data entry becomes its epoch) after
  registering the run with put-if-absent at ``runs/{writer}/{run}.json``. A
  run that finds itself registered but not current was fenced.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import FencedWriterError
from pyspark_fenced_sink.options import validate_writer_id
from pyspark_fenced_sink.protocol.commit import CommitContext, TableView, recover
from pyspark_fenced_sink.protocol.state import CommittedState
from pyspark_fenced_sink.protocol.wal import EntryKind, WalEntry

__all__ = ["WriterIdentity", "fence_writer", "new_token", "open_writer", "stream_epoch"]


def new_token() -> str:
    """A fresh owner token for one WAL put."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class WriterIdentity:
    """Who writes, as carried from ``open`` to ``commit`` (picklable).

    Attributes:
        writer: The writer id (the user's ``writer.id`` or an anonymous one).
        ephemeral: True for the anonymous writer of a batch job.
        epoch: The epoch claimed at open (batch writers with ``writer.id``), else None.
        opened: The committed upper when the writer opened.
        run: The incarnation id (batch write id or streaming run id).
    """

    writer: str
    ephemeral: bool
    epoch: int | None
    opened: int
    run: str


def open_writer(
    ctx: CommitContext, writer_id: str | None, *, run: str | None = None, view: TableView | None = None
) -> WriterIdentity:
    """Open a batch writer: claim an epoch with a fence barrier when ``writer_id`` is given.

    The barrier fences every older incarnation of ``writer_id``: their entries
    put after it are never applied. One conditional PUT. ``view`` is the table
    as the caller has just read it (saves a catalog read).
    """
    run = run or uuid.uuid4().hex
    view = view or ctx.port.load()
    if writer_id is None:
        return WriterIdentity(f"anon-{run[:16]}", True, None, view.state.upper, run)
    validate_writer_id(writer_id)
    barrier = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer=writer_id, run=run)
    epoch = ctx.wal.append(barrier, start=view.state.upper)
    failpoints.hit("driver.after-open")
    return WriterIdentity(writer_id, False, epoch, view.state.upper, run)


def stream_epoch(ctx: CommitContext, state: CommittedState, writer_id: str, run: str) -> int | None:
    """The epoch a streaming run's next entry carries; None means "claim with this entry".

    Raises:
        FencedWriterError: the run opened before and a newer run has claimed since.
    """
    current = state.writers.get(writer_id)
    if current is not None and current.run == run:
        return current.epoch
    if ctx.wal.register_run(writer_id, run, new_token()):
        return None
    if current is None:
        # Registered by an earlier commit of this run whose claim never reached the WAL: claim now.
        return None
    raise FencedWriterError(
        f"writer {writer_id!r} run {run} was fenced by epoch {current.epoch} (run {current.run}) "
        f"at WAL seq {current.epoch}; stop this incarnation"
    )


def fence_writer(ctx: CommitContext, writer_id: str, *, run: str = "operator-fence") -> int:
    """Fence every running incarnation of ``writer_id`` and commit the barrier (CLI ``fence``)."""
    validate_writer_id(writer_id)
    view = ctx.port.load()
    epoch = ctx.wal.append(
        WalEntry(kind=EntryKind.FENCE, token=new_token(), writer=writer_id, run=run), start=view.state.upper
    )
    recover(ctx)
    return epoch
