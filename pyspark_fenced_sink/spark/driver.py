"""Driver steps shared by the batch and streaming writers (PROTOCOL.md steps 0-1, 3-6).

``plan_write`` runs when Spark plans a write (in a Python worker on the
driver): it validates options, loads or creates the table, checks the schema
(and a ``replace-where`` filter against it, and against the files live on the
target branch now) and builds the :class:`~pyspark_fenced_sink.write.task.WriteSpec`
every task receives. ``commit_files`` runs in Spark's commit worker (also on the driver,
a different process: nothing in memory is shared, everything travels in the
pickled writer and the commit messages). ``abort_files`` runs for Spark's
``abort()`` — which Spark also calls after a ``commit()`` that raised — and
deletes task files only if the commit never reached the WAL.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_fenced_sink import failpoints, logs
from pyspark_fenced_sink.errors import InvalidOptionsError, TableChangedError
from pyspark_fenced_sink.options import SinkOptions, parse_options
from pyspark_fenced_sink.protocol.fencing import WriterIdentity
from pyspark_fenced_sink.protocol.filetag import FileTag, table_tag
from pyspark_fenced_sink.protocol.upsert import UpsertSpec
from pyspark_fenced_sink.protocol.wal import WriteMode, encoded_path
from pyspark_fenced_sink.spark.messages import FencedLakeCommitMessage
from pyspark_fenced_sink.spark.tuning import ARROW_MAX_BYTES_PER_BATCH
from pyspark_fenced_sink.write.task import WriteSpec

__all__ = ["WritePlan", "abort_files", "commit_files", "plan_write"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WritePlan:
    """What the driver decided when Spark planned the write (pickled to tasks and to commit).

    Attributes:
        opts: Validated options.
        spec: What each task needs to write data files.
        identity: The opened writer (batch writes); None for streaming (claimed per run at commit).
        mode: How the write changes the table: batch ``overwrite`` and streaming ``complete`` replace rows
            (all of them, the partitions written, or the rows ``replace-where`` matches); ``upsert``.
        upsert: An upsert's key and order columns (``iceberg.upsert_plan.plan_upsert``).
    """

    opts: SinkOptions
    spec: WriteSpec
    identity: WriterIdentity | None
    mode: WriteMode
    upsert: UpsertSpec | None = None


def plan_write(options: Any, schema: Any, overwrite: bool, *, streaming: bool) -> WritePlan:
    """Validate, load or create the table, check the schema, open the writer (batch)."""
    from pyspark_fenced_sink.iceberg.catalogs import io_properties, load_catalog, open_table, resolve_table
    from pyspark_fenced_sink.protocol.fencing import open_writer

    logs.configure_from_env()
    opts = parse_options(dict(options), streaming=streaming)
    failpoints.configure(opts.failpoints)
    mode = WriteMode(opts.write_mode(overwrite))
    if opts.replace_where is not None:  # against the DataFrame's columns, before a table can be created
        from pyspark_fenced_sink.iceberg.row_filter import bind_row_filter
        from pyspark_fenced_sink.iceberg.schema import iceberg_schema_from_spark

        bind_row_filter(opts.replace_where, iceberg_schema_from_spark(schema))
    table = resolve_table(load_catalog(opts.catalog), opts, schema)
    _check_target(table, opts, mode)
    upsert, root = _plan_upsert(table, opts, mode)
    identity = None
    metadata = table.metadata
    table_id = table_tag(str(metadata.table_uuid))
    if streaming:
        tag = FileTag(str(opts.writer_id), False, None, None, None, table=table_id)
    else:
        opened = open_table(opts.catalog, opts.table, table=table)
        identity = open_writer(opened.ctx, opts.writer_id, view=opened.view)
        tag = FileTag(
            identity.writer, identity.ephemeral, identity.epoch, identity.opened, opts.batch_id, table=table_id
        )
    spec = WriteSpec(
        table=opts.table,
        location=metadata.location,
        schema_json=metadata.schema().model_dump_json(),
        spec_json=metadata.spec().model_dump_json(),
        spec_id=metadata.default_spec_id,
        table_uuid=str(metadata.table_uuid),
        format_version=metadata.format_version,
        properties=dict(metadata.properties),
        io_properties=io_properties(table),
        tag=tag,
        streaming=streaming,
        row_filter=opts.replace_where,
        upsert=upsert,
        keys_root=root,
    )
    return WritePlan(opts, spec, identity, mode, upsert)


def _plan_upsert(table: Any, opts: SinkOptions, mode: WriteMode) -> tuple[UpsertSpec | None, str | None]:
    """An upsert's key spec and the control root its delete-key files go under (None, None otherwise)."""
    if mode is not WriteMode.UPSERT:
        return None, None
    from pyspark_fenced_sink.iceberg.table_port import view_of
    from pyspark_fenced_sink.iceberg.upsert_plan import plan_upsert
    from pyspark_fenced_sink.protocol.view import bind

    return plan_upsert(table, opts), bind(view_of(table), opts.table).state.root


def _check_target(table: Any, opts: SinkOptions, mode: WriteMode) -> None:
    """Refuse, before any task runs, a branch that is a tag and a replace-where the table cannot take now."""
    from pyiceberg.table.refs import SnapshotRefType

    from pyspark_fenced_sink.iceberg.row_filter import bind_row_filter
    from pyspark_fenced_sink.iceberg.table_port import check_replace_where

    ref = table.metadata.refs.get(opts.branch) if opts.branch else None
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise InvalidOptionsError(
            f"option branch={opts.branch!r}: table {opts.table} has a tag of that name, not a branch; tags cannot "
            "be written to: choose another branch name"
        )
    if mode is WriteMode.REPLACE_WHERE and opts.replace_where is not None:
        bind_row_filter(opts.replace_where, table.metadata.schema())
        check_replace_where(table, opts.branch, opts.replace_where, opts.table)


