"""Read options: Iceberg's Spark option names, defaults, combinations refused (driver; PROTOCOL.md §14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.options.catalog import WAREHOUSE_ENV, CatalogConfig
from pyspark_fenced_sink.options.read import ReadOptions, parse_read_options


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def _fails(options: dict[str, str], match: str, *, streaming: bool = False) -> None:
    with pytest.raises(InvalidOptionsError, match=match):
        parse_read_options(options, streaming=streaming)


def test_a_table_alone_takes_every_default(tmp_path: Path) -> None:
    """The writer's catalog defaults; no time travel; split sizing from the table; no stream bounds."""
    opts = parse_read_options({"path": "db.events"})
    assert opts == ReadOptions(
        table="db.events",
        catalog=CatalogConfig(warehouse=str(tmp_path.resolve() / "fencedlake-warehouse")),
    )
    assert (opts.split_size, opts.max_files_per_batch, opts.skip_overwrite) == (None, None, False)
    assert not opts.incremental and not opts.streaming


def test_every_batch_option_reaches_its_field() -> None:
    """Keys are case-insensitive (Spark lower-cases them); catalog.* pass through as properties."""
    opts = parse_read_options(
        {
            "Table": "db.t",
            "catalog.type": "sql",
            "catalog.uri": "sqlite:///x.db",
            "start-snapshot-id": "5",
            "end-snapshot-id": "9",
            "split-size": "1048576",
            "file-open-cost": "0",
        }
    )
    assert opts.catalog.properties == {"type": "sql", "uri": "sqlite:///x.db"}
    assert (opts.start_snapshot_id, opts.end_snapshot_id, opts.incremental) == (5, 9, True)
    assert (opts.split_size, opts.file_open_cost) == (1_048_576, 0)


def test_every_stream_option_reaches_its_field() -> None:
    """Stream bounds, skip switches and the start point."""
    opts = parse_read_options(
        {
            "table": "db.t",
            "streaming-max-files-per-micro-batch": "2",
            "streaming-max-rows-per-micro-batch": "100",
            "streaming-skip-overwrite-snapshots": "TRUE",
            "streaming-skip-delete-snapshots": "true",
            "stream-from-timestamp": "1700000000000",
        },
        streaming=True,
    )
    assert (opts.max_files_per_batch, opts.max_rows_per_batch) == (2, 100)
    assert (opts.skip_overwrite, opts.skip_delete, opts.stream_from_timestamp_ms) == (True, True, 1_700_000_000_000)
    assert opts.streaming and not opts.incremental


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"snapshot-id": "1", "tag": "v1"}, "options snapshot-id, tag cannot be combined"),
        ({"branch": "b", "as-of-timestamp": "5"}, "options as-of-timestamp, branch cannot be combined"),
        ({"snapshot-id": "1", "start-snapshot-id": "0"}, "snapshot-id, start-snapshot-id cannot be combined"),
        ({"end-snapshot-id": "3"}, "end-snapshot-id needs start-snapshot-id"),
        ({"branch": " "}, "option branch is empty"),
        ({"snapshot-id": "abc"}, r"option snapshot-id='abc' is invalid: expected an integer$"),
        ({"as-of-timestamp": "-1"}, "expected an integer >= 0"),
        ({"split-size": "0"}, "expected an integer >= 1"),
        (
            {"streaming-max-files-per-micro-batch": "5"},
            "streaming-max-files-per-micro-batch: it applies to readStream only",
        ),
        ({"versionAsOf": "3"}, "unknown read option versionasof: another tool's name; fencedlake's is snapshot-id"),
        ({"spilt-size": "5"}, "unknown read option spilt-size: expected one of .*split-size"),
    ],
)
def test_bad_batch_read_options_are_refused_naming_them(options: dict[str, str], match: str) -> None:
    """Bad values, unknown keys and combinations fail before anything is read."""
    _fails({"table": "db.t", **options}, match)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"snapshot-id": "1"}, "unknown read option snapshot-id: it applies to spark.read \\(batch\\) only"),
        ({"end-snapshot-id": "1"}, "applies to spark.read"),
        ({"start-snapshot-id": "1", "stream-from-timestamp": "5"}, "cannot be combined"),
        ({"streaming-max-rows-per-micro-batch": "0"}, "expected an integer >= 1"),
        ({"streaming-skip-delete-snapshots": "yes"}, "expected true or false"),
    ],
)
def test_bad_stream_options_are_refused_naming_them(options: dict[str, str], match: str) -> None:
    """A time-travel option in a stream, bad bounds and bad switches are refused."""
    _fails({"table": "db.t", **options}, match, streaming=True)


def test_the_kind_of_read_is_inferred_from_stream_only_keys() -> None:
    """streaming=None (DataSource.schema() is not told): a stream-only key makes it a stream read."""
    assert parse_read_options({"table": "db.t", "stream-from-timestamp": "1"}, streaming=None).streaming
    assert not parse_read_options({"table": "db.t", "snapshot-id": "1"}, streaming=None).streaming


def test_no_table_says_how_to_name_one() -> None:
    """A read without a table names the load() path and the table option."""
    _fails({}, r'no table given: .*CREATE TEMPORARY VIEW .*\.load\("db.events"\) \(reads\)')


def test_write_options_in_a_read_are_ignored() -> None:
    """A SQL view's options reach its SELECT and its INSERT alike: the sink's write options do not fail the read."""
    write_only = {
        "writer.id": "w",
        "partition-by": "day(ts)",
        "table.format-version": "2",
        "snapshot-property.job": "x",
        "overwrite-mode": "dynamic",
        "write.target-file-size-bytes": "1024",
        "target-file-size-bytes": "1024",
    }
    assert parse_read_options({"table": "db.t", **write_only}) == parse_read_options({"table": "db.t"})
