"""What applying an entry removes, and when it may not apply (PROTOCOL.md §5.1, §5.2, §5.4; pure, driver).

:func:`removals` selects, among the branch's files live on the version a commit
is built on (apply time), what the commit's lead entry removes per write mode;
a replace-where over a straddling file, or a compaction whose input is no longer
live, raises :class:`EntryRefused`. :func:`check_fast_forward` is publish's rule,
over :func:`changed_data`. What a file's metadata can prove (:func:`missing_stats`,
:func:`holds_unmatched`: absent is unknown, never zero) and a filter's columns by
field id (:func:`filter_columns_now`) are the rules other engines' metadata meets.
A refusal is an external decision (``Outcome.REFUSED``), committed before it is
reported.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry, WriteMode

__all__ = [
    "ColumnStats",
    "EntryRefused",
    "LiveFile",
    "Match",
    "Refusals",
    "changed_data",
    "check_fast_forward",
    "check_folded",
    "filter_columns_now",
    "holds_unmatched",
    "missing_stats",
    "removals",
]

#: Snapshot summary counters that, when positive, say a snapshot changed data (Iceberg's summary keys).
DATA_COUNTERS = (
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
    "added-records",
    "deleted-records",
)


class Match(str, Enum):
    """How a live file's rows stand against a row filter (from its partition and statistics).

    ``SOME``: rows on both sides, or statistics that say it may be so; ``UNPROVEN``: the file's metadata
    lacks a statistic the decision needs (a NaN or null count, bounds), so it cannot be placed at all —
    absent metadata is unknown, never zero.
    """

    ALL = "all"
    NONE = "none"
    SOME = "some"
    UNPROVEN = "unproven"


@dataclass(frozen=True)
class ColumnStats:
    """What a data file's metadata says about one column a row filter reads (None: absent).

    Attributes:
        name: The column, for messages.
        compared: The filter compares its values (not only ``IS NULL`` / ``IS NAN`` tests): a null or NaN
            in it matches no such comparison.
        floating: A float or double column (it may hold NaN, which bounds do not cover).
        values: Value count; ``nulls`` and ``nans``: null and NaN counts.
    """

    name: str
    compared: bool
    floating: bool
    values: int | None
    nulls: int | None
    nans: int | None


def missing_stats(columns: Iterable[ColumnStats]) -> str | None:
    """What the file's metadata lacks to prove anything about its rows (None: nothing).

    A missing null count or NaN count is unknown, not zero: a file written with
    ``write.metadata.metrics.default=none``, or by a writer that records no NaN counts, may hold rows
    no bound describes.
    """
    for c in columns:
        if c.values is None or c.nulls is None:
            return f"column {c.name!r} has no value or null count"
        if c.floating and c.nans is None:
            return f"column {c.name!r} has no NaN count"
    return None


def holds_unmatched(columns: Iterable[ColumnStats]) -> bool:
    """True if a compared column holds nulls or NaNs (rows a comparison does not match; counts known)."""
    return any(c.compared and bool(c.nulls or c.nans) for c in columns)


def filter_columns_now(filter_ids: Sequence[tuple[str, int]], current: Mapping[int, str]) -> dict[str, str]:
    """The names a row filter's columns have now: each column -> the current name of the field id it bound to.

    A filter is applied by field id, as Iceberg binds expressions: a column renamed between the write
    and its apply keeps its meaning, and a column of the old name added since is not it.

    Raises:
        EntryRefused: a column the filter bound to was dropped.
    """
    names = {}
    for name, field_id in filter_ids:
        now = current.get(field_id)
        if now is None:
            raise EntryRefused(
                f"replace-where column {name!r} (field id {field_id}) was dropped from the table since the write "
                "was planned, so its filter no longer says which rows it replaces; nothing was changed"
            )
        names[name] = now
    return names


@dataclass(frozen=True)
class LiveFile:
    """A data file live on the target branch, as the protocol sees it.

    Attributes:
        path: The file's path (the catalog side maps it back to its own record).
        spec_id: The partition spec the file was written with.
        partition: Its encoded partition values (as in ``WalEntry.partitions``).
    """

    path: str
    spec_id: int
    partition: tuple[str | None, ...]


class EntryRefused(Exception):
    """The commit's lead entry cannot be applied on the version being committed on.

    Raised by the catalog side while it builds a commit; the commit loop then
    decides the entry REFUSED (with ``reason``) and commits that decision.
    """

    def __init__(self, reason: str, seq: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


class Refusals:
    """The commit loop's memory of refused entries, valid for the one table version they were found on."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.reasons: dict[int, str] = {}

    def at(self, version: str) -> dict[int, str]:
        """The refusals found on ``version`` (all forgotten when the version changes)."""
        if version != self.version:
            self.version, self.reasons = version, {}
        return self.reasons

    def add(self, version: str, lead: int | None, refusal: EntryRefused) -> None:
        """Record ``refusal`` of the entry at ``lead`` (the refused plan's first applied entry) on ``version``."""
        seq = lead if refusal.seq is None else refusal.seq
        reasons = self.at(version)
        if seq is None or seq in reasons:  # the port refused an entry the plan does not apply: a bug, not a loop
            raise RuntimeError(f"table port refused WAL seq {seq} twice on one version: {refusal.reason}")
        reasons[seq] = refusal.reason


