"""``fencedlake compact`` without Spark (``--no-spark``): output, progress, exit codes (PROTOCOL.md §5.2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.ops.cli import EXIT_UNDONE, main
from pyspark_fenced_sink.testing.harness import rows, sink_write, table_ids

TABLE = "db.cli_compact"


@pytest.fixture
def wh(tmp_path: Path) -> str:
    for i in range(3):
        sink_write(str(tmp_path), TABLE, rows("w", i * 10, 10), tasks=1)
    return str(tmp_path)


def _parquet(wh: str) -> set[Path]:
    return set(Path(wh).rglob("*.parquet"))


def test_compact_without_spark_prints_progress_and_the_result(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0; JSON result on stdout; the plan and each group's progress on stderr; rows unchanged."""
    code = main(["compact", TABLE, "--warehouse", wh, "--no-spark", "--min-input-files", "2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    body = json.loads(out)
    assert (body["outcome"], body["input_files"], body["output_files"], body["rows"]) == ("applied", 3, 1, 30)
    assert "3 of 3 planned files in 1 group(s)" in err and "group 1/1 rewritten" in err
    assert table_ids(wh, TABLE) == list(range(30))


def test_a_bad_filter_exits_2_naming_it_and_writes_nothing(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--where over a column the table lacks: exit 2, the message names the filter; no file written."""
    before = _parquet(wh)
    code = main(["compact", TABLE, "--warehouse", wh, "--no-spark", "--where", "nope = 1"])
    assert code == 2
    assert "compaction filter where='nope = 1' is invalid" in capsys.readouterr().err
    assert _parquet(wh) == before


def test_a_refused_compaction_exits_3_and_leaves_no_output(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An overwrite lands while the compaction rewrites: exit 3 with the reason; its outputs are removed."""

    def overwrite(point: str) -> None:
        if point == "compact.after-rewrite":
            failpoints.set_handler(None)
            sink_write(wh, TABLE, rows("o", 100, 2), overwrite=True, tasks=1)

    failpoints.set_handler(overwrite)
    try:
        code = main(["compact", TABLE, "--warehouse", wh, "--no-spark", "--min-input-files", "2"])
    finally:
        failpoints.set_handler(None)
    assert code == EXIT_UNDONE
    assert "refused, nothing changed" in capsys.readouterr().err
    assert table_ids(wh, TABLE) == [100, 101]
    assert len(_parquet(wh)) == 4  # the 3 inputs (older snapshots keep them) and the overwrite's file


def test_a_dry_run_with_too_few_small_files_per_partition_says_why_nothing_is_planned(
    wh: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """status counts small files; compact needs --min-input-files of them in a partition: the dry run says so."""
    code = main(["compact", TABLE, "--warehouse", wh, "--dry-run", "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 0 and (body["groups"], body["small_files"], body["below_min_input_files"]) == (0, 3, 3)
    assert "3 small file(s) in 1 partition(s) left alone" in body["detail"]
    assert "--min-input-files" in body["detail"]
    assert main(["compact", TABLE, "--warehouse", wh, "--dry-run", "--min-input-files", "2", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["groups"], body["input_files"], body["below_min_input_files"], body["detail"]) == (1, 3, 0, "")
