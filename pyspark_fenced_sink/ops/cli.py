"""The ``fencedlake`` operator CLI: status, wal, recover, gc, fence, skip, repair-state, publish, compact (§5-§8).

It takes the same catalog configuration as the sink: the embedded default
(``--warehouse``, else ``$FENCEDLAKE_WAREHOUSE``, else ``./fencedlake-warehouse``),
a named pyiceberg catalog (``--catalog NAME``), or pyiceberg properties
(``--catalog-prop key=value``, repeatable). Every command prints a readable
table, or JSON with ``--json``. Exit status: 0 done, 2 bad input or a table
that cannot be read (the message says which object and what to do), 3 work
left undone (entries wait behind a missing WAL position, a barrier is
durable but not committed, a compaction was refused: the message says what blocks it), 1 an
unexpected failure. Nothing here takes a lock: every change goes through the
protocol (a WAL barrier and a catalog commit), so it is safe while writers run.
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

__all__ = ["main"]

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Exit status when work the command was asked to do is left undone (entries wait behind a missing
#: position, a barrier is durable but not committed).
EXIT_UNDONE = 3
#: Exit status when the reader of our output went away (the shell's convention for SIGPIPE).
EXIT_BROKEN_PIPE = 141


def _duration(text: str) -> float:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) -> seconds."""
    raw = text.strip().lower()
    unit = _DURATION_UNITS.get(raw[-1:])
    number = raw[:-1] if unit else raw
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: expected e.g. 90s, 30m, 24h, 7d") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration cannot be negative")
    return value


#: Command -> (one-line help, description). Every command takes the table as its first argument.
_HELP = {
    "status": (
        "committed upper, pending entries, writers, recent commits, small files, manifests",
        "Show the committed upper, pending WAL entries (and what the next commit would do with each), every "
        "writer's epoch and last batch id, recent commits with latency, group size, conflicts absorbed and "
        "fences, small data files per partition, the manifest count and the last compaction (read from "
        "metadata only: no data file is opened).",
    ),
    "wal": (
        "WAL entries from a position, each with its classification",
        "List WAL entries from --from on: below the upper (reconciled; the outcome recorded for it), at or above "
        "(pending; what the next commit would decide).",
    ),
    "recover": (
        "apply every pending entry now",
        "Reconcile and commit every pending WAL entry now (what the next writer would do), and report what each "
        "commit decided.",
    ),
    "gc": (
        "truncate the WAL, remove orphan files, expire snapshots",
        "Expire anonymous writes older than the grace period (a WAL barrier), delete WAL entries below the "
        "committed upper, remove orphan data files that no snapshot or pending entry references and no future "
        "entry can (aborted tasks, duplicate replays, fenced writers) once older than the grace period, and "
        "optionally expire old snapshots (the committed state is a table property and survives). --dry-run lists "
        "what would go.",
    ),
    "skip": (
        "fill a missing WAL position with a no-op entry (operator)",
        "A WAL position whose object was lost, or damaged and moved out of the WAL, blocks every later entry. "
        "Put a 'skip' entry at exactly that position (put-if-absent: it never overwrites an entry) with your "
        "reason, and commit: the position's outcome is SKIPPED in the commit record, and the entries behind it "
        "are applied. A writer whose damaged entry was skipped and that is still waiting puts its entry again.",
    ),
    "repair-state": (
        "rebuild a lost, foreign or edited fencedlake.state property (operator)",
        "Rebuild the committed state from the newest checkpoint gc kept and the WAL entries and commit records "
        "after it, and set it as the table's fencedlake.state property. Refuses (changing nothing) if a position "
        "to replay has no WAL object or no commit record. --dry-run shows the rebuilt state only.",
    ),
    "publish": (
        "fast-forward main to a branch (write-audit-publish)",
        "Publish BRANCH: move main to the branch's head through the protocol (a WAL entry applied by the group "
        "commit, in WAL order). Refused, with nothing changed, if main changed data since the branch forked "
        "(not a fast-forward) or the branch does not exist. Writers keep writing meanwhile.",
    ),
    "compact": (
        "rewrite small data files into large ones (runs a local Spark session)",
        "Plan groups of small data files per partition of main (smaller than 75%% of the target size, at least "
        "--min-input-files of them in a partition), rewrite each group with Spark (a local[*] session is "
        "started if this process has none; --no-spark rewrites in this process) and commit one 'compact' WAL "
        "entry: applied only if every input file is still live, else refused with its outputs removed and "
        "nothing changed (exit 3; run it again). Rows never change; writers keep writing meanwhile.",
    ),
    "fence": (
        "fence every running incarnation of a writer",
        "Put a fence barrier for WRITER_ID and commit it: every running incarnation of that writer gets "
        "FencedWriterError at its next commit and lands nothing after it.",
    ),
}


