"""Iceberg's Spark writer and fencedlake writers on one table at once: fencedlake's promises hold.

While fencedlake writers append (threads of the suite's Spark application, each its own
``df.write.format("fencedlake")`` job) and a fencedlake compaction runs, Iceberg's Spark runtime
works the same table through the same catalog: ``INSERT``, ``MERGE``, ``DELETE``, and its
``rewrite_data_files``, ``rewrite_manifests`` and ``expire_snapshots`` procedures. Afterwards:

* every fencedlake write returned success (no conflict surfaced) and its rows are in the table exactly
  once; a compaction ended applied or refused, never in an error;
* every Iceberg operation that reported success took effect and nothing of it was lost (a model of
  the foreign rows, applied in the order the one Iceberg thread ran them, equals the table's foreign
  rows); an operation that failed changed nothing;
* the table's fencedlake state survived the foreign commits: nothing pending after ``recover``.

What Iceberg's writers report -- their own conflicts (``ValidationException``, ``CommitFailedException``)
-- is recorded in ``.integration/interop-metrics.json`` and printed at the end of the run, never judged.
Rounds alternate Iceberg's defaults (copy-on-write, serializable isolation) with merge-on-read and
snapshot isolation (Iceberg adds position delete files to the table). CI runs two rounds on ``pg-s3``;
``FENCEDLAKE_INTEROP_FULL=1`` four rounds with more writes on every catalog.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from integration.conftest import Services
from integration.interop.report import REPORT
from integration.interop.support import CATALOGS, FULL, Catalog, make_catalog

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP, name STRING"
FOREIGN = 5_000_000  # Iceberg's own rows have ids from here; fencedlake's stay below
#: Table properties each round starts with: Iceberg's defaults (copy-on-write, serializable), then
#: merge-on-read with snapshot isolation (Iceberg writes position deletes into the table).
MODES: list[dict[str, str]] = [
    {
        "write.delete.mode": "copy-on-write",
        "write.merge.mode": "copy-on-write",
        "write.merge.isolation-level": "serializable",
    },
    {
        "write.delete.mode": "merge-on-read",
        "write.merge.mode": "merge-on-read",
        "write.merge.isolation-level": "snapshot",
    },
]
ROUNDS = 4 if FULL else 2
WRITERS, WRITES = (3, 4) if FULL else (2, 2)


@dataclass
class Foreign:
    """The Iceberg thread's operations, their outcomes, and the model of the rows they own."""

    rows: dict[int, str] = field(default_factory=dict)
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    next_id: int = FOREIGN


def _frame(spark: Any, ids: range, name: str) -> Any:
    return spark.createDataFrame([(i, None, name) for i in ids], SCHEMA).selectExpr(
        "id", "timestamp'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) AS ts", "name"
    )


def _iceberg_ops(spark: Any, t: str, cat: Catalog, f: Foreign, rnd: int) -> None:
    """One round of Iceberg Spark writes and procedures; each outcome recorded, the model updated on success."""
    from pyspark_fenced_sink import activate_session

    activate_session(spark)
    base = f.next_id
    f.next_id += 1000
    insert_ids = range(base, base + 20)
    merge_new = range(base + 20, base + 25)
    updated = [i for i in f.rows if i % 3 == 0][:10]

    def run(op: str, sql: str, effect: Any) -> None:
        try:
            spark.sql(sql).collect()
        except Exception as e:
            f.outcomes.append((op, _error_kind(e)))
            f.messages.append(f"{op}: {_first_line(e)}")
            return
        f.outcomes.append((op, "ok"))
        effect()

    values = ", ".join(f"({i}, timestamp'2026-01-02 00:00:00', 'ice-{rnd}')" for i in insert_ids)
    run("insert", f"INSERT INTO {t} VALUES {values}", lambda: f.rows.update(dict.fromkeys(insert_ids, f"ice-{rnd}")))
    src = ", ".join(f"({i}, 'merged-{rnd}')" for i in [*updated, *merge_new])
    run(
        "merge",
        f"MERGE INTO {t} t USING (SELECT * FROM VALUES {src} AS s(id, name)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.name = s.name "
        "WHEN NOT MATCHED THEN INSERT (id, ts, name) VALUES (s.id, timestamp'2026-01-03 00:00:00', s.name)",
        lambda: f.rows.update(dict.fromkeys([*updated, *merge_new], f"merged-{rnd}")),
    )
    gone = [i for i in f.rows if i % 4 == 1]
    run(
        "delete",
        f"DELETE FROM {t} WHERE id >= {FOREIGN} AND id % 4 = 1",
        lambda: [f.rows.pop(i) for i in gone],
    )
    run(
        "rewrite_data_files",
        f"CALL {cat.name}.system.rewrite_data_files(table => '{t.split('.', 1)[1]}', "
        "options => map('min-input-files', '2', 'rewrite-all', 'true'))",
        lambda: None,
    )
    run("rewrite_manifests", f"CALL {cat.name}.system.rewrite_manifests('{t.split('.', 1)[1]}')", lambda: None)
    run(
        "expire_snapshots",
        f"CALL {cat.name}.system.expire_snapshots(table => '{t.split('.', 1)[1]}', "
        "older_than => current_timestamp(), retain_last => 2)",
        lambda: None,
    )


