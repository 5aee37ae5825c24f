"""Arrow batches -> Iceberg Parquet data files (executor side).

PROTOCOL.md step 2 ("write data files"). Each Spark task streams its Arrow
batches through :func:`write_task`, which casts them to the table's Arrow
schema, splits them by partition in one vectorized pass per batch, buffers
them into large row groups, rolls files at ``write.target-file-size-bytes``
and describes every finished file as an encoded pyiceberg ``DataFile`` built
from the writer's own footer. Files are named from a :class:`FileTag` and are
referenced by nothing until the driver's WAL entry names them; a task that
fails deletes the files it wrote (best effort; ``gc`` removes the rest).

Memory: each partition buffers at most one row group
(``write.parquet.row-group-limit`` rows, ``write.parquet.row-group-size-bytes``
bytes of Arrow data); across partitions the buffers are bounded by
``WriteSpec.buffer_bytes`` (the largest are flushed first).

No catalog code here: this module runs in Spark's Python workers.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    data_file_statistics_from_parquet_metadata,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import (
    PartitionFieldValue,
    PartitionKey,
    partition_record_value,
)
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.typedef import Record

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import ServiceError, WriteRejectedError
from pyspark_fenced_sink.iceberg.codec.datafiles import data_file_layout_version, encode_data_file
from pyspark_fenced_sink.iceberg.codec.fileio import cached_file_io
from pyspark_fenced_sink.iceberg.codec.row_filter import filter_columns, row_violations
from pyspark_fenced_sink.iceberg.codec.write_properties import dictionary_columns
from pyspark_fenced_sink.masking import mask_secrets, redact
from pyspark_fenced_sink.protocol.filetag import FileTag
from pyspark_fenced_sink.protocol.upsert import UpsertSpec
from pyspark_fenced_sink.write.arrowcast import conform_batch
from pyspark_fenced_sink.write.layout import ResolvedKey, layout, split
from pyspark_fenced_sink.write.nan_counts import count_nans
from pyspark_fenced_sink.write.upsert import DeleteRows

__all__ = ["BUFFER_BYTES_DEFAULT", "TaskInfo", "WriteResult", "WriteSpec", "task_info_from_spark", "write_task"]

logger = logging.getLogger(__name__)

#: Default bound on Arrow data buffered by one task across all its partitions.
BUFFER_BYTES_DEFAULT = 256 * 1024 * 1024


@dataclass(frozen=True)
class WriteSpec:
    """Everything a task needs to write data files; built and pickled by the driver.

    Attributes:
        table: Table name, for messages.
        location: The table's location.
        schema_json: ``Schema.model_dump_json()`` of the table's current schema.
        spec_json: ``PartitionSpec.model_dump_json()`` of the default spec.
        spec_id: The default spec's id (recorded in the WAL entry).
        table_uuid: The table's UUID when the write was planned (the commit checks it).
        format_version: The table's format version.
        properties: Table properties (Parquet, file size and location settings).
        io_properties: FileIO properties; may hold secrets, masked in ``repr``.
        tag: The writer's file tag; task, attempt, nonce (and the streaming
            batch id) are filled in on the executor.
        streaming: True for a streaming write (batch id from the task context).
        buffer_bytes: Bound on Arrow data buffered by a task across partitions.
        row_filter: A ``replace-where`` filter every row must satisfy (checked before it is written).
        upsert: The key columns of an upsert (its delete rows go to a delete-key file, ``write.upsert``).
        keys_root: The control root delete-key files are written under (upserts).
    """

    table: str
    location: str
    schema_json: str
    spec_json: str
    spec_id: int
    table_uuid: str
    format_version: int
    properties: Mapping[str, str]
    io_properties: Mapping[str, str]
    tag: FileTag
    streaming: bool = False
    buffer_bytes: int = BUFFER_BYTES_DEFAULT
    row_filter: str | None = None
    upsert: UpsertSpec | None = None
    keys_root: str | None = None

    def __repr__(self) -> str:
        """A representation with every secret-looking property value masked."""
        return (
            f"WriteSpec(table={self.table!r}, location={self.location!r}, format_version={self.format_version}, "
            f"properties={redact(self.properties)!r}, io_properties={redact(self.io_properties)!r}, "
            f"tag={self.tag!r}, streaming={self.streaming}, buffer_bytes={self.buffer_bytes})"
        )


@dataclass(frozen=True)
class TaskInfo:
    """The Spark task writing: partition id, task attempt id, streaming batch id."""

    partition_id: int
    attempt_id: int
    batch_id: int | None


@dataclass(frozen=True)
class WriteResult:
    """What a task wrote: encoded DataFiles (``datafiles.encode_data_file``), rows, bytes; delete-key files."""

    files: tuple[dict[str, Any], ...] = ()
    rows: int = 0
    bytes: int = 0
    deletes: tuple[dict[str, Any], ...] = ()


def task_info_from_spark() -> TaskInfo:
    """The current Spark task's identity; zeros and no batch id outside a task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return TaskInfo(0, 0, None)
    raw = ctx.getLocalProperty("streaming.sql.batchId")
    return TaskInfo(ctx.partitionId(), ctx.taskAttemptId(), int(raw) if raw not in (None, "") else None)