def _abort_marker(run: str, batch: int | None) -> Path:
    """A driver-local file saying "commit() of this write reached the WAL step" (read by abort())."""
    name = run if batch is None else f"{run}-{batch}"
    return Path(tempfile.gettempdir()) / "fencedlake-commits" / f"{name}.started"


def _remover(table: Any) -> Any:
    def remove(paths: Sequence[str]) -> None:
        for path in paths:
            try:
                table.io.delete(path)
            except FileNotFoundError:
                pass
            except OSError as e:  # the file becomes an orphan for gc; the write's outcome stands
                logger.warning("fencedlake: could not remove %s: %s", path, e)

    return remove


def commit_files(
    plan: WritePlan,
    messages: Sequence[FencedLakeCommitMessage | None],
    *,
    batch_id: int | None = None,
) -> Any:
    """Commit the tasks' files through the protocol; returns the CommitResult or raises."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table
    from pyspark_fenced_sink.protocol.fencing import stream_epoch
    from pyspark_fenced_sink.protocol.outcome import data_entry, finish_write

    logs.configure_from_env()
    failpoints.configure(plan.opts.failpoints)
    collected = [m for m in messages if m is not None]
    files = [f for m in collected for f in m.files]
    deletes = [d for m in collected for d in m.deletes]
    rows = sum(m.rows for m in collected)
    untuned = any(m.untuned for m in collected)
    opts = plan.opts
    if untuned:
        logger.warning(
            "fencedlake: the write to %s ran with Spark's per-row Arrow batch size check on "
            "(%s at Spark's default): Python sinks write at about half speed that way; call "
            "pyspark_fenced_sink.tune_session(spark) once, or pass --conf %s=2147483647",
            opts.table,
            ARROW_MAX_BYTES_PER_BATCH,
            ARROW_MAX_BYTES_PER_BATCH,
        )
    # The one catalog read before the WAL put: the base view and the table location.
    opened = open_table(
        opts.catalog, opts.table, max_wait_ms=opts.commit_max_wait_ms, max_group=opts.commit_max_group_size
    )
    ctx, view = opened.ctx, opened.view
    if view.table_uuid != plan.spec.table_uuid:
        raise TableChangedError(
            f"table {opts.table} is now table {view.table_uuid}, not {plan.spec.table_uuid} that this write was "
            "planned for: it was dropped and re-created, or renamed and replaced, while the write ran; nothing was "
            "committed, re-run the write",
            table=opts.table,
        )
    if plan.upsert is not None:  # before any WAL put: a key twice without an order fails with nothing durable
        from pyspark_fenced_sink.iceberg.upsert_plan import check_unique_keys

        paths = [encoded_path(f) for f in (*files, *deletes)]
        check_unique_keys(opened.table, plan.upsert, paths, opts.table)
    if plan.identity is not None:
        identity, query, strict, batch = plan.identity, None, False, opts.batch_id
    else:
        run = next((m.run for m in collected if m.run), None) or f"batch-{batch_id}"
        query = next((m.query for m in collected if m.query), None)
        writer = str(opts.writer_id)
        epoch = stream_epoch(ctx, view.state, writer, run, query)
        identity = WriterIdentity(writer, False, epoch, view.state.upper, run)
        strict, batch = True, batch_id
    marker = _abort_marker(identity.run, batch)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    entry = data_entry(
        identity,
        files,
        mode=plan.mode,
        batch=batch,
        query=query,
        strict=strict,
        rows=rows,
        spec_id=plan.spec.spec_id,
        untuned=untuned,
        row_filter=opts.replace_where,
        branch=opts.branch,
        properties=opts.snapshot_properties,
        upsert=plan.upsert,
        deletes=deletes,
    )
    result = finish_write(ctx, entry, _remover(opened.table), view=view)
    marker.unlink(missing_ok=True)
    logger.info("fencedlake: %s %s rows=%d files=%d", opts.table, result.summary(), rows, len(files))
    return result


def abort_files(
    plan: WritePlan, messages: Sequence[FencedLakeCommitMessage | None], *, batch_id: int | None = None
) -> None:
    """Delete the tasks' files unless ``commit()`` may have put a WAL entry naming them."""
    from pyspark_fenced_sink.iceberg.catalogs import load_catalog

    run = plan.identity.run if plan.identity is not None else next((m.run for m in messages if m and m.run), None)
    if run is None:
        return
    marker = _abort_marker(run, plan.opts.batch_id if plan.identity is not None else batch_id)
    if marker.exists():
        logger.warning(
            "fencedlake: abort after commit() started for %s: keeping its files (a WAL entry may name them; "
            "the next commit resolves it, gc removes them if it is never applied)",
            plan.opts.table,
        )
        marker.unlink(missing_ok=True)
        return
    paths = [encoded_path(f) for m in messages if m is not None for f in (*m.files, *m.deletes)]
    if paths:
        table = load_catalog(plan.opts.catalog).load_table(plan.opts.table)
        _remover(table)(paths)
        logger.info("fencedlake: abort removed %d file(s) of %s", len(paths), plan.opts.table)
