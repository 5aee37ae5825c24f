"""The Azure and GCS control stores against their emulators (Azurite, fake-gcs-server): PROTOCOL.md §2.1.

Each store is opened the way the sink opens it -- ``store.registry.open_store`` with the
table's FileIO properties -- and must give put-if-absent that is atomic under 16 racing
creators (one winner, every other creator told "exists"), listing after a key, reads,
deletes, and resolve an "exists" by the owner token (``create_resolved``). ``gc``'s file
system for the same location lists what the store wrote.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from integration.conftest import Services
from pyspark_fenced_sink.store.base import create_resolved
from pyspark_fenced_sink.store.registry import filesystem_path, open_filesystem, open_store

pytestmark = pytest.mark.integration

RACERS, ROUNDS = 16, 10


@pytest.fixture(params=["abfs", "abfss", "gs"])
def located(request: pytest.FixtureRequest, services: Services) -> tuple[str, dict[str, str]]:
    """(a fresh root URI, FileIO properties) on Azurite (both URI forms) or the GCS emulator."""
    tag = uuid.uuid4().hex[:12]
    if request.param == "gs":
        services.require("gcs_endpoint", "gcs_bucket")
        from integration.conftest import gcs_io_properties

        return f"gs://{services.gcs_bucket}/it/stores-{tag}", gcs_io_properties(services)
    services.require("azure_connection_string", "azure_container")
    props = {"adls.connection-string": services.azure_connection_string}
    if request.param == "abfss":
        return f"abfss://{services.azure_container}@devstoreaccount1.dfs.core.windows.net/it/stores-{tag}", props
    return f"abfs://{services.azure_container}/it/stores-{tag}", props


def _token(raw: bytes) -> str:
    return raw.split(b"|", 1)[0].decode()


def test_store_contract_put_get_list_delete(located: tuple[str, dict[str, str]]) -> None:
    """Create once then "exists"; get; sorted list after a key; delete (a missing key is no error)."""
    root, props = located
    store = open_store(root, props)
    assert store.put_if_absent("wal/00000000000000000001.json", b"a|one")
    assert not store.put_if_absent("wal/00000000000000000001.json", b"b|two")
    assert store.get("wal/00000000000000000001.json") == b"a|one"
    assert store.get("wal/missing.json") is None
    for seq in (3, 2):
        assert store.put_if_absent(f"wal/{seq:020d}.json", b"x|")
    assert store.put_if_absent("runs/w/r.json", b"x|")
    assert store.list("wal/") == [f"wal/{s:020d}.json" for s in (1, 2, 3)]
    assert store.list("wal/", f"wal/{1:020d}.json") == [f"wal/{s:020d}.json" for s in (2, 3)]
    store.delete("wal/00000000000000000001.json")
    store.delete("wal/00000000000000000001.json")
    assert store.list("wal/") == [f"wal/{s:020d}.json" for s in (2, 3)]

    fs, path = open_filesystem(root, props)
    assert path == filesystem_path(root)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(f"{path}/wal")) == [f"{s:020d}.json" for s in (2, 3)]


def test_store_exists_is_resolved_by_the_owner_token(located: tuple[str, dict[str, str]]) -> None:
    """A retried create that meets its own object is ours; a peer's object is not (invariant I7)."""
    root, props = located
    store = open_store(root, props)
    assert create_resolved(store, "k.json", b"mine|1", "mine", _token)
    assert create_resolved(store, "k.json", b"mine|1", "mine", _token)  # our lost response, retried
    assert not create_resolved(store, "k.json", b"peer|2", "peer", _token)
    assert store.get("k.json") == b"mine|1"


def _create(store: Any, key: str, i: int, barrier: threading.Barrier, outcomes: list[Any]) -> None:
    try:
        barrier.wait(timeout=30)
        outcomes[i] = store.put_if_absent(key, f"{i}|racer {i}".encode())
    except Exception as e:  # recorded and asserted by the caller
        outcomes[i] = e


def test_put_if_absent_race_has_exactly_one_winner(located: tuple[str, dict[str, str]]) -> None:
    """16 creators (separate clients' threads) race on one key, 10 rounds: one True, 15 False, the winner's bytes."""
    root, props = located
    store = open_store(root, props)
    for round_no in range(ROUNDS):
        key = f"race/{round_no:020d}.json"
        barrier = threading.Barrier(RACERS)
        outcomes: list[Any] = [None] * RACERS

        threads = [threading.Thread(target=_create, args=(store, key, i, barrier, outcomes)) for i in range(RACERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        winners = [i for i, o in enumerate(outcomes) if o is True]
        assert len(winners) == 1 and outcomes.count(False) == RACERS - 1, f"round {round_no}: {outcomes}"
        assert _token(store.get(key) or b"") == str(winners[0])
