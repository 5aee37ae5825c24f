"""Fixtures that hand the real integration services to tests.

The services are started by ``integration/run.sh`` (local PostgreSQL + moto S3 on
127.0.0.1) or by ``docker/docker-compose.yml`` (PostgreSQL + MinIO); both export the
same environment variables, read here. Without them every integration test FAILS with
a message saying how to start the services: an integration suite that silently skips
is indistinguishable from one that passes.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything collected under integration/ as ``integration``."""
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the scenario metrics (integration/test_scenarios.py) and write them as JSON."""
    support = sys.modules.get("integration.scenarios_support")
    if support is None or not support.REPORT.scenarios:
        return
    path = support.metrics_path()
    support.REPORT.write(path)
    terminalreporter.section("fencedlake scenario metrics")
    for line in support.REPORT.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {path})")


@dataclass(frozen=True)
class Services:
    """Connection settings of the running services."""

    target: str
    pg_uri: str
    s3_endpoint: str
    s3_bucket: str
    aws_access_key_id: str
    aws_secret_access_key: str
    aws_region: str


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
    """pyiceberg properties of the Iceberg REST catalog (Lakekeeper), docker target only.

    The local target has no REST catalog: tests that need one are skipped there with
    this reason, which ``-ra`` prints in the summary.
    """
    uri = os.environ.get("FENCEDLAKE_IT_REST_URI")
    if not uri:
        pytest.skip("no Iceberg REST catalog in this target (docker/docker-compose.yml provides Lakekeeper)")
    return {
        "type": "rest",
        "uri": uri,
        "warehouse": os.environ.get("FENCEDLAKE_IT_REST_WAREHOUSE", "fencedlake"),
    }
