"""Fixtures that hand the real integration services to tests.

The services are started by ``integration/run.sh`` (local PostgreSQL, moto S3, Azurite,
fake-gcs-server and the REST test catalog on 127.0.0.1) or by ``docker/docker-compose.yml``
(PostgreSQL, MinIO, Azurite, Lakekeeper); both export the environment variables read here.
Without them every integration test FAILS with a message saying how to start the
services: an integration suite that silently skips is indistinguishable from one that
passes. (The docker target has no GCS emulator: only there do GCS tests skip.)
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REQUIRED_ENV = (
    "FENCEDLAKE_IT_PG_URI",
    "FENCEDLAKE_IT_S3_ENDPOINT",
    "FENCEDLAKE_IT_S3_BUCKET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
)

_HERE = Path(__file__).resolve().parent

# integration/interop/ runs in its own venv (the pyspark Iceberg's Spark runtime jar is built for) and
# stage: integration/interop/run.sh (`scripts/test.sh interop`) sets FENCEDLAKE_INTEROP=1. Elsewhere
# it is not collected; `pytest integration/interop` without it collects nothing and fails (exit 5).
INTEROP = os.environ.get("FENCEDLAKE_INTEROP", "") == "1"
collect_ignore = [] if INTEROP else ["interop"]


def pytest_report_header(config: pytest.Config) -> str:
    """Say where integration/interop/ went when it is not collected."""
    if INTEROP:
        return "fencedlake interop: integration/interop/ collected (FENCEDLAKE_INTEROP=1)"
    return "fencedlake interop: integration/interop/ not collected here; run integration/interop/run.sh"


#: The longest modules, in the order they start (~365, 205, 170 and 160 s of the ~1,000 s stage, 2026-11-30): with
#: two pytest-xdist workers (scripts/test.sh: ``--dist loadscope``, each module whole in one worker, so its Spark
#: session, Connect server or cluster starts once) the long ones start first and the short ones fill in after.
#: No module changes a service another one uses: test_rest.py's faults and test_scenarios.py's PostgreSQL
#: restart each have a server of their own.
LONGEST_FIRST = ("test_scenarios.py", "test_connect.py", "test_cluster.py", "test_network_faults.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything collected under integration/ as ``integration``; the longest modules first."""
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: a module stays whole


def state_dir() -> Path:
    """Where the services keep their state: ``$FENCEDLAKE_IT_STATE`` (default ``.integration``)."""
    return Path(os.environ.get("FENCEDLAKE_IT_STATE") or _HERE.parent / ".integration")


def metrics_path() -> Path:
    """Where the scenario metrics (integration/test_scenarios.py) are written as JSON."""
    return state_dir() / "scenario-metrics.json"


def own_server_env(port_variable: str, port: int, name: str) -> dict[str, str]:
    """The environment of an integration/services/ script for a server of one module's own: ``port`` in
    ``port_variable`` and a state directory ``name`` of its own (integration/run.sh stops it after a crash)."""
    return {**os.environ, port_variable: str(port), "FENCEDLAKE_IT_STATE": str(state_dir() / name)}


@contextlib.contextmanager
def own_server(script: str, env: dict[str, str]) -> Iterator[str]:
    """Start integration/services/``script`` with ``env`` (:func:`own_server_env`), stop it on exit; yields the
    script's path (to run it again with ``env``)."""
    path = str(_HERE / "services" / script)
    subprocess.run([path, "start"], check=True, capture_output=True, timeout=300, env=env)
    try:
        yield path
    finally:
        subprocess.run([path, "stop"], check=False, capture_output=True, timeout=120, env=env)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Forget an earlier run's scenario metrics (the controller of a parallel run prints what its workers wrote)."""
    if not hasattr(session.config, "workerinput"):
        with contextlib.suppress(FileNotFoundError):
            metrics_path().unlink()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the scenario metrics (integration/test_scenarios.py) as JSON, in whichever process ran them."""
    support = sys.modules.get("integration.scenarios_support")
    if support is not None and support.REPORT.scenarios:
        support.REPORT.write(metrics_path())


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the scenario metrics this run wrote (a worker's or this process's)."""
    path = metrics_path()
    if not path.is_file():
        return
    from integration.scenarios_support import ScenarioReport

    report = ScenarioReport.read(path)
    terminalreporter.section("fencedlake scenario metrics")
    for line in report.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {path})")


