"""``make demo``: concurrent exactly-once Spark writes into one Iceberg table, embedded default (README "Quickstart").

Writer threads of one local SparkSession each append batches with their own
``writer.id`` and ``writer.batch-id`` at the same moment (real concurrent Spark
jobs racing through the protocol, PROTOCOL.md §3); one batch is re-run and must
add nothing; the table is read back and checked row by row (``OK: exactly once``,
exit 0). The warehouse directory is kept for ``fencedlake status``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark_fenced_sink import activate_session, fencedlake_error
from pyspark_fenced_sink.options.catalog import WAREHOUSE
from pyspark_fenced_sink.options.write import PARTITION_BY, WRITER_BATCH_ID, WRITER_ID
from pyspark_fenced_sink.spark.warmup import MAX_WRITERS

__all__ = ["main"]

TABLE = "demo.events"
DEMO_PARTITIONING = "day(ts)"
DAY_SECONDS = 86_400
# 2026-01-01T00:00:00Z: the rows spread over the three days from here (three day partitions).
BASE_EPOCH_SECONDS = 1_767_225_600


@dataclass
class _Progress:
    """Thread-safe progress printing and the outcome of every write."""

    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[str] = field(default_factory=list)

    def say(self, message: str) -> None:
        with self.lock:
            print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    def fail(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)
        self.say(f"ERROR {message}")


def _fresh_warehouse(requested: str | None) -> Path:
    if requested:
        path = Path(requested).expanduser().resolve()
        if path.exists() and any(path.iterdir()):
            raise SystemExit(f"demo: warehouse {path} is not empty; give a new or empty directory")
    else:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = (Path("fencedlake-warehouse") / f"demo-{stamp}-{os.getpid()}").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _spark(writers: int) -> Any:
    # Spark's Python workers (executor tasks and the commit worker) must run this interpreter,
    # the one that has pyspark_fenced_sink installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("fencedlake-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # Installed packages named pyspark_* are registered automatically; registering explicitly
    # as well keeps the demo working from a plain (non-editable) checkout on sys.path.
    from pyspark_fenced_sink import FencedLakeDataSource, tune_session

    spark.dataSource.register(FencedLakeDataSource)
    # The README's throughput setting (Spark's Arrow batch size check off), and the Python workers
    # `writers` concurrent writes need, started now rather than by the first writes that overlap.
    tune_session(spark, writers=min(writers, MAX_WRITERS))
    return spark


def _batch_frame(spark: Any, writer: str, batch: int, rows: int) -> Any:
    """The rows of one batch: the same rows every time it is built (as a retried job would read)."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    seconds = F.lit(BASE_EPOCH_SECONDS) + (F.col("id") % 3) * DAY_SECONDS + (F.col("id") * 7 + batch * 13) % DAY_SECONDS
    return spark.range(0, rows, 1, numPartitions=2).select(
        F.lit(writer).alias("writer"),
        F.lit(batch).cast("int").alias("batch"),
        F.col("id").alias("seq"),
        F.timestamp_seconds(seconds).alias("ts"),
        (F.col("id") % 1000 / F.lit(10.0)).alias("amount"),
    )


def _write(spark: Any, warehouse: Path, writer: str, batch: int, rows: int) -> None:
    (
        _batch_frame(spark, writer, batch, rows)
        .write.format("fencedlake")
        .mode("append")
        .option(WAREHOUSE, str(warehouse))
        .option(PARTITION_BY, DEMO_PARTITIONING)
        .option(WRITER_ID, writer)
        .option(WRITER_BATCH_ID, str(batch))
        .save(TABLE)
    )


def _error_line(error: BaseException) -> str:
    """The most telling line of an error (Spark wraps the sink's Python error in a Java one)."""
    typed = fencedlake_error(error)
    if typed is not None:
        return f"{type(typed).__name__}: {typed.message}"[:400]
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception): ", ln)]
    ours = [ln for ln in raised if "pyspark_fenced_sink" in ln or "fencedlake" in ln.lower()]
    if ours or raised:
        return (ours or raised)[-1][:400]
    return (lines[0] if lines else type(error).__name__)[:400]


def _writer_thread(
    spark: Any, warehouse: Path, writer: str, batches: int, rows: int, start: threading.Barrier, progress: _Progress
) -> None:
    activate_session(spark)  # writes from a thread need the session active there (README)
    try:
        start.wait(timeout=120)
    except threading.BrokenBarrierError:
        progress.fail(f"{writer}: the writers' start barrier broke")
        return
    for batch in range(batches):
        t0 = time.monotonic()
        try:
            _write(spark, warehouse, writer, batch, rows)
        except Exception as e:  # noqa: BLE001 - reported, and the demo exits non-zero
            progress.fail(f"{writer} batch {batch}: {_error_line(e)}")
            return
        progress.say(f"{writer} batch {batch}: {rows} rows committed ({time.monotonic() - t0:.1f} s)")


