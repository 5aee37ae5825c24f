"""Iceberg's own Spark reader reads every table state fencedlake writes, and its metadata tables agree.

One table per catalog walks through every kind of commit the sink makes -- appends (manifests
merged along the way), snapshot properties, a dynamic overwrite, a replace-where, a compaction's
``replace`` snapshot, a branch write and its publish, a static overwrite -- and after each step
Iceberg's Spark runtime (``SparkCatalog`` on the *same* catalog: JdbcCatalog on the SQLite file or
PostgreSQL database pyiceberg's SqlCatalog uses, or Iceberg's REST fixture) must

* return exactly pyiceberg's rows, whole and under filters on every column type (Iceberg prunes
  files with the statistics fencedlake wrote: a wrong bound loses rows here), and exactly the ids
  the steps put there;
* list in ``snapshots``, ``refs``, ``manifests`` and ``files`` exactly what pyiceberg reads from the
  same metadata, with the counts fencedlake's summaries claim; and decode from our manifests
  (``readable_metrics``) bounds and counts that hold for the values the data files contain.

CI runs the walk on the SQLite file (every check after every step) and on Iceberg's REST fixture (a
``JdbcCatalog`` on PostgreSQL with ``S3FileIO`` behind it; the filtered reads and metrics checks after
the first and last step only). ``FENCEDLAKE_INTEROP_FULL=1`` runs it on every catalog of
:data:`integration.interop.support.CATALOGS`, every check after every step. In CI, Iceberg's
``JdbcCatalog`` on PostgreSQL itself reads fencedlake's tables in test_catalog_compat.py and
test_mixed_writers.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from integration.conftest import Services
from integration.interop.compare import (
    java_files,
    java_manifests,
    java_refs,
    java_snapshots,
    py_files,
    py_manifests,
    py_refs,
    py_snapshots,
    pyiceberg_rows,
    spark_rows,
    without,
)
from integration.interop.support import CATALOGS, FULL, Catalog, make_catalog
from integration.interop.tables import day_bounds, frame

pytestmark = [pytest.mark.integration, pytest.mark.spark]

#: (Spark SQL predicate, pyiceberg row filter): each column type, with and without pruning potential.
FILTERS = [
    ("id BETWEEN 1030 AND 1090", "id >= 1030 AND id <= 1090"),
    ("name = 'name-01042-λλ'", "name = 'name-01042-λλ'"),
    ("name > 'name-01100-'", "name > 'name-01100-'"),
    ("amount >= 70.00", "amount >= 70.00"),
    ("d < DATE'2025-12-10'", "d < '2025-12-10'"),
    ("ts >= TIMESTAMP'2026-01-02 06:00:00'", "ts >= '2026-01-02T06:00:00+00:00'"),
    ("ts_ntz < TIMESTAMP_NTZ'2026-01-01 12:00:00'", "ts_ntz < '2026-01-01T12:00:00'"),
    ("flag = true", "flag == true"),
    ("score IS NULL", "score IS NULL"),
    ("nested.a = 5", "nested.a = 5"),
]


@dataclass
class Walk:
    """A table being walked through the sink's commit kinds, and what it must hold."""

    spark: Any
    catalog: Catalog
    table: str
    ids: Counter[int] = field(default_factory=Counter)
    branch_ids: Counter[int] = field(default_factory=Counter)
    steps: list[str] = field(default_factory=list)

    @property
    def options(self) -> dict[str, str]:
        return self.catalog.options(self.table)

    @property
    def java_name(self) -> str:
        return self.catalog.spark_name(self.table)

    def write(self, ids: range | list[int], day: int, mode: str = "append", **options: str) -> None:
        frame(self.spark, ids, day).write.format("fencedlake").mode(mode).options(**self.options, **options).save()

    def pyiceberg(self) -> Any:
        return self.catalog.load().load_table(self.table)


# ---------------------------------------------------------------------------------------------- steps


def _appends(w: Walk) -> None:
    """Four appends over three days; the table merges manifests once three have gathered."""
    for k, day in enumerate((0, 1, 2, 0)):
        ids = range(1000 + 40 * k, 1040 + 40 * k)
        w.write(
            ids,
            day,
            **{
                "partition-by": "day(ts)",
                "table.format-version": "2",
                "table.commit.manifest.min-count-to-merge": "3",
            },
        )
        w.ids.update(ids)


def _snapshot_properties(w: Walk) -> None:
    w.write(range(1160, 1180), 1, **{"snapshot-property.job-run": "interop-42"})
    w.ids.update(range(1160, 1180))
    summary = w.pyiceberg().current_snapshot().summary
    assert summary.additional_properties.get("job-run") == "interop-42"


def _dynamic_overwrite(w: Walk) -> None:
    """Replace day 1 (its rows: ids 1040..1079 and 1160..1179) with new rows."""
    w.write(range(1200, 1230), 1, "overwrite", **{"overwrite-mode": "dynamic"})
    for i in [*range(1040, 1080), *range(1160, 1180)]:
        w.ids[i] -= 1
    w.ids.update(range(1200, 1230))


