"""The ``fencedlake`` command line (PROTOCOL.md §8.1): status, wal, recover, fence, gc, skip, repair-state, ...

Each command is a function here over the logic in ``ops/`` and ``protocol/``;
arguments are ``cli_args``'. Exit status: 0 done, 2 bad input or control data
that needs an operator, 3 work left undone (entries still waiting, a fence not
committed, a compaction refused).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, FencedLakeError
from pyspark_fenced_sink.ops.cli_args import build_parser
from pyspark_fenced_sink.ops.cli_output import ENTRY_COLUMNS, WRITER_COLUMNS, emit, progress, writer_rows

__all__ = ["main"]

#: Exit status when work the command was asked to do is left undone (entries wait behind a missing
#: position, a barrier is durable but not committed).
EXIT_UNDONE = 3
#: Exit status when the reader of our output went away (the shell's convention for SIGPIPE).
EXIT_BROKEN_PIPE = 141


def _open(args: argparse.Namespace, **kwargs: Any) -> Any:
    """The table the command names, opened with one catalog read (an ``OpenedTable``).

    WAL entries are read from the store every time (``keep=False``): an operator looks at what it holds now.
    """
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog_exists, open_table
    from pyspark_fenced_sink.options.catalog import catalog_config
    from pyspark_fenced_sink.options.common import validate_table_name

    properties = {}
    for prop in args.catalog_prop:
        key, sep, value = prop.partition("=")
        if not sep or not key:
            raise FencedLakeError(f"--catalog-prop {prop!r}: expected KEY=VALUE")
        properties[key] = value
    config = catalog_config(args.catalog, properties, args.warehouse)
    if config.embedded and not embedded_catalog_exists(config.warehouse):
        raise FencedLakeError(
            f"no fencedlake catalog in {config.warehouse} (no catalog.db there): check --warehouse or "
            "$FENCEDLAKE_WAREHOUSE (the CLI never creates a catalog), or select a catalog with --catalog / "
            "--catalog-prop"
        )
    return open_table(config, validate_table_name(args.table), keep=False, **kwargs)


def _cmd_status(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.ops.commit_stats import commit_stats, describe_stats
    from pyspark_fenced_sink.ops.health import file_health, last_compaction_text
    from pyspark_fenced_sink.ops.inspect import pending_summary, recent_commits, wal_rows

    opened = _open(args)
    ctx, view = opened.ctx, opened.view
    table = ctx.port.table(view)
    state = view.state
    entries = wal_rows(ctx, view, state.upper, limit=10_000)
    now_ms = int(time.time() * 1000)
    commits = recent_commits(table, args.commits)
    last = next((c for c in commits if c["seqs"] is not None), None)
    body = {
        "table": args.table,
        "committed_upper": state.upper,
        "expired_before": state.expired_before,
        "wal_below_upper": len([s for s in ctx.wal.scan(0) if s < state.upper]),
        **pending_summary(entries, now_ms),
        "since_last_commit_s": None if last is None else round((now_ms - last["timestamp_ms"]) / 1000, 1),
        "untuned_writes_in_recent_commits": sum(int(c.get("untuned") or 0) for c in commits),
        "keys_rewritten_in_recent_commits": sum(int(c.get("keys_rewritten") or 0) for c in commits),
        "tombstone_files": len(state.tombstones),
        "commit_stats": commit_stats(table, args.stats_commits),
        "writers": writer_rows(state, WRITER_COLUMNS),
        "pending_entries": entries,
        "recent_commits": commits,
        **file_health(table, now_ms, args.small_file_bytes),
    }
    if not args.json:  # the text view: the top partitions, the last compaction and the commit stats in words
        body["last_compaction"] = last_compaction_text(body["last_compaction"], body.pop("history_since_ms"))
        body["commit_stats"] = describe_stats(body["commit_stats"])
        body["small_files_by_partition"] = body["small_files_by_partition"][: args.top]
    emit(
        args,
        body,
        [
            ("writers", "writers", WRITER_COLUMNS),
            ("pending entries", "pending_entries", ENTRY_COLUMNS),
            (
                f"small files by partition (top {args.top}; all with --json)",
                "small_files_by_partition",
                ("partition", "files", "small_files", "bytes", "small_bytes"),
            ),
            (
                "recent commits",
                "recent_commits",
                (
                    "snapshot_id",
                    "operation",
                    "seqs",
                    "latency_ms",
                    "attempts",
                    "conflicts",
                    "group",
                    "applied",
                    "for_peers",
                    "waited_ms",
                    "waited_for",
                    "helper",
                    "voided",
                    "fences",
                    "untuned",
                    "added_rows",
                    "keys_rewritten",
                ),
            ),
        ],
    )
    if body["pending_decided_awaiting_record"] and not args.json:
        print(
            "note: entries 'decided' above (a re-run answered as a duplicate, its open barrier) add no data and "
            "are not stuck: the next commit on the table records them."
        )
    if body["small_files"] and not args.json:
        print(
            "note: 'small' here is below --small-file-bytes; `fencedlake compact` rewrites files below 75% of the "
            "target size, in partitions with at least --min-input-files (5) of them (its --dry-run says which)."
        )
    if body["untuned_writes_in_recent_commits"] and not args.json:
        print(
            "note: some recent writes ran with Spark's per-row Arrow batch size check on (about half speed): call "
            "pyspark_fenced_sink.tune_session(spark) in those applications."
        )
    return 0


def _cmd_wal(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.ops.inspect import live_paths_of, wal_rows

    opened = _open(args)
    ctx, view = opened.ctx, opened.view
    body = {
        "table": args.table,
        "committed_upper": view.state.upper,
        "entries": wal_rows(ctx, view, args.start, limit=args.limit, live_paths=live_paths_of(opened.table)),
    }
    emit(args, body, [("entries", "entries", ENTRY_COLUMNS)])
    return 0


def _cmd_recover(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.protocol.commit import recover

    ctx = _open(args).ctx
    before = ctx.load().state.upper
    return _report_commits(args, ctx, before, recover(ctx))


def _report_commits(args: argparse.Namespace, ctx: Any, before: int, records: Sequence[Any]) -> int:
    """Print what the commits did; exit 3 if entries still wait behind a missing position."""
    upper = ctx.load().state.upper
    waiting = ctx.wal.scan(upper)
    commits = [{"seqs": f"{r.first}-{r.last}", "outcomes": "".join(o for _, o in r.outcomes)} for r in records]
    body = {
        "table": args.table,
        "upper_before": before,
        "committed_upper": upper,
        "catalog_commits": len(records),
        "waiting": len(waiting),
        "commits": commits,
    }
    emit(args, body, [("commits", "commits", ("seqs", "outcomes"))])
    if waiting:
        print(
            f"fencedlake {args.command}: {len(waiting)} entries wait behind WAL position {upper}, which is missing; "
            f"if its object was lost, run `fencedlake skip {args.table} {upper} --reason '...'`",
            file=sys.stderr,
        )
        return EXIT_UNDONE
    return 0


def _cmd_skip(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.protocol.repair import skip_position

    ctx = _open(args).ctx
    before = ctx.load().state.upper
    return _report_commits(args, ctx, before, skip_position(ctx, args.seq, args.reason))


def _cmd_repair_state(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.protocol.repair import repair_state

    opened = _open(args, check=False, root=args.control_root)
    identity = opened.ctx.identity
    rebuilt = repair_state(opened.ctx, identity.uuid, identity.root, dry_run=args.dry_run)
    state = rebuilt.state
    body = {
        "table": args.table,
        "dry_run": args.dry_run,
        "control_root": state.root,
        "from_checkpoint": rebuilt.checkpoint,
        "positions_replayed": rebuilt.replayed,
        "committed_upper": state.upper,
        "expired_before": state.expired_before,
        "writers": writer_rows(state, WRITER_COLUMNS[:-1]),
    }
    emit(args, body, [("writers", "writers", WRITER_COLUMNS[:-1])])
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.ops.gc import gc

    ctx = _open(args).ctx
    report = gc(
        ctx,
        grace_s=args.grace,
        dry_run=args.dry_run,
        snapshots_older_than_s=args.expire_snapshots_older_than,
        retain_last=args.retain_last,
        progress=progress,
    )
    body = {"table": args.table, **asdict(report)}
    body["orphans"] = [{"path": p} for p in report.orphans]
    body["snapshots_expired"] = [{"snapshot_id": s} for s in report.snapshots_expired]
    if args.dry_run and not args.json:  # the text says what would happen; the JSON keeps its keys (dry_run: true)
        body = {_GC_DRY_RUN_WORDS.get(k, k): v for k, v in body.items()}
    expired = "snapshots_would_expire" if args.dry_run and not args.json else "snapshots_expired"
    emit(
        args,
        body,
        [
            ("orphan files" + (" (would remove)" if args.dry_run else " (removed)"), "orphans", ("path",)),
            ("snapshots" + (" (would expire)" if args.dry_run else " expired"), expired, ("snapshot_id",)),
        ],
    )
    if args.dry_run and not args.json:
        print("dry run: nothing was changed")
    return 0


#: gc's report keys, worded for a dry run's text output.
_GC_DRY_RUN_WORDS = {
    "expired_before": "would_expire_writes_opened_before",
    "wal_truncated": "wal_entries_would_truncate",
    "orphan_bytes": "orphan_bytes_would_remove",
    "snapshots_expired": "snapshots_would_expire",
}


def _cmd_fence(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.protocol.fencing import fence_writer, validate_writer_id

    validate_writer_id(args.writer_id)
    ctx = _open(args).ctx
    epoch = fence_writer(ctx, args.writer_id)
    body = {
        "table": args.table,
        "writer": args.writer_id,
        "fenced_at_seq": epoch,
        "committed_upper": ctx.load().state.upper,
    }
    emit(args, body, [])
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.iceberg.commit.producers import check_publish
    from pyspark_fenced_sink.protocol.publish import publish_branch, publish_entry

    publish_entry(args.branch)  # validates the name before anything is read
    opened = _open(args)
    check_publish(opened.table, args.branch, args.table)  # refuse now, with nothing durable, if it would be refused
    result = publish_branch(opened.ctx, args.branch)
    table = opened.ctx.port.table(opened.ctx.load())
    body = {
        "table": args.table,
        "branch": args.branch,
        "published_at_seq": result.seq,
        "main_snapshot_id": table.metadata.current_snapshot_id,
        "branch_snapshot_id": table.metadata.refs[args.branch].snapshot_id,
    }
    emit(args, body, [])
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.ops.compact import compact_table, local_runner, spark_runner

    handler = logging.StreamHandler(sys.stderr)  # the compaction's progress lines (INFO) on stderr
    handler.setFormatter(logging.Formatter("[fencedlake] %(message)s"))
    log = logging.getLogger("pyspark_fenced_sink.ops.compact")
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # printed once here, not again by a FENCEDLAKE_LOG_LEVEL handler
    try:
        opened = _open(args)
        spark = None if args.no_spark or args.dry_run else _local_spark()
        result = compact_table(
            opened,
            args.table,
            local_runner if spark is None else spark_runner(spark),
            where=args.where,
            target_file_size=args.target_file_size,
            min_input_files=args.min_input_files,
            dry_run=args.dry_run,
        )
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    emit(args, asdict(result), [])
    if result.outcome == "refused":
        print(f"fencedlake compact: refused, nothing changed: {result.detail}", file=sys.stderr)
        return EXIT_UNDONE
    return 0


def _local_spark() -> Any:
    """This process's active SparkSession, or a new local[*] one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    print("[fencedlake] compact: starting a local Spark session (local[*])", file=sys.stderr, flush=True)
    return SparkSession.builder.master("local[*]").appName("fencedlake-compact").getOrCreate()


