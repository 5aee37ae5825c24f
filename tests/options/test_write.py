"""Sink options: keys, defaults, validation, redaction (driver; PROTOCOL.md step 0, §10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.masking import redact
from pyspark_fenced_sink.options.catalog import WAREHOUSE_ENV, CatalogConfig
from pyspark_fenced_sink.options.write import (
    COMMIT_MAX_GROUP_SIZE_DEFAULT,
    COMMIT_MAX_WAIT_MS_DEFAULT,
    SinkOptions,
    parse_write_options,
)
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.protocol.fencing import validate_writer_id


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(WAREHOUSE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def _fails(options: dict[str, str], match: str | None, *, streaming: bool = False) -> InvalidOptionsError:
    with pytest.raises(InvalidOptionsError, match=match) as err:
        parse_write_options(options, streaming=streaming)
    assert isinstance(err.value, ValueError)
    assert err.value.retryable is False
    return err.value


# ---------------------------------------------------------------------------------------------- defaults


def test_minimal_options_take_every_default(tmp_path: Path) -> None:
    """Only a table: the embedded catalog in ./fencedlake-warehouse and every documented default."""
    opts = parse_write_options({"table": "db.events"})
    assert opts == SinkOptions(
        table="db.events",
        catalog=CatalogConfig(name=None, properties={}, warehouse=str(tmp_path.resolve() / "fencedlake-warehouse")),
        create_table=True,
        partition_by="",
        table_properties={},
        merge_schema=False,
        writer_id=None,
        batch_id=None,
        commit_max_wait_ms=300_000,
        commit_max_group_size=1000,
        failpoints="",
    )
    assert (COMMIT_MAX_WAIT_MS_DEFAULT, COMMIT_MAX_GROUP_SIZE_DEFAULT) == (300_000, 1000)
    assert opts.catalog.embedded is True


def test_every_option_key_is_parsed(tmp_path: Path) -> None:
    """Each key reaches its field; ``catalog.*`` and ``table.*`` become property maps; keys are case-insensitive."""
    opts = parse_write_options(
        {
            "path": "a.b.events",
            "Catalog": "prod",
            "catalog.uri": "http://rest:8181",
            "catalog.s3.endpoint": "http://minio:9000",
            "create-table": "false",
            "partition-by": "day(ts), bucket(16, id)",
            "table.write.parquet.compression-codec": "zstd",
            "merge-schema": "TRUE",
            "Writer.Id": "Orders-1",
            "writer.batch-id": " 42 ",
            "commit.max-wait-ms": "1",
            "commit.max-group-size": "7",
            "test.failpoints": "commit.after-wal-put=raise@2",
            "checkpointLocation": "/chk",
            "queryName": "q",
        }
    )
    assert opts.table == "a.b.events"
    assert opts.catalog.name == "prod"
    assert opts.catalog.properties == {"uri": "http://rest:8181", "s3.endpoint": "http://minio:9000"}
    assert opts.create_table is False
    assert opts.partition_by == "day(ts), bucket(16, id)"
    assert opts.table_properties == {"write.parquet.compression-codec": "zstd"}
    assert opts.merge_schema is True
    assert opts.writer_id == "Orders-1"
    assert opts.batch_id == 42
    assert opts.commit_max_wait_ms == 1
    assert opts.commit_max_group_size == 7
    assert opts.failpoints == "commit.after-wal-put=raise@2"
    assert opts.catalog.embedded is False


def test_warehouse_from_option_env_and_file_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The option wins over FENCEDLAKE_WAREHOUSE; ``file://`` is stripped; the path is made absolute."""
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "from-env"))
    assert parse_write_options({"table": "db.t"}).catalog.warehouse == str(tmp_path / "from-env")
    from_uri = parse_write_options({"table": "db.t", "warehouse": f"file://{tmp_path}/opt"})
    assert from_uri.catalog.warehouse == str(tmp_path / "opt")
    relative = parse_write_options({"table": "db.t", "warehouse": "rel/wh"})
    assert relative.catalog.warehouse == str(tmp_path.resolve() / "rel/wh")


