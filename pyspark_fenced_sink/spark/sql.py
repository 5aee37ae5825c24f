"""fencedlake tables in Spark SQL: session views, and the catalog tables Spark cannot pass through (driver).

What Spark 4.x hands a Python data source (verified with Spark 4.3, classic and Connect):
``CREATE TABLE t USING fencedlake OPTIONS (...)`` (no column list) asks the source for its
schema with the OPTIONS (plus ``provider``, ``owner``, ``option.*``); ``CREATE TABLE t (id
BIGINT, ...) USING fencedlake OPTIONS (...)`` runs no code of the source at all. Then ``INSERT
INTO t``, ``INSERT OVERWRITE t``, ``SELECT ... FROM t``, ``CREATE TABLE ... AS SELECT``,
``insertInto("t")`` and ``writeTo("t")`` reach the source with **no options at all** — not the
OPTIONS, the name, a ``LOCATION`` nor the ``TBLPROPERTIES``, in this session or another — so the
sink cannot know which Iceberg table is meant. (The schema Spark passes carries column metadata,
but an ``INSERT ... SELECT`` passes the query's, not the table's: no channel from ``CREATE`` to
``INSERT``.) A temporary view declared ``USING fencedlake OPTIONS (...)`` passes its options to
every statement: ``SELECT``, ``INSERT INTO`` (append), ``INSERT OVERWRITE`` (per the view's
``overwrite-mode``/``replace-where``), ``insertInto`` and ``writeTo(view).append()``.

So :func:`register_view` declares such a view; :func:`refuse_catalog_table` fails ``CREATE TABLE
... USING fencedlake`` without columns (the one moment the sink sees it) with the statement that
works; and :func:`refuse_unnamed_table` fails every statement that reaches the sink with no
options (a catalog table declared with columns, which Spark registers without asking) with the
same statement, the table's columns filled in. Spark itself refuses ``overwritePartitions()``,
``INSERT ... REPLACE WHERE`` and ``overwrite(condition)`` for Python sources (no such capability
in the API): the README's SQL section names the options that do it (PROTOCOL.md §14.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_fenced_sink.errors import InvalidOptionsError, marked_errors
from pyspark_fenced_sink.options.common import TABLE, validate_table_name

__all__ = ["refuse_catalog_table", "refuse_unnamed_table", "register_view", "view_statement"]

#: Keys Spark adds to a source's options when it registers a table in its catalog (CREATE TABLE ... USING).
_CATALOG_TABLE_KEYS = ("provider", "owner")


def refuse_catalog_table(options: Mapping[str, str]) -> None:
    """Raise if Spark asks for the schema while it registers a catalog table ``USING fencedlake``.

    Raises:
        InvalidOptionsError: the options are those of ``CREATE TABLE ... USING fencedlake``.
    """
    keys = {str(k).lower() for k in options}
    if not all(k in keys for k in _CATALOG_TABLE_KEYS):
        return
    table = next((str(v) for k, v in options.items() if str(k).lower() == TABLE), "db.events")
    with marked_errors():
        raise InvalidOptionsError(
            "CREATE TABLE ... USING fencedlake is refused: Spark would keep the table's OPTIONS in its catalog but "
            "pass none of them to a Python data source on INSERT INTO or SELECT, so the table could be neither "
            "written nor read. Declare it for the session instead: CREATE TEMPORARY VIEW <name> USING fencedlake "
            f"OPTIONS (table '{table}', ...), or pyspark_fenced_sink.register_view(spark, '<name>', '{table}', "
            "...); the Iceberg table itself lives in fencedlake's catalog and is created by the first write"
        )


def _columns(schema: Any) -> str:
    """``id BIGINT, s STRING`` for a Spark ``StructType`` (``<its columns>`` without one)."""
    fields = getattr(schema, "fields", None)
    if not fields:
        return "<its columns>"
    return ", ".join(f"`{f.name}` {f.dataType.simpleString().upper()}" for f in fields)


def refuse_unnamed_table(options: Mapping[str, str], schema: Any = None) -> None:
    """Raise if Spark passed no options at all: a statement on a catalog table ``USING fencedlake``.

    A DataFrame read or write with neither a path nor an option looks the same to the sink, so the
    message gives the SQL statement first and the DataFrame way last. ``schema``: the columns Spark
    passed, for the view statement.

    Raises:
        InvalidOptionsError: ``options`` is empty.
    """
    if any(True for _ in options):
        return
    columns = _columns(schema)
    with marked_errors():
        raise InvalidOptionsError(
            "no table given: Spark passed no options at all, as it does for INSERT INTO, INSERT OVERWRITE, SELECT, "
            "CREATE TABLE ... AS SELECT, insertInto() and writeTo() on a table declared with CREATE TABLE ... USING "
            "fencedlake: Spark keeps that table's OPTIONS in its catalog but never hands them (nor its name or "
            "location) to a Python data source, so fencedlake cannot know which Iceberg table is meant. Declare it "
            f"as a session view instead (the Iceberg table stays as it is): DROP TABLE <name>; CREATE TEMPORARY VIEW "
            f"<name> ({columns}) USING fencedlake OPTIONS (table '<namespace.table>', ...), or "
            f'pyspark_fenced_sink.register_view(spark, "<name>", "<namespace.table>", schema="{columns}"); then '
            "INSERT INTO, INSERT OVERWRITE and SELECT the view. (A DataFrame read or write names its table in "
            '.save("namespace.table"), .load("namespace.table") or .option("table", ...).)'
        )


def _literal(value: Any) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _check_view_name(view: str) -> None:
    if not view.replace("_", "").isalnum():
        raise InvalidOptionsError(f"view name {view!r} is invalid: expected letters, digits and '_'")


def view_statement(view: str, table: str, options: Mapping[str, Any], schema: str | None = None) -> str:
    """The ``CREATE OR REPLACE TEMPORARY VIEW ... USING fencedlake OPTIONS (...)`` statement for :func:`register_view`.

    Raises:
        InvalidOptionsError: a view name that is not one SQL identifier, or a bad table name.
    """
    _check_view_name(view)
    pairs = {TABLE: validate_table_name(table), **{str(k): v for k, v in options.items() if v is not None}}
    body = ", ".join(f"{_literal(k)} {_literal(v)}" for k, v in pairs.items())
    columns = f" ({schema})" if schema else ""
    return f"CREATE OR REPLACE TEMPORARY VIEW `{view}`{columns} USING fencedlake OPTIONS ({body})"


def register_view(
    spark: Any, view: str, table: str, *, schema: str | None = None, native: bool | str = False, **options: Any
) -> str:
    """Declare fencedlake table ``table`` as the temporary view ``view`` of ``spark``'s session, for SQL.

    ``SELECT ... FROM view``, ``INSERT INTO view`` (append) and ``INSERT OVERWRITE view`` (what
    ``overwrite-mode`` / ``replace-where`` say; static: every row) then read and write ``table``
    exactly as ``format("fencedlake")`` does with ``options`` (the sink's and the reader's options,
    e.g. ``warehouse="/data/lake"``, ``**{"overwrite-mode": "dynamic"}``). Works on classic and Spark
    Connect sessions. The view lives as long as the session and reads the table's newest snapshot
    at every query.

    Spark reads the table's schema when the view is declared, so a table that does not exist yet
    needs ``schema`` (its columns in SQL DDL, ``"id BIGINT, ts TIMESTAMP"``); the first ``INSERT``
    then creates it.

    ``native=True`` (or ``"auto"``: native where exact, else the data source) declares a read-only
    view of :func:`pyspark_fenced_sink.read_table` instead: Spark's own Parquet reader, SQL filters
    pruning files and row groups. It is a **snapshot**: the view keeps the files planned when it was
    declared, so a later commit is not seen until the view is declared again, and ``INSERT`` into it
    is refused by Spark. Hence not the default.

    Returns:
        The view's name.

    Raises:
        InvalidOptionsError: a bad view name, ``schema`` with ``native``, bad read options, or
            ``native=True`` on a table the native path cannot read.
    """
    if native is False:
        spark.sql(view_statement(view, table, options, schema))
        return view
    from pyspark_fenced_sink.spark.native_read import read_table

    with marked_errors():
        _check_view_name(view)
        if schema is not None:
            raise InvalidOptionsError(
                f"register_view({view!r}, native={native!r}) reads an existing table: schema= is for a view of a "
                "table no write has created yet (native=False)"
            )
    read_table(spark, validate_table_name(table), native=native, **options).createOrReplaceTempView(view)
    return view
