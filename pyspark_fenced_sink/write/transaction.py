"""One write, owned from the first catalog read to its commit or abort (PROTOCOL.md steps 0-1, 3-6; driver).

Every entry point — the Spark batch and stream writers, compaction, the
harness — is a client of :class:`WriteTransaction`: :meth:`~WriteTransaction.begin`
(one catalog read resolves or creates and checks the table, the schema is
checked and merged, the target checked, the writer opened, the executor spec
built once), then :meth:`~WriteTransaction.commit` or
:meth:`~WriteTransaction.abort` (files removed only if the commit never reached
the WAL). The object is frozen and pickled to tasks and to Spark's commit
worker; catalog code is imported inside its driver-side methods only.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pyspark_fenced_sink import failpoints, logs
from pyspark_fenced_sink.errors import InvalidOptionsError, TableChangedError
from pyspark_fenced_sink.iceberg.codec.fileio import cached_file_io
from pyspark_fenced_sink.options.write import SinkOptions
from pyspark_fenced_sink.protocol.context import CommitResult
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.protocol.fencing import WriterIdentity, open_writer, stream_epoch
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.filetag import FileTag, table_tag
from pyspark_fenced_sink.protocol.outcome import data_entry, finish_write
from pyspark_fenced_sink.protocol.upsert import UpsertSpec
from pyspark_fenced_sink.write.task import WriteSpec

if TYPE_CHECKING:
    from pyspark_fenced_sink.iceberg.catalogs import OpenedTable
    from pyspark_fenced_sink.protocol.view import TableView
    from pyspark_fenced_sink.write.schema_plan import SchemaPlan

__all__ = ["WriteSchema", "WriteTransaction", "Written"]

logger = logging.getLogger(__name__)

#: Concurrent schema changes a write's column merge outlasts before it gives up (retryable).
_MERGE_ATTEMPTS = 10


class WriteSchema(Protocol):
    """The schema of the data a write brings (the Spark face adapts a DataFrame's: ``spark.schema_to_iceberg``)."""

    def iceberg(self) -> Any:
        """The Iceberg schema of a table created from the data."""

    def check(self, table_schema: Any, *, merge_schema: bool, nulls_checked_per_row: bool = False) -> SchemaPlan:
        """Check the data against the table's schema; the columns to add first (with ``merge_schema``).

        ``nulls_checked_per_row``: nullable data may go into required top-level columns (the tasks check rows).
        """


@dataclass(frozen=True)
class Written:
    """What a write's tasks wrote, all tasks together: the input of :meth:`WriteTransaction.commit`.

    Attributes:
        files: Encoded data files (``iceberg.codec.datafiles``).
        rows: Rows written.
        untuned: Some task ran with Spark's per-row Arrow batch size check on (recorded in the entry).
        run: The streaming run id the tasks reported, if any.
        query: The streaming query id the tasks reported, if any.
        deletes: An upsert's delete-key files (``write.upsert``; PROTOCOL.md §5.5).
    """

    files: tuple[Mapping[str, Any], ...] = ()
    rows: int = 0
    untuned: bool = False
    run: str | None = None
    query: str | None = None
    deletes: tuple[Mapping[str, Any], ...] = ()

    @property
    def paths(self) -> list[str]:
        """The paths of the data files and of the delete-key files."""
        return [encoded_path(f) for f in (*self.files, *self.deletes)]


@dataclass(frozen=True)
class WriteTransaction:
    """One write: what was decided when it began, and its commit or abort.

    Attributes:
        opts: The write's validated options.
        mode: How applying the write changes its branch (PROTOCOL.md §5.1).
        spec: What each task needs to write data files.
        identity: The opened writer (batch writes); None for streaming, whose runs claim an epoch at
            their first commit (PROTOCOL.md §7).
        inputs: A compaction's input files (the files its output replaces).
        folded: The position delete files a compaction folds into its output (PROTOCOL.md §5.2).
        upsert: An upsert's key and order columns (``iceberg.commit.upsert_plan``; PROTOCOL.md §5.5).
    """

    opts: SinkOptions
    mode: WriteMode
    spec: WriteSpec
    identity: WriterIdentity | None
    inputs: tuple[str, ...] = field(default=())
    folded: tuple[str, ...] = field(default=())
    upsert: UpsertSpec | None = None

    @classmethod
    def begin(cls, opts: SinkOptions, schema: WriteSchema, *, overwrite: bool, streaming: bool) -> WriteTransaction:
        """Plan a write of data with ``schema`` (before any task runs): resolve the table, check, open.

        Raises:
            InvalidOptionsError: a bad option, filter, partitioning or table property (nothing written).
            SchemaMismatchError: the data cannot be written into the table.
            WriteRejectedError: a ``replace-where`` that a live file straddles.
            TableChangedError: the table's schema kept changing while columns were merged (retryable).
        """
        from pyspark_fenced_sink.iceberg.catalogs import TableCreation, open_table, validate_table_properties
        from pyspark_fenced_sink.iceberg.codec.row_filter import bind_row_filter

        logs.configure_from_env()
        failpoints.configure(opts.failpoints)
        mode = opts.write_mode(overwrite)
        if opts.replace_where is not None:  # against the data's columns, before a table can be created
            bind_row_filter(opts.replace_where, schema.iceberg())
        creation = TableCreation(_created_schema(schema, opts), opts.partition_by, opts.table_properties)
        opened = open_table(
            opts.catalog,
            opts.table,
            create=creation if opts.create_table else None,
            missing_hint=" and create-table=false: create it first or drop the option",
            max_wait_ms=opts.commit_max_wait_ms,
            max_group=opts.commit_max_group_size,
        )
        opened = _conform_schema(opened, schema, opts)
        if opts.write_properties:  # this write's write.* options, checked with the table's properties
            validate_table_properties(opts.file_properties(opened.table.properties))
        _check_target(opened, opts, mode)
        return cls.open(opened, opts, mode, streaming=streaming)

    @classmethod
    def open(
        cls,
        opened: OpenedTable,
        opts: SinkOptions,
        mode: WriteMode,
        *,
        streaming: bool = False,
        inputs: Sequence[str] = (),
        folded: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> WriteTransaction:
        """Open a writer on ``opened`` (the table as just read) and build the executor spec.

        ``properties`` override table properties for this write's files (compaction's target size), after
        the write's own ``write.*`` options (``SinkOptions.file_properties``).
        An upsert's keys are resolved here (``iceberg.commit.upsert_plan``).
        """
        upsert = None
        if mode is WriteMode.UPSERT:
            from pyspark_fenced_sink.iceberg.commit.upsert_plan import plan_upsert

            upsert = plan_upsert(opened.table, opts)
        from pyspark_fenced_sink.iceberg.codec.fileio import io_properties

        table = opened.table
        metadata = table.metadata
        uuid = str(metadata.table_uuid)
        from pyspark_fenced_sink.iceberg.service_errors import service_errors

        # A writer.id's fence barrier reads and may commit the table: a catalog or storage failure there is a
        # ServiceError like any before the data entry's put (PROTOCOL.md §4), never the client's own error.
        with service_errors(opts.catalog, opts.table, io_properties(table)):
            identity = (
                None
                if streaming
                else open_writer(opened.ctx, opts.writer_id, view=opened.view, idempotent=opts.batch_id is not None)
            )
        tag = FileTag(
            writer=str(opts.writer_id) if identity is None else identity.writer,
            ephemeral=False if identity is None else identity.ephemeral,
            epoch=None if identity is None else identity.epoch,
            opened=None if identity is None else identity.opened,
            batch=None if identity is None else opts.batch_id,
            table=table_tag(uuid),
        )
        spec = WriteSpec(
            table=opts.table,
            location=metadata.location,
            schema_json=metadata.schema().model_dump_json(),
            spec_json=metadata.spec().model_dump_json(),
            spec_id=metadata.default_spec_id,
            table_uuid=uuid,
            format_version=metadata.format_version,
            properties={**opts.file_properties(metadata.properties), **(properties or {})},
            io_properties=io_properties(table),
            tag=tag,
            streaming=streaming,
            row_filter=opts.replace_where,
            upsert=upsert,
            keys_root=opened.ctx.identity.root if upsert is not None and opened.ctx.identity else None,
        )
        return cls(opts, mode, spec, identity, tuple(sorted(inputs)), tuple(sorted(folded)), upsert)

    def commit(
        self, written: Written, *, batch_id: int | None = None, opened: OpenedTable | None = None
    ) -> CommitResult:
        """Commit what the tasks wrote through the protocol (steps 3-6); the result, or the write's error.

        ``batch_id`` is the streaming micro-batch id. One catalog read, then the WAL put and the commit
        loop; a caller in the process that began the write may pass the table as it read it instead
        (``opened``: saves the read; a stale view costs one catalog conflict, never a wrong outcome).

        Raises:
            FencedWriterError, WriteRejectedError: the outcome (the write's files are removed).
            CommitOutcomeUnknownError: the entry is durable; the next commit on the table applies it.
            TableChangedError: the name holds another table than the planned one (nothing durable).
        """
        from pyspark_fenced_sink.iceberg.catalogs import open_table

        logs.configure_from_env()
        failpoints.configure(self.opts.failpoints)
        opts = self.opts
        opened = opened or open_table(
            opts.catalog,
            opts.table,
            expected_uuid=self.spec.table_uuid,
            max_wait_ms=opts.commit_max_wait_ms,
            max_group=opts.commit_max_group_size,
        )
        ctx, view, table = opened.ctx, opened.view, opened.table
        if self.upsert is not None:  # before any WAL put: a key twice without an order fails, nothing durable
            from pyspark_fenced_sink.iceberg.commit.upsert_plan import check_unique_keys

            check_unique_keys(table, self.upsert, written.paths, opts.table)
        commit_view: TableView | None = view
        if self.identity is not None:
            identity, strict, batch = self.identity, False, opts.batch_id
        else:
            writer = str(opts.writer_id)
            run = self._run(written, batch_id)
            from pyspark_fenced_sink.iceberg.codec.fileio import io_properties
            from pyspark_fenced_sink.iceberg.service_errors import service_errors

            with service_errors(opts.catalog, opts.table, io_properties(table)):  # a run's barrier: before the put
                epoch = stream_epoch(ctx, view.state, writer, run, written.query)
            identity = WriterIdentity(writer, False, epoch, view.state.upper, run)
            current = view.state.writers.get(writer)
            if current is None or current.run != run:
                # The run registered (a barrier put, reads and maybe a commit through it): the port keeps only
                # the tables of its last few loads, so the commit reads the table afresh instead of ``view``.
                commit_view = None
            strict, batch = True, batch_id
        marker = self._marker(written, batch_id)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        entry = data_entry(
            identity,
            written.files,
            mode=self.mode,
            batch=batch,
            query=written.query if self.identity is None else None,
            strict=strict,
            rows=written.rows,
            spec_id=self.spec.spec_id,
            untuned=written.untuned,
            row_filter=opts.replace_where,
            filter_ids=self._filter_ids(),
            branch=opts.branch,
            properties=opts.snapshot_properties,
            inputs=self.inputs,
            folded=self.folded,
            upsert=self.upsert,
            deletes=written.deletes,
        )
        result = finish_write(ctx, entry, lambda paths: _remove(table.io, paths), view=commit_view)
        marker.unlink(missing_ok=True)
        logger.info(
            "fencedlake: %s %s rows=%d files=%d", opts.table, result.summary(), written.rows, len(written.files)
        )
        return result

    def _filter_ids(self) -> tuple[tuple[str, int], ...]:
        """A replace-where's columns with the field ids they bound to in the schema the tasks wrote (§5.4)."""
        from pyspark_fenced_sink.iceberg.codec.row_filter import filter_field_ids

        text = self.opts.replace_where
        return filter_field_ids(text, self.spec.schema_json) if text is not None else ()

    def abort(self, written: Written, *, batch_id: int | None = None) -> None:
        """Remove the tasks' files unless :meth:`commit` may have put a WAL entry naming them."""
        marker = self._marker(written, batch_id)
        if marker.exists():
            logger.warning(
                "fencedlake: abort after commit() started for %s: keeping its files (a WAL entry may name them; "
                "the next commit resolves it, gc removes them if it is never applied)",
                self.opts.table,
            )
            marker.unlink(missing_ok=True)
            return
        paths = written.paths
        if paths:  # the files' own FileIO (the spec's): no catalog read, so a dropped table is no obstacle
            _remove(cached_file_io(self.spec.io_properties, self.spec.location), paths)
            logger.info("fencedlake: abort removed %d file(s) of %s", len(paths), self.opts.table)

    def _run(self, written: Written, batch_id: int | None) -> str:
        """The incarnation the write belongs to: the batch writer's, or the streaming run the tasks reported."""
        if self.identity is not None:
            return self.identity.run
        return written.run or f"batch-{batch_id}"

    def _marker(self, written: Written, batch_id: int | None) -> Path:
        """A driver-local file saying "commit() of this write reached the WAL step" (read by :meth:`abort`)."""
        run = self._run(written, batch_id)
        batch = self.opts.batch_id if self.identity is not None else batch_id
        name = run if batch is None else f"{run}-{batch}"
        return Path(tempfile.gettempdir()) / "fencedlake-commits" / f"{name}.started"


def _conform_schema(opened: OpenedTable, schema: WriteSchema, opts: SinkOptions) -> OpenedTable:
    """Check the data's schema against the table's; merge its new columns first if asked (re-reading after)."""
    from pyiceberg.exceptions import CommitFailedException

    from pyspark_fenced_sink.write.schema_plan import apply_additions

    for _ in range(_MERGE_ATTEMPTS):
        table = opened.table
        plan = schema.check(table.schema(), merge_schema=opts.merge_schema, nulls_checked_per_row=opts.upsert)
        if not plan.additions:
            return opened
        try:
            with table.update_schema() as update:
                apply_additions(update, plan)
            logger.info("fencedlake: merged %d new column(s) into %s", len(plan.additions), opts.table)
        except CommitFailedException:
            pass  # a concurrent schema change: read again and check again
        opened = dataclasses.replace(opened, view=opened.ctx.load())  # read again, checked like the first read
    raise TableChangedError(
        f"table {opts.table}: merging new columns kept conflicting with concurrent schema changes "
        f"({_MERGE_ATTEMPTS} attempts); nothing was written, retry",
        table=opts.table,
    )


def _created_schema(schema: WriteSchema, opts: SinkOptions) -> Any:
    """The schema of a table the write creates: an upsert's keys become its required identifier fields."""
    if not (opts.upsert and opts.upsert_keys):
        return schema.iceberg
    keys = opts.upsert_keys

    def keyed() -> Any:
        from pyspark_fenced_sink.iceberg.commit.upsert_plan import with_identifier_fields

        return with_identifier_fields(schema.iceberg(), keys, opts.table)

    return keyed


def _check_target(opened: OpenedTable, opts: SinkOptions, mode: WriteMode) -> None:
    """Refuse, before any task runs, a branch that is a tag and a replace-where the table cannot take now."""
    from pyiceberg.table.refs import SnapshotRefType

    from pyspark_fenced_sink.iceberg.codec.row_filter import bind_row_filter
    from pyspark_fenced_sink.iceberg.commit.producers import check_replace_where

    table = opened.table
    ref = table.metadata.refs.get(opts.branch) if opts.branch else None
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise InvalidOptionsError(
            f"option branch={opts.branch!r}: table {opts.table} has a tag of that name, not a branch; tags cannot "
            "be written to: choose another branch name"
        )
    if mode is WriteMode.REPLACE_WHERE and opts.replace_where is not None:
        bind_row_filter(opts.replace_where, table.metadata.schema())
        check_replace_where(table, opts.branch, opts.replace_where, opts.table)


def _remove(io: Any, paths: Sequence[str]) -> None:
    """Delete data files that no WAL entry will ever reference (best effort: a leftover is an orphan for gc)."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except OSError as e:  # the file becomes an orphan for gc; the write's outcome stands
            logger.warning("fencedlake: could not remove %s: %s", path, e)
