"""A write's driver-side lifecycle after its files exist (PROTOCOL.md steps 3-6; Spark-free).

The Spark writers (``batch``, ``streaming``) and the model-based test call the
same two functions, so the model exercises exactly what the sink runs:

* :func:`data_entry` builds the WAL entry of a write;
* :func:`finish_write` commits it and turns the outcome into the user-facing
  result: success (applied, or a duplicate of an applied batch), or an error.
  Files of an entry that will never be applied (duplicate, fenced, rejected)
  are removed here — the outcome is final, so nothing can reference them.
  Files of an entry whose outcome is unknown are never removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark_fenced_sink.errors import FencedWriterError, WriteRejectedError
from pyspark_fenced_sink.protocol.commit import commit_entry
from pyspark_fenced_sink.protocol.context import CommitContext, CommitResult
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.fencing import WriterIdentity, new_token
from pyspark_fenced_sink.protocol.file_refs import encoded_path, partitions_of
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.upsert import UpsertSpec
from pyspark_fenced_sink.protocol.view import TableView

__all__ = ["data_entry", "finish_write", "raise_for_outcome"]

_HINTS = {
    Outcome.GAP: "the query's checkpoint was lost or swapped; restore it or use a new writer.id",
    Outcome.QUERY_MISMATCH: "a writer.id belongs to one streaming query (checkpoint); use a new writer.id",
    Outcome.EXPIRED: "the write outlived gc's grace period; rerun it (or raise gc's --grace for long jobs)",
    Outcome.SPEC_CHANGED: "the table's partition spec changed while the write ran; rerun it",
    Outcome.MISSING_FILES: "another tool deleted the write's data files while it was pending; rerun it",
    Outcome.STALE_BATCH: "the batch id is older than the ids the table still tracks; use a new batch id",
    Outcome.REFUSED: "the table's data at apply time did not allow it (see above)",
}


def data_entry(
    identity: WriterIdentity,
    files: Sequence[Mapping[str, Any]],
    *,
    mode: WriteMode | str = WriteMode.APPEND,
    batch: int | None = None,
    query: str | None = None,
    strict: bool = False,
    rows: int = 0,
    spec_id: int | None = None,
    untuned: bool = False,
    row_filter: str | None = None,
    filter_ids: Sequence[tuple[str, int]] = (),
    branch: str | None = None,
    properties: Mapping[str, str] | None = None,
    inputs: Sequence[str] = (),
    folded: Sequence[str] = (),
    upsert: UpsertSpec | None = None,
    deletes: Sequence[Mapping[str, Any]] = (),
) -> WalEntry:
    """The data entry of a write by ``identity``.

    A ``DYNAMIC`` entry's partition set is the set of partitions its files were
    written to (an empty write replaces nothing). A ``REPLACE_WHERE`` entry's ``filter_ids`` are
    its filter's columns with the field ids they bound to at planning. A ``COMPACT`` entry's
    ``inputs`` are the paths of the files its files replace, ``folded`` the delete files it
    folds. An ``UPSERT`` entry carries its key columns (``upsert``) and its delete-key files
    (``deletes``).
    """
    mode = WriteMode(mode)
    return WalEntry(
        kind=EntryKind.DATA,
        token=new_token(),
        query=query,
        batch=batch,
        strict=strict,
        mode=mode,
        files=tuple(files),
        partitions=partitions_of(files) if mode is WriteMode.DYNAMIC else (),
        row_filter=row_filter,
        filter_ids=tuple(sorted(filter_ids)),
        branch=branch,
        properties=tuple(sorted((properties or {}).items())),
        inputs=tuple(sorted(inputs)),
        folded=tuple(sorted(folded)),
        upsert=upsert,
        deletes=tuple(deletes),
        rows=rows,
        spec_id=spec_id,
        untuned=untuned,
        writer=identity.writer,
        ephemeral=identity.ephemeral,
        epoch=identity.epoch,
        opened=identity.opened,
        tail=identity.tail,
        run=identity.run,
    )


def raise_for_outcome(result: CommitResult, table: str) -> None:
    """Raise the user-facing error for a failed outcome; return for success."""
    if result.outcome.succeeded:
        return
    facts = {"table": table, "seq": result.seq, "outcome": result.outcome.name}
    if result.outcome is Outcome.FENCED:
        raise FencedWriterError(f"table {table}: {result.detail}; stop this incarnation (not retryable)", **facts)
    raise WriteRejectedError(
        f"table {table}: write rejected at WAL seq {result.seq}: {result.detail}; {_HINTS.get(result.outcome, '')}",
        **facts,
    )


def finish_write(
    ctx: CommitContext,
    entry: WalEntry,
    remove_files: Callable[[Sequence[str]], None],
    *,
    view: TableView | None = None,
) -> CommitResult:
    """Commit ``entry`` and return its result, or raise for a failed outcome.

    ``view`` is the table as the caller last read it (saves a catalog read).

    Raises:
        FencedWriterError: a newer incarnation of the writer opened first.
        WriteRejectedError: batch gap, another query's writer.id, or expired by gc.
        CommitOutcomeUnknownError: the entry is durable; its outcome is not known yet.
    """
    result = commit_entry(ctx, entry, view=view)
    if result.outcome is not Outcome.APPLIED and (entry.files or entry.deletes):
        remove_files([encoded_path(f) for f in (*entry.files, *entry.deletes)])
    raise_for_outcome(result, ctx.port.name)
    return result
