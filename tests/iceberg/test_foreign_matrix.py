"""Each write mode while another engine changes the table between its WAL put and its apply (PROTOCOL.md §5.4).

One test per row of the table in docs/PROTOCOL.md §5.4: the other engine's
operation (plain pyiceberg, ``tests.iceberg.foreign``) runs at the fail point
``commit.after-wal-put`` of every mode in turn — append, static overwrite,
dynamic overwrite, replace-where, compaction, publish, a branch write, an upsert
(key ``id``, order ``n``: §5.5) — each on
a table of its own, and the entry must end with the outcome the table says, by
one committed decision, with exactly the rows that decision gives.

Every table starts as: main ``d2: 3`` (one commit), then ``d1: 1, 2`` (one
commit, two files); branch ``audit`` forked from there with ``d3: 4``.
Columns: ``id`` long, ``day`` string (the partition), ``note`` string, ``n`` int.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType
from pyspark.sql.types import IntegerType, StringType, StructField, StructType
from pyspark.sql.types import LongType as SparkLong

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import FencedLakeError
from pyspark_fenced_sink.iceberg import catalogs
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.compact import compact_table, local_runner
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.publish import publish_branch
from pyspark_fenced_sink.testing.harness import open_target, sink_write
from tests.iceberg import foreign

SCHEMA = StructType(
    [
        StructField("id", SparkLong()),
        StructField("day", StringType()),
        StructField("note", StringType()),
        StructField("n", IntegerType()),
    ]
)
Rows = list[tuple[int, str]]
BASE: Rows = [(1, "d1"), (2, "d1"), (3, "d2")]
AUDIT: Rows = [*BASE, (4, "d3")]


def data(*rows: tuple[int, str]) -> pa.Table:
    ids = [i for i, _ in rows]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [d for _, d in rows],
            "note": ["x"] * len(rows),
            "n": pa.array(ids, pa.int32()),
        }
    )


def write(
    wh: str, name: str, rows: list[tuple[int, str]], *, overwrite: bool = False, tasks: int = 1, **opts: str
) -> Any:
    return sink_write(wh, name, data(*rows), opts, schema=SCHEMA, overwrite=overwrite, partition_by="day", tasks=tasks)


def base(wh: str, name: str) -> None:
    write(wh, name, [(3, "d2")])
    write(wh, name, [(1, "d1"), (2, "d1")], tasks=2)  # two files in d1
    write(wh, name, [(4, "d3")], branch="audit")


def table_of(mode: str) -> str:
    return f"db.{mode.replace('-', '_')}"


def rows(wh: str, name: str, ref: str = "main") -> Rows:
    """``(id, day)`` of every row of ``ref``, by field id (whatever the columns are called or ordered now)."""
    table = embedded_catalog(wh).load_table(name)
    snapshot = table.metadata.snapshot_by_name(ref)
    if snapshot is None:
        return []
    got = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    schema = table.metadata.schema_by_id(snapshot.schema_id) if snapshot.schema_id is not None else None
    id_name, day_name = ((schema or table.schema()).find_column_name(i) for i in (1, 2))
    return sorted(zip(got.column(id_name).to_pylist(), got.column(day_name).to_pylist(), strict=True))


UPSERT = {"upsert-keys": "id", "upsert-order": "n"}

#: What each mode does, and to which branch: (run, branch read, rows after if APPLIED from the rows before).
Mode = tuple[Callable[[str, str], Any], str, Callable[[Rows, Rows], Rows]]
MODES: dict[str, Mode] = {
    "append": (lambda wh, t: write(wh, t, [(5, "d4")]), "main", lambda main, audit: [*main, (5, "d4")]),
    "overwrite": (lambda wh, t: write(wh, t, [(6, "d5")], overwrite=True), "main", lambda main, audit: [(6, "d5")]),
    "dynamic": (
        lambda wh, t: write(wh, t, [(7, "d1")], overwrite=True, **{"overwrite-mode": "dynamic"}),
        "main",
        lambda main, audit: [r for r in main if r[1] != "d1"] + [(7, "d1")],
    ),
    "replace-where": (
        lambda wh, t: write(wh, t, [(8, "d1")], overwrite=True, **{"replace-where": "day = 'd1'"}),
        "main",
        lambda main, audit: [r for r in main if r[1] != "d1"] + [(8, "d1")],
    ),
    "compaction": (
        lambda wh, t: compact_table(open_target(wh, t), t, local_runner, min_input_files=2),
        "main",
        lambda main, audit: main,
    ),
    "publish": (lambda wh, t: publish_branch(open_target(wh, t).ctx, "audit"), "main", lambda main, audit: audit),
    "branch": (
        lambda wh, t: write(wh, t, [(9, "d6")], branch="audit"),
        "audit",
        lambda main, audit: [*audit, (9, "d6")],
    ),
    "upsert": (  # key ``id``, order ``n`` (= id): row 2 ties with the live row 2 and wins as the later write
        lambda wh, t: write(wh, t, [(2, "d8"), (12, "d8")], **UPSERT),
        "main",
        lambda main, audit: [r for r in main if r[0] != 2] + [(2, "d8"), (12, "d8")],
    ),
}


def outcomes(
    wh: str,
    op: Callable[[Any], Any],
    effect: Callable[[Rows], Rows] = lambda r: r,
    audit_effect: Callable[[Rows, Rows], Rows] = lambda main, audit: audit,
) -> dict[str, str]:
    """Run every mode with ``op`` (on the table) between its WAL put and its apply; mode -> outcome code.

    Rows are checked against the code: APPLIED gives the mode's rows over the rows as ``op`` left them
    (``effect`` on main's, ``audit_effect`` on the branch's), anything else leaves them as ``op`` left them.
    """
    codes = {}
    for mode, (run, branch, applied) in MODES.items():
        name = table_of(mode)
        seqs: list[int] = []

        def between(point: str, name: str = name, seqs: list[int] = seqs) -> None:
            if point == "commit.after-wal-put" and not seqs:
                ctx = open_target(wh, name).ctx
                seqs.append(ctx.wal.scan(0)[-1])
                op(embedded_catalog(wh).load_table(name))

        failpoints.set_handler(between)
        try:
            run(wh, name)
        except FencedLakeError:
            pass  # refused or rejected: the code below says which
        finally:
            failpoints.set_handler(None)
        ctx = open_target(wh, name).ctx
        recover(ctx)
        view = ctx.load()
        record = ctx.port.find_record(view, seqs[0])
        assert record is not None, f"{mode}: WAL seq {seqs[0]} was never decided"
        found = record.find(seqs[0])
        assert found is not None
        codes[mode] = found[1]
        main_now = effect(list(BASE))
        audit_now = audit_effect(main_now, list(AUDIT))
        before = main_now if branch == "main" else audit_now
        expected = applied(main_now, audit_now) if found[1] == "A" else before
        assert rows(wh, name, branch) == sorted(expected), f"{mode} ({found[1]})"
    return codes


ALL_APPLIED = dict.fromkeys(MODES, "A")


def _close_catalogs() -> None:
    """Close the per-process cached catalogs' database connections (their SQLite file is about to be replaced)."""
    for catalog in list(catalogs._cache.values()):  # the sink's per-process cache (iceberg.catalogs.load_catalog)
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()
    catalogs._cache.clear()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every mode's starting table, built once: the warehouse and a copy of it to restore from."""
    wh = tmp_path_factory.mktemp("matrix") / "wh"
    for mode in MODES:
        base(str(wh), table_of(mode))
    _close_catalogs()
    shutil.copytree(wh, wh.with_name("template"))
    return wh


