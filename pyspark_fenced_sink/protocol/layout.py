"""Every key of a table's control data, spelled once (PROTOCOL.md §1).

Control objects live under ``<table location>/_fencedlake/``:

* ``wal/{seq:020d}.json`` — WAL positions (zero-padded, so lexicographic order
  is numeric order and a LIST can start after a position);
* ``runs/{writer}/{run}.json`` — the streaming run registry.

Nothing else formats or parses a control key.
"""

from __future__ import annotations

import re
import uuid

__all__ = ["CONTROL_DIR", "RUNS_PREFIX", "WAL_PREFIX", "control_root", "run_key", "seq_of", "wal_key"]

CONTROL_DIR = "_fencedlake"
WAL_PREFIX = "wal/"
RUNS_PREFIX = "runs/"
_RUN_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def control_root(table_location: str) -> str:
    """The control prefix of a table: ``<table location>/_fencedlake``."""
    return f"{table_location.rstrip('/')}/{CONTROL_DIR}"


def wal_key(seq: int) -> str:
    """The object key of WAL position ``seq``."""
    if seq < 0:
        raise ValueError(f"WAL seq must be >= 0, got {seq}")
    return f"{WAL_PREFIX}{seq:020d}.json"


def seq_of(key: str) -> int | None:
    """The WAL position a key names, or None for any other key."""
    name = key.rsplit("/", 1)[-1]
    stem, dot, ext = name.partition(".")
    if dot and ext == "json" and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def run_key(writer_id: str, run: str) -> str:
    """The registry key of streaming run ``run`` of ``writer_id`` (odd run ids are hashed to a safe name)."""
    if not _RUN_ID.match(run):
        run = uuid.uuid5(uuid.NAMESPACE_URL, run).hex
    return f"{RUNS_PREFIX}{writer_id}/{run}.json"
