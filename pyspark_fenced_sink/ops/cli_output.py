"""What the ``fencedlake`` command line prints: progress on stderr, JSON or text tables (``ops/cli``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark_fenced_sink.protocol.state import CommittedState

__all__ = ["ENTRY_COLUMNS", "WRITER_COLUMNS", "emit", "print_table", "progress", "writer_rows"]


def progress(label: str, done: int, total: int) -> None:
    """Progress on stderr: live on a terminal; otherwise every 500 items and at the end of large steps."""
    if total < 100 and not sys.stderr.isatty():
        return
    if sys.stderr.isatty() or done == total or done % 500 == 0:
        end = "\n" if done == total or not sys.stderr.isatty() else ""
        print(f"\r[fencedlake] {label}: {done}/{total}", end=end, file=sys.stderr, flush=True)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` as an aligned text table of ``columns`` (a missing value prints ``-``)."""
    if not rows:
        print("  (none)")
        return
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def emit(args: argparse.Namespace, body: dict[str, Any], sections: Sequence[tuple[str, str, Sequence[str]]]) -> None:
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
        print_table(body[key], columns)


ENTRY_COLUMNS = (
    *("seq", "position", "outcome", "kind", "writer", "epoch", "tail"),
    *("batch", "mode", "branch", "files", "rows"),
)


#: A writer's committed state, one row per writer (``status``; ``repair-state`` without ``query``).
WRITER_COLUMNS = ("writer", "epoch", "tail", "batches", "run", "query")


def writer_rows(state: CommittedState, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The committed state's writers as rows of ``columns``, by writer name."""
    rows = []
    for name, s in sorted(state.writers.items()):
        row = {
            "writer": name,
            "epoch": s.epoch,
            "tail": s.tail,
            "batches": s.batches.describe(),
            "run": s.run,
            "query": s.query,
        }
        rows.append({c: row[c] for c in columns})
    return rows
