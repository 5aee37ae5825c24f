"""Remembered deletes: merging the committed tombstone list when it grows (PROTOCOL.md §5.5; driver).

The committed state lists the delete-key files of applied ordered upserts on
main (``protocol.reconcile.remembered``). When a commit would list more than
``protocol.upsert.TOMBSTONE_FILES_MAX`` files, :func:`merge_tombstones` replaces
them, per (key columns, order column), by one tombstone file under the control
root holding, per key, the greatest order value of its deletes and when the
newest was written — dropping deletes written longer ago than the table property
``fencedlake.tombstone-retention-ms`` (default 7 days). Past that retention a
very late row with a lower order value can bring a deleted key back; the
documentation says so.

The file is written inside the commit attempt and named from an ``ApplyTag``
(``t-<table tag>-<upper>-<nonce>.parquet``); a conflict removes it, and ``gc``
removes one that no committed state lists once the upper has passed its name.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.iceberg.codec.key_files import MS_COLUMN, describe, write_key_file
from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit
from pyspark_fenced_sink.iceberg.commit.key_index import Reads, Unreadable, column_name, key_table
from pyspark_fenced_sink.protocol.filetag import ApplyTag, table_tag
from pyspark_fenced_sink.protocol.layout import keys_key
from pyspark_fenced_sink.protocol.upsert import (
    TOMBSTONE_FILES_MAX,
    TOMBSTONE_KEYS_KEY,
    TOMBSTONE_MS_KEY,
    TOMBSTONE_ORDER_KEY,
    TOMBSTONE_RETENTION_MS_DEFAULT,
    TOMBSTONE_RETENTION_PROPERTY,
)

__all__ = ["merge_tombstones", "retention_ms"]

logger = logging.getLogger(__name__)

Ref = Mapping[str, Any]


def retention_ms(properties: Mapping[str, str]) -> int:
    """The table's tombstone retention (a malformed value falls back to the default: it never fails a commit)."""
    try:
        value = int(str(properties.get(TOMBSTONE_RETENTION_PROPERTY, TOMBSTONE_RETENTION_MS_DEFAULT)))
    except ValueError:
        return TOMBSTONE_RETENTION_MS_DEFAULT
    return value if value > 0 else TOMBSTONE_RETENTION_MS_DEFAULT


def _rows(staged: StagedCommit, ref: Ref, keys: list[int], order: int, reads: Reads) -> pa.Table | None:
    """A listed file's keys, order values and ``_ms`` (a delete-key file's rows all share its reference's).

    None (logged) for a file that is gone: its remembered deletes are forgotten, never a refused commit.
    """
    metadata = staged.tx.table_metadata
    try:
        table = key_table(staged.table.io, str(ref["p"]), [*keys, order], metadata.schema(), None, reads)
    except Unreadable as e:
        logger.warning("fencedlake: remembered deletes in %s are forgotten: %s", ref["p"], e)
        return None
    names = [column_name(i) for i in [*keys, order]]
    if str(ref["p"]).rsplit("/", 1)[-1].startswith("t-"):
        with staged.table.io.new_input(str(ref["p"])).open() as stream:
            ms = pq.ParquetFile(stream).read(columns=[MS_COLUMN]).column(MS_COLUMN)
    else:
        ms = pa.array([int(ref[TOMBSTONE_MS_KEY])] * table.num_rows, pa.int64())
    return pa.table([*(table.column(n) for n in names), ms], names=[*names, MS_COLUMN])


def merge_tombstones(staged: StagedCommit, tombstones: tuple[Ref, ...], reads: Reads) -> tuple[Ref, ...] | None:
    """The merged tombstone list if ``tombstones`` holds more than the bound, else None (no change).

    Files of the merge go to ``staged.cleanups`` (removed if the attempt does not land).
    """
    if len(tombstones) <= TOMBSTONE_FILES_MAX:
        return None
    metadata = staged.tx.table_metadata
    cutoff = int(time.time() * 1000) - retention_ms(metadata.properties)
    groups: dict[tuple[tuple[int, ...], int], list[Ref]] = {}
    for ref in tombstones:
        keys = tuple(int(k) for k in ref[TOMBSTONE_KEYS_KEY])
        groups.setdefault((keys, int(ref[TOMBSTONE_ORDER_KEY])), []).append(ref)
    root = staged.plan.state.root or ""
    tag = table_tag(str(metadata.table_uuid))
    merged: list[Ref] = []
    for (keys, order), refs in sorted(groups.items()):
        found = [t for ref in refs if (t := _rows(staged, ref, list(keys), order, reads)) is not None]
        if not found:
            continue
        table = pa.concat_tables(found)
        table = table.filter(pc.greater_equal(table.column(MS_COLUMN), cutoff))
        if not table.num_rows:
            continue
        names = [column_name(i) for i in keys]
        grouped = table.group_by(names).aggregate([(column_name(order), "max"), (MS_COLUMN, "max")])
        columns = [*(grouped.column(n) for n in names), grouped.column(f"{column_name(order)}_max")]
        best = pa.table([*columns, grouped.column(f"{MS_COLUMN}_max")], names=[*names, column_name(order), MS_COLUMN])
        path = f"{root.rstrip('/')}/{keys_key(ApplyTag('t', tag, staged.plan.base.upper).file_name())}"
        ids = {column_name(i): i for i in [*keys, order]}
        size = write_key_file(staged.table.io, path, best, ids)
        staged.cleanups.append(_remover(staged, path))
        ref = describe(path, best, keys, metadata.schema(), size)
        oldest = pc.min(best.column(MS_COLUMN)).as_py()
        merged.append({**ref, TOMBSTONE_MS_KEY: oldest, TOMBSTONE_ORDER_KEY: order, TOMBSTONE_KEYS_KEY: list(keys)})
    failpoints.hit("upsert.after-tombstones-merged")
    return tuple(merged)


def _remover(staged: StagedCommit, path: str) -> Callable[[], None]:
    def remove() -> None:
        with contextlib.suppress(OSError):  # gc removes it: no committed state lists it
            staged.table.io.delete(path)

    return remove
