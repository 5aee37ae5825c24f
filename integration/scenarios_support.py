"""Writer lanes, process control, table checks and metrics for ``integration/test_scenarios.py``.

A *lane* is one OS process (an "app") running the sink's real driver and
executor steps -- ``WriteTransaction.begin``, ``write.task.write_task`` per task,
``WriteTransaction.commit`` -- on one or more threads, each thread a writer doing
its own plan/write/commit, exactly what a Spark application's driver and commit
worker run, minus the JVM (``pyspark_fenced_sink/testing/harness.py`` does the same in-process)::

    python -m integration.scenarios_support lane   < SPEC_JSON
    python -m integration.scenarios_support gc     < SPEC_JSON

The spec travels on stdin (it holds the catalog URI with its password: never on
a command line). Every write prints one JSON line (outcome and ``CommitResult``
metrics, or the error and the protocol stage it came from). Writes of thread
``t`` carry ids ``base + (t * writes + i) * rows ...``; stable writers use
``writer.id = <app>-t<t>`` and ``writer.batch-id = first_batch + i``.

Fault hooks in the spec: ``start_file`` (wait for it before writing: lets the
harness release many processes at once), ``stop_at`` + ``stop_nth`` (the process
SIGSTOPs *itself* at that fail point, after writing ``<marker_dir>/<point>.stopped``:
a GC pause / frozen VM at an exact protocol step; the harness resumes it with
SIGCONT), ``gap_s`` (a pause after each write: spreads a lane's writes over time so that an
outage the harness causes meets some of them). ``FENCEDLAKE_FAILPOINTS`` in the environment
arms the sink's own fail points (``pause`` for ``kill -9``).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from pyspark_fenced_sink.testing.harness import rows

ROOT = Path(__file__).resolve().parents[1]

__all__ = [
    "REPORT",
    "Lane",
    "ScenarioReport",
    "attempt_write",
    "context",
    "data_files",
    "ids_of",
    "outcomes_by_seq",
    "process_state",
    "result_record",
    "rows",
    "store_exists",
    "table_ids",
    "violations",
    "wait_for",
]


def ids_of(start: int, count: int) -> list[int]:
    """The ids :func:`rows` writes."""
    return list(range(start, start + count))


# ------------------------------------------------------------------ one write


def result_record(result: Any, **extra: Any) -> dict[str, Any]:
    """A JSON-able record of a ``CommitResult`` (what lanes print, what the report aggregates)."""
    return {
        "ok": True,
        **extra,
        "outcome": result.outcome.name,
        "seq": result.seq,
        "latency_ms": round(result.latency_ms, 1),
        "attempts": result.attempts,
        "conflicts": result.conflicts,
        "unknowns": result.unknowns,
        "catalog_commits": result.catalog_commits,
        "group": result.group,
        "for_peers": result.for_peers,
        "by_peer": result.by_peer,
    }


def attempt_write(options: Mapping[str, str], data: pa.Table, *, tasks: int = 2) -> dict[str, Any]:
    """One batch write as Spark runs it; never raises: returns :func:`result_record` or an error record.

    An error record names the stage it came from: ``plan`` (driver planning; nothing durable),
    ``tasks`` (executors; nothing in the WAL), ``commit`` (the commit worker, before its WAL
    put), or -- in lanes, which track the protocol's fail points -- ``wal``: the WAL put had
    started, so the entry may be durable and only ``CommitOutcomeUnknownError`` may leave the
    outcome open (I1).
    """
    from pyspark_fenced_sink.protocol.file_refs import encoded_path
    from pyspark_fenced_sink.spark.messages import written
    from pyspark_fenced_sink.testing.harness import commit, plan_options, write_tasks

    stage, files = "plan", []
    _last_point.name = None
    try:
        plan = plan_options(options)
        stage = "tasks"
        messages = write_tasks(plan, data, tasks)
        files = [encoded_path(f) for m in messages for f in m.files]
        stage = "commit"
        try:
            result = commit(plan, messages, abort=False)
        except BaseException:
            try:
                plan.abort(written(messages, plan.opts.table))  # what Spark does after a failed commit()
            except Exception as abort_error:
                print(f"abort after a failed commit raised {abort_error!r}", file=sys.stderr, flush=True)
            raise
    except Exception as e:
        if stage == "commit" and getattr(_last_point, "name", None) in _PUT_STARTED:
            stage = "wal"
        return {
            "ok": False,
            "stage": stage,
            "error": type(e).__name__,
            "message": str(e)[:400],
            "files": files,
            "where": _sink_frames(e),
        }
    return result_record(result, files=files)


def _sink_frames(error: BaseException) -> list[str]:
    """The sink's own frames of the error's traceback (``module.function:line``), outermost first."""
    import traceback

    return [
        f"{Path(f.filename).stem}.{f.name}:{f.lineno}"
        for f in traceback.extract_tb(error.__traceback__)
        if f"{os.sep}pyspark_fenced_sink{os.sep}" in f.filename
    ]


# ------------------------------------------------------------------ lanes (subprocess side)


#: Fail points from which a write's WAL entry may be durable (the put has started).
_PUT_STARTED = frozenset(
    {
        "commit.before-wal-put",
        "commit.after-wal-put",
        "commit.before-catalog-commit",
        "commit.after-manifests-written",
        "commit.after-catalog-commit",
    }
)
_last_point = threading.local()


def _install_hooks(stop_at: str | None, nth: int, marker_dir: str | None) -> None:
    """Lane-wide fail point handler: track each thread's last protocol step; optionally SIGSTOP at one."""
    from pyspark_fenced_sink import failpoints

    hits = 0
    lock = threading.Lock()

    def handler(name: str) -> None:
        nonlocal hits
        _last_point.name = name
        if name != stop_at:
            return
        with lock:
            hits += 1
            mine = hits == nth
        if mine:
            Path(str(marker_dir), f"{name}.stopped").write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process freezes here, mid-protocol

    failpoints.set_handler(handler)


