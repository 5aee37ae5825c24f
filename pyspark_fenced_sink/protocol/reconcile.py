"""Three-way reconciliation of pending WAL entries against the committed upper (PROTOCOL.md §5; pure, driver).

:func:`reconcile` decides what the next catalog commit does from the committed
state, the entries from the upper on and the facts outside the state the caller
passes in (spec id, missing files, refusals: *external* decisions, committed
before they are reported, §6). Positions below the upper are never applied again,
the one at it is applied, those above wait (:func:`position`); batch ids are
judged exactly (``protocol.batches``); a missing position an entry above it
declares jumped over (a *hole*, ``wal.holes``) is decided VOID and passed over,
any other missing position waits (a lost object); :func:`transition` is the one place a
decision changes the state (``repair-state`` replays it), :func:`remembered` the one
place an upsert changes the remembered deletes (§5.5). A commit is a run of
appends, a run of upserts (the catalog side applies them in WAL order), or one
entry that replaces rows, alone, on one branch. No I/O: the model test runs it
through thousands of interleavings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from types import MappingProxyType
from typing import Any

from pyspark_fenced_sink.protocol.batches import BatchIds
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.state import CommittedState, WriterState
from pyspark_fenced_sink.protocol.upsert import remember_deletes

__all__ = [
    "MAX_GROUP_DEFAULT",
    "Decision",
    "Outcome",
    "Position",
    "ReconcilePlan",
    "fenced_by",
    "position",
    "reconcile",
    "remembered",
    "superseded",
    "transition",
]

#: At most this many entries are applied by one catalog commit (option ``commit.max-group-size``); decisions
#: that add nothing to the commit (holes, skips, marks, barriers, rejected entries) are not counted.
MAX_GROUP_DEFAULT = 1000


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
    MISSING_FILES = "L"
    STALE_BATCH = "O"
    REFUSED = "R"
    BARRIER = "B"
    MARK = "M"
    SKIPPED = "K"
    VOID = "V"  # a hole: no entry's outcome (a put landing there later finds another token, §6)

    @property
    def succeeded(self) -> bool:
        """True if the writer of the entry should report success."""
        return self in (Outcome.APPLIED, Outcome.DUPLICATE, Outcome.BARRIER, Outcome.MARK, Outcome.SKIPPED)

    @property
    def external(self) -> bool:
        """True if the decision used catalog or storage facts outside the committed state."""
        return self in (Outcome.SPEC_CHANGED, Outcome.MISSING_FILES, Outcome.REFUSED)


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
        mode: The mode of the commit's first applied entry (``APPEND`` if none applies): every
            applied entry has it (appends, or upserts), or the one applied entry replaces rows.
        stop: Why the plan ends: ``tail`` (no next entry), ``gap`` (a position is missing
            while later ones exist), ``next-commit`` (the next applied entry cannot join this
            commit: it replaces rows, writes to another branch or carries other snapshot
            properties) or ``limit`` (group size bound).
        branch: The branch the commit writes to (``main`` if nothing applies).
        properties: The snapshot properties of every applied entry (all equal), as sorted pairs.
    """

    base: CommittedState
    state: CommittedState
    decisions: tuple[Decision, ...]
    apply: tuple[int, ...]
    mode: WriteMode
    stop: str
    branch: str = MAIN_BRANCH
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def lead(self) -> int | None:
        """The position of the first applied entry (the one whose mode the commit has), if any."""
        return self.apply[0] if self.apply else None

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
    seq: int,
    entry: WalEntry,
    writers: Mapping[str, WriterState],
    expired_before: int,
    spec_id: int | None,
    missing: Collection[int],
    refused: Mapping[int, str] = MappingProxyType({}),
) -> tuple[Outcome, str]:
    """Decide one entry against the state so far (no state change: see :func:`transition`)."""
    if entry.kind is EntryKind.EXPIRE:
        return Outcome.MARK, f"anonymous writes opened before upper {entry.expire_before} expire"
    if entry.kind is EntryKind.SKIP:
        return Outcome.SKIPPED, f"skipped by an operator: {entry.reason or 'no reason given'}"
    if entry.kind is EntryKind.PUBLISH:
        return (Outcome.REFUSED, refused[seq]) if seq in refused else (Outcome.APPLIED, "")
    current = writers.get(entry.writer)
    if entry.strict and current and current.query and entry.query and current.query != entry.query:
        return (
            Outcome.QUERY_MISMATCH,
            f"writer {entry.writer!r} belongs to streaming query {current.query}, not {entry.query}",
        )
    if entry.kind is EntryKind.FENCE:
        return Outcome.BARRIER, f"writer {entry.writer!r} epoch {seq} opened"
    if entry.ephemeral:
        if entry.opened < expired_before:
            return (
                Outcome.EXPIRED,
                f"write opened at upper {entry.opened}; gc expired writes opened before {expired_before}",
            )
    elif (why := fenced_by(entry, current)) is not None:
        return Outcome.FENCED, f"{why} at WAL seq {seq}"
    elif entry.batch is not None:
        verdict = _judge_batch(entry, current or WriterState(epoch=None))
        if verdict is not None:
            return verdict
    if entry.files and spec_id is not None and entry.spec_id is not None and entry.spec_id != spec_id:
        return Outcome.SPEC_CHANGED, f"files were written with partition spec {entry.spec_id}; the table's is {spec_id}"
    if seq in missing:
        return Outcome.MISSING_FILES, "some of the entry's data files no longer exist (removed by another tool?)"
    if seq in refused:
        return Outcome.REFUSED, refused[seq]
    return Outcome.APPLIED, ""