def test_none_values_are_ignored() -> None:
    """Spark may pass None for unset options: treated as absent."""
    assert parse_write_options({"table": "db.t", "writer.id": None}).writer_id is None  # type: ignore[dict-item]


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("False", False), (" TRUE ", True), ("false", False)])
def test_booleans_accept_true_and_false_in_any_case(raw: str, value: bool) -> None:
    """Booleans are ``true``/``false``, case and surrounding blanks ignored."""
    opts = parse_write_options({"table": "db.t", "create-table": raw, "merge-schema": raw})
    assert (opts.create_table, opts.merge_schema) == (value, value)


# ---------------------------------------------------------------------------------------------- rejections


def test_unknown_key_is_rejected_naming_it() -> None:
    """A misspelt option fails before any task runs, naming the key and listing the valid ones."""
    err = _fails({"table": "db.t", "writer.idd": "x", "comit.max-wait-ms": "5"}, "unknown option")
    assert "comit.max-wait-ms, writer.idd" in str(err)
    assert "writer.id" in str(err)
    assert "commit.max-wait-ms" in str(err)


@pytest.mark.parametrize("key", ["catalog.", "table."])
def test_empty_property_key_is_rejected(key: str) -> None:
    """``catalog.`` / ``table.`` with nothing after the dot is a mistake, not a property."""
    _fails({"table": "db.t", key: "x"}, "ends with '.'")


@pytest.mark.parametrize(
    "writer_id",
    ["../x", "a/b", "", ".hidden", "-rf", "a b", "x" * 129, "orders\n", "ü", "a\\b"],
    ids=[
        "dotdot",
        "slash",
        "empty",
        "leading-dot",
        "leading-dash",
        "space",
        "too-long",
        "newline",
        "non-ascii",
        "backslash",
    ],
)
def test_bad_writer_id_is_rejected(writer_id: str) -> None:
    """writer.id names files and control keys: only 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'."""
    err = _fails({"table": "db.t", "writer.id": writer_id}, "writer.id .* is invalid")
    assert repr(writer_id) in str(err)
    with pytest.raises(InvalidOptionsError):
        validate_writer_id(writer_id)


@pytest.mark.parametrize("writer_id", ["a", "x" * 128, "orders.v2", "_tmp", "A-b_c.9"])
def test_good_writer_ids_are_kept(writer_id: str) -> None:
    """Valid writer ids pass unchanged (case kept)."""
    assert parse_write_options({"table": "db.t", "writer.id": writer_id}).writer_id == writer_id


@pytest.mark.parametrize("key", ["commit.max-wait-ms", "commit.max-group-size"])
@pytest.mark.parametrize("raw", ["abc", "0", "-5", "1.5", "", "1e3"])
def test_non_positive_or_non_integer_limits_are_rejected(key: str, raw: str) -> None:
    """Limits are integers >= 1; the error names the key and the value."""
    _fails({"table": "db.t", key: raw}, rf"option {key}={raw!r} is invalid: expected an integer >= 1")


@pytest.mark.parametrize("raw", ["-1", "x", "2.0"])
def test_bad_batch_id_is_rejected(raw: str) -> None:
    """writer.batch-id is an integer >= 0."""
    _fails({"table": "db.t", "writer.id": "w", "writer.batch-id": raw}, "writer.batch-id.*expected an integer >= 0")


def test_batch_id_zero_is_valid() -> None:
    """Batch id 0 is a batch id, not "unset"."""
    assert parse_write_options({"table": "db.t", "writer.id": "w", "writer.batch-id": "0"}).batch_id == 0


def test_batch_id_without_writer_id_is_rejected() -> None:
    """Batch ids are counted per writer, so they need writer.id."""
    _fails({"table": "db.t", "writer.batch-id": "3"}, "writer.batch-id needs writer.id")


