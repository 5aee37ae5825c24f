"""Every catalog request has a bound (iceberg/timeouts.py; PROTOCOL.md §4).

Each test points a real client at a real socket that accepts connections and never
answers (``silent_port``: a hung server, a response lost in the network): without the
bound the call hangs for ever.
"""

from __future__ import annotations

import time
import uuid

import pytest

from pyspark_fenced_sink.errors import ServiceError
from pyspark_fenced_sink.iceberg import timeouts
from pyspark_fenced_sink.iceberg.catalogs import load_catalog
from pyspark_fenced_sink.iceberg.timeouts import REQUEST_TIMEOUT_DEFAULT_S, _with_libpq_defaults, request_timeout_s
from pyspark_fenced_sink.options.catalog import catalog_config


def test_rest_catalog_that_never_answers_fails_within_its_request_timeout(silent_port: int) -> None:
    """A REST catalog that accepts and never answers: loading it raises a retryable ServiceError in ~1 s."""
    config = catalog_config(
        properties={"type": "rest", "uri": f"http://127.0.0.1:{silent_port}", "request-timeout": "1"}
    )
    t0 = time.monotonic()
    with pytest.raises(ServiceError) as raised:
        load_catalog(config)
    assert time.monotonic() - t0 < 5
    assert raised.value.retryable and raised.value.service == "catalog", raised.value


def test_postgres_catalog_that_never_answers_fails_within_its_request_timeout(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL server that accepts and never answers: the SQL catalog raises a retryable ServiceError."""
    pytest.importorskip("psycopg2")
    # The statement bound is process-wide and the largest asked for wins: start from none, as a fresh
    # process does (an earlier test's PostgreSQL catalog asked for the 30 s default).
    monkeypatch.setattr(timeouts, "_statement_bound_s", None)
    uri = f"postgresql+psycopg2://user:pw-{uuid.uuid4().hex[:6]}@127.0.0.1:{silent_port}/db"
    config = catalog_config(properties={"type": "sql", "uri": uri, "request-timeout": "1"})
    t0 = time.monotonic()
    with pytest.raises(ServiceError) as raised:
        load_catalog(config)
    assert time.monotonic() - t0 < 5
    assert raised.value.retryable, raised.value
    assert "pw-" not in str(raised.value)  # the password never reaches a message


def test_libpq_defaults_are_added_only_where_the_uri_sets_none() -> None:
    """connect_timeout and keepalives join a PostgreSQL URI; a value the user set is kept."""
    uri = _with_libpq_defaults("postgresql+psycopg2://u:p@h:5432/db?connect_timeout=3")
    assert "connect_timeout=3" in uri and "keepalives_idle=30" in uri and "u:p@h:5432" in uri


@pytest.mark.parametrize(
    ("value", "expected"), [(None, REQUEST_TIMEOUT_DEFAULT_S), ("", REQUEST_TIMEOUT_DEFAULT_S), ("2.5", 2.5)]
)
def test_request_timeout_property_parses_seconds(value: str | None, expected: float) -> None:
    """request-timeout is a positive number of seconds; absent or empty means the default."""
    props = {} if value is None else {"request-timeout": value}
    assert request_timeout_s(props) == expected


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_request_timeout_property_that_is_not_positive_is_refused(value: str) -> None:
    """A zero, negative or non-numeric request-timeout is an error naming the property."""
    with pytest.raises(ValueError, match="request-timeout"):
        request_timeout_s({"request-timeout": value})


def test_an_adapter_pyiceberg_mounts_itself_gets_the_request_timeout_too(silent_port: int) -> None:
    """SigV4 signing mounts pyiceberg's own adapter on the catalog URI: it is bounded like the sink's."""
    import requests
    from requests.adapters import HTTPAdapter

    uri = f"http://127.0.0.1:{silent_port}"
    session = requests.Session()
    session.mount(uri, HTTPAdapter())  # more specific than the sink's "http://": it answers for the URI
    timeouts._mount_bounded(session, {"request-timeout": "0.5"}, None)
    t0 = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout):
        session.get(f"{uri}/v1/config")
    assert time.monotonic() - t0 < 3