def _prepare(spec: dict[str, Any]) -> None:
    """Client settings and fault hooks, imports, then "ready" and wait for the start file."""
    _install_hooks(spec.get("stop_at"), int(spec.get("stop_nth", 1)), spec.get("marker_dir"))
    # Import everything before "ready", so a release starts the protocol at once, not imports.
    for module in (
        "pyiceberg.catalog.sql",
        "s3fs",
        "pyspark_fenced_sink.iceberg.catalogs",
        "pyspark_fenced_sink.write.transaction",
        "pyspark_fenced_sink.iceberg.commit.table_port",
        "pyspark_fenced_sink.ops.gc",
        "pyspark_fenced_sink.testing.harness",
    ):
        importlib.import_module(module)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    start_file = spec.get("start_file")
    deadline = time.monotonic() + 300
    while start_file and not os.path.exists(start_file) and time.monotonic() < deadline:
        time.sleep(0.01)


def _lane(spec: dict[str, Any]) -> None:
    _prepare(spec)
    app, writes, count, base = spec["app"], int(spec["writes"]), int(spec["rows"]), int(spec.get("base", 0))
    stable = spec.get("stable", True)
    out_lock = threading.Lock()

    def writer(t: int) -> None:
        for i in range(writes):
            options = dict(spec["options"])
            if stable is True or (stable == "mixed" and t % 2 == 0):
                options.update(
                    {"writer.id": f"{app}-t{t}", "writer.batch-id": str(int(spec.get("first_batch", 0)) + i)}
                )
            start = base + (t * writes + i) * count
            for attempt in range(int(spec.get("retries", 0)) + 1):
                record = attempt_write(options, rows(f"{app}-t{t}", start, count))
                with out_lock:
                    print(
                        json.dumps(
                            {
                                "app": app,
                                "thread": t,
                                "write": i,
                                "attempt": attempt,
                                "start": start,
                                "count": count,
                                **record,
                            }
                        ),
                        flush=True,
                    )
                if record["ok"]:
                    break
                time.sleep(float(spec.get("retry_sleep_s", 0.5)))
            time.sleep(float(spec.get("gap_s", 0)))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(int(spec.get("threads", 1)))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _gc(spec: dict[str, Any]) -> None:
    from pyspark_fenced_sink.ops.gc import gc

    _prepare(spec)
    report = gc(context(spec["options"]), grace_s=float(spec.get("grace_s", 0)))
    print(
        json.dumps({"ok": True, "gc": True, "orphans": len(report.orphans), "wal_truncated": report.wal_truncated}),
        flush=True,
    )


def main(argv: list[str]) -> int:
    """``lane`` or ``gc``, with the JSON spec on stdin."""
    spec = json.loads(sys.stdin.read())
    {"lane": _lane, "gc": _gc}[argv[0]](spec)
    return 0


