"""Read options: ``spark.read`` / ``spark.readStream`` keys (Iceberg's Spark option names), validated once (driver).

:func:`parse_read_options` returns a frozen :class:`ReadOptions` (PROTOCOL.md §14);
the README's read option table is the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.options.catalog import CATALOG, CATALOG_PREFIX, WAREHOUSE, CatalogConfig, catalog_options
from pyspark_fenced_sink.options.common import BRANCH, SPARK_PASSED, TABLE, flag, integer, lowered, table_name
from pyspark_fenced_sink.options.write import is_write_option

__all__ = ["FOREIGN_READ_OPTIONS", "ReadOptions", "parse_read_options"]

SNAPSHOT_ID = "snapshot-id"
AS_OF_TIMESTAMP = "as-of-timestamp"
TAG = "tag"
START_SNAPSHOT_ID = "start-snapshot-id"
END_SNAPSHOT_ID = "end-snapshot-id"
#: A batch read's own row filter (Iceberg syntax): part of what the DataFrame is, so every query of it agrees.
READ_FILTER = "filter"
SPLIT_SIZE = "split-size"
FILE_OPEN_COST = "file-open-cost"
STREAM_FROM_TIMESTAMP = "stream-from-timestamp"
STREAMING_MAX_FILES = "streaming-max-files-per-micro-batch"
STREAMING_MAX_ROWS = "streaming-max-rows-per-micro-batch"
STREAMING_SKIP_OVERWRITE = "streaming-skip-overwrite-snapshots"
STREAMING_SKIP_OVERWRITE_DEFAULT = False
STREAMING_SKIP_DELETE = "streaming-skip-delete-snapshots"
STREAMING_SKIP_DELETE_DEFAULT = False

_TIME_TRAVEL = (SNAPSHOT_ID, AS_OF_TIMESTAMP, BRANCH, TAG)
_BATCH_READ = frozenset({*_TIME_TRAVEL, END_SNAPSHOT_ID, READ_FILTER})
_STREAM_READ = frozenset(
    {STREAM_FROM_TIMESTAMP, STREAMING_MAX_FILES, STREAMING_MAX_ROWS, STREAMING_SKIP_OVERWRITE, STREAMING_SKIP_DELETE}
)
_READ_KNOWN = frozenset({TABLE, CATALOG, WAREHOUSE, START_SNAPSHOT_ID, SPLIT_SIZE, FILE_OPEN_COST})
_ANY = -(2**63)  # snapshot ids are any long
#: Other tools' read option names (lower-cased, as Spark passes them) -> fencedlake's.
FOREIGN_READ_OPTIONS = {
    "versionasof": SNAPSHOT_ID,
    "timestampasof": f"{AS_OF_TIMESTAMP} (milliseconds since the epoch)",
}


@dataclass(frozen=True)
class ReadOptions:
    """Validated read options (``spark.read`` and ``spark.readStream``; the README's read option table).

    Attributes:
        table: Table identifier ``namespace.table``.
        catalog: Which catalog (the same ``catalog``, ``catalog.<key>``, ``warehouse`` options as writes).
        streaming: True for ``spark.readStream``.
        snapshot_id: ``snapshot-id``: read this snapshot.
        as_of_timestamp_ms: ``as-of-timestamp``: read the main branch's snapshot current at this time (ms).
        branch: ``branch``: read the tip (newest snapshot) of this branch.
        tag: ``tag``: read the snapshot this tag names.
        start_snapshot_id: ``start-snapshot-id`` (exclusive): a batch read returns the rows appended after it
            (up to ``end_snapshot_id``); a stream starts after it.
        end_snapshot_id: ``end-snapshot-id`` (inclusive) of an incremental batch read; None: the current snapshot.
        split_size: ``split-size`` in bytes, or None (the table's ``read.split.target-size``, else adaptive).
        file_open_cost: ``file-open-cost`` in bytes, or None (table property, else 4 MiB).
        stream_from_timestamp_ms: ``stream-from-timestamp``: a stream starts at the first snapshot at or after it.
        max_files_per_batch: ``streaming-max-files-per-micro-batch``, or None (no bound).
        max_rows_per_batch: ``streaming-max-rows-per-micro-batch``, or None (no bound).
        skip_overwrite: ``streaming-skip-overwrite-snapshots``: skip overwrite snapshots instead of failing.
        skip_delete: ``streaming-skip-delete-snapshots``: skip delete snapshots instead of failing.
        row_filter: ``filter``: an Iceberg filter; the read returns only the rows matching it and skips files
            that cannot hold one (checked against the table's columns when the read is planned).
    """

    table: str
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    streaming: bool = False
    snapshot_id: int | None = None
    as_of_timestamp_ms: int | None = None
    branch: str | None = None
    tag: str | None = None
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    split_size: int | None = None
    file_open_cost: int | None = None
    stream_from_timestamp_ms: int | None = None
    max_files_per_batch: int | None = None
    max_rows_per_batch: int | None = None
    skip_overwrite: bool = STREAMING_SKIP_OVERWRITE_DEFAULT
    skip_delete: bool = STREAMING_SKIP_DELETE_DEFAULT
    row_filter: str | None = None

    @property
    def incremental(self) -> bool:
        """True for a batch read of the rows appended between two snapshots."""
        return not self.streaming and self.start_snapshot_id is not None


def parse_read_options(
    options: Mapping[str, str], *, streaming: bool | None = False, remote: bool = False
) -> ReadOptions:
    """Validate the options of ``spark.read`` (or, with ``streaming``, ``spark.readStream``).

    ``streaming=None`` infers the kind from the keys (``DataSource.schema()`` is not told which read
    asks; the reader itself validates strictly). The sink's write options are ignored: one SQL view
    (``CREATE TEMPORARY VIEW ... USING fencedlake OPTIONS (...)``) hands its options to both its
    ``SELECT`` and its ``INSERT``. ``remote``: as for ``options.catalog.catalog_config``.

    Raises:
        InvalidOptionsError: an unknown key (a stream option in a batch read and the reverse are named as
            such), a bad value, or options that cannot be combined.
    """
    opts = lowered(options)
    if streaming is None:
        streaming = any(k in _STREAM_READ for k in opts)
    known = _READ_KNOWN | (_STREAM_READ if streaming else _BATCH_READ)
    for key in sorted(opts):
        if key in known or key in SPARK_PASSED or key.startswith(CATALOG_PREFIX) or is_write_option(key):
            continue
        where = "readStream" if key in _STREAM_READ else "spark.read (batch)" if key in _BATCH_READ else None
        hint = f"it applies to {where} only" if where else f"expected one of {', '.join(sorted(known))}"
        if key in FOREIGN_READ_OPTIONS:
            hint = f"another tool's name; fencedlake's is {FOREIGN_READ_OPTIONS[key]}"
        raise InvalidOptionsError(f"unknown read option {key}: {hint} (or {CATALOG_PREFIX}<pyiceberg property>)")
    given = [k for k in _TIME_TRAVEL if k in opts]
    if len(given) > 1 or (given and START_SNAPSHOT_ID in opts):
        both = ", ".join([*given, *([START_SNAPSHOT_ID] if START_SNAPSHOT_ID in opts else [])])
        raise InvalidOptionsError(f"options {both} cannot be combined: give one snapshot to read")
    if END_SNAPSHOT_ID in opts and START_SNAPSHOT_ID not in opts:
        raise InvalidOptionsError(f"option {END_SNAPSHOT_ID} needs {START_SNAPSHOT_ID} (an incremental read)")
    if streaming and STREAM_FROM_TIMESTAMP in opts and START_SNAPSHOT_ID in opts:
        raise InvalidOptionsError(f"options {START_SNAPSHOT_ID} and {STREAM_FROM_TIMESTAMP} cannot be combined")
    for ref in (BRANCH, TAG):
        if ref in opts and not opts[ref].strip():
            raise InvalidOptionsError(f"option {ref} is empty: expected the name of a {ref}")
    return ReadOptions(
        table=table_name(opts),
        catalog=catalog_options(opts, remote=remote),
        streaming=streaming,
        snapshot_id=integer(opts, SNAPSHOT_ID, None, _ANY),
        as_of_timestamp_ms=integer(opts, AS_OF_TIMESTAMP, None, 0),
        branch=opts.get(BRANCH),
        tag=opts.get(TAG),
        start_snapshot_id=integer(opts, START_SNAPSHOT_ID, None, _ANY),
        end_snapshot_id=integer(opts, END_SNAPSHOT_ID, None, _ANY),
        split_size=integer(opts, SPLIT_SIZE, None, 1),
        file_open_cost=integer(opts, FILE_OPEN_COST, None, 0),
        stream_from_timestamp_ms=integer(opts, STREAM_FROM_TIMESTAMP, None, 0),
        max_files_per_batch=integer(opts, STREAMING_MAX_FILES, None, 1),
        max_rows_per_batch=integer(opts, STREAMING_MAX_ROWS, None, 1),
        skip_overwrite=flag(opts, STREAMING_SKIP_OVERWRITE, STREAMING_SKIP_OVERWRITE_DEFAULT),
        skip_delete=flag(opts, STREAMING_SKIP_DELETE, STREAMING_SKIP_DELETE_DEFAULT),
        row_filter=_read_filter(opts),
    )


def _read_filter(opts: Mapping[str, str]) -> str | None:
    """The ``filter`` option's text (its columns are checked at planning, against the snapshot's schema)."""
    text = opts.get(READ_FILTER)
    if text is not None and not text.strip():
        raise InvalidOptionsError(f"option {READ_FILTER} is empty: expected a filter such as \"region = 'eu'\"")
    return text