def fenced_by(entry: WalEntry, current: WriterState | None) -> str | None:
    """Why a stable writer's data ``entry`` is fenced by its writer's committed state ``current``, or None.

    Incarnations are ordered on one scale of WAL positions (PROTOCOL.md §7): a barrier at ``e`` opened
    its incarnation *at* ``e``; an idempotent job whose open listed the tail ``t`` (no barrier) opened
    *between* the barriers at ``t - 1`` and ``t``. An entry of an epoch is valid only while that epoch is
    the writer's barrier and no idempotent job that opened after it was reconciled (``tail > epoch``).
    An idempotent job's entry is valid unless a barrier at or above its tail, or an idempotent job with a
    higher tail, was reconciled: jobs with equal tails are not ordered (their batch ids decide).
    """
    if entry.tail is not None:
        who = f"writer {entry.writer!r}'s job opened at WAL tail {entry.tail}"
    else:
        who = f"writer {entry.writer!r} epoch {entry.epoch}"
    fencer = _fencer(entry, current)
    return None if fencer is None else f"{who} was fenced by {fencer}"


def _fencer(entry: WalEntry, current: WriterState | None) -> str | None:
    """What in ``current`` fences ``entry`` (:func:`fenced_by`'s rules), or None."""
    if current is None:
        return None if entry.tail is not None else "no open epoch"
    epoch = current.epoch
    if entry.tail is not None:  # a job opened between the barriers at tail - 1 and tail
        return f"epoch {epoch}" if epoch is not None and entry.tail <= epoch else superseded(entry.tail, current)
    if epoch is None:
        return "no open epoch"
    return f"epoch {epoch}" if entry.epoch is None or entry.epoch > epoch else superseded(entry.epoch, current)


def superseded(epoch: int, current: WriterState) -> str | None:
    """What fences barrier epoch ``epoch`` of a writer for good, or None (PROTOCOL.md §7).

    A later barrier, or an idempotent job that opened later (its tail above ``epoch``), was reconciled:
    committed epochs and tails only grow, so no entry of ``epoch`` is applied again. An epoch *above*
    the committed one is a barrier not reconciled yet, not superseded.
    """
    if current.epoch is not None and epoch < current.epoch:
        return f"epoch {current.epoch}"
    if current.tail is not None and epoch < current.tail:
        return f"a job of the writer opened later, at WAL tail {current.tail}"
    return None


def _judge_batch(entry: WalEntry, current: WriterState) -> tuple[Outcome, str] | None:
    """The outcome a stable writer's batch id forces (duplicate, stale, gap), or None: a new batch."""
    batch, applied, name = int(entry.batch or 0), current.batches, entry.writer
    if not applied.known(batch):
        return (
            Outcome.STALE_BATCH,
            f"batch {batch} of writer {name!r} is older than the oldest batch id still tracked ({applied.floor}): "
            "whether it landed cannot be told",
        )
    if batch in applied:
        return Outcome.DUPLICATE, f"batch {batch} of writer {name!r} was applied before ({applied.describe()})"
    last = applied.last
    if entry.strict and last is not None and batch != last + 1:
        how = "skips batches after" if batch > last else "is out of order below"
        return Outcome.GAP, f"batch {batch} of writer {name!r} {how} its last applied batch {last}"
    return None


