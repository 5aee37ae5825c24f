"""The SQL catalog's round trips: one statement per load, one compare-and-swap per protocol commit (PROTOCOL.md §4).

``iceberg.sql_catalog.LeanSqlCatalog`` over the embedded SQLite catalog; the same
class serves PostgreSQL (integration/ runs it there). The sink's FileIO
(``iceberg.codec.fileio.LeanFileIO``) is checked here too.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import PyArrowFile
from sqlalchemy import create_engine, event

from pyspark_fenced_sink.iceberg import sql_catalog
from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog, load_catalog
from pyspark_fenced_sink.iceberg.codec.fileio import LeanFileIO
from pyspark_fenced_sink.iceberg.sql_catalog import PING_AFTER_IDLE_S, LeanSqlCatalog, compare_against, ping_after_idle
from pyspark_fenced_sink.options.catalog import CatalogConfig
from pyspark_fenced_sink.testing.harness import rows, sink_write, table_ids

TABLE = "db.events"


class Statements:
    """Statements the watched catalogs run, by first word (``SELECT``, ``UPDATE``)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._listeners: list[tuple[Any, Any]] = []

    def watch(self, catalog: LeanSqlCatalog) -> None:
        def count(*args: Any) -> None:
            self.seen[args[2].split()[0].upper()] += 1

        event.listen(catalog.engine, "before_cursor_execute", count)
        self._listeners.append((catalog.engine, count))

    def close(self) -> None:
        for engine, fn in self._listeners:
            event.remove(engine, "before_cursor_execute", fn)


@pytest.fixture
def statements() -> Iterator[Statements]:
    watcher = Statements()
    yield watcher
    watcher.close()


