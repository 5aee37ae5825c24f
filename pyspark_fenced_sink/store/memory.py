"""An in-memory object store with put-if-absent (PROTOCOL.md §2): the model test's store."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pyspark_fenced_sink.errors import StoreError

__all__ = ["MemoryStore"]


class MemoryStore:
    """A thread-safe in-memory store with fault hooks (model tests).

    ``before_put(key) -> str | None`` may return ``"lost-before"`` (raise an
    ambiguous error without applying) or ``"lost-after"`` (apply, then raise
    an ambiguous error). ``before_op(kind, key)`` runs before every request;
    ``created(key, data)`` after every put that created its key (inside the lock).
    """

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.before_put: Callable[[str], str | None] | None = None
        self.before_op: Callable[[str, str], None] | None = None
        self.created: Callable[[str, bytes], None] | None = None

    def _op(self, kind: str, key: str) -> None:
        if self.before_op is not None:
            self.before_op(kind, key)

    def get(self, key: str) -> bytes | None:
        self._op("get", key)
        with self._lock:
            return self.objects.get(key)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        self._op("list", prefix)
        with self._lock:
            return sorted(k for k in self.objects if k.startswith(prefix) and k > start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._op("put", key)
        fault = self.before_put(key) if self.before_put is not None else None
        if fault == "lost-before":
            raise StoreError(f"PUT {key}: response lost (not applied)", ambiguous=True)
        with self._lock:
            created = key not in self.objects
            if created:
                self.objects[key] = bytes(data)
                if self.created is not None:
                    self.created(key, self.objects[key])
        if fault == "lost-after":
            raise StoreError(f"PUT {key}: response lost (applied={created})", ambiguous=True)
        return created

    def delete(self, key: str) -> None:
        self._op("delete", key)
        with self._lock:
            self.objects.pop(key, None)
