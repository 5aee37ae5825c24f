"""The error kinds fencedlake raises (driver and executors).

Every error derives from :class:`FencedLakeError`. Each kind's docstring says
whether retrying the same call can help. Messages say what was expected, what
was found and what to do; they never contain secrets (see
``options.redact``).
"""

from __future__ import annotations

__all__ = [
    "CommitOutcomeUnknownError",
    "CorruptControlDataError",
    "FencedLakeError",
    "FencedWriterError",
    "InvalidOptionsError",
    "SchemaMismatchError",
    "StoreError",
    "TableChangedError",
    "TableStateError",
    "WriteRejectedError",
]


class FencedLakeError(Exception):
    """Root of every error fencedlake raises.

    ``retryable`` tells whether the same call, repeated unchanged, may succeed.
    """

    retryable: bool = False


class InvalidOptionsError(FencedLakeError, ValueError):
    """Bad user input: an option, a table name, a partition spec, a type.

    Not retryable: fix the input. Raised on the driver before any task runs,
    so nothing has been written.
    """


class SchemaMismatchError(InvalidOptionsError):
    """The DataFrame's schema cannot be written into the table's schema.

    Not retryable. The message names the column, the expected type and the
    type found. Raised before any task runs; nothing has been written.
    """


class FencedWriterError(FencedLakeError):
    """A newer incarnation of this ``writer.id`` opened: this one is fenced.

    Not retryable and fatal for this incarnation: stop it. Nothing this
    incarnation wrote after the fence is ever applied, and its files are
    removed.
    """


class WriteRejectedError(FencedLakeError):
    """The protocol rejected this write.

    Causes: a batch-id gap, a different streaming query behind the same
    ``writer.id``, or a write expired by ``gc``.

    Not retryable as is: the message says what to change. Nothing of the write
    was applied, and its files are removed.
    """


class CommitOutcomeUnknownError(FencedLakeError):
    """The write's WAL entry is durable but its outcome is not known yet.

    Do not retry blindly and never delete its files: the next commit on the
    table (or ``fencedlake recover``) applies the entry exactly once. Look the
    outcome up with ``fencedlake wal TABLE --from SEQ --limit 1``.
    """

    def __init__(self, message: str, *, table: str = "", seq: int | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.seq = seq


class CorruptControlDataError(FencedLakeError):
    """A control object (WAL entry, committed state) cannot be read.

    Not retryable: operator action. The message names the object.
    """


class TableStateError(CorruptControlDataError):
    """The table's ``fencedlake.state`` cannot be trusted: lost, foreign or edited.

    Not retryable: operator action. The message names the command that
    rebuilds the state (``fencedlake repair-state``). Nothing was written.
    """


class TableChangedError(FencedLakeError):
    """The table was dropped and re-created, or renamed away, while a write was being planned.

    Retryable: nothing of the write is durable yet; run it again against the
    table that now has the name. (Once a write's WAL entry is durable the same
    event is reported as :class:`CommitOutcomeUnknownError` instead.)
    """

    retryable = True


class StoreError(FencedLakeError):
    """An object-store request failed.

    Retryable: the store may be unavailable for a while. ``ambiguous`` is true
    when a write may or may not have taken effect (the response was lost).
    """

    retryable = True

    def __init__(self, message: str, *, ambiguous: bool = False) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous
