"""Table reads shared by the threads of one process (PROTOCOL.md §3 step 3, the waiters' re-reads; driver).

Many writer threads of one process that wait on one table each re-read it every
pause to see whether the committed upper moved (``protocol.committer``). Each read
is a catalog round trip, and with pyiceberg and SQLAlchemy every one costs CPU;
on two cores, 512 waiting threads spent half their CPU re-reading an unchanged
table. :func:`load_table` lets the threads share reads without giving up
freshness:

- A caller shares only a read that **started after it was called**. A read in
  flight when it asks may predate a commit it already knows of (its own, or the
  one that just beat its compare-and-swap), so it waits for that read to end and
  shares the next. What it gets is therefore what a read of its own would have
  returned: a version at least as new as any committed before its call. The
  protocol sees no difference (PROTOCOL.md §3: every view is a read, and any
  read may be stale by the time it is used).
- Each caller gets its own ``Table`` object (a shallow copy): pyiceberg's
  ``Table._do_commit`` moves the object it commits through to the new version,
  so one object must not serve two committers. The parsed metadata is shared
  (it is immutable, as the metadata file is).
- A failed shared read is not shared: each caller that waited on it reads on
  its own, so every caller sees its own error with its own traceback.

Reads are keyed by catalog object and table identifier, so two catalogs over one
database never share (one may be behind a proxy, another may carry other
credentials).
"""

from __future__ import annotations

import copy
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

__all__ = ["load_table"]


@dataclass
class _Reads:
    """The reads of one table through one catalog object in this process."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    #: Reads started so far; read ``n`` is the n-th. One runs at a time: one is in flight while ``started > ended``.
    started: int = 0
    #: The last read to end: its number, and its table (None: it failed).
    ended: int = 0
    table: Any = None


_lock = threading.Lock()
_reads: weakref.WeakKeyDictionary[Any, dict[str, _Reads]] = weakref.WeakKeyDictionary()


def _of(catalog: Any, identifier: str) -> _Reads:
    with _lock:
        per_catalog = _reads.get(catalog)
        if per_catalog is None:
            per_catalog = _reads[catalog] = {}
        return per_catalog.setdefault(identifier, _Reads())


def load_table(catalog: Any, identifier: str) -> Any:
    """``catalog.load_table(identifier)``, sharing a read another thread started after this call.

    Raises what ``catalog.load_table`` raises (a read of its own, when the shared one failed).
    """
    try:
        reads = _of(catalog, identifier)
    except TypeError:  # a catalog object that cannot be weakly referenced: nothing to share
        return catalog.load_table(identifier)
    with reads.cond:
        need = reads.started + 1  # the first read to start after this call
        while reads.ended < need and reads.started > reads.ended:
            reads.cond.wait()
        if reads.ended >= need:
            if reads.table is not None:
                return copy.copy(reads.table)
            mine = 0  # the shared read failed: read on our own
        else:
            reads.started += 1
            mine = reads.started
    if not mine:
        return catalog.load_table(identifier)
    table = None
    try:
        table = catalog.load_table(identifier)
        return table
    finally:
        with reads.cond:
            reads.ended = mine
            # A copy of its own: the caller may commit through ``table``, which moves it to another version.
            reads.table = None if table is None else copy.copy(table)
            reads.cond.notify_all()