def _load_table(warehouse: Path) -> Any:
    from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog

    return embedded_catalog(str(warehouse)).load_table(TABLE)


def _snapshot_lines(table: Any) -> list[str]:
    lines = []
    for snap in table.snapshots():
        summary = snap.summary
        operation = summary.operation.value if summary is not None else "?"
        props = summary.additional_properties if summary is not None else {}
        added = props.get("added-records", "0")
        fenced = {k.removeprefix("fencedlake."): v for k, v in sorted(props.items()) if k.startswith("fencedlake.")}
        outcomes = fenced.get("outcomes", "")
        codes = Counter(item.rpartition(":")[2] for item in outcomes.split(",") if item)
        lines.append(
            f"  {snap.snapshot_id:>20}  {operation:<9} +{added:>6} rows  seqs={fenced.get('seqs', '-'):<7} "
            f"outcomes={dict(sorted(codes.items()))}  commit={fenced.get('commit', '-')}"
        )
    return lines


def _rerun_wal_rows(warehouse: Path, rerun: tuple[str, int]) -> list[dict[str, Any]]:
    """The WAL's data entries of the re-run batch, each with its (recorded or next-commit) outcome."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table
    from pyspark_fenced_sink.ops.inspect import wal_rows
    from pyspark_fenced_sink.options.catalog import catalog_config

    opened = open_table(catalog_config(warehouse=str(warehouse)), TABLE)
    rows = wal_rows(opened.ctx, opened.view, 0, limit=100_000)
    return [r for r in rows if r["kind"] == "data" and r["writer"] == rerun[0] and r["batch"] == rerun[1]]


def _report(warehouse: Path, writers: list[str], batches: int, rows: int, rerun: tuple[str, int]) -> list[str]:
    """Print what landed; return the mismatches (empty: exactly once)."""
    import pyarrow.compute as pc

    from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState

    table = _load_table(warehouse)
    data = table.scan().to_arrow()
    problems: list[str] = []

    print(f"\nTable {TABLE} (read back through pyiceberg), partitioned by {DEMO_PARTITIONING}:")
    per_writer = Counter(data.column("writer").to_pylist())
    print(f"  {'writer':<10} {'expected':>9} {'found':>9}")
    for writer in writers:
        expected, found = batches * rows, per_writer.get(writer, 0)
        mark = "" if expected == found else "   <-- MISMATCH"
        print(f"  {writer:<10} {expected:>9} {found:>9}{mark}")
        if expected != found:
            problems.append(f"{writer}: expected {expected} rows, found {found}")
    for writer in sorted(set(per_writer) - set(writers)):
        problems.append(f"unexpected writer {writer!r} with {per_writer[writer]} rows")
    expected_total = len(writers) * batches * rows
    print(f"  {'total':<10} {expected_total:>9} {data.num_rows:>9}")
    if data.num_rows != expected_total:
        problems.append(f"total: expected {expected_total} rows, found {data.num_rows}")

    keys = Counter(zip(*(data.column(c).to_pylist() for c in ("writer", "batch", "seq")), strict=True))
    duplicated = sum(1 for n in keys.values() if n > 1)
    print(f"  distinct (writer, batch, seq) keys: {len(keys)}; keys present more than once: {duplicated}")
    if duplicated:
        problems.append(f"{duplicated} (writer, batch, seq) keys are present more than once")

    days = Counter(d.isoformat() for d in pc.cast(data.column("ts"), "date32").to_pylist())
    print("  rows per day(ts) partition: " + ", ".join(f"{d}: {n}" for d, n in sorted(days.items())))
    print(f"  data files: {len(table.inspect.files())}")

    snapshots = list(table.snapshots())
    print(f"\nSnapshots ({len(snapshots)}; outcome codes: A applied, B barrier, D duplicate, F fenced):")
    for line in _snapshot_lines(table):
        print(line)

    rerun_rows = _rerun_wal_rows(warehouse, rerun)
    print(f"\nWAL entries of {rerun[0]} batch {rerun[1]} (docs/PROTOCOL.md section 5):")
    for row in rerun_rows:
        where = f"seq {row['seq']:>3}  {row['position']:<5}  epoch {row['epoch']!s:<4}"
        print(f"  {where} {row['rows']:>6} rows  {row['outcome']}")
    outcomes = [str(row["outcome"]).removeprefix("next commit: ") for row in rerun_rows]
    if outcomes != ["APPLIED", "DUPLICATE"]:
        problems.append(f"{rerun[0]} batch {rerun[1]}: expected WAL outcomes APPLIED then DUPLICATE, found {outcomes}")
    if any(row["position"] != "below" for row in rerun_rows):
        print("  (an entry at or above the committed upper was decided without a catalog commit: nothing to add;")
        print("   the next commit on the table records it)")

    state = CommittedState.decode(table.properties.get(STATE_PROPERTY))
    print(f"\nCommitted state (table property {STATE_PROPERTY}): upper={state.upper}")
    for writer, ws in sorted(state.writers.items()):
        print(f"  {writer:<10} epoch={ws.epoch!s:<4} tail={ws.tail!s:<4} applied batch ids={ws.batches.describe()}")
        if ws.batches.intervals != ((0, batches - 1),):
            problems.append(f"{writer}: applied batch ids {ws.batches.describe()}, expected 0-{batches - 1}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every row landed exactly once."""
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_fenced_sink.demo",
        description="Concurrent exactly-once Spark writes into one local Iceberg table, read back and checked.",
    )
    parser.add_argument(
        "--warehouse", help="an empty warehouse directory (default: a fresh ./fencedlake-warehouse/demo-*)"
    )
    parser.add_argument("--writers", type=int, default=4, help="concurrent writer threads (default 4)")
    parser.add_argument("--batches", type=int, default=3, help="batch writes per writer (default 3)")
    parser.add_argument("--rows", type=int, default=5000, help="rows per batch write (default 5000)")
    args = parser.parse_args(argv)
    if args.writers < 1 or args.batches < 2 or args.rows < 1:
        parser.error("need --writers >= 1, --batches >= 2 (one batch is re-run) and --rows >= 1")

    progress = _Progress()
    warehouse = _fresh_warehouse(args.warehouse)
    writers = [f"writer-{i}" for i in range(args.writers)]
    progress.say(f"warehouse: {warehouse} (embedded SQLite catalog + local files, no servers)")
    progress.say(
        f"starting a local[2] SparkSession and the Python workers {len(writers)} concurrent writes need "
        "(a cold start takes a few seconds)"
    )
    spark = _spark(len(writers))
    try:
        progress.say(
            f"{len(writers)} writers x {args.batches} batches x {args.rows} rows -> {TABLE}, "
            f"partition-by {DEMO_PARTITIONING}, all starting at once (the first write also creates the table)"
        )
        start = threading.Barrier(len(writers))
        threads = [
            threading.Thread(
                target=_writer_thread,
                args=(spark, warehouse, w, args.batches, args.rows, start, progress),
                name=w,
                daemon=True,
            )
            for w in writers
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if progress.errors:
            print("\nFAILED: a write raised:\n  " + "\n  ".join(progress.errors), file=sys.stderr)
            return 1
        progress.say(f"all {len(writers) * args.batches} concurrent writes returned")

        before = _load_table(warehouse)
        rows_before, snaps_before = before.scan().to_arrow().num_rows, len(before.snapshots())
        rerun_writer, rerun_batch = writers[0], 1
        progress.say(
            f"re-running {rerun_writer} batch {rerun_batch} (same writer.id, writer.batch-id and rows, "
            "like a retried job): it must succeed and add nothing"
        )
        t0 = time.monotonic()
        try:
            _write(spark, warehouse, rerun_writer, rerun_batch, args.rows)
        except Exception as e:  # noqa: BLE001 - reported, and the demo exits non-zero
            print(f"\nFAILED: the idempotent re-run raised: {_error_line(e)}", file=sys.stderr)
            return 1
        after = _load_table(warehouse)
        rows_after, snaps_after = after.scan().to_arrow().num_rows, len(after.snapshots())
        progress.say(
            f"re-run returned in {time.monotonic() - t0:.1f} s: table rows {rows_before} -> {rows_after}, "
            f"snapshots {snaps_before} -> {snaps_after}"
        )
        problems = []
        if rows_after != rows_before:
            problems.append(f"the re-run changed the row count {rows_before} -> {rows_after}")
    finally:
        spark.stop()

    problems += _report(warehouse, writers, args.batches, args.rows, (rerun_writer, rerun_batch))
    elapsed = time.monotonic() - progress.started
    if problems:
        print(f"\nFAILED after {elapsed:.0f} s: not exactly once:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    total = len(writers) * args.batches * args.rows
    print(
        f"\nOK: exactly once -- {total} rows from {len(writers)} concurrent writers x {args.batches} batches, "
        f"none lost, none duplicated, the re-run added nothing ({elapsed:.0f} s).\n"
        f"Inspect: {cli_command()} status {TABLE} --warehouse {warehouse}"
    )
    return 0


def cli_command() -> str:
    """How to run the ``fencedlake`` CLI of this interpreter, from any shell (no venv activated)."""
    script = Path(sys.executable).parent / "fencedlake"  # the console script beside the venv's python
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(_shortest(script))
    return f"{shlex.quote(_shortest(Path(sys.executable)))} -m pyspark_fenced_sink.ops.cli"


def _shortest(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it, else absolute (not resolved: venvs)."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


if __name__ == "__main__":
    sys.exit(main())
