"""The integration services are real and give the protocol what it needs.

- S3: put-if-absent (``If-None-Match: *``) is atomic under racing writers, and a
  conditional overwrite with a stale ETag (``If-Match``) is refused.
- PostgreSQL: a pyiceberg ``SqlCatalog`` on it stores tables, and a commit built on a
  stale view of the table fails with ``CommitFailedException`` -- both when the stale
  requirement is caught and when the metadata-location compare-and-swap in PostgreSQL
  itself loses a race -- with pyiceberg's own retry bypassed (``Table._do_commit``).

Independent of the package under ``pyspark_fenced_sink/``: only the services' clients.
"""

from __future__ import annotations

import errno
import threading
import uuid
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.integration

RACERS = 16
RACE_ROUNDS = 20


# --------------------------------------------------------------------------- S3


def test_put_if_absent_second_create_raises_file_exists(s3fs_fs: Any, s3_prefix: str) -> None:
    """pipe_file(mode="create") succeeds once; the second create raises FileExistsError and changes nothing."""
    path = f"{s3_prefix}/wal/{0:020d}"
    s3fs_fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        s3fs_fs.pipe_file(path, b"second", mode="create")
    assert s3fs_fs.cat_file(path) == b"first"

    # open(..., "xb") is the streaming form of the same conditional PUT.
    with pytest.raises(FileExistsError), s3fs_fs.open(path, "xb") as f:
        f.write(b"third")
    assert s3fs_fs.cat_file(path) == b"first"


def _race_creators(filesystems: list[Any], path: str, payloads: list[bytes]) -> list[str | BaseException | None]:
    """Start one thread per filesystem, release them at once on a barrier, each creating ``path``."""
    barrier = threading.Barrier(len(filesystems))
    outcomes: list[str | BaseException | None] = [None] * len(filesystems)

    def create(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            filesystems[i].pipe_file(path, payloads[i], mode="create")
            outcomes[i] = "won"
        except BaseException as e:  # recorded, asserted by the caller
            outcomes[i] = e

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(filesystems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), f"{path}: a creator hung"
    return outcomes


def test_put_if_absent_race_has_exactly_one_winner(s3_storage_options: dict[str, Any], s3_prefix: str) -> None:
    """16 creators racing on one key, 20 times: one wins, 15 get FileExistsError, the object is the winner's."""
    import s3fs

    filesystems = [s3fs.S3FileSystem(skip_instance_cache=True, **s3_storage_options) for _ in range(RACERS)]
    for round_no in range(RACE_ROUNDS):
        path = f"{s3_prefix}/race/{round_no:020d}"
        payloads = [f"round {round_no} writer {i} {uuid.uuid4().hex}".encode() for i in range(RACERS)]
        outcomes = _race_creators(filesystems, path, payloads)

        winners = [i for i, o in enumerate(outcomes) if o == "won"]
        others = [o for o in outcomes if o != "won" and not isinstance(o, FileExistsError)]
        assert len(winners) == 1, f"round {round_no}: {len(winners)} winners, outcomes {outcomes!r}"
        assert others == [], f"round {round_no}: unexpected outcomes {others!r}"
        assert filesystems[0].cat_file(path) == payloads[winners[0]], f"round {round_no}: object is not the winner's"


def test_if_match_with_stale_etag_is_rejected(s3fs_fs: Any, s3_prefix: str) -> None:
    """An overwrite conditioned on the current ETag succeeds; the same condition, now stale, is refused."""
    path = f"{s3_prefix}/manifest"
    etag_v1 = s3fs_fs.pipe_file(path, b"v1", mode="create")["ETag"]
    etag_v2 = s3fs_fs.pipe_file(path, b"v2", IfMatch=etag_v1)["ETag"]
    assert etag_v2 != etag_v1
    assert s3fs_fs.cat_file(path) == b"v2"

    with pytest.raises(OSError, match=r"(?i)pre-?condition") as excinfo:
        s3fs_fs.pipe_file(path, b"v3-from-a-stale-writer", IfMatch=etag_v1)
    assert not isinstance(excinfo.value, FileExistsError)
    assert excinfo.value.errno == errno.EINVAL, f"expected a 412 PreconditionFailed, got {excinfo.value!r}"
    response = getattr(excinfo.value.__cause__, "response", {})  # the botocore ClientError s3fs translated
    assert response.get("Error", {}).get("Code") == "PreconditionFailed", repr(excinfo.value.__cause__)
    assert response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412
    assert s3fs_fs.cat_file(path) == b"v2"


# ------------------------------------------------------------------- PostgreSQL


def test_postgres_requires_the_password(pg_uri: str) -> None:
    """The server is a real PostgreSQL with password auth: the right password connects, a wrong one is refused."""
    import sqlalchemy as sa

    engine = sa.create_engine(pg_uri)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT version()")).scalar_one().startswith("PostgreSQL")
    finally:
        engine.dispose()

    wrong = sa.engine.make_url(pg_uri).set(password="not-the-password-" + uuid.uuid4().hex)
    bad_engine = sa.create_engine(wrong)
    try:
        with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
            bad_engine.connect()
    finally:
        bad_engine.dispose()


def _sql_catalog(pg_uri: str, warehouse: str, s3_props: dict[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    # Same catalog name on both instances: they address the same rows in PostgreSQL.
    return SqlCatalog("fencedlake_it", uri=pg_uri, warehouse=warehouse, **s3_props)


ROWS_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("writer", pa.string())])


def _rows(writer: str, ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "writer": [writer] * len(ids)}, schema=ROWS_SCHEMA)


