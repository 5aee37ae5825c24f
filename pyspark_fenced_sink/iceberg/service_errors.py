"""Catalog and storage failures while a table is opened, as one typed error (driver; PROTOCOL.md §4, before step 3).

A wrong S3 endpoint, a refused secret or a database that is down fails inside
pyiceberg, botocore, pyarrow or SQLAlchemy before fencedlake's protocol runs.
:func:`service_errors` turns those failures into :class:`ServiceError` naming
the service (``catalog`` or ``storage``), its endpoint (secrets masked) and
whether retrying helps; a missing database driver becomes an
:class:`InvalidOptionsError` naming the extra to install. Anything not
recognised passes through unchanged. Only code that runs before a WAL put uses
this (planning, the first catalog read, the CLI's open): after the put, the
commit loop's own rules apply (§4).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark_fenced_sink.errors import FencedLakeError, InvalidOptionsError, ServiceError
from pyspark_fenced_sink.masking import mask_secrets, redact
from pyspark_fenced_sink.options.catalog import CatalogConfig

__all__ = ["classify", "service_errors"]

#: Missing Python modules -> the extra that installs them.
_EXTRAS = {"psycopg2": "postgres", "adlfs": "azure", "azure": "azure", "gcsfs": "gcs"}
#: Exception modules whose errors come from object storage.
_STORAGE_MODULES = ("botocore", "s3fs", "aiobotocore", "adlfs", "azure", "gcsfs", "google", "pyarrow", "fsspec")
_CREDENTIALS = re.compile(
    r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|EXPIRED_TOKEN|UNRECOGNIZED_CLIENT|"
    r"MISSING_AUTHENTICATION_TOKEN|HTTP status 40[13]|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|"
    r"ExpiredToken|InvalidToken|AuthenticationFailed|password authentication failed|authentication failed|"
    r"no password supplied|permission denied|Forbidden|Unauthorized|invalid_client|NoCredentials|"
    r"Unable to locate credentials",
    re.IGNORECASE,
)
_MISSING = re.compile(r"NO_SUCH_BUCKET|NoSuchBucket|ContainerNotFound|database \S+ does not exist", re.IGNORECASE)
_UNREACHABLE = re.compile(
    r"NETWORK_CONNECTION|curlCode|Could not connect|couldn't connect|Connection refused|could not translate host|"
    r"Name or service not known|Temporary failure in name resolution|timed out|timeout|Connection reset|"
    r"Max retries exceeded|EndpointConnectionError|Cannot connect to host|server closed the connection",
    re.IGNORECASE,
)
_SERVER = re.compile(
    r"HTTP status 5\d\d|SlowDown|ServiceUnavailable|InternalError|Internal Server Error|Too Many Requests",
    re.IGNORECASE,
)
_AUTH_TYPES = {"UnauthorizedError", "ForbiddenError", "OAuthError", "AuthorizationExpiredError", "NoCredentialsError"}
_UNREACHABLE_TYPES = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionError",
    "ConnectionRefusedError",
    "Timeout",
    "ConnectTimeout",
    "TimeoutError",
}
_SERVER_TYPES = {"ServerError", "ServiceUnavailableError", "TooManyRequestsError"}


@dataclass(frozen=True)
class _Kind:
    retryable: bool
    what: str
    advice: str


_KINDS = {
    "credentials": _Kind(False, "refused the credentials", "check the access key and secret (or token)"),
    "missing": _Kind(False, "does not have what the configuration names", "check the bucket, container or database"),
    "unreachable": _Kind(
        True,
        "could not be reached",
        "check the endpoint; retrying helps only if the service was down, not if the endpoint is wrong",
    ),
    "server": _Kind(True, "answered with a server error", "retry once the service is healthy"),
    "truncated": _Kind(
        True,
        "returned an incomplete object (a response cut on the way)",
        "retry; if it persists, the object itself is damaged",
    ),
}
#: A metadata file read back empty or cut short: the storage client handed over a truncated response body
#: (seen through a proxy that cut responses: pyarrow's S3 client returned an empty metadata file).
_TRUNCATED = re.compile(r"EOF while parsing|Invalid JSON: EOF|unexpected end of (data|file|stream)", re.IGNORECASE)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _kind(error: BaseException) -> str | None:
    for e in _chain(error):
        if isinstance(e, (PermissionError, FileNotFoundError)):  # local files: their own message says it
            return None
        name, text = type(e).__name__, str(e)
        if name in _AUTH_TYPES or _CREDENTIALS.search(text):
            return "credentials"
        if _MISSING.search(text):
            return "missing"
        if name in _SERVER_TYPES or _SERVER.search(text):
            return "server"
        if name in _UNREACHABLE_TYPES or _UNREACHABLE.search(text):
            return "unreachable"
        if _TRUNCATED.search(text):
            return "truncated"
    return None


def _service(error: BaseException) -> str:
    for e in _chain(error):
        module = type(e).__module__ or ""
        if module.split(".")[0] in _STORAGE_MODULES or "AWS Error" in str(e):
            return "storage"
    return "catalog"


def _storage_endpoint(properties: Mapping[str, str]) -> str:
    for key in sorted(properties):
        if key.endswith(("endpoint", "service.host", "account-host")):
            return f"{mask_secrets(str(properties[key]))} ({key})"
    if any(k.startswith("adls.") for k in properties):
        return f"Azure account {properties.get('adls.account-name', '(from the connection string)')}"
    return "the store's default endpoint (no s3.endpoint set)"


def _catalog_endpoint(config: CatalogConfig) -> str:
    if config.embedded:
        return f"the embedded catalog {config.warehouse}/catalog.db"
    uri = config.properties.get("uri")
    named = f"catalog {config.name}" if config.name else "the catalog.* options"
    return f"{mask_secrets(uri)} (uri of {named})" if uri else named


def _masked(text: str, properties: Mapping[str, str]) -> str:
    masked = redact(properties)
    for key, value in properties.items():
        if value and masked[key] != value:
            text = text.replace(value, masked[key])
    return mask_secrets(text)


def _missing_module(error: BaseException) -> str | None:
    for e in _chain(error):
        name = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
        if name:
            return str(name)
        if type(e).__name__ == "NotInstalledError":
            return str(e)
    return None


def classify(
    error: BaseException, config: CatalogConfig, table: str | None, io_properties: Mapping[str, str] | None = None
) -> FencedLakeError | None:
    """The typed error for ``error`` raised while opening ``table`` of ``config``'s catalog, or None if unknown."""
    properties = {**config.properties, **(io_properties or {})}
    detail = _masked(f"{type(error).__name__}: {error}", properties).strip().replace("\n", " ")[:400]
    module = _missing_module(error)
    if module is not None:
        # pyiceberg reports a missing psycopg2 as "SQLAlchemy support not installed": the URI says which driver.
        uri = str(config.properties.get("uri", ""))
        module = f"{module} psycopg2" if uri.startswith("postgres") else module
        extra = next((x for m, x in _EXTRAS.items() if m in module), None)
        install = f"pip install 'pyspark-fenced-sink[{extra}]'" if extra else "install the missing package"
        return InvalidOptionsError(
            f"{config.describe()} needs a package that is not installed where this runs ({detail}): {install} "
            "in the environment of the Spark driver and its Python workers"
        )
    kind = _kind(error)
    if kind is None:
        return None
    service = "storage" if kind == "truncated" else _service(error)
    endpoint = _storage_endpoint(properties) if service == "storage" else _catalog_endpoint(config)
    k = _KINDS[kind]
    subject = f"table {table}" if table else "the catalog"
    return ServiceError(
        f"the {service} at {endpoint} {k.what} while opening {subject}, before anything was written: {k.advice}. "
        f"Retrying {'may help' if k.retryable else 'does not help'}. ({detail})",
        service=service,
        endpoint=endpoint,
        table=table,
        retryable=k.retryable,
    )


@contextmanager
def service_errors(
    config: CatalogConfig, table: str | None = None, io_properties: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Raise recognised catalog and storage failures inside the block as typed errors (:func:`classify`)."""
    try:
        yield
    except FencedLakeError:
        raise
    except Exception as e:
        typed = classify(e, config, table, io_properties)
        if typed is None:
            raise
        raise typed from e
