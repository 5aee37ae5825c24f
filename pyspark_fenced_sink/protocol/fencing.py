"""Writer identities, epochs and fence barriers (PROTOCOL.md step 1, §7; driver).

An epoch is the WAL position of the ``fence`` barrier that opened an
incarnation: batch writers with ``writer.id`` and no batch id put one when they
open (:func:`open_writer`), streaming runs when they register at their first
commit (:func:`stream_epoch`, with the run registry), the CLI to fence. Entries
of an older epoch above a newer epoch's barrier are FENCED by reconciliation.
An idempotent job (``writer.id`` + ``writer.batch-id``) puts no barrier: its
entry carries a tail that orders it among the writer's incarnations
(``reconcile.fenced_by``, PROTOCOL.md §7) -- the committed upper when the
writer has never put a barrier (one GET of its barrier mark, no LIST), else the
WAL tail one LIST finds. Every barrier of a writer with no committed epoch marks
the writer first (:func:`_mark_barriers`).
:func:`put_barrier` never trusts a position a truncation may have reused or
a commit may void, and seals the holes below a barrier before it is used.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from dataclasses import dataclass

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    FencedWriterError,
    InvalidOptionsError,
)
from pyspark_fenced_sink.protocol.commit import recorded_token, recover
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, EntryKind, WalEntry
from pyspark_fenced_sink.protocol.state import CommittedState
from pyspark_fenced_sink.protocol.view import TableView

__all__ = [
    "WRITER_ID_PATTERN",
    "WriterIdentity",
    "fence_writer",
    "new_token",
    "open_writer",
    "put_barrier",
    "stream_epoch",
    "validate_writer_id",
]

#: Writer ids (and branch names): letters, digits, ``_ . -``; 1 to 128 characters; not starting with ``.`` or
#: ``-``. A writer id names run-registry keys (``protocol.layout``), so it can never name a parent directory.
WRITER_ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def validate_writer_id(writer_id: str) -> str:
    """Return ``writer_id`` if it is a valid writer identity (:data:`WRITER_ID_PATTERN`), else raise.

    It can never name a parent directory or an option-like token.

    Raises:
        InvalidOptionsError: the id is empty, too long or has other characters.
    """
    if not WRITER_ID_PATTERN.fullmatch(writer_id or ""):  # fullmatch: "$" alone accepts a trailing "\n"
        raise InvalidOptionsError(
            f"writer.id {writer_id!r} is invalid: expected 1-128 characters of letters, digits, "
            "'_', '.', '-', not starting with '.' or '-'"
        )
    return writer_id


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
        barrier_token: The owner token of the barrier that opened ``epoch`` (batch writers).
        tail: An idempotent job's open: the WAL tail it listed (no barrier, ``epoch`` None).
    """

    writer: str
    ephemeral: bool
    epoch: int | None
    opened: int
    run: str
    barrier_token: str | None = None
    tail: int | None = None