# ------------------------------------------------------------------ writing


class _Partition:
    """One partition's buffered batches and its open (rolling) Parquet file."""

    def __init__(self, record: Record, key: PartitionKey | None) -> None:
        self.record, self.key = record, key
        self.pending: list[pa.RecordBatch] = []
        self.rows = self.nbytes = 0
        self.writer: pq.ParquetWriter | None = None
        self.stream: Any = None
        self.path = ""
        self.nans: dict[int, int] = {}  # NaN count per float column of the open file


class _TaskWriter:
    def __init__(self, spec: WriteSpec, task: TaskInfo) -> None:
        self.spec = spec
        self.layout = layout(spec.schema_json, spec.spec_json, tuple(sorted(spec.properties.items())))
        self.io = cached_file_io(spec.io_properties, spec.location)
        self.locations: LocationProvider = load_location_provider(spec.location, dict(spec.properties))
        batch = task.batch_id if spec.streaming and task.batch_id is not None else spec.tag.batch
        self.tag = dataclasses.replace(spec.tag, task=task.partition_id, attempt=task.attempt_id, batch=batch)
        self.parts: dict[tuple[Any, ...], _Partition] = {}
        self.buffered = 0
        self.files: list[dict[str, Any]] = []
        self.rows = self.bytes = 0
        self.created: list[str] = []
        self.deletes = None
        if spec.upsert is not None:
            required = tuple(self.layout.arrow_schema.field(i).name for i in self.layout.required)
            root = spec.keys_root or spec.location
            self.deletes = DeleteRows(
                spec.upsert, spec.table, root, self.layout.schema, spec.schema_json, required, self.io, self.tag
            )

    def add(self, batch: pa.RecordBatch) -> None:
        if self.deletes is not None:  # delete rows may leave non-key columns empty: required is checked per row
            batch = self.deletes.split(conform_batch(batch, self.layout.arrow_schema, ()))
            if not batch.num_rows:
                return
        else:
            batch = conform_batch(batch, self.layout.arrow_schema, self.layout.required)
        if self.spec.row_filter is not None:
            self._check_rows(batch, self.spec.row_filter)
        if not self.layout.sources:
            self._buffer((), batch)
        else:
            for key, group in split(batch, self.layout):
                self._buffer(key, group)
        if self.buffered > self.spec.buffer_bytes:
            for part in sorted(self.parts.values(), key=lambda p: p.nbytes, reverse=True):
                if self.buffered <= self.spec.buffer_bytes // 2:
                    break
                if part.rows:
                    self._write_row_group(part, part.rows)

    def _check_rows(self, batch: pa.RecordBatch, row_filter: str) -> None:
        """Fail the task (before the batch reaches a file) if a row does not satisfy ``replace-where``."""
        bad = row_violations(batch, row_filter, self.spec.schema_json)
        if bad.num_rows:
            columns = [c for c in filter_columns(row_filter, self.spec.schema_json) if c in bad.schema.names]
            shown = {c: bad.column(c)[0].as_py() for c in columns}
            raise WriteRejectedError(
                f"table {self.spec.table}: {bad.num_rows} row(s) of a batch do not satisfy replace-where "
                f"{row_filter!r} (the first has {shown}); every row a replace-where writes must match its filter "
                "(false or null does not), so this write fails and nothing of it is committed: fix the rows or "
                "the filter",
                table=self.spec.table,
            )

    def _partition(self, key: tuple[Any, ...]) -> _Partition:
        layout = self.layout
        if not layout.sources:
            return _Partition(Record(), None)
        fields = layout.spec.fields
        record = Record(*(partition_record_value(f, v, layout.schema) for f, v in zip(fields, key, strict=True)))
        values = [PartitionFieldValue(f, v) for f, v in zip(fields, key, strict=True)]
        return _Partition(record, ResolvedKey(values, layout.spec, layout.schema, record))

    def _buffer(self, key: tuple[Any, ...], batch: pa.RecordBatch) -> None:
        # Floats by bit pattern: NaN must find its partition again, -0.0 must not join 0.0.
        slot = tuple(struct.pack(">d", v) if isinstance(v, float) else v for v in key)
        part = self.parts.get(slot)
        if part is None:
            part = self.parts[slot] = self._partition(key)
        part.pending.append(batch)
        part.rows += batch.num_rows
        part.nbytes += batch.nbytes
        self.buffered += batch.nbytes
        limit_rows, limit_bytes = self.layout.row_group_rows, self.layout.row_group_bytes
        while part.rows >= limit_rows or part.nbytes >= limit_bytes:
            by_bytes = int(part.rows * limit_bytes / part.nbytes) if part.nbytes else part.rows
            self._write_row_group(part, max(1, min(part.rows, limit_rows, by_bytes)))

    def _write_row_group(self, part: _Partition, rows: int) -> None:
        table = pa.Table.from_batches(part.pending, schema=self.layout.arrow_schema)
        group = table.slice(0, rows)
        writer = part.writer if part.writer is not None else self._open(part, group)
        writer.write_table(group, row_group_size=rows)
        for field_id, values in self.layout.nan_columns:
            part.nans[field_id] = part.nans.get(field_id, 0) + count_nans(values(group))
        part.pending = table.slice(rows).to_batches() if rows < table.num_rows else []
        nbytes = sum(b.nbytes for b in part.pending)
        self.buffered -= part.nbytes - nbytes
        part.rows, part.nbytes = table.num_rows - rows, nbytes
        if part.stream.tell() >= self.layout.target_file_bytes:
            self._close_file(part)

    def _open(self, part: _Partition, first_group: pa.Table) -> pq.ParquetWriter:
        tag = dataclasses.replace(self.tag, nonce=secrets.token_hex(8))
        part.path = self.locations.new_data_location(tag.file_name(), part.key)
        part.stream = self.io.new_output(part.path).create(overwrite=False)
        self.created.append(part.path)
        layout = self.layout
        part.writer = pq.ParquetWriter(
            part.stream,
            schema=layout.arrow_schema,
            use_dictionary=dictionary_columns(first_group, layout.id_mapping),
            **layout.parquet_kwargs,
        )
        return part.writer

    def _close_file(self, part: _Partition) -> None:
        writer, stream = part.writer, part.stream
        part.writer = part.stream = None
        if writer is None:
            return
        with stream:
            writer.close()
            size = stream.tell()
        layout = self.layout
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=writer.writer.metadata,
            stats_columns=layout.stats_plan,
            parquet_column_mapping=layout.id_mapping,
        )
        # The footer has no NaN counts; they come from the rows written (absent would read as "unknown").
        stats.nan_value_counts.update(part.nans)
        part.nans = {}
        # Fields not given (sort order, equality ids, key metadata) take their initial default, None.
        where = {"file_path": part.path, "partition": part.record, "file_size_in_bytes": size}
        data_file = DataFile.from_args(
            data_file_layout_version(self.spec.format_version),
            content=DataFileContent.DATA,
            file_format=FileFormat.PARQUET,
            **where,
            **stats.to_serialized_dict(),
        )
        data_file.spec_id = layout.spec.spec_id
        self.files.append(encode_data_file(data_file, layout.partition_type))
        self.rows += stats.record_count
        self.bytes += size
        failpoints.hit("executor.after-file-written")

    def finish(self) -> WriteResult:
        for part in self.parts.values():
            if part.rows:
                self._write_row_group(part, part.rows)
            self._close_file(part)
        deletes = self.deletes.finish() if self.deletes is not None else ()
        return WriteResult(files=tuple(self.files), rows=self.rows, bytes=self.bytes, deletes=deletes)

    def abort(self) -> None:
        """Close open streams and delete this task's files (nothing references them yet)."""
        if self.deletes is not None:
            self.deletes.abort()
        for part in self.parts.values():
            if part.stream is not None:
                try:
                    part.stream.close()
                except OSError as e:
                    logger.warning("closing %s after a failed task: %s", part.path, e)
        for path in self.created:
            try:
                self.io.delete(path)
            except (OSError, FileNotFoundError) as e:
                logger.warning("could not delete %s of a failed task (gc will): %s", path, e)


