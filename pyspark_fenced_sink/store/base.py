"""The object-store interface of control objects, with put-if-absent (PROTOCOL.md §2; driver).

:class:`ObjectStore` is the one small interface every store implements (get,
list with start-after, put_if_absent, delete); :mod:`.registry` finds the
implementation for a URI scheme. Outcomes of ``put_if_absent`` (PROTOCOL.md
§2.1): ``True`` created; ``False`` the key exists (S3 ``412``, Azure ``409
BlobAlreadyExists``, GCS ``412``, local ``EEXIST``); :class:`StoreError` with
``ambiguous=True`` when the request may have been applied but the response was
lost. A ``False`` answer can be the store's view of *our own* earlier attempt
(SDKs retry lost requests by themselves), so callers resolve every ``False``
with the owner token inside the object (:func:`create_resolved`), never by
guessing (invariant I7). :class:`CountingStore` counts requests by kind
(benchmarks and request-budget tests).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from pyspark_fenced_sink.errors import StoreError

__all__ = ["Claim", "CountingStore", "ObjectStore", "check_key", "claim_key", "create_resolved", "fill_key"]


@runtime_checkable
class ObjectStore(Protocol):
    """Control-object storage rooted at one prefix; keys are relative, ``/``-separated."""

    def get(self, key: str) -> bytes | None:
        """Return the object's bytes, or None if it does not exist."""

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Keys under ``prefix`` (a directory ending in ``/``) sorted, all ``> start_after``."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent: True created, False it already exists."""

    def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""


def check_key(key: str) -> str:
    """Return ``key`` if it stays inside the store's root; raise ValueError if it escapes it."""
    if key.startswith("/") or ".." in key.split("/"):
        raise ValueError(f"control key {key!r} escapes the control prefix")
    return key


class CountingStore:
    """Wrap a store and count requests by kind (GET, LIST, PUT_IF_ABSENT, DELETE)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def get(self, key: str) -> bytes | None:
        self._count("GET")
        return self.inner.get(key)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        self._count("LIST")
        return self.inner.list(prefix, start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._count("PUT_IF_ABSENT")
        return self.inner.put_if_absent(key, data)

    def delete(self, key: str) -> None:
        self._count("DELETE")
        self.inner.delete(key)


class Claim(str, Enum):
    """Whose object a key holds after a put-if-absent, as :func:`claim_key` resolved it."""

    OURS = "ours"
    THEIRS = "theirs"
    #: It existed, then was deleted before it could be read: truncated after being reconciled. Whose it
    #: was is no longer in the store; the caller resolves it (the WAL asks the commit record).
    VANISHED = "vanished"


def claim_key(
    store: ObjectStore,
    key: str,
    data: bytes,
    token: str,
    token_of: Callable[[bytes], str],
    *,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
) -> Claim:
    """Create ``key`` and say whose it is (invariant I7); never re-creates a key that vanished.

    Every "already exists" is resolved by reading the object back and comparing
    its owner token with ours (``token_of`` extracts it), because our own
    earlier attempt may have landed although its response was lost — s3fs and
    botocore retry such requests by themselves, so the caller cannot know.
    Ambiguous errors are retried on the same key.

    Raises:
        StoreError: nothing was confirmed; ``ambiguous`` is set if an attempt may have landed.
    """
    if fill_key(store, key, data, attempts=attempts, sleep=sleep):
        return Claim.OURS
    existing = store.get(key)
    if existing is None:
        return Claim.VANISHED
    return Claim.OURS if token_of(existing) == token else Claim.THEIRS


def fill_key(
    store: ObjectStore, key: str, data: bytes, *, attempts: int = 5, sleep: Callable[[float], None] = time.sleep
) -> bool:
    """Make sure an object is at ``key``: True if this call's put created it, False if one was there.

    For keys where *whose* object it is does not matter, only that the key is taken (a seal of a hole:
    PROTOCOL.md §7): an "already exists" needs no read (our earlier attempt or a peer's, the key is taken).
    Ambiguous errors are retried on the same key.

    Raises:
        StoreError: nothing was confirmed; ``ambiguous`` is set if an attempt may have landed.
    """
    maybe = False
    last: StoreError | None = None
    for attempt in range(attempts):
        try:
            return store.put_if_absent(key, data)
        except StoreError as e:
            last, maybe = e, maybe or e.ambiguous
            sleep(min(0.05 * 2**attempt, 1.0))
    raise StoreError(f"create {key} not confirmed after {attempts} attempts: {last}", ambiguous=maybe)


def create_resolved(store: ObjectStore, key: str, data: bytes, token: str, *args: Any, **options: Any) -> bool:
    """:func:`claim_key` (same arguments) for keys never deleted while in use: True ours, False a peer's.

    A key that vanished between "exists" and the read is tried again.
    """
    attempts = int(options.get("attempts", 5))
    for _ in range(attempts):
        claim = claim_key(store, key, data, token, *args, **options)
        if claim is not Claim.VANISHED:
            return claim is Claim.OURS
    raise StoreError(f"create {key}: the object kept vanishing after {attempts} attempts", ambiguous=True)