def test_streaming_requires_writer_id_and_refuses_batch_id() -> None:
    """Streaming needs a stable writer.id and uses Spark's batch ids, never writer.batch-id."""
    _fails({"table": "db.t"}, "writer.id is required for streaming", streaming=True)
    _fails({"table": "db.t", "writer.id": "w", "writer.batch-id": "1"}, "for batch writes", streaming=True)
    assert parse_write_options({"table": "db.t", "writer.id": "w"}, streaming=True).writer_id == "w"


@pytest.mark.parametrize("key", ["create-table", "merge-schema"])
@pytest.mark.parametrize("raw", ["yes", "1", "", "on"])
def test_bad_booleans_are_rejected(key: str, raw: str) -> None:
    """Only true/false: ``yes``, ``1``, empty are errors naming the key and value."""
    _fails({"table": "db.t", key: raw}, rf"option {key}={raw!r} is invalid: expected true or false")


@pytest.mark.parametrize(
    "options",
    [{"catalog": "prod", "warehouse": "/w"}, {"catalog.uri": "sqlite:///x.db", "warehouse": "/w"}],
    ids=["named-catalog", "catalog-properties"],
)
def test_warehouse_only_with_the_embedded_catalog(options: dict[str, str]) -> None:
    """``warehouse`` configures the embedded catalog; with a configured catalog it is an error."""
    _fails({"table": "db.t", **options}, "set catalog.warehouse instead")


def test_object_store_warehouse_needs_a_catalog() -> None:
    """The embedded catalog needs a local path."""
    _fails({"table": "db.t", "warehouse": "s3://bucket/wh"}, "needs a local path")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "no table given"),
        ({"table": "  "}, "no table given"),
        ({"path": "db.a", "table": "db.b"}, "two table names given"),
        ({"table": "events"}, "table name 'events' is invalid"),
        ({"table": "db..events"}, "is invalid"),
        ({"table": "db.ev ents"}, "is invalid"),
        ({"table": "db/x.events"}, "is invalid"),
        ({"table": "db\n.events"}, "is invalid"),
    ],
    ids=["none", "blank", "two-names", "no-namespace", "empty-part", "space", "slash", "newline"],
)
def test_bad_table_names_are_rejected(options: dict[str, str], match: str) -> None:
    """The table is ``namespace.table`` with identifier parts, given once."""
    _fails(options, match)


def test_same_table_in_path_and_option_is_fine() -> None:
    """save("db.t") with option table=db.t is one name, not two."""
    assert parse_write_options({"path": "db.t", "table": "db.t"}).table == "db.t"


@pytest.mark.parametrize("spec", ["nope=raise", "commit.after-wal-put=explode", "commit.after-wal-put"])
def test_bad_failpoint_spec_is_rejected_naming_the_option(spec: str) -> None:
    """test.failpoints is validated on the driver, before anything runs."""
    _fails({"table": "db.t", "test.failpoints": spec}, "option test.failpoints is invalid")


# ---------------------------------------------------------------------------------------------- redaction

SECRETS = {
    "s3.secret-access-key": "wJalrXUtnFEMI",
    "s3.access-key-id": "AKIAEXAMPLE",
    "s3.session-token": "FwoGZXIvYXdzE",
    "password": "hunter2",
    "credential": "client:s3cr3t",
    "token": "eyJhbGciOi",
    "header.Authorization": "Bearer abc.def",
    "adls.sas-token.acct": "sv=2020&sig=xyz",
}


@pytest.mark.parametrize(("key", "value"), SECRETS.items(), ids=SECRETS.keys())
def test_redact_masks_secret_keys(key: str, value: str) -> None:
    """Values of secret-looking keys are replaced by ****."""
    assert redact({key: value}) == {key: "****"}


