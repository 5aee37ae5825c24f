"""Data-file compaction through the protocol: plan, rewrite on Spark, one ``compact`` WAL entry (PROTOCOL.md §5.2).

:func:`compact_table` (driver) plans groups of small files
(``ops.compact_plan``), opens an anonymous writer (its files are protected from
``gc`` like any pending write's), rewrites every group in one Spark job — one
task per group (``ops.compact_task``) — and commits **one** ``compact`` entry for
the whole compaction through the WAL and the group commit (a ``write.transaction``):
applied only if every input is still live when it is applied, else REFUSED
and its outputs removed, nothing lost. One entry, so readers see one snapshot
that replaces every group at once; a concurrent overwrite of any input refuses
all of it, and running it again plans from what is live then.

:func:`compact` is the Python API (``pyspark_fenced_sink.compact``), which the
CLI's ``compact`` command calls with a local Spark session.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyiceberg.table import TableProperties

from pyspark_fenced_sink import failpoints, logs
from pyspark_fenced_sink.errors import InvalidOptionsError, WriteRejectedError
from pyspark_fenced_sink.iceberg.catalogs import OpenedTable, open_table
from pyspark_fenced_sink.iceberg.planning.scan import executor_metadata
from pyspark_fenced_sink.ops.compact_plan import MIN_INPUT_FILES_DEFAULT, CompactionPlan, plan_compaction
from pyspark_fenced_sink.ops.compact_task import rewrite_group, sort_columns
from pyspark_fenced_sink.options.catalog import CATALOG, CATALOG_PREFIX, WAREHOUSE, catalog_config, is_remote_session
from pyspark_fenced_sink.options.common import validate_table_name
from pyspark_fenced_sink.options.write import COMMIT_MAX_WAIT_MS, SinkOptions
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.write.task import TaskInfo, WriteResult, WriteSpec, task_info_from_spark
from pyspark_fenced_sink.write.transaction import WriteTransaction, Written

__all__ = ["CompactionResult", "compact", "compact_table", "local_runner", "spark_runner"]

logger = logging.getLogger(__name__)

#: Rewrites every group: (spec, executor metadata, plan, sort columns) -> one WriteResult per group, in order.
Runner = Callable[[WriteSpec, Any, CompactionPlan, Sequence[tuple[str, str]]], list[WriteResult]]
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class CompactionResult:
    """What a compaction did.

    ``outcome`` is ``applied``, ``nothing-to-do``, ``dry-run`` or ``refused`` (the table changed under it:
    an input was removed, or gc expired it; its outputs were removed, nothing changed; ``detail`` says why).
    ``small_files`` counts the files below 75% of the target size that could be rewritten, and
    ``below_min_input_files`` those of them left alone because their partition has fewer than
    ``min_input_files`` of them (``detail`` then says so).
    """

    table: str
    outcome: str
    snapshot_id: int | None
    groups: int
    input_files: int
    input_bytes: int
    output_files: int = 0
    output_bytes: int = 0
    rows: int = 0
    seq: int | None = None
    detail: str = ""
    seconds: float = 0.0
    small_files: int = 0
    below_min_input_files: int = 0


def local_runner(
    spec: WriteSpec, metadata: Any, plan: CompactionPlan, sort: Sequence[tuple[str, str]]
) -> list[WriteResult]:
    """Rewrite the groups one after the other in this process (tests, and tables too small for Spark)."""
    out = []
    for i, group in enumerate(plan.groups):
        out.append(rewrite_group(spec, metadata, group.tasks, TaskInfo(i, 0, None), sort))
        logger.info("fencedlake compact %s: group %d/%d rewritten", spec.table, i + 1, len(plan.groups))
    return out


def spark_runner(spark: Any) -> Runner:
    """A runner that rewrites the groups in one Spark job of ``spark``, one task per group.

    On a classic session the job is ``sparkContext.parallelize(groups).map(...)`` with progress from
    Spark's status tracker. A Spark Connect session has no ``sparkContext``: there the job is
    ``spark.range(groups).mapInArrow(...)`` (DataFrame API only; Connect clients have pandas, which
    ``mapInArrow`` needs and a classic install may lack), each task returning its pickled
    :class:`WriteResult`, and progress is logged when the job starts.
    """

    def run(spec: WriteSpec, metadata: Any, plan: CompactionPlan, sort: Sequence[tuple[str, str]]) -> list[WriteResult]:
        tasks = [g.tasks for g in plan.groups]

        def rewrite(i: int) -> WriteResult:  # executors
            return rewrite_group(spec, metadata, tasks[i], task_info_from_spark(), sort)

        if is_remote_session(spark):
            logger.info("fencedlake compact %s: rewriting %d group(s) in one Spark job", spec.table, len(tasks))
            return _remote_job(spark, rewrite, len(tasks))
        sc = spark.sparkContext
        done = threading.Event()
        args = (sc.statusTracker(), spec.table, len(tasks), done)
        threading.Thread(target=_report_progress, args=args, daemon=True).start()
        try:
            results: list[WriteResult] = sc.parallelize(range(len(tasks)), len(tasks)).map(rewrite).collect()
        finally:
            done.set()
        return results

    return run


def _remote_job(spark: Any, rewrite: Callable[[int], WriteResult], count: int) -> list[WriteResult]:
    """Run ``rewrite`` for groups ``0..count-1`` as ``mapInArrow`` tasks (a Spark Connect session)."""

    def tasks(batches: Any) -> Any:  # executors: one group per input row
        import pickle

        import pyarrow as pa

        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield pa.RecordBatch.from_pydict({"group": [i], "result": [pickle.dumps(rewrite(i))]})

    rows = spark.range(0, count, 1, count).mapInArrow(tasks, "group long, result binary").collect()
    results = {int(r["group"]): pickle.loads(r["result"]) for r in rows}  # our own tasks' results
    return [results[i] for i in range(count)]


def _report_progress(tracker: Any, table: str, total: int, done: threading.Event) -> None:
    """Log how many groups the running Spark stages finished, every ``PROGRESS_EVERY_S``."""
    while not done.wait(PROGRESS_EVERY_S):
        finished = 0
        for stage in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage)
            finished += info.numCompletedTasks if info is not None else 0
        logger.info("fencedlake compact %s: %d/%d groups rewritten", table, finished, total)


def compact_table(
    opened: OpenedTable,
    name: str,
    run: Runner,
    *,
    where: str | None = None,
    target_file_size: int | None = None,
    min_input_files: int = MIN_INPUT_FILES_DEFAULT,
    dry_run: bool = False,
) -> CompactionResult:
    """Plan, rewrite (``run``) and commit one compaction of main (``opened``: the table as just read).

    Raises:
        InvalidOptionsError: bad arguments (nothing written).
        ReadRefusedError: the table has equality deletes (nothing written).
        CommitOutcomeUnknownError: the entry is durable; the next commit on the table applies or refuses it.
    """
    started = time.monotonic()
    table = opened.table
    plan = plan_compaction(table, name, where=where, target_file_size=target_file_size, min_input_files=min_input_files)
    base = CompactionResult(
        name,
        "dry-run",
        plan.snapshot_id,
        len(plan.groups),
        plan.input_files,
        plan.input_bytes,
        small_files=plan.small_files,
        below_min_input_files=plan.below_min_input_files,
        detail=_left_alone(plan, min_input_files),
    )
    logger.info(
        "fencedlake compact %s: %d of %d planned files in %d group(s) to rewrite (%d bytes, target %d bytes); "
        "%d small file(s) with delete files and %d of an older partition spec left alone",
        name,
        plan.input_files,
        plan.live_files,
        len(plan.groups),
        plan.input_bytes,
        plan.target_file_size,
        plan.skipped_with_deletes,
        plan.skipped_other_spec,
    )
    failpoints.hit("compact.after-plan")
    if not plan.groups or dry_run:
        return _done(base, "dry-run" if dry_run else "nothing-to-do", started)
    opts = SinkOptions(table=name, catalog=opened.config, commit_max_wait_ms=round(opened.ctx.max_wait_s * 1000))
    target = {TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(plan.target_file_size)}
    txn = WriteTransaction.open(
        opened, opts, WriteMode.COMPACT, inputs=plan.inputs, folded=plan.folded, properties=target
    )
    metadata = table.metadata
    results = run(txn.spec, executor_metadata(metadata, metadata.schema()), plan, sort_columns(metadata))
    done = Written(files=tuple(f for r in results for f in r.files), rows=sum(r.rows for r in results))
    expected = sum(g.input_rows for g in plan.groups)
    if done.rows != expected:
        txn.abort(done)
        raise WriteRejectedError(
            f"table {name}: compaction read {expected} rows from its inputs' statistics but wrote {done.rows}; "
            "nothing was committed and its outputs were removed (report this)",
            table=name,
        )
    failpoints.hit("compact.after-rewrite")
    written: dict[str, Any] = {
        "output_files": len(done.files),
        "output_bytes": sum(r.bytes for r in results),
        "rows": done.rows,
    }
    try:
        result = txn.commit(done, opened=opened)
    except WriteRejectedError as e:
        logger.warning("fencedlake compact %s: refused, outputs removed: %s", name, e)
        return _done(base, "refused", started, seq=e.fields.get("seq"), detail=str(e), **written)
    out = _done(base, "applied", started, seq=result.seq, **written)
    logger.info(
        "fencedlake compact %s: replaced %d files by %d at WAL seq %s in %.1f s",
        name,
        out.input_files,
        out.output_files,
        out.seq,
        out.seconds,
    )
    return out


def _left_alone(plan: CompactionPlan, min_input_files: int) -> str:
    """Why small files are not rewritten ("" if every one is)."""
    if not plan.below_min_input_files:
        return ""
    return (
        f"{plan.below_min_input_files} small file(s) in {plan.partitions_below_min_input_files} partition(s) left "
        f"alone: a partition is compacted once it has min_input_files={min_input_files} files below 75% of the "
        f"target size ({plan.target_file_size} bytes); lower min_input_files (--min-input-files) to rewrite them"
    )


def _done(base: CompactionResult, outcome: str, started: float, **changes: Any) -> CompactionResult:
    return replace(base, outcome=outcome, seconds=round(time.monotonic() - started, 3), **changes)


def open_for_compaction(table: str, options: Mapping[str, str], *, remote: bool = False) -> OpenedTable:
    """Open ``table`` with the sink's catalog options (``catalog``, ``catalog.*``, ``warehouse``, commit wait).

    ``remote``: the session is a Spark Connect client's (``options.catalog.catalog_config``: the embedded catalog
    then needs an absolute warehouse).

    Raises:
        InvalidOptionsError: an unknown option, or a catalog or table that cannot be opened.
        ServiceError: the catalog or its storage failed.
    """
    known = {CATALOG, WAREHOUSE, COMMIT_MAX_WAIT_MS}
    unknown = sorted(k for k in options if k not in known and not k.startswith(CATALOG_PREFIX))
    if unknown:
        raise InvalidOptionsError(
            f"compact got unknown option(s) {unknown}: expected {sorted(known)} or {CATALOG_PREFIX}<key>"
        )
    props = {k[len(CATALOG_PREFIX) :]: str(v) for k, v in options.items() if k.startswith(CATALOG_PREFIX)}
    config = catalog_config(options.get(CATALOG), props, options.get(WAREHOUSE), remote=remote)
    wait = options.get(COMMIT_MAX_WAIT_MS)
    return open_table(config, validate_table_name(table), max_wait_ms=None if wait is None else int(wait))


def compact(
    spark: Any,
    table: str,
    *,
    where: str | None = None,
    target_file_size: int | None = None,
    min_input_files: int = MIN_INPUT_FILES_DEFAULT,
    dry_run: bool = False,
    **options: str,
) -> CompactionResult:
    """Compact ``table``'s small data files with ``spark`` (see docs/SEMANTICS.md, "Compaction").

    Works on classic and Spark Connect sessions. Planning and the commit run in this process (like the
    CLI), so it needs the catalog and the table's storage from here; on a Connect session the embedded
    catalog needs an absolute ``warehouse`` (the server resolves a relative one where it was started).

    Args:
        spark: The SparkSession whose executors rewrite the files (one task per group).
        table: The table (``namespace.name``).
        where: Only files that may hold rows matching this filter (Iceberg expression syntax).
        target_file_size: Output file size in bytes (default: the table's ``write.target-file-size-bytes``).
        min_input_files: A partition is compacted only if it has at least this many small files.
        dry_run: Plan only; write and change nothing.
        **options: The sink's catalog options (``catalog``, ``catalog.<key>``, ``warehouse``).

    Returns:
        What was done; ``outcome == "refused"`` if the table changed under it (nothing lost; run it again).
    """
    logs.configure_from_env()
    opened = open_for_compaction(table, options, remote=is_remote_session(spark))
    return compact_table(
        opened,
        table,
        spark_runner(spark),
        where=where,
        target_file_size=target_file_size,
        min_input_files=min_input_files,
        dry_run=dry_run,
    )
