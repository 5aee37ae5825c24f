"""The exact set of batch ids a writer has applied (PROTOCOL.md §5, §7; pure).

A re-run of a batch id is answered DUPLICATE (success, nothing added) only if
that very id was applied: the committed state keeps applied ids exactly, as
sorted disjoint intervals (ids that increase by one stay one interval). To
bound the state, at most :data:`MAX_INTERVALS` intervals are kept; when more
would be needed the oldest are dropped and ``floor`` rises to the lowest id
still tracked. A batch id below ``floor`` can no longer be judged and is
rejected, never reported as a duplicate.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_INTERVALS", "BatchIds"]

#: Intervals of applied batch ids kept per writer (older ones are forgotten; ``floor`` rises).
MAX_INTERVALS = 64


@dataclass(frozen=True)
class BatchIds:
    """Applied batch ids: sorted, disjoint, non-adjacent closed intervals; ids below ``floor`` are unknown."""

    intervals: tuple[tuple[int, int], ...] = ()
    floor: int = 0

    def __contains__(self, batch: object) -> bool:
        if not isinstance(batch, int):
            return False
        i = bisect.bisect_right(self.intervals, (batch, float("inf"))) - 1
        return i >= 0 and self.intervals[i][0] <= batch <= self.intervals[i][1]

    @property
    def last(self) -> int | None:
        """The highest applied batch id, or None."""
        return self.intervals[-1][1] if self.intervals else None

    def known(self, batch: int) -> bool:
        """True if whether ``batch`` was applied can still be told (it is not below ``floor``)."""
        return batch >= self.floor

    def add(self, batch: int) -> BatchIds:
        """A copy with ``batch`` applied (merging neighbours, dropping the oldest beyond the bound)."""
        if batch in self:
            return self
        spans = [*self.intervals, (batch, batch)]
        spans.sort()
        merged: list[tuple[int, int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        floor = self.floor
        if len(merged) > MAX_INTERVALS:
            merged = merged[-MAX_INTERVALS:]
            floor = max(floor, merged[0][0])
        return BatchIds(tuple(merged), floor)

    def describe(self) -> str:
        """``"0-41,45"`` style text for logs and the CLI (``"-"`` when empty)."""
        text = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self.intervals) or "-"
        return f"{text} (below {self.floor} unknown)" if self.floor else text

    def encode(self) -> dict[str, Any]:
        """JSON form: ``{"ids": [[lo, hi], ...], "floor": n}`` (floor omitted when 0)."""
        body: dict[str, Any] = {"ids": [list(span) for span in self.intervals]}
        if self.floor:
            body["floor"] = self.floor
        return body

    @classmethod
    def decode(cls, body: Any) -> BatchIds:
        """Parse :meth:`encode`'s form; raises ValueError/TypeError if malformed (the caller reports corruption)."""
        if not isinstance(body, dict):
            raise TypeError(f"batch ids: expected an object, found {type(body).__name__}")
        spans = tuple((int(lo), int(hi)) for lo, hi in body.get("ids", []))
        if any(lo > hi for lo, hi in spans) or any(a[1] + 1 >= b[0] for a, b in itertools.pairwise(spans)):
            raise ValueError(f"batch ids: intervals must be sorted, disjoint and non-adjacent, found {spans}")
        return cls(spans, int(body.get("floor", 0)))
