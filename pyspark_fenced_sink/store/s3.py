"""A control store on S3 or an S3-compatible server, through s3fs (PROTOCOL.md §2; driver).

Put-if-absent is ``PUT`` with ``If-None-Match: *`` (s3fs ``pipe_file(mode="create")``):
``412`` -> exists; ``409 ConditionalRequestConflict`` (a concurrent conditional
write in flight, nothing applied) is retried on the same key; transport errors
and 5xx are ambiguous. One ``s3fs.S3FileSystem`` per distinct configuration is
reused by the WAL and by ``gc``'s listing; every request it makes is bounded
(:data:`CONNECT_TIMEOUT_S`, :data:`READ_TIMEOUT_S`, :data:`MAX_ATTEMPTS`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.filesystem import FileSystemStore

__all__ = ["S3Store", "put_through_conflicts", "request_bound_s", "s3_filesystem", "seconds"]

_S3_PROPERTY_MAP = {
    "s3.access-key-id": "key",
    "s3.secret-access-key": "secret",
    "s3.session-token": "token",
}


class S3Store(FileSystemStore):
    """S3 or an S3-compatible server, through one reused ``s3fs.S3FileSystem``."""

    scheme = "s3"
    conflict_retries = 8

    def __init__(self, root: str, fs: Any) -> None:
        super().__init__(root, fs, _s3_failures())

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
                raise self._error("LIST", prefix, e) from e
            keys.extend(obj["Key"][len(base) :] for obj in page.get("Contents", ()))
            if not page.get("IsTruncated"):
                return keys
            token = page["NextContinuationToken"]

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)

        def once() -> bool | None:
            try:
                self.fs.pipe_file(path, data, mode="create")
                return True
            except FileExistsError:
                return False
            except self._failures as e:
                if _s3_error_code(e) == "ConditionalRequestConflict":
                    return None
                raise self._error("PUT", key, e, ambiguous=_may_have_applied(e)) from e

        return put_through_conflicts(once, f"s3://{path}", self.conflict_retries)


def put_through_conflicts(put: Callable[[], bool | None], where: str, retries: int) -> bool:
    """Send ``put`` until S3 stops answering ``409 ConditionalRequestConflict``, with growing jitter between.

    ``put`` answers True (created), False (exists) or None (the 409: a concurrent conditional write to the key
    was in flight, nothing was applied). Both S3 stores' conditional PUTs go through here (PROTOCOL.md §2.1).

    Raises:
        StoreError: still conflicting after ``retries`` puts (definite: none was applied).
    """
    for attempt in range(retries):
        outcome = put()
        if outcome is not None:
            return outcome
        if attempt + 1 < retries:
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise StoreError(f"PUT {where}: still conflicting (409 ConditionalRequestConflict) after {retries} attempts")


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


#: Bounds of every request to S3 (PROTOCOL.md §2.1): seconds to connect, seconds a socket read may wait (the
#: table's ``s3.connect-timeout`` / ``s3.request-timeout`` FileIO properties override them), and attempts
#: per request, botocore's own retries included. s3fs's defaults (15 s reads, 5 botocore attempts inside 5
#: s3fs attempts) let one request to an endpoint that stopped answering hang for more than 10 minutes.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3


def seconds(props: Mapping[str, str], key: str, default: float) -> float:
    """The positive number of seconds property ``key`` sets, else ``default``; a non-number is a StoreError."""
    try:
        value = float(props[key]) if props.get(key) else default
    except ValueError:
        raise StoreError(f"FileIO property {key}={props[key]!r}: expected a number of seconds") from None
    return value if value > 0 else default


def request_bound_s(io_properties: Mapping[str, str]) -> float:
    """The longest one control-store request takes with these properties.

    Attempts x timeouts, plus botocore's backoff between attempts (at most 1 s, then 2 s, ...) and the
    client's own overhead (measured: about 2 s).
    """
    connect = seconds(io_properties, "s3.connect-timeout", CONNECT_TIMEOUT_S)
    read = seconds(io_properties, "s3.request-timeout", READ_TIMEOUT_S)
    return MAX_ATTEMPTS * (connect + read) + float(2**MAX_ATTEMPTS)


_fs_cache: dict[tuple[tuple[str, str], ...], Any] = {}
_fs_lock = threading.Lock()


def _no_expect_continue(request: Any, **kwargs: Any) -> None:
    """Send a PUT's body with its headers, without waiting for ``100 Continue`` (see :func:`_filesystem_class`)."""
    request.headers.pop("Expect", None)


_fs_class: list[type] = []


def _filesystem_class() -> type:
    """``s3fs.S3FileSystem`` whose PUTs carry no ``Expect: 100-continue`` header.

    botocore adds the header to every PutObject; aiobotocore (s3fs's client) then waits for the
    server's ``100 Continue`` with no timeout at all, so a PUT to an endpoint that stopped answering
    hung for ever, whatever ``read_timeout`` says (GETs and LISTs time out as configured). Control
    objects are small: sending the body at once costs nothing. The header is not signed (SigV4 skips
    ``expect``), so it is removed just before sending.
    """
    if not _fs_class:
        import s3fs

        class ControlS3FileSystem(s3fs.S3FileSystem):  # type: ignore[misc]
            async def set_session(self, refresh: bool = False, kwargs: Any = None) -> Any:
                client = await super().set_session(refresh, kwargs or {})
                client.meta.events.register(
                    "before-send.s3.PutObject", _no_expect_continue, unique_id="fencedlake-no-expect-continue"
                )
                return client

        _fs_class.append(ControlS3FileSystem)
    return _fs_class[0]


def s3_filesystem(io_properties: Mapping[str, str]) -> Any:
    """One S3FileSystem per distinct configuration, reused: clients are costly to build."""
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
            config: dict[str, Any] = {
                "connect_timeout": seconds(props, "s3.connect-timeout", CONNECT_TIMEOUT_S),
                "read_timeout": seconds(props, "s3.request-timeout", READ_TIMEOUT_S),
                "retries": {"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            }
            if props.get("s3.force-virtual-addressing", "").lower() != "true":
                config["s3"] = {"addressing_style": "path"} if "s3.endpoint" in props else {}
            fs = _filesystem_class()(
                client_kwargs=client_kwargs, config_kwargs=config, skip_instance_cache=True, **kwargs
            )
            fs.retries = 1  # botocore's retries above are the only ones: s3fs would multiply them
            _fs_cache[relevant] = fs
        return fs