def _storage_failure(error: BaseException) -> bool:
    """True for what a data file's upload raises when the object store fails.

    pyarrow's and fsspec's ``OSError`` s (an ``AWS Error NETWORK_CONNECTION``, a cut multipart upload),
    botocore's errors where s3fs writes (matched by module: executors do not import botocore for this).
    """
    return isinstance(error, OSError) or (type(error).__module__ or "").split(".")[0] in ("botocore", "aiobotocore")


def write_task(spec: WriteSpec, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> WriteResult:
    """Write one task's Arrow batches into data files of ``spec``'s table.

    Args:
        spec: The write, as built by the driver.
        batches: The task's Arrow batches (any column order; matched by name).
        task: The task's identity (:func:`task_info_from_spark`).

    Returns:
        The encoded DataFiles, row count and bytes written; empty for no rows.

    Raises:
        SchemaMismatchError: a batch cannot be cast to the table's schema (a bug:
            the driver validates schemas first). The task's files are deleted.
        InvalidOptionsError: a table property has an invalid value.
        WriteRejectedError: a row does not satisfy the ``replace-where`` filter (nothing of it was written).
        ServiceError: the object store failed (a reset, a cut or timed-out response, an outage); the task's
            files are deleted where the store lets us.
    """
    writer = _TaskWriter(spec, task)
    try:
        for batch in batches:
            if batch.num_rows:
                writer.add(batch)
        return writer.finish()
    except Exception as e:
        writer.abort()
        if not _storage_failure(e):
            raise
        raise ServiceError(
            f"writing a data file of table {spec.table} failed in the object store "
            f"({type(e).__name__}: {mask_secrets(str(e))[:300]}); nothing of this write is durable: Spark retries "
            "the task, and a write that failed can be run again",
            service="storage",
            retryable=not isinstance(e, PermissionError),
        ) from e
    except BaseException:
        writer.abort()
        raise
