"""The upsert options: parsed on the driver, refused in combinations that mean nothing (PROTOCOL.md §5.5)."""

from __future__ import annotations

import pytest

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.options.write import parse_write_options
from pyspark_fenced_sink.protocol.entry import WriteMode

BASE = {"table": "db.t"}


def test_upsert_options_parse_and_make_an_append_an_upsert() -> None:
    """Keys are split on commas and trimmed; any upsert option turns an append into an upsert."""
    opts = parse_write_options(
        {**BASE, "upsert-keys": " tenant , id", "upsert-order": " ts ", "upsert-delete-where": "op = 'D'"}
    )
    assert (opts.upsert_keys, opts.upsert_order, opts.upsert_delete_where) == (("tenant", "id"), "ts", "op = 'D'")
    assert opts.upsert and opts.write_mode(False) is WriteMode.UPSERT
    only_order = parse_write_options({**BASE, "upsert-order": "ts"})
    assert only_order.upsert and only_order.upsert_keys is None  # keys: the table's identifier fields
    assert parse_write_options(BASE).write_mode(False) is WriteMode.APPEND


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"upsert-keys": "id,,ts"}, "distinct column names"),
        ({"upsert-keys": "id, ID"}, "distinct column names"),
        ({"upsert-order": " "}, "upsert-order is empty"),
        ({"upsert-delete-where": "  "}, "upsert-delete-where is empty"),
        ({"upsert-delete-where": "op = = 'D'"}, "not a valid filter"),
        ({"upsert-keys": "id", "replace-where": "id = 1"}, "conflict"),
        ({"upsert-keys": "id", "overwrite-mode": "dynamic"}, "conflict"),
    ],
)
def test_bad_upsert_options_are_refused_naming_the_key(options: dict[str, str], match: str) -> None:
    """A malformed or contradictory upsert option fails before anything runs."""
    with pytest.raises(InvalidOptionsError, match=match):
        parse_write_options({**BASE, **options})


def test_an_upsert_refuses_to_overwrite() -> None:
    """mode("overwrite") with upsert options is refused: an upsert appends by key."""
    opts = parse_write_options({**BASE, "upsert-keys": "id"})
    with pytest.raises(InvalidOptionsError, match="overwrites: drop the upsert options"):
        opts.write_mode(True)
