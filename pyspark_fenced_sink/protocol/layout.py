"""Every key of a table's control data, spelled once (PROTOCOL.md §1).

A table's control data lives under its *control root*,
``<table location>/_fencedlake/<table uuid>/``: it belongs to the table's
identity, not to its location or name (PROTOCOL.md §1.1). Under the root:

* ``wal/{seq:020d}.json`` — WAL positions (zero-padded, so lexicographic order
  is numeric order and a LIST can start after a position);
* ``runs/{writer}/{run}.json`` — the streaming run registry;
* ``runs/{writer}/_barriers.json`` — the writer has put a fence barrier (PROTOCOL.md §7: an idempotent
  job of a writer without one takes the committed upper for its tail);
* ``checkpoints/{upper:020d}.json`` — committed states ``gc`` kept before
  truncating the WAL (``fencedlake repair-state`` starts from them);
* ``keys/<file name>`` — upserts' delete-key files (executors) and merged
  tombstone files (commits), fencedlake-private Parquet (PROTOCOL.md §5.5).

Nothing else formats or parses a control key.
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "CHECKPOINT_PREFIX",
    "CONTROL_DIR",
    "KEYS_PREFIX",
    "RUNS_PREFIX",
    "WAL_PREFIX",
    "barriers_key",
    "checkpoint_key",
    "checkpoint_upper",
    "control_root",
    "keys_key",
    "run_key",
    "seq_of",
    "wal_key",
]

CONTROL_DIR = "_fencedlake"
WAL_PREFIX = "wal/"
RUNS_PREFIX = "runs/"
CHECKPOINT_PREFIX = "checkpoints/"
KEYS_PREFIX = "keys/"
_RUN_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def control_root(table_location: str, table_uuid: str) -> str:
    """The control root of a table: ``<table location>/_fencedlake/<table uuid>``."""
    return f"{table_location.rstrip('/')}/{CONTROL_DIR}/{table_uuid}"


def _numbered(prefix: str, n: int) -> str:
    if n < 0:
        raise ValueError(f"a WAL position or upper must be >= 0, got {n}")
    return f"{prefix}{n:020d}.json"


def _number_of(prefix: str, key: str) -> int | None:
    if not key.startswith(prefix) and f"/{prefix}" not in key:
        return None
    name = key.rsplit("/", 1)[-1]
    stem, dot, ext = name.partition(".")
    if dot and ext == "json" and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def wal_key(seq: int) -> str:
    """The object key of WAL position ``seq``."""
    return _numbered(WAL_PREFIX, seq)


def seq_of(key: str) -> int | None:
    """The WAL position a key names, or None for any other key."""
    return _number_of(WAL_PREFIX, key)


def checkpoint_key(upper: int) -> str:
    """The object key of the state checkpoint taken at committed upper ``upper``."""
    return _numbered(CHECKPOINT_PREFIX, upper)


def checkpoint_upper(key: str) -> int | None:
    """The upper a checkpoint key names, or None for any other key."""
    return _number_of(CHECKPOINT_PREFIX, key)


def keys_key(file_name: str) -> str:
    """The key of a delete-key or tombstone file named ``file_name`` (a FileTag or ApplyTag name)."""
    if "/" in file_name or not file_name.endswith(".parquet"):
        raise ValueError(f"expected a Parquet file name, got {file_name!r}")
    return f"{KEYS_PREFIX}{file_name}"


def barriers_key(writer_id: str) -> str:
    """The key that says ``writer_id`` has put a fence barrier (``_`` never starts a run's name)."""
    return f"{RUNS_PREFIX}{writer_id}/_barriers.json"


def run_key(writer_id: str, run: str) -> str:
    """The registry key of streaming run ``run`` of ``writer_id`` (odd run ids are hashed to a safe name)."""
    if not _RUN_ID.match(run):
        run = uuid.uuid5(uuid.NAMESPACE_URL, run).hex
    return f"{RUNS_PREFIX}{writer_id}/{run}.json"