_COMMANDS = {
    "status": _cmd_status,
    "wal": _cmd_wal,
    "recover": _cmd_recover,
    "gc": _cmd_gc,
    "fence": _cmd_fence,
    "skip": _cmd_skip,
    "repair-state": _cmd_repair_state,
    "publish": _cmd_publish,
    "compact": _cmd_compact,
}


def _fail(command: str, error: BaseException, code: int, as_json: bool) -> int:
    """Report ``error``: a line on stderr, or (``--json``) a JSON object on stdout; returns ``code``."""
    from pyspark_fenced_sink.masking import mask_secrets

    if not as_json:
        said = "not done" if code == EXIT_UNDONE else "error"
        print(f"fencedlake {command}: {said}: {error}", file=sys.stderr)
        return code
    fields = error.fields if isinstance(error, FencedLakeError) else {}
    body = {
        "kind": type(error).__name__,
        "message": mask_secrets(str(error)),
        "retryable": bool(getattr(error, "retryable", False)),
        "exit_status": code,
        **{k: v for k, v in fields.items() if k not in ("retryable",)},
    }
    print(json.dumps({"command": command, "error": body}, indent=2, sort_keys=True, default=str))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (``ops.cli_args.EXIT_STATUSES``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except FencedLakeError as e:  # a usage error
        return _fail(next((a for a in argv if not a.startswith("-")), "fencedlake"), e, 2, as_json)
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # inside the try: a reader that went away (`| head`) is a broken pipe, not a traceback
        return code
    except BrokenPipeError:  # e.g. `fencedlake wal T | head`: the reader is gone; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except CommitOutcomeUnknownError as e:
        return _fail(args.command, e, EXIT_UNDONE, args.json)
    except FencedLakeError as e:
        return _fail(args.command, e, 2, args.json)
    except Exception as e:
        if not args.json:
            raise
        return _fail(args.command, e, 1, True)


if __name__ == "__main__":
    sys.exit(main())