@pytest.fixture
def wh(template: Path) -> str:
    """The starting tables, fresh for each test, at the same path (the catalog records absolute paths)."""
    _close_catalogs()
    shutil.rmtree(template)
    shutil.copytree(template.with_name("template"), template)
    return str(template)


def test_a_column_renamed_between_put_and_apply(wh: str) -> None:
    """Rename ``day`` (the partition source and the replace-where column): every mode applies, by field id."""
    assert outcomes(wh, lambda t: foreign.rename_column(t, "day", "dt")) == ALL_APPLIED


def test_a_column_dropped_between_put_and_apply(wh: str) -> None:
    """Drop ``note``: every mode applies (its files keep the column; readers ignore it)."""
    assert outcomes(wh, lambda t: foreign.drop_column(t, "note")) == ALL_APPLIED


def test_columns_reordered_between_put_and_apply(wh: str) -> None:
    """Move ``n`` first: every mode applies (files are read by field id)."""

    def reorder(table: Any) -> None:
        with table.update_schema() as update:
            update.move_first("n")

    assert outcomes(wh, reorder) == ALL_APPLIED


def test_a_type_promoted_between_put_and_apply(wh: str) -> None:
    """``n`` int -> long: every mode applies (statistics and values of the narrower type still read)."""
    assert outcomes(wh, lambda t: foreign.promote_column(t, "n", LongType())) == ALL_APPLIED


