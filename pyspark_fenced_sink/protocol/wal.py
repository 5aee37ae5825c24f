"""The write-ahead log: put-if-absent append, reads, truncation, checkpoints, run registry (PROTOCOL.md §3, §8; driver).

Every entry is one immutable object at a fresh position (``protocol.layout``),
created with put-if-absent in a window above the tail the writer sees
(:meth:`Wal.claim`; positions it jumps over and nobody fills are holes that
commits void, :func:`holes`); an "already exists" is resolved by the owner
token, never by guessing (I7). Entries are read in parallel
(:meth:`Wal.read_many`), and a process keeps the entries it decoded
(``protocol.kept``, the WAL of a table's control root). Truncation keeps the
object at ``upper - 1`` so no put lands in a truncated position; ``gc``
checkpoints the committed state first. Entries themselves are ``protocol.entry``'s.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, CorruptControlDataError, StoreError
from pyspark_fenced_sink.protocol.codec import MALFORMED, dumps
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.kept import KEPT, KeptEntries
from pyspark_fenced_sink.protocol.layout import (
    CHECKPOINT_PREFIX,
    WAL_PREFIX,
    barriers_key,
    checkpoint_key,
    checkpoint_upper,
    run_key,
    seq_of,
    wal_key,
)
from pyspark_fenced_sink.store.base import Claim, ObjectStore, claim_key, create_resolved, fill_key

__all__ = ["KEPT", "Claimed", "KeptEntries", "Wal", "holes"]


def _token_of(raw: bytes) -> str:
    return str(json.loads(raw).get("token"))


#: The writer and reason recorded in the ``skip`` entries that seal holes below a barrier (``Wal.seal``).
SEAL_WRITER = "fencedlake-seal"
SEAL_REASON = "hole below a barrier, sealed"
#: Entry kinds put by ``fencing.put_barrier``, which seals the holes below them (:meth:`Wal.seal`).
BARRIERS = frozenset({EntryKind.FENCE, EntryKind.EXPIRE})
#: Claims spread over at most this many positions above the tail (after lost races, or under load). It binds only
#: above ~250 claims per second (``_spread``): at W = 512 a cap of 32 left 2.0-2.2 PUT tries per write, 64 leaves
#: 1.7-1.8 (docs/benchmarks.md §9).
SPREAD_MAX = 64
#: The first claim spreads over about ``pace * (one LIST's duration) * SPREAD_FACTOR`` positions: the writers
#: that claim within one round trip of each other then mostly pick different positions.
SPREAD_FACTOR = 8.0
#: After this many lost races in a row, list the tail again instead of jumping on.
RELIST_AFTER = 3

#: Parallel GETs of :meth:`Wal.read_many` per process (WAL objects are small; the store's latency dominates).
READ_THREADS = 16
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _read_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="fencedlake-wal-read")
        return _pool


@dataclass(frozen=True)
class Claimed:
    """A position an entry was put at.

    Attributes:
        seq: The position.
        vanished: The position answered "exists" and the object was gone before it could be
            read (reconciled and truncated meanwhile): whether it was our own earlier attempt,
            only the commit record of ``seq`` can tell.
        entry: The entry as written (with its ``floor``).
        ahead: Positions below ``seq`` this writer saw taken (listed, or lost a race for).
    """

    seq: int
    vanished: bool
    entry: WalEntry
    ahead: tuple[int, ...]


def _spread(pace: float | None, list_s: float) -> int:
    """How many positions above the tail a first claim spreads over (1: none)."""
    if not pace:
        return 1
    return max(1, min(SPREAD_MAX, round(pace * list_s * SPREAD_FACTOR)))


def holes(entries: Mapping[int, WalEntry], upper: int) -> frozenset[int]:
    """Missing positions at or above ``upper`` that an entry above them declares it jumped over.

    An entry at ``s`` with ``floor`` f declares every missing position in ``[f, s)``: its writer
    listed the WAL with nothing at or above ``f`` and claimed past it (PROTOCOL.md §3 step 3).
    A position no entry declares stays a gap.
    """
    found: set[int] = set()
    for seq, entry in entries.items():
        if entry.floor is not None:
            found.update(p for p in range(max(entry.floor, upper), seq) if p not in entries)
    return frozenset(found)


class Wal:
    """Reads and appends WAL entries in one control store."""

    put_attempts = 5

    def __init__(
        self,
        store: ObjectStore,
        *,
        label: str = "",
        sleep: Callable[[float], None] = time.sleep,
        parallel_reads: bool = True,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        keep: str | None = None,
    ) -> None:
        self.store = store
        #: The control root whose entries this process keeps once decoded (:class:`KeptEntries`); None: read each time.
        self.keep = keep
        self.label = label or repr(store)
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.clock = clock
        #: :meth:`read_many` reads in parallel (False: one after the other, as the model test schedules them).
        self.parallel_reads = parallel_reads

    def scan(self, start: int) -> list[int]:
        """Positions present at or after ``start``, sorted (one LIST request)."""
        after = wal_key(start - 1) if start > 0 else ""
        seqs = (seq_of(k) for k in self.store.list(WAL_PREFIX, after))
        return sorted(s for s in seqs if s is not None and s >= start)

    def occupied(self, seq: int) -> bool:
        """True if an object (readable or not) is at position ``seq``."""
        return self.store.get(wal_key(seq)) is not None

    def read(self, seq: int) -> WalEntry | None:
        """The entry at ``seq``, or None if the position is empty (a kept entry without a request)."""
        if self.keep is not None and (kept := KEPT.get(self.keep, seq)) is not None:
            return kept
        data = self.store.get(wal_key(seq))
        return None if data is None else self._decoded(seq, data)

    def _decoded(self, seq: int, data: bytes) -> WalEntry:
        """The entry ``data`` (the object read at ``seq``), kept if this WAL keeps; a damaged object raises."""
        entry = decode_entry(data, f"{self.label}/{wal_key(seq)}")
        if self.keep is not None:
            KEPT.keep(self.keep, seq, entry, len(data))
        return entry

    def read_many(self, seqs: Sequence[int]) -> list[WalEntry | None]:
        """The entries at ``seqs``, in order, read in parallel; None where a position is empty.

        WAL objects are immutable, so the reads need no order among themselves. A damaged
        object raises only if every position before it holds an entry (as reading them one
        by one, stopping at the first empty position, would).
        """
        if not self.parallel_reads or len(seqs) <= 1:
            found = []
            for s in seqs:
                entry = self.read(s)
                found.append(entry)
                if entry is None:
                    break
            return found + [None] * (len(seqs) - len(found))

        def read(seq: int) -> WalEntry | CorruptControlDataError | None:
            try:
                return self.read(seq)
            except CorruptControlDataError as e:
                return e

        out: list[WalEntry | None] = []
        for got in _read_pool().map(read, seqs):
            if isinstance(got, CorruptControlDataError) and None not in out:
                raise got
            out.append(got if isinstance(got, WalEntry) else None)
        return out

    def read_present(self, seqs: Sequence[int]) -> dict[int, WalEntry]:
        """The decodable entries at ``seqs``, read in parallel; empty positions and damaged objects left out."""

        def read(seq: int) -> WalEntry | None:
            try:
                return self.read(seq)
            except CorruptControlDataError:
                return None  # damaged: it takes its position, and says nothing we can read

        found = _read_pool().map(read, seqs) if self.parallel_reads and len(seqs) > 1 else map(read, seqs)
        return {s: e for s, e in zip(seqs, found, strict=True) if e is not None}

    def append(self, entry: WalEntry, start: int) -> int:
        """Put ``entry`` at the first free position after the tail seen from ``start``; returns its seq.

        See :meth:`append_claim`; a caller that cannot handle a vanished position
        itself must not use this (barriers use ``fencing.put_barrier``).
        """
        return self.append_claim(entry, start)[0]

    def append_claim(self, entry: WalEntry, start: int) -> tuple[int, bool]:
        """:meth:`claim` at the first free position after the tail: (seq, vanished)."""
        claimed = self.claim(entry, start)
        return claimed.seq, claimed.vanished

    def claim(self, entry: WalEntry, start: int, *, pace: float | None = None) -> Claimed:
        """Put ``entry`` at a free position above the tail seen from ``start`` (PROTOCOL.md §3 step 3).

        One LIST finds the tail ``t``; the first try is ``t + 1``, or under load (``pace``:
        positions reconciled per second lately) a position drawn from the next few, so that
        writers claiming at the same moment mostly pick different ones. A race lost to a peer
        jumps a few positions on without listing again (every few losses, it lists again).
        The entry records ``floor = t + 1`` when it lands above it: the positions in between
        that stay empty are holes, which the next commit voids (:func:`holes`).

        Raises StoreError if nothing can have been written, or
        CommitOutcomeUnknownError if a put may have landed but could not be confirmed.
        """
        t0 = self.clock()
        listed = self.scan(start)
        spread = _spread(pace, self.clock() - t0)
        floor = listed[-1] + 1 if listed else start
        taken = list(listed)
        seq = floor + self.rng.randrange(spread)
        lost = 0
        while True:
            written = replace(entry, floor=floor if seq > floor else None)
            data = encode_entry(written)
            claim = self._claim(seq, data, entry.token)
            if claim is Claim.OURS and self.keep is not None:  # the object there is ours: peers here need not read it
                KEPT.keep(self.keep, seq, written, len(data))
            if claim is not Claim.THEIRS:
                return Claimed(seq, claim is Claim.VANISHED, written, tuple(p for p in taken if p < seq))
            taken.append(seq)
            lost += 1
            if lost % RELIST_AFTER == 0:  # far behind the tail: find it again
                listed = self.scan(seq + 1)
                taken += listed
                floor = listed[-1] + 1 if listed else seq + 1
                seq = floor
                continue
            seq += 1 + self.rng.randrange(min(SPREAD_MAX, max(spread, 2**lost)))

    def truncate(self, upper: int) -> int:
        """Delete positions below ``upper - 1`` (``upper``: the committed upper); returns how many.

        The object at ``upper - 1`` is kept: a writer listing from any upper it
        read earlier then finds a tail at or above it, so no put (data entry or
        barrier) can land in a truncated position.
        """
        deleted = 0
        for key in self.store.list(WAL_PREFIX):
            seq = seq_of(key)
            if seq is None:
                continue
            if seq >= upper - 1:
                break
            self.store.delete(key)
            deleted += 1
        return deleted

    def truncatable(self, upper: int) -> int:
        """How many positions :meth:`truncate` would delete now (``gc --dry-run``)."""
        return sum(1 for k in self.store.list(WAL_PREFIX) if (s := seq_of(k)) is not None and s < upper - 1)

    def put_checkpoint(self, upper: int, state_text: str) -> None:
        """Keep the committed state at ``upper`` (before truncating below it); an existing one is kept.

        The state at an upper is unique (reconciliation is deterministic), so an existing checkpoint
        there holds the same text; an ambiguous put is retried and resolved by comparing the text.
        """
        create_resolved(
            self.store, checkpoint_key(upper), state_text.encode(), state_text, bytes.decode, sleep=self.sleep
        )

    def latest_checkpoint(self, at_most: int = 2**63) -> tuple[int, str] | None:
        """(upper, state text) of the newest checkpoint at or below ``at_most``, or None (one LIST, one GET)."""
        found = [u for k in self.store.list(CHECKPOINT_PREFIX) if (u := checkpoint_upper(k)) is not None]
        for upper in sorted((u for u in found if u <= at_most), reverse=True):
            data = self.store.get(checkpoint_key(upper))
            if data is not None:
                return upper, data.decode()
        return None

    def remove(self, seq: int) -> None:
        """Delete the object at ``seq`` (only ever below the committed upper)."""
        self.store.delete(wal_key(seq))

    def seal(self, upper: int, claimed: Claimed) -> list[int]:
        """Fill the holes below ``claimed`` (a barrier) with ``skip`` entries; return the positions listed above it.

        One LIST from ``upper``. A hole is an empty position in ``[upper, claimed.seq)`` that an
        entry above it (below or above the barrier, or the barrier itself) declares it jumped over
        (:func:`holes`); the entries are read only when such a position exists. An
        empty position nobody declares is a lost object, left to the operator (it blocks the
        table as before). A position a writer takes first keeps its entry (put-if-absent):
        after this, every hole below the barrier holds an object, so no later put lands below it.

        Barriers opened together would all fill the same holes (every put but one answered
        "exists"). So the holes above the highest barrier listed below this one are filled at once,
        and the ones below it are left to that barrier's own seal: after those fills the WAL is
        listed again, and only what is still empty is filled, from the top down (away from the lower
        barrier's fills, which go up). A lower barrier that never seals costs one LIST more; the
        postcondition is the same. Fills were tried in parallel: no fewer puts, more reads.
        """
        listed = self.scan(upper)
        below = {p for p in listed if p < claimed.seq}
        missing = [p for p in range(upper, claimed.seq) if p not in below]
        if missing:
            entries: dict[int, WalEntry] = {claimed.seq: claimed.entry}
            entries.update(self.read_present([p for p in listed if p > missing[0] and p != claimed.seq]))  # declarers
            found = sorted(holes(entries, upper) & set(missing))
            lower = max((p for p in below if p in entries and entries[p].kind in BARRIERS), default=-1)
            self._seal_holes([h for h in found if h > lower])
            self._seal_after_lower([h for h in found if h < lower])
        return [p for p in listed if p > claimed.seq]

    def _seal_after_lower(self, holes_below: Sequence[int]) -> None:
        """Fill the ``holes_below`` a lower barrier (whose seal fills them) has left empty: one LIST, top down."""
        if holes_below:
            present = set(self.scan(holes_below[0]))
            self._seal_holes([h for h in reversed(holes_below) if h not in present])

    def _seal_holes(self, seqs: Sequence[int]) -> None:
        """Fill each of ``seqs``, in that order, with a seal ``skip`` entry."""
        for seq in seqs:
            seal = WalEntry(kind=EntryKind.SKIP, token=uuid.uuid4().hex, writer=SEAL_WRITER, reason=SEAL_REASON)
            self._fill(seq, encode_entry(seal))

    def put_skip(self, seq: int, entry: WalEntry) -> bool:
        """Put an operator's ``skip`` entry at exactly ``seq`` (put-if-absent); False if the position is taken."""
        return self._claim(seq, encode_entry(entry), entry.token) is Claim.OURS

    def register_run(self, writer_id: str, run: str, epoch: int) -> int:
        """Record that streaming run ``run`` of ``writer_id`` registered with the barrier at ``epoch``.

        Put-if-absent: a registration that already exists (this run's earlier
        attempt) wins. Returns the epoch the registry holds for the run.
        """
        key = run_key(writer_id, run)
        body = {"writer": writer_id, "run": run, "epoch": epoch, "opened_ms": int(time.time() * 1000)}
        token = f"{run}@{epoch}"
        if create_resolved(
            self.store, key, dumps({**body, "token": token}).encode(), token, _token_of, sleep=self.sleep
        ):
            return epoch
        recorded = self.run_epoch(writer_id, run)
        return epoch if recorded is None else recorded

    def mark_barriers(self, writer_id: str) -> None:
        """Record for good that ``writer_id`` puts fence barriers; before its first one (PROTOCOL.md §7).

        Put-if-absent, and any object there will do: the key only says that a barrier of the writer may
        be pending. An idempotent job's open that finds it lists the WAL for its tail.

        Raises:
            StoreError: the put was not confirmed (nothing is put after it: the barrier is not put either).
        """
        body = {"writer": writer_id, "marked_ms": int(time.time() * 1000)}
        fill_key(
            self.store, barriers_key(writer_id), dumps(body).encode(), attempts=self.put_attempts, sleep=self.sleep
        )

    def barriers_marked(self, writer_id: str) -> bool:
        """True if ``writer_id`` has ever begun to put a fence barrier (:meth:`mark_barriers`): one GET."""
        return self.store.get(barriers_key(writer_id)) is not None

    def run_epoch(self, writer_id: str, run: str) -> int | None:
        """The epoch streaming run ``run`` registered with, or None if it never registered."""
        key = run_key(writer_id, run)
        data = self.store.get(key)
        if data is None:
            return None
        try:
            return int(json.loads(data)["epoch"])
        except MALFORMED as e:
            raise CorruptControlDataError(f"run registry object {self.label}/{key} is damaged ({e})") from e

    def _fill(self, seq: int, data: bytes) -> None:
        """Take position ``seq`` with ``data`` unless an object is there (whose, a seal does not care: no read)."""
        try:
            fill_key(self.store, wal_key(seq), data, attempts=self.put_attempts, sleep=self.sleep)
        except StoreError as e:
            raise self._unconfirmed(seq, e) from e

    def _claim(self, seq: int, data: bytes, token: str) -> Claim:
        """Whose the object at ``seq`` is after a put-if-absent of ``data`` (I7).

        An "exists" is answered by reading the object; the entry read is kept (:class:`KeptEntries`):
        a lost race's GET is then the last read of that position by this process.
        """
        key = wal_key(seq)

        def token_of(raw: bytes) -> str:
            try:
                return self._decoded(seq, raw).token
            except CorruptControlDataError:
                return ""  # a damaged object is never ours, never kept: the caller moves on

        try:
            return claim_key(self.store, key, data, token, token_of, attempts=self.put_attempts, sleep=self.sleep)
        except StoreError as e:
            raise self._unconfirmed(seq, e) from e

    def _unconfirmed(self, seq: int, e: StoreError) -> Exception:
        """The error of a WAL put that was not confirmed: outcome unknown if it may have landed, else ``e``."""
        if not e.ambiguous:
            return e
        return CommitOutcomeUnknownError(
            f"WAL put at {self.label}/{wal_key(seq)} may have landed but could not be confirmed ({e}); "
            "the next commit on the table resolves it",
            seq=seq,
        )
