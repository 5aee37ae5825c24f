"""Keys and value parsers every option set shares: the table name, booleans, integers (PROTOCOL.md step 0; driver).

Spark lower-cases option keys; values keep their case. Every parser raises
``InvalidOptionsError`` naming the key, the value found and what is expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pyspark_fenced_sink.errors import InvalidOptionsError

__all__ = ["BRANCH", "PATH", "SPARK_PASSED", "TABLE", "flag", "integer", "lowered", "table_name", "validate_table_name"]

TABLE = "table"
#: The branch a write writes or a read reads (default: main).
BRANCH = "branch"
PATH = "path"  # what .save("ns.table") / .load("ns.table") passes
#: Keys Spark itself passes to every data source, accepted silently.
SPARK_PASSED = frozenset({PATH, "checkpointlocation", "queryname"})
_IDENT = re.compile(r"^[A-Za-z0-9_$-]+$")


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-cased keys and text values (None values dropped), as Spark hands them."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    """Option ``key`` as a boolean (``true``/``false``, any case), or ``default``."""
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionsError(f"option {key}={raw!r} is invalid: expected true or false")
    return value == "true"


def integer(options: Mapping[str, str], key: str, default: int | None, minimum: int) -> int | None:
    """Option ``key`` as an integer of at least ``minimum``, or ``default``."""
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        expected = "an integer" if minimum < 0 else f"an integer >= {minimum}"
        raise InvalidOptionsError(f"option {key}={raw!r} is invalid: expected {expected}")
    return value


def table_name(options: Mapping[str, str]) -> str:
    """The table a read or write names: ``save()``/``load()``'s path or the ``table`` option (not both)."""
    path, table = options.get(PATH), options.get(TABLE)
    if path and table and path != table:
        raise InvalidOptionsError(
            f"two table names given: path {path!r} (save()/load(), or a path option) and option table={table!r}; "
            "give one"
        )
    name = (table or path or "").strip()
    if not name:
        raise InvalidOptionsError(
            "no table given: name it with the table option: in SQL, CREATE TEMPORARY VIEW events USING fencedlake "
            'OPTIONS (table \'db.events\', ...) or pyspark_fenced_sink.register_view(spark, "events", "db.events", '
            '...); on a DataFrame, .save("db.events") (writes), .load("db.events") (reads) or .option("table", '
            '"db.events")'
        )
    return validate_table_name(name)


def validate_table_name(name: str) -> str:
    """Return ``name`` if it is ``namespace.table`` (namespaces may nest), else raise InvalidOptionsError."""
    parts = name.split(".")
    if len(parts) < 2 or not all(_IDENT.fullmatch(p) for p in parts):
        raise InvalidOptionsError(
            f"table name {name!r} is invalid: expected namespace.table with letters, digits, '_', '-' or '$' "
            "in each part (for example db.events)"
        )
    return name