def test_a_new_partition_spec_between_put_and_apply(wh: str) -> None:
    """A new default spec: an entry whose files were written under the old one is SPEC_CHANGED; publish applies."""

    def respec(table: Any) -> None:
        with table.update_spec() as update:
            update.add_field("note", IdentityTransform(), "note")

    expected = {**dict.fromkeys(MODES, "S"), "publish": "A"}
    assert outcomes(wh, respec) == expected


def test_a_partition_spec_changed_and_reverted_between_put_and_apply(wh: str) -> None:
    """Changed and reverted (Iceberg reuses the old spec id): every mode applies."""

    def respec_and_back(table: Any) -> None:
        with table.update_spec() as update:
            update.add_field("note", IdentityTransform(), "note")
        table = foreign.reload(table)
        with table.update_spec() as update:
            update.remove_field("note")

    assert outcomes(wh, respec_and_back) == ALL_APPLIED


def test_a_sort_order_set_between_put_and_apply(wh: str) -> None:
    """A sort order: every mode applies (fencedlake's files claim no sort order)."""

    def sort(table: Any) -> None:
        with table.update_sort_order() as update:
            update.asc("id", IdentityTransform())

    assert outcomes(wh, sort) == ALL_APPLIED


def test_rows_deleted_between_put_and_apply(wh: str) -> None:
    """``DELETE WHERE id = 1`` removes a d1 file: a compaction of it and a publish (main changed data) are
    refused; every other mode applies to what is live then."""
    expected = {**ALL_APPLIED, "compaction": "R", "publish": "R"}
    effect: Callable[[Rows], Rows] = lambda r: [x for x in r if x[0] != 1]  # noqa: E731
    assert outcomes(wh, lambda t: foreign.delete_rows(t, "id = 1"), effect) == expected


def test_another_engines_minimal_summary_append_between_put_and_apply(wh: str) -> None:
    """An append to d1 with a summary of only ``operation``, its file without metrics: publish is refused
    (main changed data); a replace-where of ``day = 'd1'`` still applies (the partition places the file)."""

    def append(table: Any) -> None:
        with table.transaction() as tx:
            tx.set_properties({"write.metadata.metrics.default": "none"})
        foreign.append_minimal_summary(foreign.reload(table), data((10, "d1")))

    expected = {**ALL_APPLIED, "publish": "R"}
    assert outcomes(wh, append, lambda r: [*r, (10, "d1")]) == expected


def test_snapshots_expired_between_put_and_apply(wh: str) -> None:
    """Every snapshot main no longer needs expired: every mode applies (decisions read live files)."""

    def expire(table: Any) -> None:
        current = table.current_snapshot().snapshot_id
        older = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]
        protected = {ref.snapshot_id for ref in table.refs().values()}
        table.maintenance.expire_snapshots().by_ids([s for s in older if s not in protected]).commit()

    assert outcomes(wh, expire) == ALL_APPLIED


def test_main_rolled_back_between_put_and_apply(wh: str) -> None:
    """Main back to ``d2: 3``: the compaction's inputs are gone (refused); publish is a fast-forward again;
    every other mode applies to what main holds then."""

    def rollback(table: Any) -> None:
        first = min(table.snapshots(), key=lambda s: s.sequence_number or 0)
        foreign.rollback_main(table, first.snapshot_id)

    expected = {**ALL_APPLIED, "compaction": "R"}
    assert outcomes(wh, rollback, lambda r: [x for x in r if x[1] != "d1"]) == expected


def test_the_branch_removed_between_put_and_apply(wh: str) -> None:
    """``audit`` dropped: a write to it forks it again from main; a publish of it is refused (nothing to publish)."""

    def drop(table: Any) -> None:
        table.manage_snapshots().remove_branch("audit").commit()

    expected = {**ALL_APPLIED, "publish": "R"}
    assert outcomes(wh, drop, audit_effect=lambda main, audit: main) == expected


def test_properties_edited_between_put_and_apply(wh: str) -> None:
    """Metrics off and a malformed manifest-merge setting: every mode applies (a setting never fails a commit)."""

    def edit(table: Any) -> None:
        with table.transaction() as tx:
            tx.set_properties({"write.metadata.metrics.default": "none", "commit.manifest-merge.enabled": "banana"})

    assert outcomes(wh, edit) == ALL_APPLIED
