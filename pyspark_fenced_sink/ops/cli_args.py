"""The ``fencedlake`` command line's argument parser (PROTOCOL.md §8.1): one sub-parser per command.

Every ``--help`` lists the exit statuses (:data:`EXIT_STATUSES`) and each option's
default. A usage error raises ``InvalidOptionsError`` (exit 2) instead of printing,
so ``--json`` can report it as JSON.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from pyspark_fenced_sink.errors import InvalidOptionsError

__all__ = ["EXIT_STATUSES", "build_parser"]

#: Exit status -> meaning, for every command (``ops.cli`` returns them; ``--help`` lists them).
EXIT_STATUSES = {
    0: "done",
    1: "an unexpected failure (a bug, or an error no other status covers)",
    2: "bad input, a table or catalog that cannot be read, or control data that needs an operator "
    "(the message names the object and the command)",
    3: "work left undone: entries wait behind a missing WAL position, a barrier is durable but not committed, "
    "or a compaction was refused (run it again)",
}
_EPILOG = "exit status:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_STATUSES.items())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises (the CLI reports it, as JSON with ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidOptionsError(f"{self.prog}: {message} (see {self.prog} --help)")


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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
        "writer's epoch and last batch id, recent commits with latency, group size, conflicts absorbed, "
        "waits and helps, commit statistics over the newest commits (commits and writes per second, "
        "time-to-commit p50/p99/max, CAS attempts and conflicts, group sizes, writes applied by another "
        "writer's commit, helper commits, holes voided), small data files per partition, the manifest count "
        "and the last compaction (read from metadata only: no data file is opened).",
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
    from pyspark_fenced_sink.version import __version__

    return __version__


def _command(sub: Any, name: str, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    help_text, description = _HELP[name]
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=[common],
        help=help_text,
        description=description,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("table")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``fencedlake`` argument parser."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--catalog",
        help="a catalog configured the pyiceberg way (.pyiceberg.yaml, PYICEBERG_CATALOG__*) (default: the embedded "
        "catalog of --warehouse)",
    )
    common.add_argument(
        "--catalog-prop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (type, uri, warehouse, s3.endpoint, ...); repeatable",
    )
    common.add_argument(
        "--warehouse",
        help="embedded default catalog's warehouse directory (default: $FENCEDLAKE_WAREHOUSE, else "
        "./fencedlake-warehouse)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable JSON output, errors included")
    parser = _Parser(
        prog="fencedlake",
        description="Inspect and maintain Iceberg tables written by the fencedlake sink. Safe while writers run. "
        "'fencedlake COMMAND --help' shows a command's options and their defaults.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fencedlake {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = {name: _command(sub, name, common) for name in _HELP}
    p = commands["status"]
    p.add_argument("--commits", type=int, default=10, help="recent commits to show (default 10)")
    p.add_argument(
        "--stats-commits",
        type=int,
        default=200,
        metavar="N",
        help="fencedlake commits the commit statistics cover: rates, time-to-commit, CAS attempts and "
        "conflicts, group sizes, waits and helps (default 200)",
    )
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
    p.add_argument(
        "--where",
        default=None,
        metavar="FILTER",
        help="only files that may hold rows matching FILTER (default: every live file of main)",
    )
    p.add_argument(
        "--target-file-size", type=int, default=None, metavar="BYTES", help="output file size (default: the table's)"
    )
    p.add_argument(
        "--min-input-files", type=int, default=5, metavar="N", help="small files a partition needs (default 5)"
    )
    p.add_argument("--dry-run", action="store_true", help="plan and show the groups, change nothing")
    p.add_argument("--no-spark", action="store_true", help="rewrite in this process, without Spark (small tables)")