@pytest.fixture
def two_catalogs(pg_uri: str, s3_prefix: str, pyiceberg_s3_properties: dict[str, str]) -> Any:
    """Two independent SqlCatalog instances on the same PostgreSQL catalog, a fresh table on S3."""
    warehouse = f"s3://{s3_prefix}/warehouse"
    cat_a = _sql_catalog(pg_uri, warehouse, pyiceberg_s3_properties)
    cat_b = _sql_catalog(pg_uri, warehouse, pyiceberg_s3_properties)
    namespace = f"it_{uuid.uuid4().hex[:12]}"
    cat_a.create_namespace(namespace)
    identifier = f"{namespace}.events"
    cat_a.create_table(identifier, schema=ROWS_SCHEMA)
    yield cat_a, cat_b, identifier
    cat_a.drop_table(identifier)
    cat_a.drop_namespace(namespace)
    cat_a.engine.dispose()
    cat_b.engine.dispose()


def test_sql_catalog_stale_append_fails_without_pyiceberg_retry(two_catalogs: Any) -> None:
    """Both catalogs load the table and append; the second commit, built on the stale snapshot, fails."""
    from pyiceberg.exceptions import CommitFailedException

    cat_a, cat_b, identifier = two_catalogs
    table_a = cat_a.load_table(identifier)
    table_b = cat_b.load_table(identifier)
    assert table_a.metadata_location == table_b.metadata_location

    tx_a = table_a.transaction()
    tx_a.append(_rows("a", range(10)))
    tx_b = table_b.transaction()
    tx_b.append(_rows("b", range(100, 110)))

    # Table._do_commit is one catalog commit: no rebase-and-retry by pyiceberg.
    table_a._do_commit(tx_a._updates, tx_a._requirements)
    with pytest.raises(CommitFailedException):
        table_b._do_commit(tx_b._updates, tx_b._requirements)

    landed = cat_a.load_table(identifier).scan().to_arrow()
    assert sorted(landed.column("writer").to_pylist()) == ["a"] * 10
    assert sorted(landed.column("id").to_pylist()) == list(range(10))


def test_sql_catalog_metadata_location_cas_loses_a_real_race(two_catalogs: Any) -> None:
    """B reads the current metadata location, A commits before B's UPDATE: PostgreSQL's CAS refuses B."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.update import SetPropertiesUpdate

    cat_a, cat_b, identifier = two_catalogs
    table_a = cat_a.load_table(identifier)
    table_b = cat_b.load_table(identifier)
    before = table_b.metadata_location

    # No table requirements on either commit: only the metadata-location compare-and-swap
    # in PostgreSQL (UPDATE ... WHERE metadata_location = <what B read>) decides.
    original_write = cat_b._write_metadata
    interleaved: list[str] = []

    def write_then_let_a_win(*args: Any, **kwargs: Any) -> None:
        # Runs inside B's commit_table, after B has read the current metadata location.
        table_a._do_commit((SetPropertiesUpdate(updates={"winner": "a"}),), ())
        interleaved.append(table_a.metadata_location)
        original_write(*args, **kwargs)

    cat_b._write_metadata = write_then_let_a_win
    with pytest.raises(CommitFailedException, match="updated by another process"):
        table_b._do_commit((SetPropertiesUpdate(updates={"winner": "b"}),), ())

    assert interleaved, "A's commit did not run inside B's commit: the race was not exercised"
    current = cat_a.load_table(identifier)
    assert current.metadata_location == interleaved[0] != before
    assert current.properties.get("winner") == "a"
