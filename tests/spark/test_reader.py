"""The batch reader's API as Spark drives it, without Spark: which reader, what it prunes, files counted.

Spark's planner calls ``DataSource.schema()``, ``reader(schema)``, then (in its
filter-pushdown planner only) ``pushFilters`` and ``partitions()``; these tests
make the same calls with real ``pyspark.sql.datasource`` filter objects on a
table pyiceberg wrote (partitioned by region, two appends: 8 data files), and
count the data files each query plans. Spark's end-to-end check is in
``tests/spark/test_read.py``.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType
from pyspark.sql import datasource as F  # noqa: N812 - the filter classes, as Spark's docs spell them
from pyspark.sql.datasource import DataSourceReader

from pyspark_fenced_sink import FencedLakeDataSource
from pyspark_fenced_sink.spark import reader as reader_module
from pyspark_fenced_sink.spark.reader import FencedLakeFilteringReader, FencedLakeReader, open_read
from tests.read.tables import make_table

SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "region", StringType()),
    NestedField(3, "v", LongType()),
    NestedField(4, "score", DoubleType()),
)
BY_REGION = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
REGIONS = ("eu", "us", "ap", "sa")


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> str:
    """db.regions: ids 0-99, then 100-199; region REGIONS[id % 4]; v null if id % 10 == 0; score NaN if id % 7 == 0."""
    warehouse = str(tmp_path_factory.mktemp("reader") / "wh")
    table = make_table(warehouse, "db.regions", schema=SCHEMA, spec=BY_REGION)
    for lo in (0, 100):
        ids = list(range(lo, lo + 100))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "region": [REGIONS[i % 4] for i in ids],
                    "v": [None if i % 10 == 0 else i * 2 for i in ids],
                    "score": [float("nan") if i % 7 == 0 else i / 3 for i in ids],
                },
                schema=table.schema().as_arrow(),
            )
        )
    return warehouse


@pytest.fixture(autouse=True)
def _pushed_filters_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    """The translation rules as a Spark that plans every scan anew uses them (Spark 4.3 prunes nothing by them:
    test_pushed_filters_prune_nothing_where_spark_reuses_the_plan)."""
    monkeypatch.setattr(reader_module, "PUSHED_FILTERS_PRUNE", True)


def _reader(wh: str, cls: type[FencedLakeReader] = FencedLakeFilteringReader, **options: str) -> Any:
    source = FencedLakeDataSource({"warehouse": wh, "path": "db.regions", **options})
    return cls(*open_read(source.options, source.schema(), streaming=False))


QUERIES: list[tuple[str, list[Any], int]] = [
    ("no filter", [], 8),
    ("region = 'eu'", [F.EqualTo(("region",), "eu")], 2),
    ("region in (eu, us) and id >= 100", [F.In(("region",), ["eu", "us"]), F.GreaterThanOrEqual(("id",), 100)], 2),
    ("id < 100", [F.LessThan(("id",), 100)], 4),
    ("v is null (only in eu and ap)", [F.IsNull(("v",))], 4),
    ("region like 'a%'", [F.StringStartsWith(("region",), "a")], 2),
    ("not region = 'eu'", [F.Not(F.EqualTo(("region",), "eu"))], 6),
    ("v <=> 398 (id 199)", [F.EqualNullSafe(("v",), 398)], 1),
    ("id > 1000", [F.GreaterThan(("id",), 1000)], 0),
    ("score > 10 (double: Spark only)", [F.GreaterThan(("score",), 10.0)], 8),
    ("region like '%u' (Spark only)", [F.StringEndsWith(("region",), "u")], 8),
]


@pytest.mark.parametrize(("filters", "files"), [(f, n) for _, f, n in QUERIES], ids=[q for q, _, _ in QUERIES])
def test_pushed_filters_plan_only_the_files_that_may_match(wh: str, filters: list[Any], files: int) -> None:
    """Partition values and column statistics prune data files; filters Spark alone can judge prune none."""
    reader = _reader(wh)
    remaining = reader.pushFilters(filters)
    assert all(a is b for a, b in zip(remaining, filters, strict=True))  # Spark still applies every filter
    splits = reader.partitions()
    assert reader.stats.files == files and reader.stats.total_files == 8
    assert sum(len(s.tasks) for s in splits) == files


def test_split_size_one_makes_one_task_per_file(wh: str) -> None:
    """split-size=1: every data file is its own split (what the Spark test counts partitions with)."""
    reader = _reader(wh, **{"split-size": "1"})
    assert [len(s.tasks) for s in reader.partitions()] == [1] * 8


def test_the_plain_reader_does_not_implement_push_filters() -> None:
    """Spark refuses a reader that overrides pushFilters while its pushdown setting is off (the default)."""
    assert FencedLakeReader.pushFilters is DataSourceReader.pushFilters
    assert FencedLakeFilteringReader.pushFilters is not DataSourceReader.pushFilters


def test_the_filtering_reader_is_handed_out_only_inside_sparks_pushdown_planner(
    wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reader() hands out the filtering reader where Spark's filter-pushdown planner is loaded, else the plain one."""
    source = FencedLakeDataSource({"warehouse": wh, "path": "db.regions"})
    assert type(source.reader(source.schema())) is FencedLakeReader
    monkeypatch.setitem(sys.modules, reader_module._PUSHDOWN_PLANNER, sys)
    assert type(source.reader(source.schema())) is FencedLakeFilteringReader