def _error_kind(error: BaseException) -> str:
    """The exception an Iceberg operation failed with: Iceberg's (its conflict kind), Spark's, or Python's."""
    text = str(error)
    for pattern in (r"org\.apache\.iceberg\.exceptions\.(\w+)", r"(?:org\.apache\.spark\S*\.|\[)([A-Z][\w.]+)"):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return type(error).__name__


def _first_line(error: BaseException) -> str:
    """The first line of the error that names an exception (Py4J's text starts with the call)."""
    lines = [ln.strip() for ln in str(error).splitlines() if "Exception" in ln or "Error" in ln]
    return (
        (lines[1] if len(lines) > 1 and lines[0].startswith("An error occurred") else lines[0])[:300] if lines else ""
    )


def _fencedlake_writer(spark: Any, cat: Catalog, table: str, w: int, results: list[Any]) -> None:
    from pyspark_fenced_sink import activate_session, fencedlake_error

    activate_session(spark)
    for k in range(WRITES):
        ids = range((w * 100 + k) * 50, (w * 100 + k) * 50 + 50)
        try:
            _frame(spark, ids, f"fl-{w}").write.format("fencedlake").mode("append").options(**cat.options(table)).save()
            results.append(("ok", list(ids)))
        except Exception as e:
            results.append((type(fencedlake_error(e) or e).__name__, list(ids)))


def _compactions(spark: Any, cat: Catalog, table: str, stop: threading.Event, outcomes: list[str]) -> None:
    from pyspark_fenced_sink import activate_session, compact

    activate_session(spark)
    options = {k: v for k, v in cat.options(table).items() if k != "table"}
    while not stop.is_set():
        try:
            outcomes.append(compact(spark, table, min_input_files=2, **options).outcome)
        except Exception as e:
            outcomes.append(f"error: {type(e).__name__}: {str(e)[:200]}")
        stop.wait(3.0)


@pytest.mark.slow
@pytest.mark.parametrize("target", CATALOGS if FULL else ["pg-s3"])
def test_icebergs_writers_and_fencedlake_on_one_table_keep_fencedlakes_promises(
    spark: Any, services: Services, tmp_path: Path, target: str
) -> None:
    """Iceberg INSERT/MERGE/DELETE/procedures beside fencedlake appends and compaction: every promise holds."""
    t0 = time.monotonic()
    cat = make_catalog(services, target, tmp_path, cache=True)  # Iceberg's default; its MERGE needs it
    cat.register(spark)
    table = f"{cat.namespace}.events"
    java = cat.spark_name(table)
    _frame(spark, range(-5, 0), "seed").write.format("fencedlake").mode("append").options(
        **cat.options(table), **{"partition-by": "day(ts)", "table.format-version": "2"}
    ).save()
    foreign = Foreign()
    results: list[Any] = []
    compactions: list[str] = []
    for rnd in range(ROUNDS):
        props = ", ".join(f"'{k}' = '{v}'" for k, v in MODES[rnd % len(MODES)].items())
        spark.sql(f"ALTER TABLE {java} SET TBLPROPERTIES ({props})")
        stop = threading.Event()
        threads = [
            threading.Thread(target=_fencedlake_writer, args=(spark, cat, table, rnd * WRITERS + w, results))
            for w in range(WRITERS)
        ]
        threads.append(threading.Thread(target=_iceberg_ops, args=(spark, java, cat, foreign, rnd)))
        compactor = threading.Thread(target=_compactions, args=(spark, cat, table, stop, compactions))
        for th in [*threads, compactor]:
            th.start()
        for th in threads:
            th.join(timeout=900)
        stop.set()
        compactor.join(timeout=300)
        assert not any(th.is_alive() for th in [*threads, compactor]), "a writer hung"

    spark.sql(f"REFRESH TABLE {java}")  # the cached table predates the sink's last commits
    failed = [r for r in results if r[0] != "ok"]
    assert failed == [], f"fencedlake writes raised (a conflict surfaced?): {failed[:3]}"
    assert [c for c in compactions if c not in ("applied", "refused", "nothing-to-do")] == []
    rows = {r.id: r.name for r in spark.table(java).collect()}
    counts = Counter(r.id for r in spark.table(java).select("id").collect())
    mine = [i for ok, ids in results for i in ids] + list(range(-5, 0))
    assert [i for i in mine if counts[i] != 1] == [], "a fencedlake row is lost or duplicated"
    assert {i: n for i, n in rows.items() if i >= FOREIGN} == foreign.rows, "a foreign commit's effect was lost"
    assert [i for i, c in counts.items() if i >= FOREIGN and c != 1] == []
    assert set(counts) == set(mine) | set(foreign.rows)
    _assert_nothing_pending(cat, table)
    REPORT.record(
        f"mixed-writers-{target}",
        fencedlake_writes=len(results),
        fencedlake_failed=len(failed),
        compactions=dict(Counter(compactions)),
        iceberg=dict(Counter(f"{op}:{outcome}" for op, outcome in foreign.outcomes)),
        iceberg_errors=foreign.messages,
        seconds=round(time.monotonic() - t0, 1),
    )


def _assert_nothing_pending(cat: Catalog, table: str) -> None:
    """The fencedlake state survived Iceberg's commits and every WAL entry is decided (I2, I5)."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table
    from pyspark_fenced_sink.options.catalog import catalog_config
    from pyspark_fenced_sink.testing.invariants import pending_after_recover

    opened = open_table(catalog_config(cat.name, cat.pyiceberg), table)
    assert opened.view.state.upper > 0
    assert pending_after_recover(opened.ctx) == []