def put_barrier(ctx: CommitContext, entry: WalEntry, start: int) -> int:
    """Append a barrier (fence or expire) and return its seq, once it is known to hold the barrier.

    A put can land in a position ``gc`` truncated after this writer listed the
    WAL (the list and the put are two requests; a pause between them can span
    a peer's entry being put, reconciled and truncated there). Such a barrier is
    never reconciled, and an epoch taken from it would fence its own writer. So
    after the put the committed version is read once: a seq at or above the
    upper is pending and will be reconciled; a seq below it is ours only if
    its commit record holds our token (a lost response whose put a peer
    reconciled) — otherwise the barrier is appended again. Data entries need no
    such check: the commit loop does it (PROTOCOL.md §6).

    Writers claim positions in a window above the tail, and a commit voids the
    holes it passes over (PROTOCOL.md §3 step 3). So before the barrier is used:

    * the holes between the upper and it are sealed (``Wal.seal``): an entry of
      an older incarnation put there later would be reconciled before the
      barrier (I4). Sealed, every hole below it is taken, and later puts land
      above it;
    * the same LIST shows what lies above the barrier. A commit voids a position
      only if its LIST missed it but saw an entry above it that declares it (its
      ``floor`` at or below the position: its writer listed before the barrier's
      put). If no entry listed above the barrier declares its position, no commit
      can void it: an entry put later that declares it is seen only by LISTs made
      after the barrier's put, which see the barrier too. So the entries above
      are read (usually one or two GETs: those put in the moments since the
      barrier's put), and only if one declares the barrier's position are the
      entries through the barrier committed now (``recover(through=)``: nothing
      above it is read, so nothing above it can block this); the barrier is then
      used only if its record names it, otherwise it is put again.
    """
    token = entry.token[:TOKEN_CHARS]
    while True:
        claimed = ctx.wal.claim(entry, start)
        seq = claimed.seq
        held = not claimed.vanished or _holds(ctx, seq, entry.token)  # read before the state, as below
        view = ctx.load()
        if seq < view.state.upper:
            if recorded_token(ctx, view, seq) == token:
                return seq
            start = view.state.upper
            continue
        if not held:
            # "Exists", then gone, at or above the upper: an operator moved the object aside (gc deletes only
            # below the upper); never reconciled and not ours. Put the barrier again.
            start = seq
            continue
        above = ctx.wal.seal(view.state.upper, claimed)
        if not _declared(ctx, above, seq):
            return seq  # no entry above it declares its position: no commit can ever void it
        # An entry above declares the barrier's position a hole, and a commit that listed the WAL before the
        # barrier's put would void it: commit through it now, and use it only if its record names it.
        with contextlib.suppress(CorruptControlDataError):  # damaged below it: that blocks every commit, too
            recover(ctx, through=seq)
        view = ctx.load()
        if seq >= view.state.upper or recorded_token(ctx, view, seq) == token:
            return seq
        start = view.state.upper


def _declared(ctx: CommitContext, above: list[int], seq: int) -> bool:
    """True if an entry at ``above`` (positions listed above ``seq``) may declare ``seq`` a hole.

    A damaged or vanished object counts as declaring it (what it declared cannot be known).
    """
    if not above:
        return False
    try:
        found = ctx.wal.read_many(above)
    except CorruptControlDataError:
        return True
    return any(e is None or (e.floor is not None and e.floor <= seq) for e in found)


def _holds(ctx: CommitContext, seq: int, token: str) -> bool:
    """True if WAL position ``seq`` holds the entry with owner ``token`` (a damaged object holds none)."""
    try:
        found = ctx.wal.read(seq)
    except CorruptControlDataError:
        return False
    return found is not None and found.token == token


def open_writer(
    ctx: CommitContext,
    writer_id: str | None,
    *,
    run: str | None = None,
    view: TableView | None = None,
    idempotent: bool = False,
) -> WriterIdentity:
    """Open a batch writer: claim an epoch with a fence barrier when ``writer_id`` is given.

    The barrier fences every older incarnation of ``writer_id``: their entries
    put after it are never applied. ``view`` is the table as the caller has just
    read it (saves a catalog read). An ``idempotent`` job (one with a batch id)
    puts no barrier: its entry carries a tail, and a job that opened later (a
    higher tail) or a barrier at or above it fences it (PROTOCOL.md §7). The tail
    is ``view``'s upper if the writer has never put a barrier (no committed epoch,
    no barrier mark: one GET), else the WAL tail one LIST finds.
    """
    run = run or uuid.uuid4().hex
    view = view or ctx.load()
    if writer_id is None:
        return WriterIdentity(f"anon-{run[:16]}", True, None, view.state.upper, run)
    validate_writer_id(writer_id)
    if idempotent:
        tail = _open_tail(ctx, view, writer_id)
        failpoints.hit("driver.after-open")
        return WriterIdentity(writer_id, False, None, view.state.upper, run, None, tail)
    _mark_barriers(ctx, view.state, writer_id)
    barrier = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer=writer_id, run=run)
    epoch = put_barrier(ctx, barrier, view.state.upper)
    failpoints.hit("driver.after-open")
    return WriterIdentity(writer_id, False, epoch, view.state.upper, run, barrier.token)