def test_the_reader_travels_to_executors_without_the_table(wh: str) -> None:
    """Spark pickles the reader into every read task: the spec and filter go, the pyiceberg table does not."""
    reader = _reader(wh)
    reader.pushFilters([F.EqualTo(("region",), "eu")])
    splits = reader.partitions()
    copy = pickle.loads(pickle.dumps(reader))
    assert not hasattr(copy, "_table") and copy.spec.row_filter == reader.spec.row_filter
    rows = [b for split in splits for b in copy.read(pickle.loads(pickle.dumps(split)))]
    assert sum(b.num_rows for b in rows) == 50
    assert set(pa.Table.from_batches(rows).column("region").to_pylist()) == {"eu"}


def test_an_empty_split_reads_nothing(wh: str) -> None:
    """Spark plans InputPartition(None) when a source returns no splits: it reads as no rows."""
    reader = _reader(wh)
    reader.pushFilters([F.GreaterThan(("id",), 1000)])
    assert reader.partitions() == []
    assert list(reader.read(F.InputPartition(None))) == []


def test_pushed_filters_prune_nothing_where_spark_reuses_the_plan(wh: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark 4.1-4.3 reuse a relation's first read plan for its later unfiltered queries: no pruning there."""
    monkeypatch.setattr(reader_module, "PUSHED_FILTERS_PRUNE", False)
    reader = _reader(wh)
    filters = [F.EqualTo(("region",), "eu")]
    assert reader.pushFilters(filters) == filters
    reader.partitions()
    assert reader.stats.files == 8 and not reader.stats.filtered


def test_pushed_filters_prune_only_on_a_spark_that_plans_every_scan_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch follows Spark's API: the limit pushdown API came with read plans kept per scan."""
    monkeypatch.undo()  # the module's own value, not the fixture's
    assert reader_module.PUSHED_FILTERS_PRUNE is hasattr(DataSourceReader, "pushLimit")


@pytest.mark.parametrize(
    ("where", "files", "rows"),
    [("region = 'eu'", 2, 50), ("id >= 150 AND REGION IN ('eu', 'us')", 2, 24), ("v IS NULL", 4, 20)],
)
def test_the_filter_option_prunes_files_and_returns_only_matching_rows(
    wh: str, where: str, files: int, rows: int
) -> None:
    """The filter read option: files that cannot match are not planned, rows that do not match are not read
    (column names bind case-insensitively), whatever Spark pushes or not."""
    reader = _reader(wh, cls=FencedLakeReader, filter=where)
    splits = reader.partitions()
    assert reader.stats.files == files and reader.stats.filtered
    read = [b for split in splits for b in reader.read(split)]
    assert sum(b.num_rows for b in read) == rows


def test_a_filter_on_a_column_the_table_lacks_fails_naming_it(wh: str) -> None:
    """A bad filter fails at planning with the option named; nothing is read."""
    from pyspark_fenced_sink.errors import InvalidOptionsError

    with pytest.raises(InvalidOptionsError, match="option filter='nope = 1' is invalid"):
        _reader(wh, cls=FencedLakeReader, filter="nope = 1")