def _version() -> str:
    from pyspark_fenced_sink import __version__

    return __version__


def _command(sub: Any, name: str, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    help_text, description = _HELP[name]
    parser: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=description)
    parser.add_argument("table")
    return parser


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--catalog", help="a catalog configured the pyiceberg way (.pyiceberg.yaml, PYICEBERG_CATALOG__*)"
    )
    common.add_argument(
        "--catalog-prop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (type, uri, warehouse, s3.endpoint, ...); repeatable",
    )
    common.add_argument("--warehouse", help="embedded default catalog's warehouse directory")
    common.add_argument("--json", action="store_true", help="machine-readable JSON output")
    parser = argparse.ArgumentParser(
        prog="fencedlake",
        description="Inspect and maintain Iceberg tables written by the fencedlake sink. Safe while writers run.",
    )
    parser.add_argument("--version", action="version", version=f"fencedlake {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = {name: _command(sub, name, common) for name in _HELP}
    p = commands["status"]
    p.add_argument("--commits", type=int, default=10, help="recent commits to show (default 10)")
    p.add_argument("--top", type=int, default=10, help="partitions with the most small files to show (default 10)")
    p.add_argument(
        "--small-file-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="a data file below this size is small (default: 1/4 of write.target-file-size-bytes)",
    )
    p = commands["wal"]
    p.add_argument("--from", dest="start", type=int, default=0, help="first position (default 0)")
    p.add_argument("--limit", type=int, default=100, help="entries to show (default 100)")
    p = commands["gc"]
    p.add_argument(
        "--grace",
        type=_duration,
        default=_duration("24h"),
        help="minimum age of removed files and expired writes (default 24h)",
    )
    p.add_argument(
        "--expire-snapshots-older-than",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="also expire snapshots older than this (default: keep all snapshots)",
    )
    p.add_argument("--retain-last", type=int, default=10, help="snapshots always kept when expiring (default 10)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, change nothing")
    commands["fence"].add_argument("writer_id")
    _compact_arguments(commands["compact"])
    commands["publish"].add_argument("branch", help="the branch to publish to main")
    p = commands["skip"]
    p.add_argument("seq", type=int, help="the missing WAL position")
    p.add_argument("--reason", required=True, help="why the position is skipped (recorded)")
    p = commands["repair-state"]
    p.add_argument("--dry-run", action="store_true", help="show the rebuilt state, change nothing")
    p.add_argument(
        "--control-root",
        default=None,
        metavar="URI",
        help="the table's control root if its location changed since the state was lost "
        "(default: <location>/_fencedlake/<table uuid>)",
    )
    return parser


def _compact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", default=None, metavar="FILTER", help="only files that may hold rows matching FILTER")
    p.add_argument(
        "--target-file-size", type=int, default=None, metavar="BYTES", help="output file size (default: the table's)"
    )
    p.add_argument(
        "--min-input-files", type=int, default=5, metavar="N", help="small files a partition needs (default 5)"
    )
    p.add_argument("--dry-run", action="store_true", help="plan and show the groups, change nothing")
    p.add_argument("--no-spark", action="store_true", help="rewrite in this process, without Spark (small tables)")


def _open(args: argparse.Namespace, **kwargs: Any) -> Any:
    """The table the command names, opened with one catalog read (an ``OpenedTable``)."""
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog_exists, open_table
    from pyspark_fenced_sink.options import catalog_config, validate_table_name

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
    return open_table(config, validate_table_name(args.table), **kwargs)


def _progress(label: str, done: int, total: int) -> None:
    """Progress on stderr: live on a terminal; otherwise every 500 items and at the end of large steps."""
    if total < 100 and not sys.stderr.isatty():
        return
    if sys.stderr.isatty() or done == total or done % 500 == 0:
        end = "\n" if done == total or not sys.stderr.isatty() else ""
        print(f"\r[fencedlake] {label}: {done}/{total}", end=end, file=sys.stderr, flush=True)


def _print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    if not rows:
        print("  (none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _emit(args: argparse.Namespace, body: dict[str, Any], sections: Sequence[tuple[str, str, Sequence[str]]]) -> None:
    """Print ``body`` as JSON, or its scalar fields then each (title, key, columns) section as a table."""
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True, default=str))
        return
    listed = {key for _, key, _ in sections}
    for key, value in body.items():
        if key not in listed:
            print(f"{key}: {value}")
    for title, key, columns in sections:
        print(f"{title}:")
        _print_table(body[key], columns)


