"""Catalog x store combinations the integration scenarios run on, and their sink options.

One row per combination; every scenario takes a ``target`` and builds its table's
options here, so a scenario is written once and runs on each:

* ``pg-s3``    -- pyiceberg SqlCatalog on PostgreSQL, warehouse and WAL on S3 (moto);
* ``rest-s3``  -- the Iceberg REST test catalog (integration/services/restcatalog.py) on
  that PostgreSQL; the client passes only the URI and its OAuth2 credential, the catalog
  vends the S3 properties the data files and the WAL use;
* ``iceberg-rest-s3`` -- Apache Iceberg's own REST catalog (the iceberg-open-api test fixture,
  integration/services/iceberg_rest.sh: Iceberg Java's RESTCatalogAdapter over a JdbcCatalog on
  that PostgreSQL, S3FileIO on that S3); it vends the S3 keys, the client adds the endpoint;
* ``pg-azure`` -- SqlCatalog on PostgreSQL, warehouse and WAL on Azure Blob (Azurite);
* ``pg-gcs``   -- SqlCatalog on PostgreSQL, warehouse and WAL on GCS (fake-gcs-server).

CI runs every scenario on ``pg-s3`` and a CI-sized selection on the others
(:func:`targets_for`); ``FENCEDLAKE_IT_FULL=1`` runs every scenario on every target.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

import pytest

from integration.conftest import Services, gcs_io_properties, iceberg_rest_properties, rest_properties

__all__ = ["FULL", "TARGETS", "target_options", "targets_for"]

TARGETS = ("pg-s3", "rest-s3", "iceberg-rest-s3", "pg-azure", "pg-gcs")
FULL = os.environ.get("FENCEDLAKE_IT_FULL", "") == "1"

#: Scenario -> the targets beyond ``pg-s3`` it runs on in the CI profile.
_CI_EXTRA: Mapping[str, tuple[str, ...]] = {
    "field-report": ("rest-s3", "iceberg-rest-s3", "pg-azure", "pg-gcs"),
    "kill-9": ("rest-s3", "pg-azure"),
    "zombie": ("rest-s3", "iceberg-rest-s3", "pg-azure", "pg-gcs"),
    "lagging": ("rest-s3", "pg-azure"),
}


def targets_for(scenario: str) -> list[str]:
    """The targets ``scenario`` runs on: all with ``FENCEDLAKE_IT_FULL=1``, else ``pg-s3`` + its CI selection."""
    return list(TARGETS) if FULL else ["pg-s3", *_CI_EXTRA.get(scenario, ())]


def target_options(services: Services, target: str, tag: str | None = None) -> dict[str, str]:
    """Sink options of a fresh table on ``target`` (a unique namespace; warehouse under a unique prefix)."""
    tag = tag or uuid.uuid4().hex[:12]
    table = {"table": f"sc_{uuid.uuid4().hex[:12]}.events"}
    pg = {"catalog.type": "sql", "catalog.uri": services.pg_uri}
    if target == "pg-s3":
        return {
            **table,
            **pg,
            "catalog.warehouse": f"s3://{services.s3_bucket}/it/{tag}/warehouse",
            "catalog.s3.endpoint": services.s3_endpoint,
            "catalog.s3.access-key-id": services.aws_access_key_id,
            "catalog.s3.secret-access-key": services.aws_secret_access_key,
            "catalog.s3.region": services.aws_region,
            "catalog.s3.path-style-access": "true",
        }
    if target == "rest-s3":
        services.require("rest_uri")
        rest = {f"catalog.{k}": v for k, v in rest_properties(services).items()}
        return {**table, **rest}
    if target == "iceberg-rest-s3":
        services.require("iceberg_rest_uri")
        return {**table, **{f"catalog.{k}": v for k, v in iceberg_rest_properties(services).items()}}
    if target == "pg-azure":
        services.require("azure_connection_string", "azure_container")
        return {
            **table,
            **pg,
            "catalog.warehouse": f"abfs://{services.azure_container}/it/{tag}/warehouse",
            "catalog.adls.connection-string": services.azure_connection_string,
            "catalog.adls.account-name": "devstoreaccount1",
        }
    if target == "pg-gcs":
        services.require("gcs_endpoint", "gcs_bucket")
        gcs = {f"catalog.{k}": v for k, v in gcs_io_properties(services).items()}
        return {**table, **pg, "catalog.warehouse": f"gs://{services.gcs_bucket}/it/{tag}/warehouse", **gcs}
    raise pytest.UsageError(f"unknown target {target!r}: expected one of {TARGETS}")