def test_a_load_is_one_select_and_parses_each_metadata_file_once(
    wh: str, statements: Statements, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged location: one SELECT, no file read; a location this process committed: no file read either."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    assert isinstance(catalog, LeanSqlCatalog)
    reads: list[str] = []
    real = sql_catalog.FromInputFile.table_metadata

    def counted(file: Any, *args: Any) -> Any:
        reads.append(file.location)
        return real(file, *args)

    monkeypatch.setattr(sql_catalog.FromInputFile, "table_metadata", staticmethod(counted))
    sql_catalog._metadata_cache.clear()
    statements.watch(catalog)
    first = catalog.load_table(TABLE)
    second = catalog.load_table(TABLE)
    assert reads == [first.metadata_location]
    assert second.metadata is first.metadata
    assert statements.seen == Counter({"SELECT": 2}), "a load is one SELECT"

    sink_write(wh, TABLE, rows("b", 10, 10))  # committed by this process: its metadata is kept
    third = catalog.load_table(TABLE)
    assert third.metadata_location != first.metadata_location
    assert reads == [first.metadata_location], "the metadata this process committed is not read back"
    assert table_ids(wh, TABLE) == list(range(20))


def test_a_protocol_commit_is_one_update_and_never_rebases(wh: str, statements: Statements) -> None:
    """Inside compare_against: one UPDATE against the base's location; a moved table is a conflict."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    stale = catalog.load_table(TABLE)
    fresh = catalog.load_table(TABLE)
    statements.watch(catalog)
    with compare_against(fresh):
        fresh.transaction().set_properties(owner="x").commit_transaction()
    assert statements.seen == Counter({"UPDATE": 1}), "no reload: the compare-and-swap alone"
    assert catalog.load_table(TABLE).properties["owner"] == "x"

    with pytest.raises(CommitFailedException), compare_against(stale):
        stale.transaction().set_properties(owner="stale").commit_transaction()
    assert catalog.load_table(TABLE).properties["owner"] == "x"
    # pyiceberg's own path (schema merges, creation) still reloads and would apply it: the contrast.
    stale.transaction().set_properties(owner="rebased").commit_transaction()
    assert catalog.load_table(TABLE).properties["owner"] == "rebased"


def test_the_sinks_catalogs_write_through_lean_file_io_unless_one_is_named(tmp_path: Path) -> None:
    """Embedded and configured catalogs hand out LeanFileIO; a catalog naming py-io-impl keeps its own."""
    wh = str(tmp_path / "wh")
    sink_write(wh, TABLE, rows("a", 0, 5))
    assert isinstance(embedded_catalog(wh).load_table(TABLE).io, LeanFileIO)
    uri = f"sqlite:///{tmp_path / 'other.db'}"
    configured = load_catalog(CatalogConfig(name="c1", properties={"type": "sql", "uri": uri, "warehouse": wh}))
    assert configured.properties["py-io-impl"].endswith("LeanFileIO")
    named = load_catalog(
        CatalogConfig(
            name="c2",
            properties={"type": "sql", "uri": uri, "warehouse": wh, "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
        )
    )
    assert named.properties["py-io-impl"] == "pyiceberg.io.fsspec.FsspecFileIO"


def test_lean_file_io_opens_s3_streams_lazily_and_creates_without_a_check(tmp_path: Path) -> None:
    """S3: allow_delayed_open (a small file is one PUT); create() writes over a name without asking first."""
    io = LeanFileIO(
        {
            "s3.endpoint": "http://127.0.0.1:9",
            "s3.region": "us-east-1",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "test-only",
        }
    )
    _, (options,) = io.fs_by_scheme("s3", "bucket").__reduce__()
    assert options["allow_delayed_open"] is True
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    with io.new_output(str(path)).create() as stream:  # pyiceberg's default create() would raise FileExistsError
        stream.write(b"new")
    assert path.read_bytes() == b"new"


def test_lean_file_io_leaves_azure_to_the_file_io_pyiceberg_prefers_for_it() -> None:
    """abfs/wasb locations go to pyiceberg's preferred FileIO for them (fsspec's), as without LeanFileIO."""
    io = LeanFileIO({"adls.account-name": "devstoreaccount1"})
    azure = io.new_output("abfs://container@devstoreaccount1.dfs.core.windows.net/t/a.parquet")
    assert type(azure).__module__ == "pyiceberg.io.fsspec"
    assert type(io.new_output("file:///tmp/t/a.parquet")).__module__ == "pyspark_fenced_sink.iceberg.codec.fileio"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def _counting_pings(monkeypatch: pytest.MonkeyPatch, engine: Any, fail: bool = False) -> list[Any]:
    pinged: list[Any] = []

    def do_ping(dbapi_connection: Any) -> bool:
        pinged.append(dbapi_connection)
        if fail:
            raise sqlite3.OperationalError("the server went away")
        return True

    monkeypatch.setattr(engine.dialect, "do_ping", do_ping)
    return pinged


def test_a_pooled_connection_is_pinged_only_after_it_sat_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh: no ping; returned 3 s ago: no ping; returned PING_AFTER_IDLE_S or more ago: one ping."""
    clock = _Clock()
    monkeypatch.setattr(sql_catalog, "time", clock)
    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    ping_after_idle(engine, PING_AFTER_IDLE_S)
    pinged = _counting_pings(monkeypatch, engine)
    for step, expected in ((0.0, 0), (3.0, 0), (PING_AFTER_IDLE_S - 0.01, 0), (PING_AFTER_IDLE_S, 1), (0.5, 1)):
        clock.now += step
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT 1").scalar() == 1
        assert len(pinged) == expected, f"after {step} s idle"
    engine.dispose()


