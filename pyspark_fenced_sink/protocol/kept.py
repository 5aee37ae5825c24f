"""The WAL entries a process decoded, kept per control root (PROTOCOL.md §3 "Reads"; driver).

``protocol.wal`` reads through :data:`KEPT` when a ``Wal`` is opened with ``keep=<control root>``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pyspark_fenced_sink.protocol.entry import WalEntry

__all__ = ["KEPT", "KeptEntries"]


class KeptEntries:
    """The WAL entries this process decoded, per control root, up to a byte budget (least recently used go first).

    An object at a WAL position never changes while it exists: entries are put with put-if-absent
    and never overwritten; truncation deletes positions below the committed upper only, and only
    an empty position is ever filled (a seal, an operator's ``skip``). The control root names one
    table incarnation (its UUID is in the path, PROTOCOL.md §2), so a table dropped and created
    again starts a WAL no kept entry belongs to. A kept entry can outlive its object twice: one
    deleted below the upper and filled again by a stale seal or barrier put (below the upper, where
    no plan applies anything, §5, and a plan on an older table version cannot land its
    compare-and-swap); and one lost at or above the upper that an operator skips (the copy may be
    applied instead: ``repair.skip_position`` then removes the skip, §8.1). Damaged objects are never
    kept (each read raises again).

    Kept, a position read once is not read again by any commit, seal or waiter of this process:
    every writer of a busy table otherwise reads the same entries (PROTOCOL.md §3, "Reads").
    """

    #: Bytes of encoded entries kept per process (all control roots together).
    BUDGET = 32 * 1024 * 1024

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._entries: OrderedDict[tuple[str, int], tuple[WalEntry, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, root: str, seq: int) -> WalEntry | None:
        """The entry kept for position ``seq`` of ``root``'s WAL, or None."""
        with self._lock:
            found = self._entries.get((root, seq))
            if found is None:
                return None
            self._entries.move_to_end((root, seq))
            return found[0]

    def keep(self, root: str, seq: int, entry: WalEntry, size: int) -> None:
        """Keep ``entry`` (``size`` bytes encoded) as the object at ``seq`` of ``root``'s WAL."""
        if size > self.budget // 16:
            return  # one huge entry does not push out hundreds of others
        with self._lock:
            old = self._entries.pop((root, seq), None)
            self._bytes += size - (old[1] if old else 0)
            self._entries[(root, seq)] = (entry, size)
            while self._bytes > self.budget:
                _, (_, gone) = self._entries.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        """Forget every kept entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


#: This process's kept entries (``Wal(..., keep=root)`` reads through it).
KEPT = KeptEntries()
