"""Read planning with each manifest decoded once per process (iceberg/planning/manifest_cache.py; PROTOCOL.md §14)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan
from pyiceberg.manifest import ManifestFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import DataScan
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from pyspark_fenced_sink.iceberg.planning import manifest_cache
from pyspark_fenced_sink.iceberg.planning.manifest_cache import planning_scan
from tests.read.tables import make_table

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType()))
BY_REGION = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


@pytest.fixture
def table(tmp_path: Any) -> Any:
    """Six appends (six manifests), regions eu/us, ids 0-599 in runs of 100; then one overwrite of region us."""
    t = make_table(str(tmp_path / "wh"), "db.cache", schema=SCHEMA, spec=BY_REGION)
    for lo in range(0, 600, 100):
        ids = list(range(lo, lo + 100))
        t.append(pa.table({"id": ids, "region": ["eu" if i % 2 else "us" for i in ids]}, schema=SCHEMA.as_arrow()))
    t.overwrite(pa.table({"id": [1000], "region": ["us"]}, schema=SCHEMA.as_arrow()), overwrite_filter="region = 'us'")
    return t


def _paths(scan: Any) -> list[str]:
    return sorted(task.file.file_path for task in scan.plan_files())


@pytest.mark.parametrize(
    "row_filter",
    [AlwaysTrue(), EqualTo("region", "eu"), GreaterThanOrEqual("id", 300), LessThan("id", 0)],
    ids=["all", "partition", "statistics", "none"],
)
def test_the_cached_planner_plans_exactly_the_files_pyiceberg_plans(table: Any, row_filter: BooleanExpression) -> None:
    """Same files as pyiceberg's own DataScan, for partition, statistics and empty filters, after an overwrite."""
    snapshot = table.metadata.current_snapshot_id
    expected = _paths(DataScan(table.metadata, table.io, row_filter=row_filter, snapshot_id=snapshot))
    for _ in range(2):  # cold, then from the cache
        assert _paths(planning_scan(table.metadata, table.io, row_filter=row_filter, snapshot_id=snapshot)) == expected


def test_each_manifest_is_decoded_once_per_process(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning the same snapshot again reads no manifest: manifests are immutable, their entries are kept."""
    decoded: list[str] = []
    real = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, io: Any, discard_deleted: bool = True) -> Any:
        decoded.append(self.manifest_path)
        return real(self, io, discard_deleted)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    monkeypatch.setattr(manifest_cache, "_entries", type(manifest_cache._entries)())
    monkeypatch.setattr(manifest_cache, "_held", 0)
    snapshot = table.metadata.current_snapshot_id
    for _ in range(3):
        planning_scan(table.metadata, table.io, snapshot_id=snapshot).plan_files()
    assert decoded and len(decoded) == len(set(decoded))


def test_the_cache_is_bounded_by_entries(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond MAX_CACHED_ENTRIES the least recently used manifests are dropped (and decoded again when needed)."""
    monkeypatch.setattr(manifest_cache, "_entries", type(manifest_cache._entries)())
    monkeypatch.setattr(manifest_cache, "_held", 0)
    monkeypatch.setattr(manifest_cache, "MAX_CACHED_ENTRIES", 3)
    snapshot = table.metadata.current_snapshot_id
    files = _paths(planning_scan(table.metadata, table.io, snapshot_id=snapshot))
    assert manifest_cache._held <= 3 and len(manifest_cache._entries) >= 1
    assert _paths(planning_scan(table.metadata, table.io, snapshot_id=snapshot)) == files