def test_a_failed_idle_ping_hands_out_a_new_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ping fails (the connection died in an outage): the pool is thrown away, a new connection serves."""
    clock = _Clock()
    monkeypatch.setattr(sql_catalog, "time", clock)
    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    ping_after_idle(engine, PING_AFTER_IDLE_S)
    with engine.connect() as connection:
        first = connection.connection.dbapi_connection
    pinged = _counting_pings(monkeypatch, engine, fail=True)
    clock.now += PING_AFTER_IDLE_S + 1
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT 1").scalar() == 1
        assert connection.connection.dbapi_connection is not first
    assert pinged == [first], "the idle connection was pinged, the new one was not"
    engine.dispose()


def test_the_sinks_sql_catalog_pings_after_idle_unless_pool_pre_ping_is_set(tmp_path: Path) -> None:
    """No pool_pre_ping: SQLAlchemy's ping-every-time off, the idle ping on; the user's setting wins."""
    uri = f"sqlite:///{tmp_path / 'c.db'}"
    wh = str(tmp_path / "wh")
    lean = load_catalog(CatalogConfig(name="c1", properties={"type": "sql", "uri": uri, "warehouse": wh}))
    assert lean.ping_after_idle_s == PING_AFTER_IDLE_S and not lean.engine.pool._pre_ping
    assert len(lean.engine.pool.dispatch.checkout) == 1, "the idle ping's listener"
    chosen = load_catalog(
        CatalogConfig(name="c2", properties={"type": "sql", "uri": uri, "warehouse": wh, "pool_pre_ping": "true"})
    )
    assert chosen.ping_after_idle_s is None and chosen.engine.pool._pre_ping
    assert len(chosen.engine.pool.dispatch.checkout) == 0


def test_a_load_that_meets_a_dead_connection_runs_once_more_on_a_new_one(wh: str, statements: Statements) -> None:
    """The pooled connection died within the idle window (no ping): the load's SELECT fails as a disconnect
    and runs again on a fresh connection; the caller sees the table."""
    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    expected = catalog.load_table(TABLE).metadata_location
    with catalog.engine.connect() as connection:
        dead = connection.connection.dbapi_connection
    dead.close()  # as a server restart would leave it
    disconnects: list[bool] = []
    event.listen(catalog.engine, "handle_error", lambda context: disconnects.append(context.is_disconnect))
    statements.watch(catalog)
    assert catalog.load_table(TABLE).metadata_location == expected
    assert disconnects == [True], "the first SELECT met the dead connection"
    assert statements.seen == Counter({"SELECT": 1}), "its repeat ran on a new connection"


def test_lean_file_io_knows_the_length_of_an_avro_file_it_wrote_without_asking_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest's length is the bytes written (no HEAD on S3); a Parquet file's stream is pyarrow's own."""
    io = LeanFileIO({})
    manifest = io.new_output(str(tmp_path / "m0.avro"))
    with manifest.create() as stream:
        stream.write(b"x" * 700)
        stream.write(b"y" * 24)
    asked: list[str] = []
    real = PyArrowFile._file_info

    def counted(file: Any) -> Any:
        asked.append(file.location)
        return real(file)

    monkeypatch.setattr(PyArrowFile, "_file_info", counted)
    assert len(manifest) == 724 == (tmp_path / "m0.avro").stat().st_size
    assert asked == [], "the length came from the bytes written"
    data = io.new_output(str(tmp_path / "d.parquet"))
    stream = data.create()
    assert isinstance(stream, pa.NativeFile), "Parquet writes keep pyarrow's native stream"
    stream.write(b"abc")
    stream.close()
    assert len(data) == 3 and asked == [str(tmp_path / "d.parquet")]


def test_a_load_whose_statement_got_no_answer_in_time_is_not_run_again(
    wh: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement bound by request-timeout that timed out (the connection closed with it) raises at once:
    running it again would double the bound."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import OperationalError

    from pyspark_fenced_sink.iceberg.timeouts import NO_ANSWER

    sink_write(wh, TABLE, rows("a", 0, 10))
    catalog = embedded_catalog(wh)
    calls: list[str] = []

    def no_answer(self: Any, stmt: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("SELECT")
        raise OperationalError("SELECT ...", {}, Exception(f"{NO_ANSWER} within 1 s"), connection_invalidated=True)

    monkeypatch.setattr(Connection, "execute", no_answer)
    with pytest.raises(OperationalError, match=NO_ANSWER):
        catalog.load_table(TABLE)
    assert calls == ["SELECT"]