def _replace_where(w: Walk) -> None:
    """Replace day 2 (ids 1080..1119) through a filter on day boundaries."""
    start, end = day_bounds(2)
    w.write(range(1300, 1310), 2, "overwrite", **{"replace-where": f"ts >= '{start}' AND ts < '{end}'"})
    for i in range(1080, 1120):
        w.ids[i] -= 1
    w.ids.update(range(1300, 1310))


def _compaction(w: Walk) -> None:
    """Rewrite day 0's small files into one: a ``replace`` snapshot, rows unchanged."""
    from pyspark_fenced_sink import compact

    result = compact(w.spark, w.table, min_input_files=2, **{k: v for k, v in w.options.items() if k != "table"})
    assert result.outcome == "applied", result
    assert w.pyiceberg().current_snapshot().summary.operation.value == "replace"


def _branch(w: Walk) -> None:
    """Write to branch ``audit`` (created from main); main is untouched."""
    w.branch_ids = Counter(w.ids)
    w.write(range(1400, 1420), 0, branch="audit")
    w.branch_ids.update(range(1400, 1420))


def _publish(w: Walk) -> None:
    """``fencedlake publish``: main fast-forwards to ``audit``."""
    from pyspark_fenced_sink.ops.cli import main

    props = [a for k, v in w.catalog.pyiceberg.items() for a in ("--catalog-prop", f"{k}={v}")]
    assert main(["publish", w.table, "audit", "--catalog", w.catalog.name, *props]) == 0
    w.ids = Counter(w.branch_ids)


def _static_overwrite(w: Walk) -> None:
    w.write(range(1500, 1525), 3, "overwrite")
    w.ids = Counter(range(1500, 1525))


def _append_after(w: Walk) -> None:
    w.write(range(1600, 1610), 4)
    w.ids.update(range(1600, 1610))


STEPS: list[tuple[str, Callable[[Walk], None]]] = [
    ("appends+merged-manifests", _appends),
    ("snapshot-properties", _snapshot_properties),
    ("dynamic-overwrite", _dynamic_overwrite),
    ("replace-where", _replace_where),
    ("compaction", _compaction),
    ("branch", _branch),
    ("publish", _publish),
    ("static-overwrite", _static_overwrite),
    ("append-after-overwrite", _append_after),
]


# --------------------------------------------------------------------------------------------- checks


def _check(w: Walk, step: str, *, deep: bool = True) -> None:
    """Everything Iceberg's runtime reads of the table agrees with pyiceberg and with the steps.

    ``deep=False`` leaves out the filtered reads and the metrics-against-data check (the CI profile's
    intermediate steps on object storage).
    """
    table = w.pyiceberg()
    java_rows = spark_rows(w.spark.table(w.java_name))
    assert java_rows == pyiceberg_rows(table), f"{step}: Iceberg's reader and pyiceberg return different rows"
    ids = sorted(r["id"] for r in w.spark.table(w.java_name).select("id").collect())
    assert ids == sorted(w.ids.elements()), f"{step}: the table does not hold exactly the rows written"
    for sql, iceberg_filter in FILTERS if deep else []:
        got = spark_rows(w.spark.table(w.java_name).where(sql))
        assert got == pyiceberg_rows(table, row_filter=iceberg_filter), f"{step}: rows differ under {sql!r}"

    assert java_snapshots(w.spark, w.java_name) == py_snapshots(table), f"{step}: snapshots differ"
    assert java_refs(w.spark, w.java_name) == py_refs(table), f"{step}: refs differ"
    snapshot = table.current_snapshot()
    assert java_manifests(w.spark, w.java_name) == py_manifests(table, snapshot), f"{step}: manifests differ"
    jfiles = java_files(w.spark, w.java_name)
    assert without(jfiles, "readable_metrics") == py_files(table, snapshot), f"{step}: files differ"
    summary = snapshot.summary.additional_properties
    data = {path: f for path, f in jfiles.items() if f["content"] == 0}
    deletes = {path: f for path, f in jfiles.items() if f["content"] != 0}
    assert len(data) == int(summary["total-data-files"]), f"{step}: files vs the summary's total-data-files"
    assert len(deletes) == int(summary.get("total-delete-files", 0)), f"{step}: vs total-delete-files"
    records = sum(f["record_count"] for f in data.values())
    deleted = sum(f["record_count"] for f in deletes.values())
    assert records == int(summary["total-records"]), f"{step}: records vs the summary's total-records"
    assert deleted == int(summary.get("total-position-deletes", 0)), f"{step}: vs total-position-deletes"
    assert records - deleted == len(ids), f"{step}: a position delete that removes no row, or one row twice"
    if deep:
        _check_metrics(table, data, step)
    if "audit" in table.metadata.refs:
        branch = table.metadata.snapshot_by_name("audit")
        got = spark_rows(w.spark.sql(f"SELECT * FROM {w.java_name} VERSION AS OF 'audit'"))
        assert got == pyiceberg_rows(table, snapshot_id=branch.snapshot_id), f"{step}: branch rows differ"
        ids = sorted(r["id"] for r in w.spark.sql(f"SELECT id FROM {w.java_name} VERSION AS OF 'audit'").collect())
        assert ids == sorted(w.branch_ids.elements()), f"{step}: the branch does not hold exactly its rows"
        jm = java_manifests(w.spark, w.java_name, ref="audit")
        assert jm == py_manifests(table, branch), f"{step}: branch manifests differ"


