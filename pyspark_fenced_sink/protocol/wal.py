"""The write-ahead log: put-if-absent append, reads, truncation, checkpoints, run registry (PROTOCOL.md §3, §8; driver).

Every entry is one immutable object at a fresh position (``protocol.layout``),
created with put-if-absent after the tail the writer sees; an "already exists"
is resolved by the owner token, never by guessing (I7). Truncation keeps the
object at ``upper - 1`` so no put lands in a truncated position; ``gc``
checkpoints the committed state first. Entries themselves are ``protocol.entry``'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, CorruptControlDataError, StoreError
from pyspark_fenced_sink.protocol.codec import MALFORMED, dumps
from pyspark_fenced_sink.protocol.entry import WalEntry, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.layout import (
    CHECKPOINT_PREFIX,
    WAL_PREFIX,
    checkpoint_key,
    checkpoint_upper,
    run_key,
    seq_of,
    wal_key,
)
from pyspark_fenced_sink.store.base import Claim, ObjectStore, claim_key, create_resolved

__all__ = ["Wal"]


def _entry_token(raw: bytes) -> str:
    """The owner token of an encoded entry; "" for a damaged object (never ours: the caller moves on)."""
    try:
        return decode_entry(raw).token
    except CorruptControlDataError:
        return ""


def _token_of(raw: bytes) -> str:
    return str(json.loads(raw).get("token"))


class Wal:
    """Reads and appends WAL entries in one control store."""

    put_attempts = 5

    def __init__(self, store: ObjectStore, *, label: str = "", sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.label = label or repr(store)
        self.sleep = sleep

    def scan(self, start: int) -> list[int]:
        """Positions present at or after ``start``, sorted (one LIST request)."""
        after = wal_key(start - 1) if start > 0 else ""
        seqs = (seq_of(k) for k in self.store.list(WAL_PREFIX, after))
        return sorted(s for s in seqs if s is not None and s >= start)

    def occupied(self, seq: int) -> bool:
        """True if an object (readable or not) is at position ``seq``."""
        return self.store.get(wal_key(seq)) is not None

    def read(self, seq: int) -> WalEntry | None:
        """The entry at ``seq``, or None if the position is empty."""
        data = self.store.get(wal_key(seq))
        return None if data is None else decode_entry(data, f"{self.label}/{wal_key(seq)}")

    def append(self, entry: WalEntry, start: int) -> int:
        """Put ``entry`` at the first free position after the tail seen from ``start``; returns its seq.

        See :meth:`append_claim`; a caller that cannot handle a vanished position
        itself must not use this (barriers use ``fencing.put_barrier``).
        """
        return self.append_claim(entry, start)[0]

    def append_claim(self, entry: WalEntry, start: int) -> tuple[int, bool]:
        """Put ``entry`` at the first free position after the tail seen from ``start``.

        Returns (seq, vanished). ``vanished`` is True when the position answered
        "exists" and the object was gone before it could be read: it was
        reconciled and truncated meanwhile, and whether it was our own earlier
        attempt (a lost response) only the commit record of ``seq`` can tell —
        the caller looks it up (PROTOCOL.md §6). The key is never created again.

        Raises StoreError if nothing can have been written, or
        CommitOutcomeUnknownError if a put may have landed but could not be confirmed.
        """
        data = encode_entry(entry)
        seqs = self.scan(start)
        seq = seqs[-1] + 1 if seqs else start
        while True:
            claim = self._claim(seq, data, entry.token)
            if claim is not Claim.THEIRS:
                return seq, claim is Claim.VANISHED
            seqs = self.scan(seq + 1)
            seq = seqs[-1] + 1 if seqs else seq + 1

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

    def _claim(self, seq: int, data: bytes, token: str) -> Claim:
        """Whose the object at ``seq`` is after a put-if-absent of ``data`` (I7)."""
        key = wal_key(seq)
        try:
            return claim_key(self.store, key, data, token, _entry_token, attempts=self.put_attempts, sleep=self.sleep)
        except StoreError as e:
            if e.ambiguous:
                raise CommitOutcomeUnknownError(
                    f"WAL put at {self.label}/{key} may have landed but could not be confirmed ({e}); "
                    "the next commit on the table resolves it",
                    seq=seq,
                ) from e
            raise
