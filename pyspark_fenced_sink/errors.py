"""The error kinds fencedlake raises, and getting them back through Spark (PROTOCOL.md §3 step 6, §4).

One root, :class:`FencedLakeError`; each kind says whether retrying helps.
Messages say expected vs found and what to do, never a secret (``masking``).
At the Spark boundary (:func:`marked_errors`) an error gains one machine-readable
line, and :func:`fencedlake_error` finds it in whatever exception Spark raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "CommitOutcomeUnknownError",
    "CorruptControlDataError",
    "FencedLakeError",
    "FencedWriterError",
    "InvalidOptionsError",
    "ReadRefusedError",
    "SchemaMismatchError",
    "ServiceError",
    "SkipRefused",
    "StoreError",
    "TableChangedError",
    "TableStateError",
    "WriteRejectedError",
    "fencedlake_error",
]

MARKER = "fencedlake-error"
_MARKED = re.compile(r"\[" + MARKER + r" (\{[^\n]*?\})\]")


class FencedLakeError(Exception):
    """Root of every error fencedlake raises.

    ``retryable`` tells whether the same call, repeated unchanged, may succeed.
    ``fields`` holds the error's facts (also readable as attributes, e.g. ``e.seq``).
    """

    retryable: bool = False

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = {k: v for k, v in fields.items() if v is not None}
        for key, value in fields.items():
            setattr(self, key, value)

    def marked(self) -> FencedLakeError:
        """A copy whose message ends with the machine-readable line :func:`fencedlake_error` reads."""
        line = json.dumps({"kind": type(self).__name__, **self.fields}, sort_keys=True, default=str)
        copy = type(self)(f"{self.message}\n[{MARKER} {line}]", **self.fields)
        copy.message = self.message
        return copy


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
    ``writer.id``, a write expired by ``gc``, a row that does not satisfy
    ``replace-where`` (raised by the task, before the row is written), or an
    entry refused when it was applied (a replace-where over a file that
    straddles its filter, a publish that is not a fast-forward).

    Not retryable as is: the message says what to change. Nothing of the write
    was applied, and its files are removed.
    """


class CommitOutcomeUnknownError(FencedLakeError):
    """The write's WAL entry is durable but its outcome is not known yet.

    Do not retry blindly and never delete its files: the next commit on the
    table (or ``fencedlake recover``) applies the entry exactly once. Look the
    outcome up with ``fencedlake wal TABLE --from SEQ --limit 1``.
    """

    def __init__(self, message: str = "", *, table: str = "", seq: int | None = None, **fields: Any) -> None:
        super().__init__(message, table=table or None, seq=seq, **fields)
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
    """The table changed under a write before its WAL entry was durable.

    It was dropped (and perhaps re-created), renamed away, or its schema kept
    changing concurrently while the write merged columns into it.
    Retryable: nothing of the write is durable yet; run it again against the
    table that now has the name. (Once a write's WAL entry is durable the same
    event is reported as :class:`CommitOutcomeUnknownError` instead.)
    """

    retryable = True


class ReadRefusedError(FencedLakeError):
    """The reader refuses to return rows it cannot return correctly.

    Causes: an Iceberg feature the reader cannot apply (equality delete files,
    a column type Spark cannot hold), a stream that meets an overwrite or
    delete snapshot (unless a ``streaming-skip-*`` option says to skip it),
    or a stream whose next snapshot is no longer in the main branch's history
    (expired, or the branch was rolled back). Not retryable as is: the message
    names the feature or snapshot and what to do. No rows were returned.
    """


class SkipRefused(FencedLakeError):
    """``fencedlake skip`` cannot fill the position: already reconciled, or an object is there.

    Not retryable as is: the message says why.
    """


class StoreError(FencedLakeError):
    """An object-store request failed.

    Retryable: the store may be unavailable for a while. ``ambiguous`` is true
    when a write may or may not have taken effect (the response was lost).
    """

    retryable = True

    def __init__(self, message: str = "", *, ambiguous: bool = False, **fields: Any) -> None:
        super().__init__(message, ambiguous=ambiguous, **fields)
        self.ambiguous = ambiguous


class ServiceError(FencedLakeError):
    """A catalog or object store failed a request while a read, write or command was being planned.

    Nothing was written: it happens before any write-ahead-log entry. ``service`` is ``catalog`` or
    ``storage``, ``endpoint`` says where (secrets masked). ``retryable`` is set per error: true when
    the service could not be reached, timed out or answered with a server error (repeat once it is
    back; a wrong endpoint never comes back), false when it refused the credentials or the
    configuration names something that does not exist (fix the configuration).
    """

    def __init__(self, message: str = "", *, retryable: bool = False, **fields: Any) -> None:
        super().__init__(message, retryable=retryable, **fields)
        self.retryable = retryable


@contextmanager
def marked_errors() -> Iterator[None]:
    """Re-raise a :class:`FencedLakeError` with the marker line (used where the sink hands control to Spark)."""
    try:
        yield
    except FencedLakeError as e:
        if f"[{MARKER} " in str(e):
            raise
        raise e.marked() from e


def _texts(error: BaseException) -> Iterator[str]:
    """Every text an exception raised through Spark carries: its own, its cause chain's, the JVM's."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        for attribute in ("desc", "stackTrace", "java_exception"):
            value = getattr(current, attribute, None)
            if value is not None:
                yield str(value)
        current = current.__cause__ or current.__context__


def fencedlake_error(error: BaseException) -> FencedLakeError | None:
    """The fencedlake error inside ``error`` (any exception Spark raised), or None if there is none.

    Returns an instance of the original class (``FencedWriterError``, ``CommitOutcomeUnknownError``,
    ...) with its message and fields (``seq``, ``table``, ``writer``, ...), so user code can ``except``
    by type::

        try:
            df.write.format("fencedlake").mode("append").save("db.events")
        except Exception as e:
            err = fencedlake_error(e)
            if isinstance(err, CommitOutcomeUnknownError):
                print("durable, applied by the next commit; look up seq", err.seq)
            else:
                raise
    """
    if isinstance(error, FencedLakeError):
        return error
    kinds = {cls.__name__: cls for cls in _kinds(FencedLakeError)}
    for text in _texts(error):
        for match in reversed(list(_MARKED.finditer(text))):
            try:
                fields = json.loads(match.group(1))
            except ValueError:
                continue
            cls = kinds.get(str(fields.pop("kind", "")))
            if cls is None:
                continue
            head = text[: match.start()].rstrip()
            start = head.rfind(f"{cls.__name__}: ")
            message = head[start + len(cls.__name__) + 2 :] if start >= 0 else head.rsplit("\n", 1)[-1]
            return cls(message.strip(), **fields)
    return None


def _kinds(root: type[FencedLakeError]) -> Iterator[type[FencedLakeError]]:
    yield root
    for sub in root.__subclasses__():
        yield from _kinds(sub)
