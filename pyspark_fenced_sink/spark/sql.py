"""fencedlake tables in Spark SQL: session views, and the catalog tables Spark cannot pass through (driver).

What Spark 4.x hands a Python data source (verified with Spark 4.3): a table
declared with ``CREATE TABLE t USING fencedlake OPTIONS (...)`` keeps its
OPTIONS in Spark's catalog, but ``INSERT INTO t``, ``INSERT OVERWRITE t``,
``SELECT ... FROM t``, ``insertInto`` and ``writeTo("t")`` reach the source with
**no options at all** (only the statement's own ``.option(...)`` calls), so the
sink cannot know which Iceberg table is meant; ``writeTo(...).using("fencedlake")
.create()`` passes its options but not its name. A temporary view declared
``USING fencedlake OPTIONS (...)`` passes its options to every statement:
``SELECT``, ``INSERT INTO`` (append), ``INSERT OVERWRITE`` (per the view's
``overwrite-mode``/``replace-where``), ``insertInto`` and ``writeTo(view).append()``.

So :func:`register_view` declares such a view, and :func:`refuse_catalog_table`
fails ``CREATE TABLE ... USING fencedlake`` (Spark asks the source for its
schema while it creates the entry: the one moment the sink sees it) with the
statement that works. Spark itself refuses ``overwritePartitions()``, ``INSERT
... REPLACE WHERE`` and ``overwrite(condition)`` for Python sources (no such
capability in the API): the README's troubleshooting section names the
options that do it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_fenced_sink.errors import InvalidOptionsError, marked_errors
from pyspark_fenced_sink.options.common import TABLE, validate_table_name

__all__ = ["refuse_catalog_table", "register_view", "view_statement"]

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


def _literal(value: Any) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def view_statement(view: str, table: str, options: Mapping[str, Any], schema: str | None = None) -> str:
    """The ``CREATE OR REPLACE TEMPORARY VIEW ... USING fencedlake OPTIONS (...)`` statement for :func:`register_view`.

    Raises:
        InvalidOptionsError: a view name that is not one SQL identifier, or a bad table name.
    """
    if not view.replace("_", "").isalnum():
        raise InvalidOptionsError(f"view name {view!r} is invalid: expected letters, digits and '_'")
    pairs = {TABLE: validate_table_name(table), **{str(k): v for k, v in options.items() if v is not None}}
    body = ", ".join(f"{_literal(k)} {_literal(v)}" for k, v in pairs.items())
    columns = f" ({schema})" if schema else ""
    return f"CREATE OR REPLACE TEMPORARY VIEW `{view}`{columns} USING fencedlake OPTIONS ({body})"


def register_view(spark: Any, view: str, table: str, *, schema: str | None = None, **options: Any) -> str:
    """Declare fencedlake table ``table`` as the temporary view ``view`` of ``spark``'s session, for SQL.

    ``SELECT ... FROM view``, ``INSERT INTO view`` (append) and ``INSERT OVERWRITE view`` (what
    ``overwrite-mode`` / ``replace-where`` say; static: every row) then read and write ``table``
    exactly as ``format("fencedlake")`` does with ``options`` (the sink's and the reader's options,
    e.g. ``warehouse="/data/lake"``, ``**{"overwrite-mode": "dynamic"}``). Works on classic and Spark
    Connect sessions. The view lives as long as the session.

    Spark reads the table's schema when the view is declared, so a table that does not exist yet
    needs ``schema`` (its columns in SQL DDL, ``"id BIGINT, ts TIMESTAMP"``); the first ``INSERT``
    then creates it.

    Returns:
        The view's name.
    """
    spark.sql(view_statement(view, table, options, schema))
    return view
