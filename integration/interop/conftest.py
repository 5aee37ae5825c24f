"""Fixtures of the interop suite: one Spark session with Iceberg's runtime for the whole suite.

Collected only under integration/interop/run.sh (``FENCEDLAKE_INTEROP=1``; integration/conftest.py),
which runs it in the venv whose pyspark matches Iceberg's Spark runtime. The session is started once
(a cold one costs ~7 s) and shared; every test registers its own Iceberg catalogs in it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from integration.conftest import Services
from integration.interop.support import start_interop_spark

# PySpark turns a `timestamp` into a naive datetime in the process's local zone: make that UTC, so rows
# compare with pyarrow's (see integration/interop/compare.py).
os.environ["TZ"] = "UTC"
time.tzset()


@pytest.fixture(scope="session")
def spark(services: Services) -> Iterator[Any]:
    """The suite's SparkSession (local[2]; Iceberg's runtime jar, S3A, fencedlake tuned)."""
    session = start_interop_spark(services, "fencedlake-interop")
    yield session
    session.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what the interop tests recorded (Iceberg's own conflicts, outcomes) and write it as JSON."""
    from integration.interop.report import REPORT

    if not REPORT.records:
        return
    terminalreporter.section("fencedlake interop records")
    for line in REPORT.lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(written to {REPORT.write()})")
