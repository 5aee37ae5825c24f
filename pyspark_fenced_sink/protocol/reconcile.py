"""Three-way reconciliation of pending WAL entries (PROTOCOL.md §5; pure, driver).

``reconcile(state, entries)`` decides, from the committed state and the WAL
entries read from the committed upper on, what the next catalog commit does.
It performs no I/O, so the model-based test can run it through thousands of
interleavings.

Positions are classified against the committed upper ``U`` (:func:`position`):

* **below** (``seq < U``): already reconciled by a committed commit. Never
  applied again and never waited for: a writer that finds its own entry below
  the upper looks its outcome up in the commit records (PROTOCOL.md §6).
* **at** (``seq == U``): next in line. Reconciled now; the upper moves past
  it and the following position is "at" in turn, so one plan reconciles the
  whole contiguous run ``U, U+1, ...`` (group commit).
* **above** (``seq > U`` after a missing position): waits for its
  predecessor. It blocks nothing below it.

Batch ids get the same three-way rule per stable writer: at or below the
writer's last applied batch -> duplicate (already persisted, dropped);
exactly the next -> applied; beyond the next with ``strict`` (streaming) ->
rejected as a gap.

Per-entry outcomes (:class:`Outcome`) are recorded in the commit record;
only ``APPLIED`` data entries contribute files. A plan holds at most one
overwrite, and only as its first applied entry, so every catalog commit is one
append or one atomic replace of the table's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

from pyspark_fenced_sink.options import COMMIT_MAX_GROUP_SIZE_DEFAULT
from pyspark_fenced_sink.protocol.state import CommittedState, WriterState
from pyspark_fenced_sink.protocol.wal import EntryKind, WalEntry, WriteMode

__all__ = ["Decision", "Outcome", "Position", "ReconcilePlan", "position", "reconcile"]


class Position(str, Enum):
    """Where a WAL position stands relative to the committed upper."""

    BELOW = "below"
    AT = "at"
    ABOVE = "above"


def position(seq: int, upper: int) -> Position:
    """Classify ``seq`` against the committed ``upper``."""
    if seq < upper:
        return Position.BELOW
    return Position.AT if seq == upper else Position.ABOVE


class Outcome(str, Enum):
    """What reconciliation did with one entry (one letter in commit records)."""

    APPLIED = "A"
    DUPLICATE = "D"
    FENCED = "F"
    GAP = "G"
    QUERY_MISMATCH = "Q"
    EXPIRED = "X"
    SPEC_CHANGED = "S"
    BARRIER = "B"
    MARK = "M"

    @property
    def succeeded(self) -> bool:
        """True if the writer of the entry should report success."""
        return self in (Outcome.APPLIED, Outcome.DUPLICATE, Outcome.BARRIER, Outcome.MARK)


@dataclass(frozen=True)
class Decision:
    """The outcome of one entry and why."""

    seq: int
    token: str
    writer: str
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True)
class ReconcilePlan:
    """What the next catalog commit does.

    Attributes:
        base: The committed state the plan was computed from.
        state: The state after the commit (upper past every decided position).
        decisions: One per reconciled position, from ``base.upper`` on.
        apply: Positions whose files the commit adds.
        mode: The commit's kind: ``APPEND``, or the mode of its first applied entry when that one
            replaces rows (at most one such entry per plan, always first).
        stop: Why the plan ends: ``tail`` (no next entry), ``gap`` (a position is missing
            while later ones exist), ``overwrite`` (the next applied entry overwrites: next
            commit) or ``limit`` (group size bound).
    """

    base: CommittedState
    state: CommittedState
    decisions: tuple[Decision, ...]
    apply: tuple[int, ...]
    mode: WriteMode
    stop: str

    @property
    def overwrite(self) -> bool:
        """True if the commit replaces rows (its first applied entry does)."""
        return self.mode.replaces_rows

    def decision_for(self, seq: int) -> Decision | None:
        """The decision for ``seq`` if this plan reconciles it."""
        i = seq - self.base.upper
        return self.decisions[i] if 0 <= i < len(self.decisions) else None

    def applied_before(self, seq: int) -> bool:
        """True if the plan applies data at a position before ``seq``."""
        return any(s < seq for s in self.apply)


def _decide(
    seq: int, entry: WalEntry, writers: dict[str, WriterState], expired_before: int
) -> tuple[Outcome, str, int]:
    """Decide one entry, updating ``writers`` in place; returns (outcome, detail, expired_before)."""
    if entry.kind is EntryKind.EXPIRE:
        mark = max(expired_before, entry.expire_before or 0)
        return Outcome.MARK, f"anonymous writes opened before upper {mark} expire", mark
    current = writers.get(entry.writer)
    if entry.kind is EntryKind.FENCE:
        writers[entry.writer] = WriterState(
            epoch=seq,
            run=entry.run,
            query=entry.query or (current.query if current else None),
            last_batch=current.last_batch if current else None,
        )
        return Outcome.BARRIER, f"writer {entry.writer!r} epoch {seq} opened", expired_before
    if entry.ephemeral:
        if entry.opened < expired_before:
            return (
                Outcome.EXPIRED,
                f"write opened at upper {entry.opened}; gc expired writes opened before {expired_before}",
                expired_before,
            )
        return Outcome.APPLIED, "", expired_before
    if entry.epoch is None:
        if entry.strict and current and current.query and entry.query and current.query != entry.query:
            return (
                Outcome.QUERY_MISMATCH,
                f"writer {entry.writer!r} belongs to streaming query {current.query}, not {entry.query}",
                expired_before,
            )
        current = WriterState(
            epoch=seq,
            run=entry.run,
            query=entry.query or (current.query if current else None),
            last_batch=current.last_batch if current else None,
        )
        writers[entry.writer] = current
    elif current is None or entry.epoch != current.epoch:
        fencer = "no open epoch" if current is None else f"epoch {current.epoch}"
        return (
            Outcome.FENCED,
            f"writer {entry.writer!r} epoch {entry.epoch} was fenced by {fencer} at WAL seq {seq}",
            expired_before,
        )
    if entry.batch is not None and current.last_batch is not None:
        if entry.batch <= current.last_batch:
            return (
                Outcome.DUPLICATE,
                f"batch {entry.batch} of writer {entry.writer!r} is at or below its last applied batch "
                f"{current.last_batch}",
                expired_before,
            )
        if entry.strict and entry.batch > current.last_batch + 1:
            return (
                Outcome.GAP,
                f"batch {entry.batch} of writer {entry.writer!r} skips batches after {current.last_batch}",
                expired_before,
            )
    if entry.batch is not None:
        writers[entry.writer] = replace(current, last_batch=entry.batch)
    return Outcome.APPLIED, "", expired_before


def _spec_changed(entry: WalEntry, spec_id: int | None) -> bool:
    return bool(entry.files) and spec_id is not None and entry.spec_id is not None and entry.spec_id != spec_id


def reconcile(
    state: CommittedState,
    entries: Mapping[int, WalEntry],
    *,
    max_group: int = COMMIT_MAX_GROUP_SIZE_DEFAULT,
    spec_id: int | None = None,
) -> ReconcilePlan:
    """Plan the next commit from ``state`` and the entries at or above its upper.

    Entries below ``state.upper`` in ``entries`` are ignored (already reconciled).
    ``spec_id`` is the table's default partition spec in the same version: data
    files written with another spec are rejected (SPEC_CHANGED), because a
    commit can only add files under the default spec.
    """
    writers = dict(state.writers)
    expired_before = state.expired_before
    decisions: list[Decision] = []
    apply: list[int] = []
    mode = WriteMode.APPEND
    seq = state.upper
    stop = "tail"
    while True:
        entry = entries.get(seq)
        if entry is None:
            stop = "gap" if any(s > seq for s in entries) else "tail"
            break
        if len(decisions) >= max_group:
            stop = "limit"
            break
        trial = dict(writers)
        outcome, detail, trial_expired = _decide(seq, entry, trial, expired_before)
        if outcome is Outcome.APPLIED and _spec_changed(entry, spec_id):
            if entry.writer in trial and not entry.ephemeral:  # keep a claim's epoch, not the batch
                before = writers.get(entry.writer)
                trial[entry.writer] = replace(trial[entry.writer], last_batch=before.last_batch if before else None)
            outcome, detail = (
                Outcome.SPEC_CHANGED,
                (f"files were written with partition spec {entry.spec_id}; the table's spec is now {spec_id}"),
            )
        applies = outcome is Outcome.APPLIED and entry.kind is EntryKind.DATA
        if applies and entry.mode.replaces_rows and apply:
            stop = "overwrite"
            break
        writers, expired_before = trial, trial_expired
        decisions.append(Decision(seq, entry.token, entry.writer, outcome, detail))
        if applies:
            mode = entry.mode if not apply else mode
            apply.append(seq)
        seq += 1
    new_state = CommittedState(upper=seq, writers=writers, expired_before=expired_before)
    return ReconcilePlan(state, new_state, tuple(decisions), tuple(apply), mode, stop)