def transition(
    writers: dict[str, WriterState], expired_before: int, seq: int, entry: WalEntry, outcome: Outcome
) -> int:
    """Apply the state change of ``entry`` decided ``outcome`` (in place); returns the new expiry mark.

    The one place a decision changes the committed state; ``fencedlake repair-state`` replays
    recorded outcomes through it.
    """
    if outcome is Outcome.MARK:
        return max(expired_before, entry.expire_before or 0)
    current = writers.get(entry.writer)
    if outcome is Outcome.BARRIER:
        writers[entry.writer] = WriterState(
            epoch=seq,
            run=entry.run,
            query=entry.query or (current.query if current else None),
            batches=current.batches if current else BatchIds(),
            tail=current.tail if current else None,
        )
    elif entry.tail is not None and outcome is not Outcome.FENCED:  # an idempotent job's open, ordered by its tail
        known = current or WriterState(epoch=None, run=entry.run)
        batches = known.batches.add(int(entry.batch or 0)) if outcome is Outcome.APPLIED else known.batches
        writers[entry.writer] = replace(known, run=entry.run, tail=max(known.tail or 0, entry.tail), batches=batches)
    elif outcome is Outcome.APPLIED and current is not None and not entry.ephemeral and entry.batch is not None:
        writers[entry.writer] = replace(current, batches=current.batches.add(entry.batch))
    return expired_before


def remembered(
    tombstones: tuple[Mapping[str, Any], ...], entry: WalEntry, outcome: Outcome
) -> tuple[Mapping[str, Any], ...]:
    """The committed tombstone list after ``entry`` was decided ``outcome`` (PROTOCOL.md §5.5).

    Like :func:`transition`, the one place a decision changes it; ``fencedlake repair-state`` replays it.
    """
    if outcome is not Outcome.APPLIED or entry.mode is not WriteMode.UPSERT:
        return tombstones
    return remember_deletes(
        tombstones, entry.upsert, entry.deletes, on_main=entry.target == MAIN_BRANCH, created_ms=entry.created_ms
    )


def _joins(lead: WalEntry, entry: WalEntry) -> bool:
    """True if applied ``entry`` may join the commit whose first applied entry is ``lead``."""
    if entry.target != lead.target or entry.properties != lead.properties:
        return False
    if entry.mode is WriteMode.APPEND:
        return lead.mode.takes_appends
    return entry.mode is WriteMode.UPSERT and lead.mode.takes_upserts


def reconcile(
    state: CommittedState,
    entries: Mapping[int, WalEntry],
    *,
    max_group: int = MAX_GROUP_DEFAULT,
    spec_id: int | None = None,
    missing: Collection[int] = (),
    refused: Mapping[int, str] | None = None,
    voids: Collection[int] = (),
) -> ReconcilePlan:
    """Plan the next commit from ``state`` and the entries at or above its upper.

    Entries below ``state.upper`` in ``entries`` are ignored (already reconciled).
    ``spec_id`` is the table's default partition spec in the same version: data
    files written with another spec are rejected (SPEC_CHANGED), because a
    commit can only add files under the default spec. ``missing`` holds the
    positions whose data files were found missing (MISSING_FILES); ``refused``
    the positions the catalog side refused to apply on this version, and why
    (REFUSED); ``voids`` the missing positions that are holes (``wal.holes``): each
    is decided VOID, the others stop the plan. ``max_group`` bounds the entries the
    plan applies; the plan stops before the first applied entry past it.
    """
    refused = refused or {}
    writers = dict(state.writers)
    expired_before = state.expired_before
    tombstones = state.tombstones
    decisions: list[Decision] = []
    apply: list[int] = []
    lead: WalEntry | None = None
    seq = state.upper
    stop = "tail"
    while True:
        entry = entries.get(seq)
        later = entry is None and any(s > seq for s in entries)
        if entry is None and not (later and seq in voids):
            stop = "gap" if later else "tail"
            break
        if entry is None:  # a hole an entry above declares: void it and go on
            decisions.append(Decision(seq, "", "", Outcome.VOID, "a hole: no entry was put here before the commit"))
            seq += 1
            continue
        outcome, detail = _decide(seq, entry, writers, expired_before, spec_id, missing, refused)
        applies = outcome is Outcome.APPLIED and entry.kind in (EntryKind.DATA, EntryKind.PUBLISH)
        if applies and len(apply) >= max_group:  # only what the commit adds counts (PROTOCOL.md §5)
            stop = "limit"
            break
        if applies and lead is not None and not _joins(lead, entry):
            stop = "next-commit"
            break
        expired_before = transition(writers, expired_before, seq, entry, outcome)
        tombstones = remembered(tombstones, entry, outcome)
        decisions.append(Decision(seq, entry.token, entry.writer, outcome, detail))
        if applies:
            lead = lead or entry
            apply.append(seq)
        seq += 1
    new_state = replace(state, upper=seq, writers=writers, expired_before=expired_before, tombstones=tombstones)
    if lead is None:
        return ReconcilePlan(state, new_state, tuple(decisions), (), WriteMode.APPEND, stop)
    return ReconcilePlan(
        state, new_state, tuple(decisions), tuple(apply), lead.mode, stop, lead.target, lead.properties
    )
