"""Where a stream offset that main's lineage no longer holds rejoins it (PROTOCOL.md §14.1; pure, driver).

Main does not only grow by appending children: a fast-forward publish moves it
to a branch's tip (dropping fencedlake's earlier publish-record snapshot from
its history), another engine may cherry-pick, replace a ref or roll back. A
stream offset names a snapshot; when that snapshot is no longer an ancestor of
main's tip, the stream follows lineage, not a list of snapshot ids:

* the newest common ancestor ``C`` of the offset's snapshot and main's tip is
  where both histories agree;
* the offset's side after ``C`` was delivered (its append snapshots' files, the
  first ``position`` of the offset's own snapshot if it was not read to its
  end): :attr:`Rejoin.delivered`;
* main's side after ``C`` is read next, without the files already delivered (a
  cherry-pick re-adds the same files);
* a delivered file main's side does not hold any more (a rollback, a replaced
  ref) means rows were delivered that main no longer has: the stream fails
  naming the snapshot that delivered them — never a silent skip or a second
  delivery.

No pyiceberg here: the model-based test runs the same functions over its
in-memory snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["LineageLost", "Rejoin", "ancestors", "rejoin"]


class LineageLost(Exception):
    """The offset's snapshot cannot be related to main's tip (its history expired, or none is shared)."""

    def __init__(self, snapshot_id: int, why: str) -> None:
        super().__init__(why)
        self.snapshot_id = snapshot_id
        self.why = why


@dataclass(frozen=True)
class Rejoin:
    """How a stream whose offset left main's lineage continues.

    Attributes:
        ancestor: The newest common ancestor of the offset's snapshot and main's tip.
        delivered: Each file the stream delivered after ``ancestor`` -> the snapshot it was delivered from.
    """

    ancestor: int
    delivered: Mapping[str, int]


def ancestors(tip: int | None, parents: Mapping[int, int | None]) -> list[int]:
    """``tip`` and its ancestors still in ``parents`` (snapshot id -> parent id), newest first."""
    out: list[int] = []
    node = tip
    while node is not None and node in parents:
        out.append(node)
        node = parents[node]
    return out


def rejoin(
    start: int,
    position: int,
    complete: bool,
    tip: int,
    parents: Mapping[int, int | None],
    delivered_files: Callable[[int], Sequence[str]],
) -> Rejoin:
    """Relate an offset ``(start, position, complete)`` off main's lineage to main's ``tip``.

    ``parents`` maps every snapshot the table still has to its parent; ``delivered_files(s)`` is what
    the stream delivers of snapshot ``s`` read whole (its added files in stream order if it is an append,
    nothing if the stream skips it).

    Raises:
        LineageLost: the offset's snapshot, or a snapshot between it and a common ancestor, expired; or
            the two histories share no snapshot.
    """
    main = set(ancestors(tip, parents))
    side: list[int] = []
    node: int | None = start
    while node not in main:
        if node is None or node not in parents:
            lost = start if node is None else node
            raise LineageLost(
                lost,
                f"snapshot {lost} of the stream's history expired (or the stream's history shares no snapshot "
                f"with main's), so what it delivered cannot be related to main's snapshot {tip}",
            )
        side.append(node)
        node = parents[node]
    delivered: dict[str, int] = {}
    for snapshot in side:
        files = list(delivered_files(snapshot))
        if snapshot == start and not complete:
            files = files[:position]
        for path in files:
            delivered.setdefault(path, snapshot)
    return Rejoin(node, delivered)