@pytest.mark.parametrize(
    ("uri", "masked"),
    [
        ("postgresql+psycopg2://fl:pg-pass@db:5432/cat", "postgresql+psycopg2://fl:****@db:5432/cat"),
        ("https://user:p%40ss@rest.example/v1", "https://user:****@rest.example/v1"),
        ("redis://:hunter2@cache:6379/0", "redis://:****@cache:6379/0"),
    ],
    ids=["postgres", "https", "empty-user"],
)
def test_redact_removes_passwords_from_uris(uri: str, masked: str) -> None:
    """A password inside a URI value is masked even though the key (``uri``) is not secret."""
    assert redact({"uri": uri}) == {"uri": masked}


def test_redact_keeps_harmless_values() -> None:
    """Non-secret keys and URIs without credentials stay readable."""
    plain = {"uri": "http://rest:8181", "s3.endpoint": "http://minio:9000", "warehouse": "s3://b/wh", "type": "rest"}
    assert redact(plain) == plain


def test_options_repr_and_errors_never_show_secrets() -> None:
    """Secrets given as catalog.* options appear neither in SinkOptions' repr nor in an option error."""
    secret_options = {
        "table": "db.t",
        "catalog.s3.secret-access-key": "wJalrXUtnFEMI",
        "catalog.uri": "postgresql://fl:pg-pass@db/cat",
        "catalog.token": "eyJhbGciOi",
    }
    opts = parse_write_options(secret_options)
    assert opts.catalog.properties["s3.secret-access-key"] == "wJalrXUtnFEMI"  # usable, just never shown
    for shown in (repr(opts), str(opts)):
        assert [s for s in ("wJalrXUtnFEMI", "pg-pass", "eyJhbGciOi") if s in shown] == []
        assert "postgresql://fl:****@db/cat" in shown
    for bad in ({"writer.idd": "x"}, {"warehouse": "/w"}, {"writer.id": "../x"}, {"commit.max-wait-ms": "0"}):
        err = _fails({**secret_options, **bad}, None)
        assert [s for s in ("wJalrXUtnFEMI", "pg-pass", "eyJhbGciOi") if s in str(err)] == []


# ---------------------------------------------------------------------------------------------- write modes


@pytest.mark.parametrize(
    ("options", "overwrite", "mode"),
    [
        ({}, False, WriteMode.APPEND),
        ({}, True, WriteMode.OVERWRITE),
        ({"overwrite-mode": "static"}, True, WriteMode.OVERWRITE),
        ({"overwrite-mode": "DYNAMIC"}, True, WriteMode.DYNAMIC),
        ({"replace-where": "region = 'eu'"}, True, WriteMode.REPLACE_WHERE),
        ({"replace-where": "region = 'eu'", "overwrite-mode": "static"}, True, WriteMode.REPLACE_WHERE),
    ],
    ids=["append", "overwrite-default-static", "static", "dynamic", "replace-where", "replace-where-static"],
)
def test_write_mode_follows_the_save_mode_and_the_overwrite_options(
    options: dict[str, str], overwrite: bool, mode: WriteMode
) -> None:
    """mode("overwrite") is a static (full) replace unless overwrite-mode=dynamic or replace-where says otherwise."""
    assert parse_write_options({"table": "db.t", **options}).write_mode(overwrite) is mode


def test_replace_where_on_an_append_fails_naming_the_option() -> None:
    """replace-where constrains the rows written: on a write that appends it is an error, not silently ignored."""
    opts = parse_write_options({"table": "db.t", "replace-where": "x = 1"})
    with pytest.raises(InvalidOptionsError, match="option replace-where applies to writes that overwrite"):
        opts.write_mode(False)