# ------------------------------------------------------------------ lanes (harness side)


class Lane:
    """A lane process started by the test, its JSON lines collected as they arrive (``module``: another program
    speaking the same protocol, e.g. ``integration.faults.app``)."""

    def __init__(
        self,
        mode: str,
        spec: Mapping[str, Any],
        *,
        env: Mapping[str, str] | None = None,
        module: str = "integration.scenarios_support",
    ) -> None:
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        if not (env or {}).get("FENCEDLAKE_FAILPOINTS"):
            full_env.pop("FENCEDLAKE_FAILPOINTS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, mode],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(dict(spec)))
        self.proc.stdin.close()
        self.records: list[dict[str, Any]] = []
        self.ready = False
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for r in self._readers:
            r.start()

    def is_ready(self) -> bool:
        """True once the lane has imported everything and waits for its start file."""
        return self.ready

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                record = json.loads(line)
                if "ready" in record:
                    self.ready = True
                else:
                    self.records.append(record)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-60]

    def stderr_tail(self) -> str:
        return "".join(self._stderr)[-3000:]

    def wait(self, timeout: float) -> int:
        """Wait for exit and for its output to be read; the exit status."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"lane pid {self.pid} still running after {timeout:.0f}s:\n{self.stderr_tail()}"
            ) from None
        for r in self._readers:
            r.join(timeout=10)
        return rc

    def kill(self) -> None:
        """SIGKILL (also wakes a stopped process: the kernel delivers SIGKILL to it)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T`` stopped, ``S`` sleeping, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def wait_for(what: str, condition: Callable[[], bool], timeout: float, lane: Lane | None = None) -> None:
    """Poll ``condition`` until true; fail naming ``what`` (and the lane's stderr) on timeout or lane exit."""
    deadline = time.monotonic() + timeout
    while not condition():
        if lane is not None and lane.proc.poll() is not None:
            raise AssertionError(f"lane exited ({lane.proc.returncode}) before {what}:\n{lane.stderr_tail()}")
        if time.monotonic() > deadline:
            tail = lane.stderr_tail() if lane is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(0.05)


# ------------------------------------------------------------------ the table


def context(options: Mapping[str, str]) -> Any:
    """The protocol context (catalog port + WAL) of the options' table."""
    from pyspark_fenced_sink.testing.harness import open_target

    return open_target(options, options["table"]).ctx


def table_ids(options: Mapping[str, str]) -> list[int]:
    """Every id in the table, sorted, WITH multiplicity (a duplicate row shows up twice)."""
    ctx = context(options)
    table = ctx.port.table(ctx.port.load())
    return sorted(table.scan().to_arrow().column("id").to_pylist())


def _filesystem(options: Mapping[str, str]) -> tuple[Any, str]:
    """(the fsspec file system ``gc`` uses for the table's location, that location as it names it)."""
    from pyspark_fenced_sink.iceberg.codec.fileio import io_properties
    from pyspark_fenced_sink.store.registry import open_filesystem

    ctx = context(options)
    table = ctx.port.table(ctx.port.load())
    return open_filesystem(table.metadata.location, io_properties(table))


def store_exists(options: Mapping[str, str]) -> Callable[[str], bool]:
    """``exists(path)`` asking the object store itself each time (S3, Azure, GCS: the table's own).

    The file systems are shared within a process and keep directory listings (``find``
    fills their caches); ``exists`` could answer from a cached listing of the parent, so a
    file written after a listing would look missing -- and a deleted one present.
    """
    from pyspark_fenced_sink.store.registry import filesystem_path

    fs, _ = _filesystem(options)

    def exists(path: str) -> bool:
        fs.invalidate_cache()
        return bool(fs.exists(filesystem_path(path)))

    return exists


def violations(options: Mapping[str, str], *, truncated: bool = False) -> list[str]:
    """``pyspark_fenced_sink.testing.invariants.check_table`` on the table and its WAL."""
    from pyspark_fenced_sink.testing.invariants import check_table

    ctx = context(options)
    table = ctx.port.table(ctx.port.load())
    return check_table(table, ctx.wal, store_exists(options), truncated=truncated)