_ENTRY_COLUMNS = ("seq", "position", "outcome", "kind", "writer", "epoch", "batch", "mode", "branch", "files", "rows")


def _cmd_status(args: argparse.Namespace) -> int:
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
        "writers": [
            {"writer": w, "epoch": s.epoch, "batches": s.batches.describe(), "run": s.run, "query": s.query}
            for w, s in sorted(state.writers.items())
        ],
        "pending_entries": entries,
        "recent_commits": commits,
        **file_health(table, now_ms, args.small_file_bytes),
    }
    if not args.json:  # the text view: the top partitions, the last compaction in words
        body["last_compaction"] = last_compaction_text(body["last_compaction"], body.pop("history_since_ms"))
        body["small_files_by_partition"] = body["small_files_by_partition"][: args.top]
    _emit(
        args,
        body,
        [
            ("writers", "writers", ("writer", "epoch", "batches", "run", "query")),
            ("pending entries", "pending_entries", _ENTRY_COLUMNS),
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
                    "helped",
                    "fences",
                    "untuned",
                    "added_rows",
                ),
            ),
        ],
    )
    if body["pending_decided_awaiting_record"] and not args.json:
        print(
            "note: entries 'decided' above (a re-run answered as a duplicate, its open barrier) add no data and "
            "are not stuck: the next commit on the table records them."
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
    _emit(args, body, [("entries", "entries", _ENTRY_COLUMNS)])
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
    _emit(args, body, [("commits", "commits", ("seqs", "outcomes"))])
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
        "writers": [
            {"writer": w, "epoch": s.epoch, "batches": s.batches.describe(), "run": s.run}
            for w, s in sorted(state.writers.items())
        ],
    }
    _emit(args, body, [("writers", "writers", ("writer", "epoch", "batches", "run"))])
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
        progress=_progress,
    )
    body = {"table": args.table, **asdict(report)}
    body["orphans"] = [{"path": p} for p in report.orphans]
    body["snapshots_expired"] = [{"snapshot_id": s} for s in report.snapshots_expired]
    _emit(
        args,
        body,
        [
            ("orphan files" + (" (would remove)" if args.dry_run else " (removed)"), "orphans", ("path",)),
            ("snapshots expired", "snapshots_expired", ("snapshot_id",)),
        ],
    )
    return 0


def _cmd_fence(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.options import validate_writer_id
    from pyspark_fenced_sink.protocol.fencing import fence_writer

    validate_writer_id(args.writer_id)
    ctx = _open(args).ctx
    epoch = fence_writer(ctx, args.writer_id)
    body = {
        "table": args.table,
        "writer": args.writer_id,
        "fenced_at_seq": epoch,
        "committed_upper": ctx.load().state.upper,
    }
    _emit(args, body, [])
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.iceberg.table_port import check_publish
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
    _emit(args, body, [])
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from pyspark_fenced_sink.ops.compact import compact_table, local_runner, spark_runner

    progress = logging.StreamHandler(sys.stderr)  # the compaction's progress lines (INFO) on stderr
    progress.setFormatter(logging.Formatter("[fencedlake] %(message)s"))
    log = logging.getLogger("pyspark_fenced_sink.ops.compact")
    level, propagate = log.level, log.propagate
    log.addHandler(progress)
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
        log.removeHandler(progress)
        log.setLevel(level)
        log.propagate = propagate
    _emit(args, asdict(result), [])
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # inside the try: a reader that went away (`| head`) is a broken pipe, not a traceback
        return code
    except BrokenPipeError:  # e.g. `fencedlake wal T | head`: the reader is gone; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except CommitOutcomeUnknownError as e:
        print(f"fencedlake {args.command}: not done: {e}", file=sys.stderr)
        return EXIT_UNDONE
    except FencedLakeError as e:
        print(f"fencedlake {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