def test_overwrite_mode_on_an_append_is_ignored() -> None:
    """overwrite-mode says what an overwrite replaces (Spark's partitionOverwriteMode is ignored on appends too):
    one SQL view's options serve INSERT INTO and INSERT OVERWRITE."""
    opts = parse_write_options({"table": "db.t", "overwrite-mode": "dynamic"})
    assert (opts.write_mode(False), opts.write_mode(True)) == (WriteMode.APPEND, WriteMode.DYNAMIC)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"overwrite-mode": "partial"}, "overwrite-mode='partial' is invalid: expected static or dynamic"),
        ({"replace-where": "  "}, "replace-where is empty"),
        ({"replace-where": "id >"}, "not a valid filter: a syntax error at column 1"),
        ({"replace-where": "x = 1", "overwrite-mode": "dynamic"}, "conflict"),
    ],
    ids=["bad-mode", "empty-filter", "syntax", "both"],
)
def test_bad_overwrite_options_fail_on_the_driver(options: dict[str, str], match: str) -> None:
    """overwrite-mode and replace-where are checked before anything runs."""
    _fails({"table": "db.t", **options}, match)


@pytest.mark.parametrize(("branch", "expected"), [("audit-2026.06", "audit-2026.06"), ("main", None)])
def test_branch_names(branch: str, expected: str | None) -> None:
    """A branch is a writer-id-like name; main is the default branch."""
    assert parse_write_options({"table": "db.t", "branch": branch}).branch == expected


@pytest.mark.parametrize("branch", ["", "../x", "a b", "-x", "fencedlake-serial", "FencedLake-x"])
def test_bad_or_reserved_branch_names_fail(branch: str) -> None:
    """Names that are not refs, and fencedlake's own ref names, are refused."""
    _fails({"table": "db.t", "branch": branch}, "option branch=")


def test_snapshot_properties_are_collected_by_key() -> None:
    """snapshot-property.<key> options become summary properties (keys as Spark passes them: lower-case)."""
    opts = parse_write_options(
        {"table": "db.t", "snapshot-property.job": "nightly", "snapshot-property.run-date": "2026-06-01"}
    )
    assert opts.snapshot_properties == {"job": "nightly", "run-date": "2026-06-01"}


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("fencedlake.seqs", "1", "writes that summary key itself"),
        ("added-records", "1", "writes that summary key itself"),
        ("partitions.x", "1", "writes that summary key itself"),
        ("api-token", "x", "looks like a secret"),
        ("source", "postgresql://u:pw@db/x", "looks like a secret"),
        ("", "x", "the key is empty"),
    ],
    ids=["fencedlake-key", "iceberg-key", "iceberg-prefix", "secret-key", "secret-in-uri", "empty"],
)
def test_snapshot_properties_never_shadow_summary_keys_nor_carry_secrets(key: str, value: str, match: str) -> None:
    """Reserved summary keys and secret-looking properties are refused before anything is written."""
    err = _fails({"table": "db.t", f"snapshot-property.{key}": value}, match)
    assert "pw@" not in str(err)


# ---------------------------------------------------------------------------------------------- other tools' names


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"write.target-file-size-bytes": "1048576"}, {"write.target-file-size-bytes": "1048576"}),
        ({"target-file-size-bytes": "1048576"}, {"write.target-file-size-bytes": "1048576"}),
        ({"compression-codec": "snappy"}, {"write.parquet.compression-codec": "snappy"}),
        ({"write.parquet.row-group-size-bytes": "4096"}, {"write.parquet.row-group-size-bytes": "4096"}),
        (
            {"target-file-size-bytes": "7", "write.target-file-size-bytes": "7"},
            {"write.target-file-size-bytes": "7"},
        ),
    ],
    ids=["property", "iceberg-spark-name", "codec", "parquet-property", "both-agree"],
)
def test_iceberg_write_names_set_this_writes_file_properties(options: dict[str, str], expected: dict[str, str]) -> None:
    """Iceberg's write property names (and its Spark write option names) apply to this write's files only."""
    opts = parse_write_options({"table": "db.t", **options})
    assert opts.write_properties == expected
    table = {"write.target-file-size-bytes": "536870912", "write.parquet.compression-codec": "zstd"}
    assert opts.file_properties(table) == {**table, **expected}
    assert opts.table_properties == {}