def outcomes_by_seq(options: Mapping[str, str]) -> dict[int, tuple[Any, str | None]]:
    """Every WAL entry still in the WAL, with its recorded outcome code (None: not reconciled).

    Read from the store, not through the entries this process kept (PROTOCOL.md §3 "Reads"): a
    scenario asks what the WAL holds now.
    """
    from pyspark_fenced_sink.protocol.wal import Wal
    from pyspark_fenced_sink.testing.invariants import _records

    ctx = context(options)
    wal = Wal(ctx.wal.store, label=ctx.wal.label)
    table = ctx.port.table(ctx.port.load())
    codes: dict[int, tuple[str, str]] = {}
    for record in _records(table):
        for i, pair in enumerate(record.outcomes):
            codes[record.first + i] = pair
    out: dict[int, tuple[Any, str | None]] = {}
    for seq in wal.scan(0):
        entry = wal.read(seq)
        if entry is not None:
            token, code = codes.get(seq, ("", None))
            out[seq] = (entry, code if code is not None and entry.token.startswith(token) else None)
    return out


def data_files(options: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """(live data files of the current snapshot, every object under the table's ``data/``), as the store names them."""
    from pyspark_fenced_sink.store.registry import filesystem_path

    ctx = context(options)
    table = ctx.port.table(ctx.port.load())
    snapshot = table.current_snapshot()
    live = set()
    if snapshot is not None:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                live.add(filesystem_path(entry.data_file.file_path))
    fs, location = _filesystem(options)
    root = location.rstrip("/") + "/data"
    fs.invalidate_cache()
    # Keys ending in "/" are directory markers some clients create, not files.
    listed = {p for p in fs.find(root) if not p.endswith("/")} if fs.exists(root) else set()
    return live, listed


# ------------------------------------------------------------------ metrics


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 1)


@dataclass
class ScenarioReport:
    """Per-scenario metrics, printed at the end of the run and written as JSON."""

    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, name: str, records: list[dict[str, Any]], *, seconds: float, **extra: Any) -> dict[str, Any]:
        """Aggregate the write records of one scenario (lane lines and in-process results)."""
        ok = [r for r in records if r.get("ok") and "outcome" in r]
        errors = [r for r in records if not r.get("ok")]
        catalog_commits = sum(r["catalog_commits"] for r in ok)
        latencies = [float(r["latency_ms"]) for r in ok]
        summary = {
            "writes": len(records),
            "commits": len(ok),
            "catalog_commits": catalog_commits,
            "group_commit_factor": round(len(ok) / catalog_commits, 2) if catalog_commits else None,
            "p50_commit_ms": _percentile(latencies, 50),
            "p99_commit_ms": _percentile(latencies, 99),
            "conflicts_absorbed": sum(r["conflicts"] for r in ok),
            "unknowns_resolved": sum(r.get("unknowns", 0) for r in ok),
            "decided_by_peer": sum(1 for r in ok if r["by_peer"]),
            "fences": sum(1 for r in errors if r.get("error") == "FencedWriterError"),
            "errors": sum(1 for r in errors if r.get("error") != "FencedWriterError"),
            "seconds": round(seconds, 1),
            **extra,
        }
        self.scenarios[name] = summary
        return summary

    def lines(self) -> list[str]:
        """A fixed-width table, one line per scenario."""
        cols = [
            ("writes", 6),
            ("commits", 7),
            ("catalog_commits", 7),
            ("group_commit_factor", 6),
            ("p50_commit_ms", 8),
            ("p99_commit_ms", 8),
            ("conflicts_absorbed", 9),
            ("unknowns_resolved", 8),
            ("fences", 6),
            ("errors", 6),
            ("seconds", 7),
        ]
        heads = [
            "writes",
            "commits",
            "cat.com",
            "group",
            "p50 ms",
            "p99 ms",
            "conflicts",
            "unknowns",
            "fences",
            "errors",
            "secs",
        ]
        width = max([len(n) for n in self.scenarios] + [8])
        out = ["scenario".ljust(width) + "".join(h.rjust(w + 1) for h, (_, w) in zip(heads, cols, strict=True))]
        for name, s in self.scenarios.items():
            cells = ["-" if s.get(k) is None else str(s[k]) for k, _ in cols]
            out.append(name.ljust(width) + "".join(c.rjust(w + 1) for c, (_, w) in zip(cells, cols, strict=True)))
        return out

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"scenarios": self.scenarios}, indent=2, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> ScenarioReport:
        """The report :meth:`write` wrote to ``path``."""
        return cls(json.loads(path.read_text())["scenarios"])


REPORT = ScenarioReport()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