def removals(
    entry: WalEntry, live: Sequence[LiveFile], match: Callable[[LiveFile], Match] | None = None
) -> list[LiveFile]:
    """The live files applying ``entry`` removes (``match`` classifies files for ``REPLACE_WHERE``).

    Raises:
        EntryRefused: a replace-where finds a live file whose rows straddle its filter.
    """
    mode = entry.mode
    if mode is WriteMode.OVERWRITE:
        return list(live)
    if mode is WriteMode.DYNAMIC:
        wanted = set(entry.partitions)
        return [f for f in live if f.spec_id == entry.spec_id and f.partition in wanted]
    if mode is WriteMode.REPLACE_WHERE:
        if match is None:
            raise ValueError("a replace-where needs a row-filter classifier")
        doomed = []
        for f in live:
            verdict = match(f)
            if verdict in (Match.SOME, Match.UNPROVEN):
                why = (
                    "has rows on both sides of the filter (by its partition and column statistics)"
                    if verdict is Match.SOME
                    else "lacks the column statistics (null or NaN counts, bounds) that could place its rows, so "
                    "it may have rows on both sides of the filter (written without full metrics?)"
                )
                raise EntryRefused(
                    f"replace-where {entry.row_filter!r} is refused: live file {f.path} on branch {entry.target} "
                    f"{why}, and replace-where only removes whole files whose rows all match; nothing was "
                    "changed. Align the filter with the table's partitioning, or rewrite those rows with "
                    "another engine first"
                )
            if verdict is Match.ALL:
                doomed.append(f)
        return doomed
    if mode is WriteMode.COMPACT:
        return _compaction_inputs(entry, live)
    return []


def _compaction_inputs(entry: WalEntry, live: Sequence[LiveFile]) -> list[LiveFile]:
    """The live files a compaction replaces: all of its inputs, or it is refused."""
    by_path = {f.path: f for f in live}
    gone = [p for p in entry.inputs if p not in by_path]
    if gone or not entry.inputs:
        raise EntryRefused(
            f"compaction of {len(entry.inputs)} file(s) is refused: {len(gone)} of its input files (e.g. "
            f"{gone[0] if gone else 'none given'}) are no longer live on branch {entry.target} (removed by an "
            "overwrite or another compaction since it read them); nothing was changed, the inputs' rows stay "
            "as they are. Run the compaction again"
        )
    return [by_path[p] for p in entry.inputs]


def check_folded(entry: WalEntry, applying: Collection[str]) -> None:
    """A compaction may apply only if the delete files applying to its inputs now are exactly the ones it folded.

    Its outputs hold the inputs' rows as they were with the folded deletes applied. A delete added to an input
    since (an upsert applied meanwhile) would be lost, its deleted rows brought back; a folded delete that no
    longer applies (main rolled back, or its deletes rewritten, by another engine) would delete rows that are
    live now.

    Raises:
        EntryRefused: the delete files applying to its inputs are not the ones it folded.
    """
    extra = sorted(set(applying) - set(entry.folded))
    if extra:
        raise EntryRefused(
            f"compaction is refused: delete file {extra[0]} applies to one of its inputs and was added after the "
            "compaction read them (an upsert or a delete applied meanwhile); its rewrite would bring deleted rows "
            "back. Nothing was changed; run it again"
        )
    gone = sorted(set(entry.folded) - set(applying))
    if gone:
        raise EntryRefused(
            f"compaction is refused: delete file {gone[0]}, folded into its rewrite, no longer applies to its "
            "inputs (main was rolled back, or the deletes rewritten, meanwhile); its rewrite would delete rows "
            "that are live now. Nothing was changed; run it again"
        )


def changed_data(
    counters: Mapping[str, str] | None, own_manifests: Callable[[], Iterable[tuple[int | None, int | None]]]
) -> bool:
    """True if a snapshot added or removed data or delete files; absent facts are never read as "no change".

    The Iceberg spec requires only ``operation`` in a summary, so its counters are a shortcut, not the
    answer: a positive counter (:data:`DATA_COUNTERS`) says "changed" at once; otherwise the manifests the
    snapshot itself added decide (``own_manifests``: their added and deleted file counts, None where the
    manifest list does not say). A snapshot changed data iff one of them added or deleted a file — or
    does not say how many.
    """
    for key in DATA_COUNTERS:
        try:
            if int((counters or {}).get(key) or 0) > 0:
                return True
        except ValueError:
            break  # an unreadable counter: the manifests decide
    return any(added is None or deleted is None or added + deleted > 0 for added, deleted in own_manifests())


def check_fast_forward(
    branch: str, main_head: int | None, branch_head: int | None, history: Mapping[int, tuple[int | None, bool]]
) -> int:
    """The snapshot main moves to when ``branch`` is published; refused unless no data of main is lost.

    ``history`` maps every snapshot id the table still has to (parent id, changed data).

    Raises:
        EntryRefused: the branch does not exist, or main changed data since it forked, or main's
            history since then expired so it cannot be told.
    """
    if branch == MAIN_BRANCH:
        raise EntryRefused("publish needs a branch other than main")
    if branch_head is None:
        raise EntryRefused(f"branch {branch!r} does not exist (nothing was written to it): nothing to publish")
    lineage: set[int] = set()
    node: int | None = branch_head
    while node is not None and node in history:
        lineage.add(node)
        node = history[node][0]
    node = main_head
    while node is not None and node not in lineage:
        if node not in history:
            raise EntryRefused(
                f"main is not a known ancestor of branch {branch!r}: main's snapshot {node} expired, so whether "
                "main changed data since the branch forked cannot be told; nothing was published"
            )
        parent, changed = history[node]
        if changed:
            raise EntryRefused(
                f"main is not an ancestor of branch {branch!r} (not a fast-forward): main's snapshot {node} "
                "changed data after the branch forked; nothing was published. Write the branch again from "
                "main's current data, or merge with another engine"
            )
        node = parent
    return branch_head