def test_an_iceberg_name_and_its_property_with_different_values_fail() -> None:
    """Two spellings of one setting must agree."""
    _fails({"table": "db.t", "target-file-size-bytes": "1", "write.target-file-size-bytes": "2"}, "both given")


@pytest.mark.parametrize(
    ("key", "equivalent"),
    [
        ("replaceWhere", "replacewhere -> replace-where"),
        ("txnAppId", "txnappid -> writer.id"),
        ("txnVersion", "txnversion -> writer.batch-id"),
        ("partitionOverwriteMode", "partitionoverwritemode -> overwrite-mode"),
        ("mergeSchema", "mergeschema -> merge-schema"),
        ("overwriteSchema", "overwriteschema -> nothing: fencedlake never replaces a table's schema"),
    ],
)
def test_deltas_names_are_refused_naming_fencedlakes_equivalent(key: str, equivalent: str) -> None:
    """Delta's option names are not guessed at: the unknown-option error names the fencedlake option to use."""
    err = _fails({"table": "db.t", key: "x"}, "unknown option")
    assert equivalent in str(err)


# ---------------------------------------------------------------------------------------------- warehouse location


def test_a_relative_warehouse_never_resolves_inside_a_spark_session_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a Spark Connect server Python workers run in the session's artifact directory (deleted with the
    session): the default warehouse resolves against the directory the server was started in ($PWD)."""
    started = tmp_path / "server"
    session = tmp_path / "spark-1" / "userFiles-2" / "3f1c"
    started.mkdir()
    session.mkdir(parents=True)
    monkeypatch.chdir(session)
    monkeypatch.setenv("PWD", str(started))
    monkeypatch.setenv("SPARK_JOB_ARTIFACT_UUID", "3f1c")
    assert parse_write_options({"table": "db.t"}).catalog.warehouse == str(started.resolve() / "fencedlake-warehouse")
    assert parse_write_options({"table": "db.t", "warehouse": "lake"}).catalog.warehouse == str(
        started.resolve() / "lake"
    )
    assert parse_write_options({"table": "db.t", "warehouse": str(tmp_path / "abs")}).catalog.warehouse == str(
        tmp_path / "abs"
    )


def test_no_stable_directory_for_a_relative_warehouse_fails_naming_the_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a session directory with no usable $PWD, nothing is resolved there: the error names the ways out."""
    session = tmp_path / "userFiles-2" / "abc"
    session.mkdir(parents=True)
    monkeypatch.chdir(session)
    monkeypatch.setenv("PWD", str(session))
    err = _fails({"table": "db.t"}, "no stable directory for a relative warehouse")
    assert "FENCEDLAKE_WAREHOUSE" in str(err) and "absolute warehouse" in str(err)


def test_classic_sessions_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A classic session's workers run where the program started (artifact id "default"): the cwd, as before."""
    monkeypatch.setenv("SPARK_JOB_ARTIFACT_UUID", "default")
    monkeypatch.setenv("PWD", "/somewhere/else")
    assert parse_write_options({"table": "db.t"}).catalog.warehouse == str(tmp_path.resolve() / "fencedlake-warehouse")


def test_a_spark_connect_client_needs_an_absolute_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compact()/read_table() plan in the client, the sink on the server: only an absolute warehouse names one place."""
    from pyspark_fenced_sink.options.catalog import catalog_config

    with pytest.raises(InvalidOptionsError, match="on a Spark Connect session"):
        catalog_config(remote=True)
    with pytest.raises(InvalidOptionsError, match="on a Spark Connect session"):
        catalog_config(warehouse="lake", remote=True)
    assert catalog_config(warehouse=str(tmp_path), remote=True).warehouse == str(tmp_path)
    monkeypatch.setenv(WAREHOUSE_ENV, str(tmp_path / "env"))
    assert catalog_config(remote=True).warehouse == str(tmp_path / "env")
    assert catalog_config(properties={"type": "sql", "uri": "sqlite:///x.db"}, remote=True).properties
