"""An entry's files and removals on the table as another engine may have left it (PROTOCOL.md §5.4; driver).

The commit (``iceberg.commit.table_port``) builds every commit on the version it
commits on — apply time — whatever happened to the table since the entry was
written: renamed, dropped or promoted columns, a new or reverted partition
spec, files rewritten or deleted, metadata written by other engines. Applying
an entry is *total*: it ends APPLIED or REFUSED by one decision on that
version, never an error every later committer hits.

* :func:`decoded_files` — the files the applied entries add, decoded under the
  partition types as they are now (a value written before a promotion of its
  source column decodes as the narrower type); a file that does not fit
  refuses its entry (by seq);
* :func:`doomed_files` — the live files a replacing entry removes
  (``protocol.replace.removals``): a dynamic overwrite's partition set compared
  by value, a replace-where's filter applied by field id with statistics
  trusted only where present (``iceberg.codec.row_filter.apply_matcher``);
* :data:`INAPPLICABLE` — what building a commit may raise when the table
  cannot take an entry: the commit refuses its lead instead.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import replace

from pyiceberg.exceptions import ResolveError
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.iceberg.codec.datafiles import decode_data_file, encode_partition, normalized_partition
from pyspark_fenced_sink.iceberg.codec.row_filter import apply_matcher
from pyspark_fenced_sink.iceberg.commit.branches import live_data_files
from pyspark_fenced_sink.protocol.entry import WalEntry, WriteMode
from pyspark_fenced_sink.protocol.file_refs import encoded_path, encoded_spec_id
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused, LiveFile, removals

__all__ = ["INAPPLICABLE", "decoded_files", "doomed_files"]

#: What building a commit may raise when the table, as another engine changed it, cannot take an entry (a
#: file that no longer fits the partition spec, a schema the entry's filter does not bind to, metadata
#: pyiceberg rejects): deterministic for one table version, so the entry is decided REFUSED on it — never an
#: error every later committer hits. I/O and catalog errors are not among them (their outcome is unknown).
INAPPLICABLE: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    LookupError,
    ArithmeticError,
    NotImplementedError,
    struct.error,
    ResolveError,
    CorruptControlDataError,
)


def decoded_files(metadata: TableMetadata, plan: ReconcilePlan, entries: Mapping[int, WalEntry]) -> list[DataFile]:
    """The DataFiles the plan's applied entries add, decoded for the table as it is now.

    Raises:
        EntryRefused: an entry's file does not fit the table now (its seq is named; nothing was sent).
    """
    schema, fv = metadata.schema(), metadata.format_version
    partition_types = {sid: spec.partition_type(schema) for sid, spec in metadata.specs().items()}
    added = []
    for seq in plan.apply:
        for f in entries[seq].files:
            try:
                added.append(decode_data_file(f, partition_types[encoded_spec_id(f)], fv))
            except INAPPLICABLE as e:
                raise EntryRefused(
                    f"data file {encoded_path(f)} of the entry does not fit the table as it is now "
                    f"({type(e).__name__}: {e}); nothing was changed",
                    seq,
                ) from e
    return added


def doomed_files(table: Table, metadata: TableMetadata, snapshot: Snapshot, lead: WalEntry) -> list[DataFile]:
    """The live files of ``snapshot`` that applying ``lead`` removes (``protocol.replace.removals``).

    A dynamic overwrite's partition set is compared by value under the partition types as they are now
    (a partition source promoted since the write encodes its values wider); a replace-where's filter is
    applied by the field ids it was planned with (``row_filter.apply_matcher``).

    Raises:
        EntryRefused: a replace-where finds a live file that straddles its filter (or that statistics cannot
            place), or its filter's column was dropped.
    """
    live = {f.file_path: f for f in live_data_files(table, snapshot)}
    schema, specs = metadata.schema(), metadata.specs()
    types = {sid: spec.partition_type(schema) for sid, spec in specs.items()} if lead.mode is WriteMode.DYNAMIC else {}
    described = [
        LiveFile(path, f.spec_id, encode_partition(f.partition, types[f.spec_id]) if types else ())
        for path, f in live.items()
    ]
    if lead.mode is WriteMode.DYNAMIC and lead.spec_id in types:
        wanted = tuple(normalized_partition(p, types[lead.spec_id]) for p in lead.partitions)
        lead = replace(lead, partitions=wanted)
    matcher = None
    if lead.mode is WriteMode.REPLACE_WHERE:
        matcher = apply_matcher(lead.row_filter or "", lead.filter_ids, schema, specs)
    doomed = removals(lead, described, (lambda lf: matcher(live[lf.path])) if matcher is not None else None)
    return [live[f.path] for f in doomed]