#: Top-level columns whose bounds Iceberg keeps (nested and repeated columns have none in the files table).
_BOUNDED = ("id", "ts", "name", "amount", "score", "flag", "d", "ts_ntz", "payload")


def _check_metrics(table: Any, jfiles: dict[str, dict[str, Any]], step: str) -> None:
    """The metrics Iceberg decodes from our manifests hold for the values in each data file."""
    for path, fields in jfiles.items():
        with table.io.new_input(path).open() as stream:
            data = pq.read_table(stream)
        metrics = fields["readable_metrics"]
        for column in _BOUNDED:
            m = metrics[column]
            values = data.column(column)
            assert m["value_count"] == len(values), f"{step}: {path} {column}: value_count"
            assert m["null_value_count"] == values.null_count, f"{step}: {path} {column}: null_value_count"
            if values.null_count == len(values):
                continue
            lo, hi = (_py(v) for v in pc.min_max(values).values())
            assert m["lower_bound"] is not None and _py(m["lower_bound"]) <= lo, f"{step}: {path} {column} lower"
            assert m["upper_bound"] is not None and _py(m["upper_bound"]) >= hi, f"{step}: {path} {column} upper"


def _py(value: Any) -> Any:
    """A pyarrow scalar or a Spark value, comparable across both (timestamps as naive UTC)."""
    value = value.as_py() if hasattr(value, "as_py") else value
    if getattr(value, "tzinfo", None) is not None:
        from datetime import UTC

        value = value.astimezone(UTC).replace(tzinfo=None)
    return bytes(value) if isinstance(value, bytearray) else value


# ---------------------------------------------------------------------------------------------- tests


#: The walk's catalogs: CI skips ``pg-s3`` (~80 s; the REST fixture covers S3 behind a JdbcCatalog on PostgreSQL).
WALK_CATALOGS = CATALOGS if FULL else tuple(c for c in CATALOGS if c != "pg-s3")


@pytest.mark.parametrize("target", WALK_CATALOGS)
def test_icebergs_spark_reader_reads_every_table_state_fencedlake_writes(
    spark: Any, services: Services, tmp_path: Path, target: str
) -> None:
    """Every commit kind of the sink, then Iceberg's reader and metadata tables agree with pyiceberg."""
    catalog = make_catalog(services, target, tmp_path)
    catalog.register(spark)
    walk = Walk(spark, catalog, f"{catalog.namespace}.events")
    for step, run in STEPS:
        run(walk)
        walk.steps.append(step)
        # CI profile: every check after every step on SQLite; on object storage the filtered reads and
        # metrics checks after the first and the last step only (every step with FENCEDLAKE_INTEROP_FULL=1).
        _check(walk, step, deep=FULL or target == "sqlite-local" or step in (STEPS[0][0], STEPS[-1][0]))
    snapshots = py_snapshots(walk.pyiceberg())
    operations = Counter(op for _, op, _ in snapshots.values())
    assert operations["replace"] >= 1 and operations["overwrite"] >= 3 and operations["append"] >= 6, operations


def _upserts(w: Walk) -> None:
    """One upsert by ``id``: 20 keys move to day 1, 5 keys are deleted, 10 keys are new (position deletes)."""
    moved, dropped, new = range(1000, 1020), range(1030, 1035), range(2000, 2010)
    w.write(
        [*moved, *dropped, *new],
        1,
        **{"upsert-keys": "id", "upsert-delete-where": "id >= 1030 AND id < 1035"},
    )
    for i in dropped:
        del w.ids[i]
    w.ids.update(new)


@pytest.mark.parametrize("target", CATALOGS[:1])
def test_icebergs_spark_reader_reads_fencedlake_upsert_deletes(
    spark: Any, services: Services, tmp_path: Path, target: str
) -> None:
    """Iceberg's reader applies fencedlake's upsert delete files exactly as pyiceberg does."""
    catalog = make_catalog(services, target, tmp_path)
    catalog.register(spark)
    walk = Walk(spark, catalog, f"{catalog.namespace}.events")
    _appends(walk)
    _upserts(walk)
    _check(walk, "upsert")
    assert any(f["content"] != 0 for f in java_files(spark, walk.java_name).values()), "no delete file was written"
