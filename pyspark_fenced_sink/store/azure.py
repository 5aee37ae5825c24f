"""A control store on Azure Blob Storage / ADLS Gen2 (PROTOCOL.md §2, §2.1; driver and CLI).

Put-if-absent is ``Put Blob`` with ``If-None-Match: *`` (``upload_blob(overwrite=False)``
of azure-storage-blob): ``409 BlobAlreadyExists`` -> exists, resolved by the owner
token like S3's ``412``; transport errors and 5xx are ambiguous. Locations are
``abfs[s]://container@account.dfs.core.windows.net/path`` (Iceberg's form),
``wasb[s]://container@account.blob.core.windows.net/path``, or adlfs' short form
``abfs[s]://container/path`` / ``az://container/path`` with the account from the
properties. Credentials are the table's pyiceberg FileIO properties (``adls.*``,
including the catalog's vended ``adls.sas-token.<account host>``); error messages
mask them. ``gc`` lists data files through adlfs with the same properties.

Needs the ``azure`` extra (azure-storage-blob, adlfs).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.masking import mask_secrets
from pyspark_fenced_sink.store.base import check_key

__all__ = ["AzureLocation", "AzureStore", "azure_filesystem", "azure_location", "azure_service", "open_azure_store"]

_EXTRA = "pip install 'pyspark-fenced-sink[azure]'"
_BLOB_AUTHORITY_DEFAULT = "blob.core.windows.net"


@dataclass(frozen=True)
class AzureLocation:
    """A parsed Azure location: container, blob-name prefix, and the account if the URI names one."""

    container: str
    path: str
    account: str | None
    host: str | None

    @property
    def fs_path(self) -> str:
        """``container/path``: how adlfs (and so ``gc``'s listing) names the location."""
        return f"{self.container}/{self.path}".rstrip("/")


def azure_location(uri: str) -> AzureLocation:
    """Parse an ``abfs[s]``/``wasb[s]``/``az`` URI (see the module docstring).

    Raises:
        StoreError: the URI has no container.
    """
    rest = uri.split("://", 1)[-1]
    netloc, _, path = rest.partition("/")
    container, at, host = netloc.partition("@")
    account = host.split(".", 1)[0] if at and host else None
    if not container:
        raise StoreError(f"Azure location {uri!r} has no container: expected abfss://container@account.../path")
    return AzureLocation(container, path.strip("/"), account, host or None)


def _missing_extra(what: str, e: ImportError) -> StoreError:
    return StoreError(f"{what} needs the Azure extra ({e.name} is not installed): {_EXTRA}")


def _sas_for(props: Mapping[str, str], account: str | None) -> str | None:
    """``adls.sas-token``, or a vended ``adls.sas-token.<account host>`` for ``account``."""
    if props.get("adls.sas-token"):
        return props["adls.sas-token"]
    for key, value in props.items():
        if key.startswith("adls.sas-token.") and (account is None or key[15:].split(".", 1)[0] == account):
            return value
    return None


def _credential(props: Mapping[str, str], account: str, sas: str | None) -> Any:
    """The credential azure-storage-blob takes, from pyiceberg's ``adls.*`` properties."""
    if props.get("adls.account-key"):
        return {"account_name": account, "account_key": props["adls.account-key"]}
    if sas:
        return sas
    if props.get("adls.token"):
        from azure.core.credentials import AccessToken

        token = props["adls.token"]

        class _Static:
            def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
                import time

                return AccessToken(token, int(time.time()) + 3600)

        return _Static()
    if props.get("adls.anon", "").lower() == "true":
        return None
    try:
        from azure import identity
    except ImportError:
        return None  # anonymous: public containers only
    if props.get("adls.client-id") and props.get("adls.client-secret") and props.get("adls.tenant-id"):
        return identity.ClientSecretCredential(
            props["adls.tenant-id"], props["adls.client-id"], props["adls.client-secret"]
        )
    return identity.DefaultAzureCredential()


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def azure_service(props: Mapping[str, str], location: AzureLocation) -> Any:
    """One ``BlobServiceClient`` per distinct configuration and account, reused."""
    try:
        from azure.storage.blob import BlobServiceClient
    except ImportError as e:
        raise _missing_extra(f"Azure location {location.fs_path}", e) from e
    relevant = tuple(sorted((k, v) for k, v in props.items() if k.startswith("adls.")))
    cache_key = (relevant, location.account)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is not None:
            return client
        if props.get("adls.connection-string"):
            client = BlobServiceClient.from_connection_string(props["adls.connection-string"])
        else:
            account = props.get("adls.account-name") or location.account
            if not account:
                raise StoreError(
                    f"Azure location {location.fs_path}: no storage account: name it in the URI "
                    "(abfss://container@account.dfs.core.windows.net/...) or set adls.account-name"
                )
            scheme = props.get("adls.blob-storage-scheme", "https")
            if props.get("adls.account-host"):
                url = f"{scheme}://{props['adls.account-host']}"
            else:
                url = f"{scheme}://{account}.{props.get('adls.blob-storage-authority', _BLOB_AUTHORITY_DEFAULT)}"
            client = BlobServiceClient(url, credential=_credential(props, account, _sas_for(props, account)))
        _clients[cache_key] = client
        return client


class AzureStore:
    """Control objects under one Azure container prefix, through azure-storage-blob."""

    def __init__(self, root: str, service: Any) -> None:
        self.location = azure_location(root)
        self.container = service.get_container_client(self.location.container)
        self._base = f"{self.location.path}/" if self.location.path else ""
        self._errors = _azure_errors()

    def __repr__(self) -> str:
        return f"AzureStore('{self.location.fs_path}')"

    def _name(self, key: str) -> str:
        return self._base + check_key(key)

    def _error(self, what: str, key: str, e: BaseException, *, ambiguous: bool = False) -> StoreError:
        return StoreError(
            f"{what} azure {self.location.container}/{self._name(key)} failed: {mask_secrets(str(e))[:500]}",
            ambiguous=ambiguous,
        )

    def get(self, key: str) -> bytes | None:
        not_found, _exists, failures = self._errors
        try:
            return bytes(self.container.download_blob(self._name(key)).readall())
        except not_found:
            return None
        except failures as e:
            raise self._error("GET", key, e) from e

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        failures = self._errors[2]
        kwargs: dict[str, Any] = {"name_starts_with": self._base + prefix}
        if start_after:
            # Blob listing has no "start after" (only an opaque marker); start_from is inclusive.
            kwargs["start_from"] = self._base + start_after
        try:
            names = [b.name for b in self.container.list_blobs(**kwargs)]
        except TypeError:  # azure-storage-blob without start_from: list the whole prefix
            kwargs.pop("start_from", None)
            names = [b.name for b in self.container.list_blobs(**kwargs)]
        except failures as e:
            raise self._error("LIST", prefix, e) from e
        keys = (n[len(self._base) :] for n in names)
        return sorted(k for k in keys if k > start_after and not k.endswith("/"))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        _not_found, exists, failures = self._errors
        try:
            self.container.upload_blob(self._name(key), data, overwrite=False)  # If-None-Match: *
            return True
        except exists:
            return False
        except failures as e:
            raise self._error("PUT", key, e, ambiguous=_may_have_applied(e)) from e

    def delete(self, key: str) -> None:
        not_found, _exists, failures = self._errors
        try:
            self.container.delete_blob(self._name(key))
        except not_found:
            return
        except failures as e:
            raise self._error("DELETE", key, e) from e


def _azure_errors() -> tuple[type[BaseException], type[BaseException], tuple[type[BaseException], ...]]:
    """(not found, already exists, any failure) of azure-core."""
    from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError

    return ResourceNotFoundError, ResourceExistsError, (AzureError, OSError)


def _may_have_applied(e: BaseException) -> bool:
    """A definitive error response (4xx) means the PUT was not applied; anything else may have been."""
    status = getattr(e, "status_code", None)
    return not (isinstance(status, int) and 400 <= status < 500)


def open_azure_store(root: str, io_properties: Mapping[str, str]) -> AzureStore:
    """The control store at ``root`` with the table's FileIO properties."""
    return AzureStore(root, azure_service(io_properties, azure_location(root)))


_fs_cache: dict[tuple[tuple[str, str], ...], Any] = {}


def azure_filesystem(location: str, io_properties: Mapping[str, str]) -> Any:
    """Adlfs' ``AzureBlobFileSystem`` with pyiceberg's ``adls.*`` properties (``gc``'s data-file listing)."""
    try:
        from adlfs import AzureBlobFileSystem
    except ImportError as e:
        raise _missing_extra("listing Azure data files", e) from e
    account = io_properties.get("adls.account-name") or azure_location(location).account
    relevant = tuple(sorted((k, v) for k, v in io_properties.items() if k.startswith("adls.")))
    with _clients_lock:
        fs = _fs_cache.get((*relevant, ("", account or "")))
        if fs is None:
            props = dict(relevant)
            fs = AzureBlobFileSystem(
                connection_string=props.get("adls.connection-string"),
                account_name=account,
                account_key=props.get("adls.account-key"),
                sas_token=_sas_for(props, account),
                tenant_id=props.get("adls.tenant-id"),
                client_id=props.get("adls.client-id"),
                client_secret=props.get("adls.client-secret"),
                account_host=props.get("adls.account-host"),
                anon=props.get("adls.anon", "").lower() == "true" or None,
                skip_instance_cache=True,
            )
            _fs_cache[(*relevant, ("", account or ""))] = fs
        return fs
