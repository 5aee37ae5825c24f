"""A control store on Google Cloud Storage, through gcsfs (PROTOCOL.md §2, §2.1; driver and CLI).

Put-if-absent is an upload with ``ifGenerationMatch=0`` (gcsfs ``pipe_file(mode="create")``):
``412`` -> exists (gcsfs raises ``FileExistsError``), resolved by the owner token;
transport errors and 5xx are ambiguous. LIST uses the JSON API's ``startOffset``.
Credentials and endpoint are the table's pyiceberg FileIO properties (``gcs.*``:
``gcs.oauth2.token``, ``gcs.project-id``, ``gcs.service.host``, ...). The plain
``gcsfs.core.GCSFileSystem`` is used: gcsfs' default class first probes every
bucket over gRPC for zonal features, which a JSON-API endpoint does not answer.

Needs the ``gcs`` extra (gcsfs).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store.filesystem import FileSystemStore

__all__ = ["GcsStore", "gcs_filesystem", "open_gcs_store"]

_EXTRA = "pip install 'pyspark-fenced-sink[gcs]'"


class GcsStore(FileSystemStore):
    """Control objects under one ``bucket/prefix``, through one reused gcsfs file system."""

    scheme = "gs"

    def __init__(self, root: str, fs: Any) -> None:
        super().__init__(root, fs, _gcs_failures())
        self.bucket, _, prefix = self.root.partition("/")
        self._base = f"{prefix}/" if prefix else ""

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        keys: list[str] = []
        params: dict[str, Any] = {"prefix": self._base + prefix, "fields": "items(name),nextPageToken"}
        if start_after:
            params["startOffset"] = self._base + start_after  # inclusive: filtered below
        while True:
            try:
                page = self.fs.call("GET", "b/{}/o", self.bucket, json_out=True, **params)
            except self._failures as e:
                raise self._error("LIST", prefix, e) from e
            keys.extend(item["name"][len(self._base) :] for item in page.get("items", ()))
            token = page.get("nextPageToken")
            if not token:
                return sorted(k for k in keys if k > start_after and not k.endswith("/"))
            params["pageToken"] = token

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self._path(key), data, mode="create")  # ifGenerationMatch=0
            return True
        except FileExistsError:
            return False
        except self._failures as e:
            raise self._error("PUT", key, e, ambiguous=_may_have_applied(e)) from e


def _gcs_failures() -> tuple[type[BaseException], ...]:
    """What a gcsfs request raises when it fails: its HttpError, OSError, and aiohttp/requests errors."""
    failures: list[type[BaseException]] = [OSError, ValueError, RuntimeError]
    try:
        from gcsfs.retry import HttpError

        failures.append(HttpError)
    except ImportError:  # pragma: no cover - gcsfs is needed to get here
        pass
    try:
        from aiohttp import ClientError

        failures.append(ClientError)
    except ImportError:  # pragma: no cover - gcsfs depends on aiohttp
        pass
    try:
        from requests.exceptions import RequestException

        failures.append(RequestException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(failures)


def _may_have_applied(e: BaseException) -> bool:
    """A definitive error response (4xx) means the upload was not applied; anything else may have been."""
    code = getattr(e, "code", None)
    if isinstance(code, int):
        return not 400 <= code < 500
    return not isinstance(e, ValueError)  # gcsfs raises ValueError for a 4xx "invalid" answer


_fs_cache: dict[tuple[tuple[str, str], ...], Any] = {}
_fs_lock = threading.Lock()


def gcs_filesystem(location: str, io_properties: Mapping[str, str]) -> Any:
    """One plain ``gcsfs.core.GCSFileSystem`` per distinct ``gcs.*`` configuration, reused."""
    try:
        from gcsfs.core import GCSFileSystem
    except ImportError as e:
        raise StoreError(f"gs:// locations need the GCS extra ({e.name} is not installed): {_EXTRA}") from e
    relevant = tuple(sorted((k, v) for k, v in io_properties.items() if k.startswith("gcs.")))
    with _fs_lock:
        fs = _fs_cache.get(relevant)
        if fs is None:
            props = dict(relevant)
            kwargs: dict[str, Any] = {"skip_instance_cache": True}
            if props.get("gcs.project-id"):
                kwargs["project"] = props["gcs.project-id"]
            if props.get("gcs.oauth2.token"):
                # A raw access token as a Credentials object: gcsfs would send a string to Google's
                # tokeninfo endpoint first (and read a file path as a service-account key).
                from google.oauth2.credentials import Credentials

                kwargs["token"] = Credentials(props["gcs.oauth2.token"])  # type: ignore[no-untyped-call]
            if props.get("gcs.service.host"):
                kwargs["endpoint_url"] = props["gcs.service.host"]
            if props.get("gcs.requester-pays", "").lower() == "true":
                kwargs["requester_pays"] = True
            fs = GCSFileSystem(**kwargs)
            _fs_cache[relevant] = fs
        return fs


def open_gcs_store(root: str, io_properties: Mapping[str, str]) -> GcsStore:
    """The control store at ``root`` with the table's FileIO properties."""
    return GcsStore(root, gcs_filesystem(root, io_properties))
