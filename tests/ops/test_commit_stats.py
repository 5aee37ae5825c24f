"""``fencedlake status`` commit statistics under load, from the commit records (ops.commit_stats; PROTOCOL.md §10)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, open_table
from pyspark_fenced_sink.ops.cli import main
from pyspark_fenced_sink.ops.commit_stats import commit_stats, describe_stats
from pyspark_fenced_sink.options.catalog import catalog_config
from pyspark_fenced_sink.protocol.commit import recover
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry
from pyspark_fenced_sink.protocol.fencing import new_token
from pyspark_fenced_sink.testing.harness import rows, sink_write

TABLE = "db.stats"


@pytest.fixture
def wh(tmp_path: Path) -> str:
    """Three writes that each committed alone, then one group commit of three entries left by dead writers."""
    w = str(tmp_path)
    for i in range(3):
        sink_write(w, TABLE, rows("a", 10 * i, 2), tasks=1)
    ctx = open_table(catalog_config(warehouse=w), TABLE).ctx
    upper = ctx.load().state.upper
    for _ in range(3):
        entry = WalEntry(kind=EntryKind.DATA, token=new_token(), writer="anon-dead", ephemeral=True, opened=upper)
        ctx.wal.claim(entry, upper)
    assert len(recover(ctx)) == 1
    return w


def test_stats_count_commits_writes_attempts_and_peers(wh: str) -> None:
    """Four commits, six writes; the group commit applied three entries of other writers; no conflict."""
    stats = commit_stats(embedded_catalog(wh).load_table(TABLE), 200)
    assert (stats["commits"], stats["writes_applied"], stats["cas_attempts"], stats["cas_conflicts"]) == (4, 6, 4, 0)
    assert stats["cas_attempts_per_commit"] == 1.0
    assert stats["group_size"] == {"p50": 1.0, "max": 3.0, "mean_applied": 1.5}
    assert (stats["writes_by_peer_commit"], stats["helper_commits"], stats["holes_voided"]) == (3, 0, 0)
    ttc = stats["time_to_commit_ms"]
    assert ttc["p50"] is not None and 0 <= ttc["p50"] <= ttc["max"] and ttc["p99"] <= ttc["max"]
    assert stats["commits_per_s"] is not None and stats["commits_per_s"] > 0


def test_stats_cover_only_the_newest_commits_asked_for(wh: str) -> None:
    """``count`` bounds the commits looked at, newest first: the last two are the group commit and one write."""
    stats = commit_stats(embedded_catalog(wh).load_table(TABLE), 2)
    assert (stats["commits"], stats["writes_applied"], stats["writes_by_peer_commit"]) == (2, 4, 3)


def test_status_reports_the_stats_in_json_and_in_words(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``status --json`` carries the structure; the text view says the same in one line."""
    assert main(["status", TABLE, "--warehouse", wh, "--json"]) == 0
    body: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert body["commit_stats"]["commits"] == 4 and body["commit_stats"]["writes_applied"] == 6
    group = [c for c in body["recent_commits"] if c["applied"] == 3]
    assert len(group) == 1 and group[0]["for_peers"] == 3 and group[0]["voided"] == 0
    assert main(["status", TABLE, "--warehouse", wh]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("commit_stats: "))
    assert line == "commit_stats: " + describe_stats(body["commit_stats"])
    assert "4 commits over" in line and "3 writes applied by another writer's commit" in line


def test_a_table_without_fencedlake_commits_has_empty_stats(tmp_path: Path) -> None:
    """No commit record: zero commits, said in words."""
    catalog = embedded_catalog(str(tmp_path))
    catalog.create_namespace("db")
    table = catalog.create_table("db.plain", schema=rows("x", 0, 1).schema)
    assert commit_stats(table, 10) == {"commits": 0}
    assert describe_stats({"commits": 0}) == "no fencedlake commit yet"