def _open_tail(ctx: CommitContext, view: TableView, writer_id: str) -> int:
    """The tail an idempotent job of ``writer_id`` opens at (PROTOCOL.md §7), ``view`` just read.

    The tail must be above every barrier of the writer whose open returned before this one began (else
    that older barrier would fence this job). A pending barrier can lie above the committed upper only
    if the writer has a committed epoch or its barrier mark: every barrier of a writer with neither is
    put after the mark (:func:`_mark_barriers`). With neither, the upper is the tail: no LIST. Both
    tails are monotone in time: uppers only grow, and a LIST made after ``view`` was read never ends
    below its upper (``gc`` keeps the object at ``upper - 1``).
    """
    if not _epoch_committed(view.state, writer_id) and not ctx.wal.barriers_marked(writer_id):
        return view.state.upper
    listed = ctx.wal.scan(view.state.upper)
    return listed[-1] + 1 if listed else view.state.upper


def _mark_barriers(ctx: CommitContext, state: CommittedState, writer_id: str) -> None:
    """Mark ``writer_id`` as a writer that puts barriers before it puts one, unless ``state`` shows its epoch.

    A committed epoch says so for good (a writer's state is never dropped), and only the writer's first
    barriers, until one is reconciled, pay the mark's put.
    """
    if not _epoch_committed(state, writer_id):
        ctx.wal.mark_barriers(writer_id)


def _epoch_committed(state: CommittedState, writer_id: str) -> bool:
    """True if ``state`` shows an epoch of ``writer_id``: a barrier of it was reconciled."""
    current = state.writers.get(writer_id)
    return current is not None and current.epoch is not None


def stream_epoch(ctx: CommitContext, state: CommittedState, writer_id: str, run: str, query: str | None) -> int:
    """The epoch a streaming run's entries carry, registering the run at its first commit.

    One barrier put and one registry put per run; later batches of the run
    read the epoch from the committed state (``state``, as just read).

    Raises:
        FencedWriterError: the run registered before and a newer run has opened since.
    """
    current = state.writers.get(writer_id)
    if current is not None and current.run == run and current.epoch is not None:
        return current.epoch
    registered = ctx.wal.run_epoch(writer_id, run)
    if registered is None:
        _mark_barriers(ctx, state, writer_id)
        barrier = WalEntry(kind=EntryKind.FENCE, token=new_token(), writer=writer_id, run=run, query=query, strict=True)
        epoch = put_barrier(ctx, barrier, state.upper)
        failpoints.hit("stream.after-register")
        registered = ctx.wal.register_run(writer_id, run, epoch)
    if current is not None and current.epoch is not None and current.epoch > registered:
        raise FencedWriterError(
            f"writer {writer_id!r} run {run} (epoch {registered}) was fenced by epoch {current.epoch} "
            f"(run {current.run}) at WAL seq {current.epoch}; stop this incarnation",
            writer=writer_id,
            seq=current.epoch,
        )
    return registered


def fence_writer(ctx: CommitContext, writer_id: str, *, run: str = "operator-fence") -> int:
    """Fence every running incarnation of ``writer_id``: put a barrier and commit it (CLI ``fence``).

    Returns the barrier's seq (the new epoch) once it is committed.

    Raises:
        CommitOutcomeUnknownError: the barrier is durable but could not be committed (e.g. a missing
            WAL position below it): running incarnations are not fenced yet.
    """
    validate_writer_id(writer_id)
    view = ctx.load()
    _mark_barriers(ctx, view.state, writer_id)
    epoch = put_barrier(
        ctx, WalEntry(kind=EntryKind.FENCE, token=new_token(), writer=writer_id, run=run), view.state.upper
    )
    recover(ctx)
    state = ctx.load().state
    current = state.writers.get(writer_id)
    if state.upper <= epoch or current is None or current.epoch is None or current.epoch < epoch:
        raise CommitOutcomeUnknownError(
            f"table {ctx.port.name}: the fence barrier for writer {writer_id!r} is durable at WAL seq {epoch} but "
            f"was not committed (committed upper {state.upper}): running incarnations are NOT fenced yet; see "
            f"`fencedlake status {ctx.port.name}` for what blocks it",
            table=ctx.port.name,
            seq=epoch,
        )
    return epoch
