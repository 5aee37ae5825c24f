"""Operations on upserted tables: gc of delete, delete-key and tombstone files; status (PROTOCOL.md §5.5, §8, §10)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.ops.cli import main
from pyspark_fenced_sink.ops.gc import gc
from pyspark_fenced_sink.protocol.filetag import ApplyTag, table_tag
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState
from pyspark_fenced_sink.testing.harness import open_target, sink_write

TABLE = "db.keyed"
SCHEMA = StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("op", StringType())])
ORDERED = {"upsert-keys": "id", "upsert-order": "ts", "upsert-delete-where": "op = 'D'"}


@pytest.fixture
def wh(tmp_path: Any) -> str:
    return str(tmp_path / "wh")


def upsert(wh: str, rows: list[tuple[int, int, str]], options: dict[str, str] | None = None) -> Any:
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "op": [r[2] for r in rows],
        }
    )
    return sink_write(wh, TABLE, data, options or ORDERED, schema=SCHEMA, tasks=1)


def ids(wh: str) -> list[int]:
    return sorted(r["id"] for r in embedded_catalog(wh).load_table(TABLE).scan().to_arrow().to_pylist())


def run_gc(wh: str) -> Any:
    return gc(open_target(wh, TABLE).ctx, grace_s=0, now=lambda: time.time() + 60)


def state(wh: str) -> CommittedState:
    return CommittedState.decode(embedded_catalog(wh).load_table(TABLE).properties[STATE_PROPERTY])


def stray(wh: str, kind: str, upper: int, under: Path) -> Path:
    """A file a commit attempt at ``upper`` wrote and no commit references."""
    uuid = str(embedded_catalog(wh).load_table(TABLE).metadata.table_uuid)
    path = under / ApplyTag(kind, table_tag(uuid), upper).file_name()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return path


def test_gc_keeps_every_file_reads_and_tombstones_need_and_removes_attempts_leftovers(wh: str) -> None:
    """Live delete files and listed tombstones stay; strays of attempts below the upper go; rows exact."""
    upsert(wh, [(1, 1, "U"), (2, 1, "U"), (3, 1, "U")])
    upsert(wh, [(1, 2, "U"), (2, 9, "D")])
    upsert(wh, [(3, 1, "D")], {"upsert-keys": "id", "upsert-delete-where": "op = 'D'"})  # unordered: no tombstone
    s = state(wh)
    root = Path(str(s.root).removeprefix("file://"))
    data = Path(wh) / "db" / "keyed" / "data"
    old_delete = stray(wh, "d", s.upper - 1, data)
    young_delete = stray(wh, "d", s.upper + 100, data)  # an attempt not yet passed by the upper (gc moves it)
    old_merge = stray(wh, "t", s.upper - 1, root / "keys")
    listed = {str(t["p"]).removeprefix("file://") for t in s.tombstones}
    assert len(listed) == 1
    report = run_gc(wh)
    removed = {p.removeprefix("file://") for p in report.orphans}
    assert str(old_delete) in removed and str(old_merge) in removed
    assert str(young_delete) not in removed and young_delete.exists()
    assert all(Path(p).exists() for p in listed)
    unordered_keys = [p for p in (root / "keys").iterdir() if str(p) not in listed and not p.name.startswith("t-")]
    assert unordered_keys == []  # the unordered upsert's delete-key file: applied, never a tombstone, collected
    live_deletes = embedded_catalog(wh).load_table(TABLE).inspect.delete_files().column("file_path").to_pylist()
    assert live_deletes and all(Path(p.removeprefix("file://")).exists() for p in live_deletes)
    assert ids(wh) == [1]
    upsert(wh, [(2, 5, "U")])  # the delete of key 2 (order 9) is still remembered
    assert ids(wh) == [1]


def test_status_shows_live_delete_files_keys_rewritten_and_tombstones(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """fencedlake status --json: delete files, the rows they delete, keys rewritten by recent commits, tombstones."""
    upsert(wh, [(1, 1, "U"), (2, 1, "U"), (3, 1, "U")])
    upsert(wh, [(1, 2, "U"), (2, 2, "D"), (4, 1, "U")])
    assert main(["status", TABLE, "--warehouse", wh, "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["delete_files"], body["deleted_rows"]) == (1, 2)
    assert body["keys_rewritten_in_recent_commits"] == 2 and body["tombstone_files"] == 1
    newest = body["recent_commits"][0]
    assert (newest["keys_inserted"], newest["keys_rewritten"]) == (1, 2) and newest["files_read"] >= 1
    assert main(["status", TABLE, "--warehouse", wh]) == 0
    assert "keys_rewritten" in capsys.readouterr().out
