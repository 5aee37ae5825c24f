"""Upserts against real services: PostgreSQL catalog (or the REST catalog) and S3 (docs/PROTOCOL.md §5.5).

Writers on several threads upsert overlapping keys with unique random order
values and delete rows into one table whose data, WAL, delete-key files and
tombstones live on S3; the table must equal the serial oracle (per key, the
greatest order wins; a winning delete leaves it absent), hold each key once,
and keep I1-I7. Then ``gc`` (which lists the control root's ``keys/`` on S3) and
a compaction that folds the delete files must change no row.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from integration.conftest import Services
from integration.scenarios_support import context, violations
from integration.targets import target_options, targets_for
from pyspark_fenced_sink.ops.compact import compact_table, local_runner
from pyspark_fenced_sink.ops.gc import gc
from pyspark_fenced_sink.testing.harness import open_target, sink_write
from pyspark_fenced_sink.testing.invariants import duplicate_keys

SCHEMA = StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("op", StringType())])
UPSERT = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}
WRITERS, WRITES, ROWS, KEYS = 3, 3, 30, 60


def _changes(seed: int) -> list[list[tuple[int, int, str]]]:
    rng = random.Random(seed)
    orders = iter(rng.sample(range(1, 10**9), WRITERS * WRITES * ROWS))
    return [
        [(rng.randrange(KEYS), next(orders), "D" if rng.random() < 0.2 else "U") for _ in range(ROWS)]
        for _ in range(WRITERS * WRITES)
    ]


def _frame(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "op": [r[2] for r in rows],
        }
    )


def _rows(options: dict[str, str]) -> list[tuple[int, int]]:
    ctx = context(options)
    table = ctx.port.table(ctx.port.load())
    assert duplicate_keys(table, ["id"]) == []
    return sorted((r["id"], r["ts"]) for r in table.scan().to_arrow().to_pylist())


@pytest.mark.parametrize("target", targets_for("upsert"))
def test_concurrent_upserts_on_s3_equal_the_oracle_through_gc_and_compaction(services: Services, target: str) -> None:
    """Three writer threads x three upserts of overlapping keys: the serial oracle, every invariant, gc, compaction."""
    options = {**target_options(services, target), **UPSERT}
    table = options["table"]
    writes = _changes(25)
    sink_write(options, table, _frame([(k, 0, "U") for k in range(KEYS)]), schema=SCHEMA, tasks=1)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            for data in writes[index::WRITERS]:
                sink_write(options, table, _frame(data), schema=SCHEMA, tasks=1)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert errors == []
    best: dict[int, tuple[int, str]] = dict.fromkeys(range(KEYS), (0, "U"))
    for change in (c for w in writes for c in w):
        if change[1] > best[change[0]][0]:
            best[change[0]] = (change[1], change[2])
    expected = sorted((k, t) for k, (t, op) in best.items() if op != "D")
    assert _rows(options) == expected
    assert violations(options) == []
    ctx = context(options)
    assert ctx.load().state.tombstones, "ordered deletes are remembered"
    gc(ctx, grace_s=0, now=lambda: time.time() + 60)
    assert _rows(options) == expected and violations(options, truncated=True) == []
    done = compact_table(open_target(options, table), table, local_runner, min_input_files=2)
    assert done.outcome == "applied"
    assert _rows(options) == expected
    late: Any = [(k, 1, "U") for k in range(KEYS)]  # older than every change: remembered deletes keep keys out
    sink_write(options, table, _frame(late), schema=SCHEMA, tasks=1)
    assert _rows(options) == expected
