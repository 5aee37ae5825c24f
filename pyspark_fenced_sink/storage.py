"""Object storage for control objects, with put-if-absent (PROTOCOL.md §2; driver).

One small interface, :class:`ObjectStore` (get, list with start-after,
put_if_absent, delete), and three implementations:

* :class:`LocalStore` — a local or shared POSIX directory; put-if-absent is a
  complete temporary file ``link()``-ed to its final name (atomic, and readers
  never see a partial object);
* :class:`S3Store` — S3 or an S3-compatible server through s3fs, put-if-absent
  is ``PUT`` with ``If-None-Match: *``;
* :class:`MemoryStore` — a dict, for the model-based test, with hooks that
  inject faults.

Outcomes of ``put_if_absent`` (PROTOCOL.md §2.1): ``True`` created; ``False``
the key exists (S3 ``412 Precondition Failed``; an Azure adapter would map
``409 BlobAlreadyExists`` here); :class:`StoreError` with ``ambiguous=True``
when the request may have been applied but the response was lost (timeouts,
dropped connections, 5xx after the body was sent). S3's ``409
ConditionalRequestConflict`` (a concurrent conditional write in flight) is
retried on the same key inside :class:`S3Store`. A ``False`` answer can be
the store's view of *our own* earlier attempt (s3fs and botocore retry lost
requests by themselves), so callers resolve every ``False`` with the owner
token inside the object (``wal.Wal.append``), never by guessing.

:class:`CountingStore` wraps any store and counts requests by kind; the
benchmarks and the request-budget tests use it.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pyspark_fenced_sink.errors import StoreError

__all__ = [
    "CountingStore",
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "S3Store",
    "control_root",
    "create_resolved",
    "open_store",
]

CONTROL_DIR = "_fencedlake"


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


def control_root(table_location: str) -> str:
    """The control prefix of a table: ``<table location>/_fencedlake``."""
    return f"{table_location.rstrip('/')}/{CONTROL_DIR}"


class LocalStore:
    """A POSIX directory (local disk or a shared file system honouring link())."""

    def __init__(self, root: str) -> None:
        self.root = Path(root[len("file://") :] if root.startswith("file://") else root)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"control key {key!r} escapes the control prefix")
        return self.root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read {self._path(key)}: {e.strerror}") from e

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        directory = self._path(prefix.rstrip("/"))
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        base = prefix if prefix.endswith("/") else prefix + "/"
        keys = (base + n for n in names if not n.startswith("."))
        return sorted(k for k in keys if k > start_after)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {path.parent}: {e.strerror}") from e
        tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True
        except OSError as e:
            raise StoreError(f"cannot create {path}: {e.strerror}") from e
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


_S3_PROPERTY_MAP = {
    "s3.access-key-id": "key",
    "s3.secret-access-key": "secret",
    "s3.session-token": "token",
}


class S3Store:
    """S3 or an S3-compatible server, through one reused ``s3fs.S3FileSystem``."""

    conflict_retries = 8

    def __init__(self, root: str, fs: Any) -> None:
        self.root = root.split("://", 1)[-1].rstrip("/")
        self.fs = fs
        self._failures = _s3_failures()

    def __repr__(self) -> str:
        return f"S3Store('s3://{self.root}')"

    def _path(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"control key {key!r} escapes the control prefix")
        return f"{self.root}/{key}"

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            return None
        except self._failures as e:
            raise StoreError(f"GET s3://{self._path(key)} failed: {e}") from e

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        bucket, _, root_key = self.root.partition("/")
        base = f"{root_key}/" if root_key else ""
        keys: list[str] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": base + prefix}
            if start_after:
                kwargs["StartAfter"] = base + start_after
            if token:
                kwargs["ContinuationToken"] = token
            try:
                page = self.fs.call_s3("list_objects_v2", **kwargs)
            except self._failures as e:
                raise StoreError(f"LIST s3://{bucket}/{base}{prefix} failed: {e}") from e
            keys.extend(obj["Key"][len(base) :] for obj in page.get("Contents", ()))
            if not page.get("IsTruncated"):
                return keys
            token = page["NextContinuationToken"]

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        for attempt in range(self.conflict_retries):
            try:
                self.fs.pipe_file(path, data, mode="create")
                return True
            except FileExistsError:
                return False
            except self._failures as e:
                if _s3_error_code(e) == "ConditionalRequestConflict" and attempt + 1 < self.conflict_retries:
                    time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
                    continue
                raise StoreError(f"PUT s3://{path} failed: {e}", ambiguous=_may_have_applied(e)) from e
        raise StoreError(f"PUT s3://{path}: still conflicting after {self.conflict_retries} attempts")

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            return
        except self._failures as e:
            raise StoreError(f"DELETE s3://{self._path(key)} failed: {e}") from e


def _s3_failures() -> tuple[type[BaseException], ...]:
    """What an s3fs request raises when it fails.

    s3fs turns S3 error responses into ``OSError`` (the botocore ``ClientError``
    as ``__cause__``), but re-raises botocore's transport errors untranslated
    once its own retries are spent: ``ConnectionClosedError`` (the connection
    dropped after the request was sent: the PUT may have landed),
    ``EndpointConnectionError``, ... Those are not ``OSError``; without them a
    lost PUT response would escape as a raw botocore error instead of an
    ambiguous :class:`StoreError` resolved by the owner token (invariant I7).
    """
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:  # pragma: no cover - s3fs depends on botocore
        return (OSError,)
    return (OSError, BotoCoreError)


def _s3_error_code(e: BaseException) -> str | None:
    cause = e.__cause__
    response = getattr(cause, "response", None)
    if isinstance(response, Mapping):
        error = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if error.get("Code") == "ConditionalRequestConflict" or (status == 409 and not error.get("Code")):
            return "ConditionalRequestConflict"
        return str(error.get("Code") or status)
    return None


def _may_have_applied(e: BaseException) -> bool:
    """A definitive S3 error response (4xx) means the PUT was not applied; anything else may have been."""
    cause = e.__cause__
    response = getattr(cause, "response", None)
    if isinstance(response, Mapping):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return not 400 <= int(status) < 500
    return True


class MemoryStore:
    """A thread-safe in-memory store with fault hooks (model tests).

    ``before_put(key) -> str | None`` may return ``"lost-before"`` (raise an
    ambiguous error without applying) or ``"lost-after"`` (apply, then raise
    an ambiguous error). ``before_op(kind, key)`` runs before every request.
    """

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.before_put: Callable[[str], str | None] | None = None
        self.before_op: Callable[[str, str], None] | None = None

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
        if fault == "lost-after":
            raise StoreError(f"PUT {key}: response lost (applied={created})", ambiguous=True)
        return created

    def delete(self, key: str) -> None:
        self._op("delete", key)
        with self._lock:
            self.objects.pop(key, None)


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


_fs_cache: dict[tuple[tuple[str, str], ...], Any] = {}
_fs_lock = threading.Lock()


def _s3_filesystem(io_properties: Mapping[str, str]) -> Any:
    """One S3FileSystem per distinct configuration, reused (DESIGN.md: reuse one instance)."""
    import s3fs

    relevant = tuple(sorted((k, v) for k, v in io_properties.items() if k.startswith(("s3.", "client."))))
    with _fs_lock:
        fs = _fs_cache.get(relevant)
        if fs is None:
            props = dict(relevant)
            kwargs: dict[str, Any] = {
                target: props[source] for source, target in _S3_PROPERTY_MAP.items() if source in props
            }
            client_kwargs: dict[str, Any] = {}
            if "s3.endpoint" in props:
                client_kwargs["endpoint_url"] = props["s3.endpoint"]
            region = props.get("s3.region") or props.get("client.region")
            if region:
                client_kwargs["region_name"] = region
            config: dict[str, Any] = {}
            if props.get("s3.force-virtual-addressing", "").lower() != "true":
                config["s3"] = {"addressing_style": "path"} if "s3.endpoint" in props else {}
            fs = s3fs.S3FileSystem(
                client_kwargs=client_kwargs, config_kwargs=config, skip_instance_cache=True, **kwargs
            )
            _fs_cache[relevant] = fs
        return fs


def open_store(table_location: str, io_properties: Mapping[str, str]) -> ObjectStore:
    """The control store of the table at ``table_location`` (``file://``, a path, or ``s3://``)."""
    root = control_root(table_location)
    scheme = root.split("://", 1)[0] if "://" in root else "file"
    if scheme == "file":
        return LocalStore(root)
    if scheme in ("s3", "s3a", "s3n"):
        return S3Store(root, _s3_filesystem(io_properties))
    raise StoreError(f"no control store for scheme {scheme!r} of {table_location!r}: expected file:// or s3://")


def create_resolved(
    store: ObjectStore,
    key: str,
    data: bytes,
    token: str,
    token_of: Callable[[bytes], str],
    *,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Create ``key`` and say whose it is: True ours, False a peer's (invariant I7).

    Every "already exists" is resolved by reading the object back and comparing
    its owner token with ours (``token_of`` extracts it), because our own
    earlier attempt may have landed although its response was lost — s3fs and
    botocore retry such requests by themselves, so the caller cannot know.
    Ambiguous errors are retried on the same key.

    Raises:
        StoreError: nothing was confirmed; ``ambiguous`` is set if an attempt may have landed.
    """
    maybe_ours = False
    last: StoreError | None = None
    for attempt in range(attempts):
        try:
            if store.put_if_absent(key, data):
                return True
        except StoreError as e:
            last, maybe_ours = e, maybe_ours or e.ambiguous
            sleep(min(0.05 * 2**attempt, 1.0))
            continue
        existing = store.get(key)
        if existing is not None:
            return token_of(existing) == token
        # Created and deleted again before we could read it: try the key again.
    raise StoreError(f"create {key} not confirmed after {attempts} attempts: {last}", ambiguous=maybe_ours)