@dataclass(frozen=True)
class Services:
    """Connection settings of the running services (empty strings: not in this target)."""

    target: str
    pg_uri: str
    s3_endpoint: str
    s3_bucket: str
    aws_access_key_id: str
    aws_secret_access_key: str
    aws_region: str
    azure_connection_string: str = ""
    azure_container: str = ""
    gcs_endpoint: str = ""
    gcs_bucket: str = ""
    rest_uri: str = ""
    rest_credential: str = ""
    rest_warehouse: str = ""
    iceberg_rest_uri: str = ""

    def require(self, *fields: str) -> None:
        """Fail (local target) or skip (docker target) when a service this test needs is not configured."""
        missing = [f for f in fields if not getattr(self, f)]
        if not missing:
            return
        message = f"services not configured in target {self.target!r}: {', '.join(missing)}"
        if self.target == "docker":
            pytest.skip(message)
        pytest.fail(message + " (run the suite through integration/run.sh)", pytrace=False)


@pytest.fixture(scope="session")
def services() -> Services:
    """The services' settings; fails (never skips) when the environment lacks them."""
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        pytest.fail(
            "integration services are not configured (missing " + ", ".join(missing) + "). "
            "Run the suite through `integration/run.sh` (starts PostgreSQL and S3 on 127.0.0.1), "
            "e.g. `integration/run.sh integration/test_services.py`, or inside docker/ with "
            "FENCEDLAKE_IT_TARGET=docker.",
            pytrace=False,
        )
    return Services(
        target=os.environ.get("FENCEDLAKE_IT_TARGET", "local"),
        pg_uri=os.environ["FENCEDLAKE_IT_PG_URI"],
        s3_endpoint=os.environ["FENCEDLAKE_IT_S3_ENDPOINT"],
        s3_bucket=os.environ["FENCEDLAKE_IT_S3_BUCKET"],
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        aws_region=os.environ["AWS_REGION"],
        azure_connection_string=os.environ.get("FENCEDLAKE_IT_AZURE_CONNECTION_STRING", ""),
        azure_container=os.environ.get("FENCEDLAKE_IT_AZURE_CONTAINER", ""),
        gcs_endpoint=os.environ.get("FENCEDLAKE_IT_GCS_ENDPOINT", ""),
        gcs_bucket=os.environ.get("FENCEDLAKE_IT_GCS_BUCKET", ""),
        rest_uri=os.environ.get("FENCEDLAKE_IT_REST_URI", ""),
        rest_credential=os.environ.get("FENCEDLAKE_IT_REST_CREDENTIAL", ""),
        rest_warehouse=os.environ.get("FENCEDLAKE_IT_REST_WAREHOUSE", ""),
        iceberg_rest_uri=os.environ.get("FENCEDLAKE_IT_ICEBERG_REST_URI", ""),
    )


@pytest.fixture(scope="session")
def pg_uri(services: Services) -> str:
    """SQLAlchemy URI of the PostgreSQL database (``postgresql+psycopg2://...``)."""
    return services.pg_uri


@pytest.fixture(scope="session")
def s3_endpoint(services: Services) -> str:
    """``http://host:port`` of the S3 endpoint (moto locally, MinIO in docker)."""
    return services.s3_endpoint


@pytest.fixture(scope="session")
def s3_bucket(services: Services) -> str:
    """The bucket the services created."""
    return services.s3_bucket


