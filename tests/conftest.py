"""Fixtures shared by every test module.

``wh``: a fresh warehouse path for the embedded catalog (a directory not
created yet, under the test's ``tmp_path``); modules that need a populated or
module-scoped warehouse define their own.

``spark``: ONE local[2] SparkSession for the whole test run (a cold session
costs ~7 s here; one per module cost a minute per run). Modules that change
session settings take ``spark.newSession()`` instead, which shares the
SparkContext but not the SQL conf. Streaming queries left running by a test
are stopped at the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from tests.spark.support import start_spark, stop_spark

    session = start_spark("fencedlake-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    stop_spark(session)


@pytest.fixture
def wh(tmp_path: Path) -> str:
    return str(tmp_path / "wh")
