"""Catalog and storage failures while a table is opened: one typed error, endpoint named, secrets masked
(iceberg/service_errors.py; PROTOCOL.md §4, failures before the WAL put)."""

from __future__ import annotations

import socket
import sys
from typing import Any

import pytest

from pyspark_fenced_sink.errors import InvalidOptionsError, ServiceError, fencedlake_error
from pyspark_fenced_sink.iceberg.catalogs import TableCreation, load_catalog, open_table
from pyspark_fenced_sink.iceberg.service_errors import classify
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.options.write import parse_write_options

SECRET = "s3cr3t-Value-9"


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_postgres_catalog_that_is_down_is_a_retryable_service_error_with_the_password_masked() -> None:
    """Connection refused by the catalog's database: ServiceError(catalog), retryable, the URI named, no password."""
    uri = f"postgresql+psycopg2://lake:{SECRET}@127.0.0.1:{_closed_port()}/lake"
    with pytest.raises(ServiceError) as err:
        load_catalog(catalog_config(properties={"type": "sql", "uri": uri}))
    e = err.value
    assert (e.service, e.retryable) == ("catalog", True)
    assert "could not be reached" in str(e) and "Retrying may help" in str(e)
    assert "postgresql+psycopg2://lake:****@127.0.0.1:" in e.endpoint
    assert SECRET not in str(e) and SECRET not in repr(e.fields)


def test_a_rest_catalog_at_a_wrong_endpoint_names_it_and_masks_the_credential() -> None:
    """A REST catalog nobody serves: ServiceError naming the uri; the OAuth2 secret appears nowhere."""
    uri = f"http://127.0.0.1:{_closed_port()}"
    config = catalog_config(properties={"type": "rest", "uri": uri, "credential": f"client:{SECRET}"})
    with pytest.raises(ServiceError) as err:
        load_catalog(config)
    assert err.value.endpoint.startswith(uri) and err.value.retryable
    assert SECRET not in str(err.value)


def test_a_wrong_s3_endpoint_fails_table_creation_with_a_typed_error(tmp_path: Any) -> None:
    """The table's metadata cannot be written to S3 (nothing listens): ServiceError(storage) naming s3.endpoint,
    the secret key masked; the typed error survives the trip through Spark's text (fencedlake_error)."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    opts = parse_write_options(
        {
            "table": "db.t",
            "catalog.type": "sql",
            "catalog.uri": f"sqlite:///{tmp_path}/c.db",
            "catalog.warehouse": "s3://bucket/wh",
            "catalog.s3.endpoint": endpoint,
            "catalog.s3.access-key-id": "AKIAEXAMPLE",
            "catalog.s3.secret-access-key": SECRET,
            "catalog.s3.region": "us-east-1",
        }
    )
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    creation = TableCreation(lambda: Schema(NestedField(1, "x", LongType())))
    with pytest.raises(ServiceError) as err:
        open_table(opts.catalog, opts.table, create=creation)
    e = err.value
    assert (e.service, e.retryable, e.table) == ("storage", True, "db.t")
    assert e.endpoint == f"{endpoint} (s3.endpoint)"
    assert SECRET not in str(e)
    back = fencedlake_error(RuntimeError(f"Py4JJavaError: ... {e.marked()}"))
    assert isinstance(back, ServiceError) and back.retryable is True and back.endpoint == e.endpoint


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    response = {"Error": {"Code": code, "Message": f"refused {SECRET}"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "HeadObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "service", "retryable", "words"),
    [
        (_client_error("InvalidAccessKeyId", 403), "storage", False, "refused the credentials"),
        (_client_error("SignatureDoesNotMatch", 403), "storage", False, "refused the credentials"),
        (_client_error("NoSuchBucket", 404), "storage", False, "does not have what the configuration names"),
        (_client_error("SlowDown", 503), "storage", True, "answered with a server error"),
        (OSError("AWS Error ACCESS_DENIED during HeadObject operation: No body."), "storage", False, "refused"),
        (OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7"), "storage", True, "reached"),
    ],
    ids=["bad-key", "bad-secret", "no-bucket", "slow-down", "arrow-403", "arrow-unreachable"],
)
def test_storage_answers_are_classified_as_retrying_would_or_would_not_help(
    error: Exception, service: str, retryable: bool, words: str
) -> None:
    """Credentials and missing buckets: fix the configuration (not retryable); outages: retry."""
    config = catalog_config(properties={"type": "sql", "uri": "sqlite:///x.db", "s3.secret-access-key": SECRET})
    typed = classify(error, config, "db.t", {"s3.endpoint": "http://minio:9000"})
    assert isinstance(typed, ServiceError)
    assert (typed.service, typed.retryable) == (service, retryable)
    assert words in str(typed) and "http://minio:9000 (s3.endpoint)" in str(typed)
    assert SECRET not in str(typed)


def test_an_unrecognised_failure_is_not_classified() -> None:
    """A bug is not a service outage: classify() leaves it alone (it is re-raised unchanged)."""
    assert classify(KeyError("x"), catalog_config(), "db.t") is None


def test_a_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg2 (no [postgres] extra) the error says what to install, not what SQLAlchemy lacks."""
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    uri = f"postgresql+psycopg2://lake@127.0.0.1:{_closed_port()}/lake"
    with pytest.raises(InvalidOptionsError, match=r"pip install 'pyspark-fenced-sink\[postgres\]'"):
        load_catalog(catalog_config(properties={"type": "sql", "uri": uri, "pool_pre_ping": "true"}))


def test_a_metadata_file_read_back_cut_short_is_a_retryable_storage_error() -> None:
    """pyiceberg's parse error of an empty (cut) metadata file is a retryable ServiceError naming the storage."""
    from pyiceberg.table.metadata import TableMetadataUtil

    try:
        TableMetadataUtil.parse_raw("")
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError, as pyiceberg raises it
        error = e
    typed = classify(error, catalog_config(properties={"type": "sql", "uri": "sqlite://"}), "db.t")
    assert isinstance(typed, ServiceError) and typed.retryable and typed.service == "storage", typed
    assert "incomplete object" in str(typed)