@pytest.fixture(scope="session")
def s3_storage_options(services: Services) -> dict[str, Any]:
    """Keyword arguments for ``s3fs.S3FileSystem`` pointing at the endpoint."""
    return {
        "key": services.aws_access_key_id,
        "secret": services.aws_secret_access_key,
        "endpoint_url": services.s3_endpoint,
        "client_kwargs": {"region_name": services.aws_region},
    }


@pytest.fixture(scope="session")
def pyiceberg_s3_properties(services: Services) -> dict[str, str]:
    """pyiceberg FileIO properties for the endpoint (``s3.*`` keys)."""
    return {
        "s3.endpoint": services.s3_endpoint,
        "s3.access-key-id": services.aws_access_key_id,
        "s3.secret-access-key": services.aws_secret_access_key,
        "s3.region": services.aws_region,
        "s3.path-style-access": "true",
    }


@pytest.fixture
def s3fs_fs(s3_storage_options: dict[str, Any]) -> Any:
    """A fresh ``S3FileSystem`` (not fsspec's cached instance)."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True, **s3_storage_options)


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest, s3_bucket: str) -> str:
    """A fresh, unique ``bucket/prefix`` for this test (no leading ``s3://``).

    Tests never share keys, so reruns against long-lived services (docker) and tests
    run in any order see empty prefixes.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60].strip("-")
    return f"{s3_bucket}/it/{name}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def rest_catalog_properties(services: Services) -> dict[str, str]:
    """pyiceberg properties of the Iceberg REST catalog (the local test server, or Lakekeeper in docker).

    Only the URI and the OAuth2 client credential: the catalog vends the storage properties.
    """
    services.require("rest_uri")
    return rest_properties(services)


def rest_properties(services: Services) -> dict[str, str]:
    """pyiceberg ``RestCatalog`` properties: URI, OAuth2 client credential and its token endpoint, warehouse."""
    props = {"type": "rest", "uri": services.rest_uri}
    if services.rest_credential:
        props["credential"] = services.rest_credential
        props["oauth2-server-uri"] = f"{services.rest_uri}/v1/oauth/tokens"
    if services.rest_warehouse:
        props["warehouse"] = services.rest_warehouse
    return props


def iceberg_rest_properties(services: Services) -> dict[str, str]:
    """pyiceberg ``RestCatalog`` properties of Iceberg's REST fixture (integration/services/iceberg_rest.sh).

    The fixture vends the S3 keys with every table; the endpoint, region and path-style access are the
    client's (they describe the S3 server as this process reaches it).
    """
    services.require("iceberg_rest_uri")
    return {
        "type": "rest",
        "uri": services.iceberg_rest_uri,
        "s3.endpoint": services.s3_endpoint,
        "s3.region": services.aws_region,
        "s3.path-style-access": "true",
    }


@pytest.fixture(scope="session")
def azure_properties(services: Services) -> dict[str, str]:
    """pyiceberg FileIO properties for Azurite (``adls.*``)."""
    services.require("azure_connection_string", "azure_container")
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    # integration/services/azurite.sh creates the container; the docker stack's Azurite starts empty.
    with contextlib.suppress(ResourceExistsError):
        service = BlobServiceClient.from_connection_string(services.azure_connection_string)
        service.create_container(services.azure_container)
    return {"adls.connection-string": services.azure_connection_string, "adls.account-name": "devstoreaccount1"}


@pytest.fixture(scope="session")
def gcs_properties(services: Services) -> dict[str, str]:
    """pyiceberg FileIO properties for the GCS emulator (``gcs.*``; it accepts any token)."""
    services.require("gcs_endpoint", "gcs_bucket")
    return gcs_io_properties(services)


def gcs_io_properties(services: Services) -> dict[str, str]:
    """``gcs.*`` properties: endpoint, project, a dummy token (so no client looks for real credentials)."""
    import time

    return {
        "gcs.service.host": services.gcs_endpoint,
        "gcs.project-id": "fencedlake",
        "gcs.oauth2.token": "emulator-accepts-any-token",
        "gcs.oauth2.token-expires-at": str(int((time.time() + 86400) * 1000)),
    }
