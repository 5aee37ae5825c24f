"""Loading and creating tables on the driver (catalogs.py; PROTOCOL.md step 0)."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from pyspark_fenced_sink.iceberg.catalogs import _ensure_namespace, embedded_catalog
from pyspark_fenced_sink.testing.harness import rows, sink_write, table_ids


def test_namespace_created_by_a_racing_writer_is_not_an_error(tmp_path: Any) -> None:
    """A peer creates the namespace between pyiceberg's existence check and its insert: the write goes on."""
    catalog = embedded_catalog(str(tmp_path / "wh"))
    catalog.create_namespace("db")  # the racing peer's creation, already committed
    real_exists = catalog.namespace_exists
    checks: list[Any] = []

    def exists_as_before_the_peer(namespace: Any) -> bool:
        checks.append(namespace)
        return False if len(checks) == 1 else real_exists(namespace)  # create_namespace's own check is stale

    catalog.namespace_exists = exists_as_before_the_peer
    with pytest.raises(IntegrityError):  # what pyiceberg's SqlCatalog raises in that interleaving
        catalog.create_namespace("db")
    checks.clear()
    _ensure_namespace(catalog, ("db",))
    assert len(checks) == 2, "the race was not exercised"


def test_concurrent_first_writes_create_the_table_once(tmp_path: Any) -> None:
    """Eight writers start at once on a warehouse with no namespace or table: all land, nothing twice."""
    wh, writers = str(tmp_path / "wh"), 8
    barrier = threading.Barrier(writers)
    errors: list[Exception] = []

    def write(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            sink_write(wh, "db.events", rows(f"w{i}", i * 100, 100))
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert table_ids(wh, "db.events") == list(range(writers * 100))


def test_a_namespace_that_would_shadow_a_table_is_refused(tmp_path: Any) -> None:
    """save("db.events.x") beside table db.events would create a namespace reading as the table: refused, nothing
    created; a sibling name and a deeper table under a real namespace still work."""
    from pyspark_fenced_sink.errors import InvalidOptionsError

    wh = str(tmp_path / "wh")
    sink_write(wh, "db.events", rows("w", 0, 3))
    shadow = "'db.events' is a table: a namespace may not shadow a table; choose another name (e.g. db.events_x)"
    with pytest.raises(InvalidOptionsError, match=re.escape(shadow)):
        sink_write(wh, "db.events.x", rows("w", 0, 3))
    catalog = embedded_catalog(wh)
    assert not catalog.namespace_exists(("db", "events"))
    sink_write(wh, "db.events_x", rows("w", 0, 3))
    sink_write(wh, "db.sub.t", rows("w", 0, 3))
    assert table_ids(wh, "db.sub.t") == [0, 1, 2]
    with pytest.raises(InvalidOptionsError, match=re.escape("'db.sub.t' is a table")):
        sink_write(wh, "db.sub.t.deeper.y", rows("w", 0, 3))
