"""The Iceberg REST catalog: the field report's 409s, commit faults, expiring tokens (integration/services/rest.sh).

* Naive pyiceberg appends through the REST catalog reproduce the field report's
  ``409 CommitFailedException``s (rows of failed writes lost to the caller), while
  fencedlake through the same server surfaces none (the field report scenario on the
  ``rest-s3`` target, integration/test_scenarios.py, and the last test here).
* Every commit answer the server can give -- 409, 500 before applying, 500/502/503/504
  after applying, the connection dropped after applying, silence past the hold time --
  ends in exactly one application of the write, found by lookup, never by a blind retry.
* Tokens that expire between requests (419) are refreshed and the writes land.

The naive baseline also runs through Apache Iceberg's own REST catalog (the iceberg-open-api
test fixture, integration/services/iceberg_rest.sh), which has no fault hooks: the scenarios run
on it as the ``iceberg-rest-s3`` target (integration/targets.py).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from integration.conftest import Services, iceberg_rest_properties, own_server, own_server_env
from integration.scenarios_support import attempt_write, ids_of, rows, table_ids, violations
from integration.targets import target_options

pytestmark = pytest.mark.integration


def _faults(services: Services, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arm (POST) or read (GET) the REST test server's faults."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{services.rest_uri}/_test/faults", data=data, method="POST" if data else "GET")
    with urllib.request.urlopen(req, timeout=30) as response:
        out: dict[str, Any] = json.loads(response.read())
        return out


#: This module's own REST test server (integration/services/rest.sh on this port): its faults hit "the next
#: commits", which no other module's writes may take when modules run side by side (scripts/test.sh).
FAULTS_REST_PORT = int(os.environ.get("FENCEDLAKE_IT_FAULTS_REST_PORT", "24362"))


@pytest.fixture(scope="module")
def faults_server(services: Services) -> Iterator[Services]:
    """``services`` with the REST URI of a REST test server started for this module (stopped after it)."""
    services.require("rest_uri")
    if services.target != "local":
        pytest.skip("fault injection needs the local REST test server (integration/services/restcatalog.py)")
    with own_server("rest.sh", own_server_env("FENCEDLAKE_IT_REST_PORT", FAULTS_REST_PORT, "rest-faults")):
        yield replace(services, rest_uri=f"http://127.0.0.1:{FAULTS_REST_PORT}")


@pytest.fixture
def rest(faults_server: Services) -> Iterator[Services]:
    """This module's REST test server, faults reset before and after (the docker target's Lakekeeper has none)."""
    _faults(faults_server, {"reset": True})
    yield faults_server
    _faults(faults_server, {"reset": True})


def test_naive_pyiceberg_appends_through_rest_surface_409s_and_lose_writes(
    rest: Services, rest_catalog_properties: dict[str, str]
) -> None:
    """16 writers x 2 plain ``table.append`` (pyiceberg's retry off) at once: CommitFailedExceptions reach
    the callers and only the other writes' rows are in the table (the field report's 409s)."""
    _naive_appends_surface_409s(rest_catalog_properties)


def test_naive_pyiceberg_appends_through_icebergs_rest_fixture_surface_409s_and_lose_writes(
    services: Services,
) -> None:
    """The same through Apache Iceberg's own REST catalog (iceberg-open-api's fixture): its 409s too."""
    _naive_appends_surface_409s(iceberg_rest_properties(services))


def _naive_appends_surface_409s(rest_catalog_properties: dict[str, str]) -> None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import CommitFailedException

    writers, appends = 16, 2
    namespace, schema = f"naive_{uuid.uuid4().hex[:10]}", pa.schema([pa.field("id", pa.int64(), nullable=False)])
    admin = load_catalog("naive", **rest_catalog_properties)
    admin.create_namespace(namespace)
    table_name = f"{namespace}.events"
    admin.create_table(table_name, schema=schema, properties={"commit.retry.num-retries": "0"})
    barrier = threading.Barrier(writers)
    landed: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        catalog = load_catalog(f"naive{w}", **rest_catalog_properties)
        barrier.wait(timeout=60)
        for k in range(appends):
            ids = list(range((w * appends + k) * 10, (w * appends + k + 1) * 10))
            try:
                catalog.load_table(table_name).append(pa.table({"id": ids}, schema=schema))
                with lock:
                    landed.extend(ids)
            except CommitFailedException as e:
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors, "no 409 surfaced: the naive baseline did not reproduce the field report"
    assert len(errors) + len(landed) // 10 == writers * appends
    found = sorted(admin.load_table(table_name).scan().to_arrow().column("id").to_pylist())
    assert found == sorted(landed), "the table does not hold exactly the writes that reported success"


@pytest.mark.parametrize(
    ("fault", "applied_first"),
    [
        ("409", False),
        ("500-before", False),
        ("500-after", True),
        ("502-after", True),
        ("503-after", True),
        ("504-after", True),
        ("drop-after", True),
        ("timeout-after", True),
    ],
)
def test_rest_commit_fault_ends_in_exactly_one_application(rest: Services, fault: str, applied_first: bool) -> None:
    """One commit answered with ``fault``: the write reports APPLIED, its rows are in the table once; an answer
    after the server applied it is resolved by re-reading (one catalog request), never by committing again."""
    options = target_options(rest, "rest-s3")
    seed = attempt_write(options, rows("seed", -1, 1))
    assert seed["ok"], seed
    _faults(rest, {"commit": [fault]})
    first = attempt_write(options, rows("w", 100, 20))
    report = _faults(rest)
    after = attempt_write(options, rows("w", 200, 20))

    assert report["pending"] == [] and report["counts"].get(fault, 0) == 1, report
    assert first["ok"] and first["outcome"] == "APPLIED", first
    if fault == "409":
        assert (first["conflicts"], first["attempts"]) == (1, 2), first
    elif applied_first:
        # The first request landed: found by its token in the commit record, no second commit; the commit
        # found is the one this writer sent, so it counts as its own catalog commit.
        assert (first["unknowns"], first["attempts"], first["catalog_commits"]) == (1, 1, 1), first
    else:
        assert (first["unknowns"], first["attempts"], first["catalog_commits"]) == (1, 2, 1), first
    assert after["ok"] and after["outcome"] == "APPLIED", after
    assert table_ids(options) == [-1, *ids_of(100, 20), *ids_of(200, 20)]
    assert violations(options) == []


def test_rest_tokens_expiring_between_requests_are_refreshed_and_writes_land(rest: Services) -> None:
    """Tokens live 1 s; writes 1.5 s apart meet expired tokens (419) on load and commit: every write lands once."""
    import time

    options = target_options(rest, "rest-s3")
    seed = attempt_write(options, rows("seed", -1, 1))
    assert seed["ok"], seed
    _faults(rest, {"token_ttl_s": 1.0})
    from pyspark_fenced_sink.iceberg import catalogs

    catalogs._cache.clear()  # a new client: it takes a 1-second token
    records = []
    for k in range(4):
        time.sleep(1.5)
        records.append(attempt_write(options, rows("w", 1000 + k * 10, 10)))
    counts = _faults(rest)["counts"]

    assert [r for r in records if not r["ok"]] == [], records
    assert Counter(r["outcome"] for r in records) == {"APPLIED": 4}
    assert counts.get("token-expired", 0) >= 1 and counts.get("tokens-issued", 0) >= 2, counts
    assert table_ids(options) == [-1, *[i for k in range(4) for i in ids_of(1000 + k * 10, 10)]]
