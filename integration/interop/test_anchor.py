"""The anchor benchmark as a smoke test: N Spark applications x T threads, Iceberg's writer vs fencedlake.

Runs :mod:`benchmarks.anchor` on every catalog the services offer (PostgreSQL, Iceberg's REST
fixture) at CI size (2 applications x 2 threads x 2 writes), or at full size (4 x 8 x 3, 2 rounds)
with ``FENCEDLAKE_INTEROP_FULL=1``; its table and figures go to ``.benchmarks-out/results-anchor-*``
and the interop records. It fails only on a wrong table (the suite verifies every round) or when
fencedlake fails a write -- never on a number; Iceberg's surfaced conflicts are recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import anchor
from integration.conftest import Services
from integration.interop.report import REPORT
from integration.interop.support import FULL, ROOT, spark_classpath

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.bench, pytest.mark.multiprocess]


@pytest.mark.slow
@pytest.mark.timeout(5400 if FULL else 1200)
def test_anchor_benchmark_fencedlake_lands_every_write_beside_icebergs_writer(
    services: Services, tmp_path: Path
) -> None:
    """Both writers, same catalogs, one run: fencedlake lands every write, every table verified."""
    services.require("iceberg_rest_uri")
    mode = "full" if FULL else "quick"
    result = anchor.run(**anchor.PROFILES[mode], jars=spark_classpath(), workdir=str(tmp_path))
    out = ROOT / ".benchmarks-out"
    out.mkdir(exist_ok=True)
    (out / f"results-anchor-{mode}.md").write_text(result.markdown())
    (out / f"results-anchor-{mode}.json").write_text(json.dumps(result.to_json(), indent=1, default=str))
    print(result.markdown())
    fenced = [r for r in result.rows if r["writer"] == anchor.FENCED]
    assert {r["catalog"] for r in fenced} == {"PostgreSQL", "Iceberg REST"}
    for row in fenced:
        landed, writes = map(int, row["landed"].split("/"))
        assert landed == writes and row["errors surfaced"] == "0", row
    for row in result.rows:
        REPORT.record(f"anchor-{mode}-{row['catalog']}-{row['writer']}", **row)
