"""Suite "anchor": N Spark applications x T threads appending to one table, Iceberg's Spark writer vs fencedlake.

The comparison users make: several Spark applications appending to one Iceberg table at once
through Iceberg's own Spark writer (``df.writeTo(table).append()``, the ``iceberg-spark-runtime``
jar, Iceberg Java's commit retries: ``commit.retry.num-retries`` 4 by default), or through
``format("fencedlake")``. Both write to the same catalog in the same run, rounds interleaved:

* ``PostgreSQL`` -- Iceberg's ``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` on the integration suite's
  PostgreSQL database (one catalog name, so one set of tables), warehouse on local disk;
* ``Iceberg REST`` -- Apache Iceberg's REST fixture (integration/services/iceberg_rest.sh) for both,
  warehouse on the suite's S3 server.

Each application is one OS process with its own SparkSession (local[2]), started once and reused;
every round releases all N x T threads at one instant, each making K appends of R rows. Reported per
(catalog, writer, N x T): writes landed / attempted, errors surfaced to the caller by kind (Iceberg's
``CommitFailedException`` after its retries, ...), snapshots the writes made (catalog commits) and
writes per commit, rows landed per second of wall time (release to the last outcome) and the ratio to
Iceberg's writer in the same run, p50/p99 latency of a landed write. Every round verifies the table:
each landed write's rows exactly once, none of a failed write.

Needs the interop venv (pyspark matching Iceberg's runtime), the jars (integration/jvm/fetch.sh) and
the services' environment (``FENCEDLAKE_IT_PG_URI``, ``FENCEDLAKE_IT_ICEBERG_REST_URI``,
``FENCEDLAKE_IT_S3_ENDPOINT``): run it through integration/interop/test_anchor.py, or by hand with
``python -m benchmarks.anchor --quick|--full`` inside those. An application process is
``python -m benchmarks.anchor --app`` (commands as JSON lines on stdin: they carry the catalog password).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from benchmarks.common import BenchmarkError, SuiteResult, median, percentile, ratio

__all__ = ["FENCED", "ICEBERG", "PROFILES", "catalogs_from_env", "run"]

ROOT = Path(__file__).resolve().parents[1]
MARK = "@@"
ICEBERG, FENCED = "iceberg-spark", "fencedlake"
SCHEMA_DDL = "id BIGINT, ts TIMESTAMP, name STRING"

PROFILES: dict[str, dict[str, Any]] = {
    # CI's smoke size: no warm-up rounds, so its figures include cold starts (not for publishing).
    "quick": {"apps": 2, "threads": 2, "writes": 2, "rows": 1000, "reps": 1, "warmup": False},
    "full": {"apps": 4, "threads": 8, "writes": 3, "rows": 1000, "reps": 2, "warmup": True},
}

# ------------------------------------------------------------------------------------ application side


def _send(obj: Any) -> None:
    sys.stdout.write(f"{MARK}{json.dumps(obj)}\n")
    sys.stdout.flush()


def _error_kind(error: BaseException) -> str:
    import re

    text = str(error)
    found = re.search(r"org\.apache\.iceberg\.exceptions\.(\w+)", text)
    if found:
        return found.group(1)
    from pyspark_fenced_sink import fencedlake_error

    typed = fencedlake_error(error)
    return type(typed or error).__name__


def _app_round(spark: Any, cmd: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one round in this application: T threads x K writes, released at ``start_at``."""
    from pyspark_fenced_sink import activate_session

    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def thread(t: int) -> None:
        activate_session(spark)
        while time.time() < cmd["start_at"]:
            time.sleep(0.005)
        for k in range(cmd["writes"]):
            base = cmd["base"] + (t * cmd["writes"] + k) * cmd["rows"]
            df = spark.range(base, base + cmd["rows"], numPartitions=1).selectExpr(
                "id", "current_timestamp() AS ts", f"'app{cmd['app']}-t{t}' AS name"
            )
            t0 = time.time()
            try:
                if cmd["writer"] == ICEBERG:
                    df.writeTo(cmd["java_table"]).append()
                else:
                    df.write.format("fencedlake").mode("append").options(**cmd["options"]).save()
                rec = {"ok": True}
            except Exception as e:  # noqa: BLE001 - every failure is a result here
                rec = {"ok": False, "error": _error_kind(e)}
            with lock:
                records.append({**rec, "t0": t0, "t1": time.time(), "base": base, "rows": cmd["rows"]})

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(cmd["threads"])]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return records


#: One process of an application's tree: (parent pid, is the JVM, own CPU s, CPU s of the children it reaped).
_Proc = tuple[int, bool, float, float]


def _proc(pid: str, tick: int) -> _Proc | None:
    """One process's entry of :func:`_tree` from ``/proc/<pid>/stat``; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    times = [int(x) / tick for x in rest[11:15]]  # utime stime cutime cstime
    return int(rest[1]), name == "java", times[0] + times[1], times[2] + times[3]


def _tree(root: int) -> dict[int, _Proc]:
    """``root`` and its descendants now (Linux ``/proc``, read once into a parent -> children map)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, _Proc] = {}
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (proc := _proc(d, tick)) is not None:
            procs[int(d)] = proc
            children.setdefault(proc[0], []).append(int(d))
    kept, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            kept[pid] = procs[pid]
            todo += children.get(pid, [])
    return kept


def _cpu_between(before: dict[int, _Proc], after: dict[int, _Proc]) -> dict[str, float]:
    """CPU seconds the tree used between two :func:`_tree` snapshots, the JVM apart from the Python processes.

    A process's own time goes to its kind. What a parent reaped in between (a worker that exited) is
    Python's (the JVM's children are Python daemons), less what those children had used before, at
    least 0: pyspark's daemon ignores SIGCHLD, so the kernel reaps its workers without adding their
    time to it -- a worker that exits during a round takes its CPU along (rare in a measured round).
    """
    used = {"jvm": 0.0, "python": 0.0}
    gone: dict[int, float] = {}
    for pid, (parent, _, own, reaped) in before.items():
        if pid not in after:
            gone[parent] = gone.get(parent, 0.0) + own + reaped
    for pid, (_, jvm, own, reaped) in after.items():
        own0, reaped0 = before[pid][2:] if pid in before else (0.0, 0.0)
        used["jvm" if jvm else "python"] += own - own0
        used["python"] += max(0.0, reaped - reaped0 - gone.get(pid, 0.0))
    return used


def app_main() -> None:
    """An application: a SparkSession with Iceberg's runtime that runs rounds sent on stdin."""
    from pyspark.sql import SparkSession

    from pyspark_fenced_sink import tune_session

    init = json.loads(sys.stdin.readline())
    builder = SparkSession.builder.master("local[2]").appName(f"anchor-app{init['app']}")
    conf = {
        "spark.jars": ",".join(init["jars"]),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "768m",
    }
    for name, props in init["catalogs"].items():
        conf[f"spark.sql.catalog.{name}"] = "org.apache.iceberg.spark.SparkCatalog"
        conf |= {f"spark.sql.catalog.{name}.{k}": v for k, v in props.items()}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tune_session(spark)
    _send({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "stop":
            break
        before = _tree(os.getpid())
        records = _app_round(spark, cmd)
        _send({"records": records, "cpu_s": _cpu_between(before, _tree(os.getpid()))})
    spark.stop()


# ------------------------------------------------------------------------------------ coordinator side


def catalogs_from_env(workdir: Path) -> dict[str, dict[str, Any]]:
    """The catalogs the services offer: name -> {label, spark: SparkCatalog props, pyiceberg: props}."""
    out: dict[str, dict[str, Any]] = {}
    pg = os.environ.get("FENCEDLAKE_IT_PG_URI")
    if pg:
        parts = urlsplit(pg)
        warehouse = (workdir / "pg-warehouse").as_uri()
        out["anchor_pg"] = {
            "label": "PostgreSQL",
            "spark": {
                "type": "jdbc",
                "uri": f"jdbc:postgresql://{parts.hostname}:{parts.port}{parts.path}",
                "jdbc.user": unquote(parts.username or ""),
                "jdbc.password": unquote(parts.password or ""),
                "warehouse": warehouse,
            },
            "pyiceberg": {"type": "sql", "uri": pg, "warehouse": warehouse},
        }
    rest, s3 = os.environ.get("FENCEDLAKE_IT_ICEBERG_REST_URI"), os.environ.get("FENCEDLAKE_IT_S3_ENDPOINT")
    if rest and s3:
        region = os.environ.get("AWS_REGION", "us-east-1")
        out["anchor_rest"] = {
            "label": "Iceberg REST",
            "spark": {
                "type": "rest",
                "uri": rest,
                "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                "s3.endpoint": s3,
                "s3.path-style-access": "true",
                "client.region": region,
            },
            "pyiceberg": {
                "type": "rest",
                "uri": rest,
                "s3.endpoint": s3,
                "s3.region": region,
                "s3.path-style-access": "true",
            },
        }
    return out


class _App:
    """One application process."""

    def __init__(self, app: int, jars: list[str], catalogs: dict[str, dict[str, Any]], log_dir: Path) -> None:
        self.app = app
        self.stderr = (log_dir / f"app{app}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.anchor", "--app"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.send({"app": app, "jars": jars, "catalogs": {n: c["spark"] for n, c in catalogs.items()}})

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                out: dict[str, Any] = json.loads(line[len(MARK) :])
                return out
        raise BenchmarkError(f"application {self.app} exited {self.proc.wait()} (log: {self.stderr.name})")

    def stop(self) -> None:
        try:
            self.send({"cmd": "stop"})
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.stderr.close()


def _new_table(catalog: dict[str, Any], name: str) -> str:
    """Create an empty table (pyiceberg) both writers can append to; returns ``namespace.table``."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    py = load_catalog(name, **catalog["pyiceberg"])
    namespace = f"anchor_{uuid.uuid4().hex[:10]}"
    py.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "ts", TimestamptzType()), NestedField(3, "name", StringType())
    )
    py.create_table(f"{namespace}.events", schema, properties={"format-version": "2"})
    return f"{namespace}.events"


def _verify(catalog: dict[str, Any], name: str, table: str, records: list[dict[str, Any]]) -> tuple[int, int]:
    """Every landed write's rows exactly once, none of a failed one; returns (snapshots, rows)."""
    from pyiceberg.catalog import load_catalog

    loaded = load_catalog(name, **catalog["pyiceberg"]).load_table(table)
    found = Counter(loaded.scan().to_arrow().column("id").to_pylist())
    expected = Counter(i for r in records if r["ok"] for i in range(r["base"], r["base"] + r["rows"]))
    failed = {i for r in records if not r["ok"] for i in range(r["base"], r["base"] + r["rows"])}
    if found != expected:
        lost = sum((expected - found).values())
        extra = sum((found - expected).values())
        raise BenchmarkError(
            f"{table}: {lost} landed rows missing, {extra} unexpected (failed writes: {len(failed)} rows)"
        )
    return len(loaded.metadata.snapshots), sum(found.values())


def _round(apps: list[_App], catalog: dict[str, Any], name: str, writer: str, prof: dict[str, Any]) -> dict[str, Any]:
    table = _new_table(catalog, name)
    options = {"table": table, "catalog": name, **{f"catalog.{k}": v for k, v in catalog["pyiceberg"].items()}}
    start_at = time.time() + 2.0  # every application has received the round
    for a in apps:
        a.send(
            {
                "writer": writer,
                "java_table": f"{name}.{table}",
                "options": options,
                "app": a.app,
                "base": a.app * 10_000_000,
                "start_at": start_at,
                **{k: prof[k] for k in ("threads", "writes", "rows")},
            }
        )
    answers = [a.receive() for a in apps]
    records = [r for answer in answers for r in answer["records"]]
    cpu = {k: sum(answer["cpu_s"][k] for answer in answers) for k in ("jvm", "python")}
    snapshots, rows = _verify(catalog, name, table, records)
    landed = [r for r in records if r["ok"]]
    wall = max(r["t1"] for r in records) - start_at
    latencies = [(r["t1"] - r["t0"]) * 1000 for r in landed]
    return {
        "writes": len(records),
        "landed": len(landed),
        "errors": dict(Counter(r["error"] for r in records if not r["ok"])),
        "snapshots": snapshots,
        "rows_per_s": rows / wall if wall > 0 else 0.0,
        "latencies": latencies,
        "cpu_s": cpu,
    }


def run(
    *,
    apps: int,
    threads: int,
    writes: int,
    rows: int,
    reps: int,
    jars: list[str],
    warmup: bool = True,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """Measure both writers on every catalog the environment offers; see the module docstring."""
    work = Path(tempfile.mkdtemp(prefix="anchor-", dir=workdir))
    catalogs = catalogs_from_env(work)
    if not catalogs:
        raise BenchmarkError("no catalog configured: run inside integration/run.sh (FENCEDLAKE_IT_PG_URI, ...)")
    prof = {"threads": threads, "writes": writes, "rows": rows}
    log(f"[anchor] starting {apps} Spark applications ...")
    procs = [_App(a, jars, catalogs, work) for a in range(apps)]
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for p in procs:
            p.receive()
        for rep in range(reps):
            for name, catalog in catalogs.items():
                for writer in (ICEBERG, FENCED) if rep % 2 == 0 else (FENCED, ICEBERG):
                    if warmup:
                        # Not measured: one write per thread right before the round, so that every thread's
                        # write finds warm workers -- Spark keeps idle Python workers for a minute only, and a
                        # cold one imports pyiceberg & co. first; JVM classes and catalog connections, too.
                        _round(procs, catalog, name, writer, {**prof, "writes": 1, "rows": 10})
                    res = _round(procs, catalog, name, writer, prof)
                    samples.setdefault((name, writer), []).append(res)
                    log(
                        f"[anchor] {catalog['label']} {writer} rep {rep}: {res['landed']}/{res['writes']} landed, "
                        f"{res['rows_per_s']:.0f} rows/s, errors {res['errors']}"
                    )
    finally:
        for p in procs:
            p.stop()
    res = _result(catalogs, samples, apps, prof, reps, warmup)
    import pyspark

    from pyspark_fenced_sink.spark.workers import GC_FREEZE_ENV, ZIP_CACHE_ENV

    switches = ", ".join(f"{k}={os.environ.get(k, '1')}" for k in (GC_FREEZE_ENV, ZIP_CACHE_ENV))
    res.notes.append(f"pyspark {pyspark.__version__}; the sink's worker switches: {switches}.")
    res.notes.append(
        "App CPU: the applications' process trees (the JVM; the driver program and its Python workers) during "
        "the measured rounds, per landed write (a failed write's CPU counts too)."
    )
    return res


def _result(
    catalogs: dict[str, dict[str, Any]],
    samples: dict[tuple[str, str], list[dict[str, Any]]],
    apps: int,
    prof: dict[str, Any],
    reps: int,
    warmup: bool,
) -> SuiteResult:
    res = SuiteResult(
        "anchor",
        f"Anchor: {apps} Spark applications x {prof['threads']} threads appending to one table "
        f"({prof['writes']} writes of {prof['rows']} rows each per thread), Iceberg's Spark writer vs fencedlake",
        columns=[
            "catalog",
            "writer",
            "landed",
            "errors surfaced",
            "catalog commits",
            "writes per commit",
            "rows landed/s",
            "vs Iceberg",
            "p50 ms",
            "p99 ms",
            "app CPU s per landed write (JVM + Python)",
        ],
    )
    for name, catalog in catalogs.items():
        base = median([s["rows_per_s"] for s in samples.get((name, ICEBERG), [])])
        for writer in (ICEBERG, FENCED):
            runs = samples.get((name, writer), [])
            landed, writes = sum(s["landed"] for s in runs), sum(s["writes"] for s in runs)
            commits = sum(s["snapshots"] for s in runs)
            errors: Counter[str] = Counter()
            for s in runs:
                errors.update(s["errors"])
            lat = [x for s in runs for x in s["latencies"]]
            speed = median([s["rows_per_s"] for s in runs])
            res.rows.append(
                {
                    "catalog": catalog["label"],
                    "writer": writer,
                    "landed": f"{landed}/{writes}",
                    "errors surfaced": ", ".join(f"{n} {k}" for k, n in errors.items()) or "0",
                    "catalog commits": commits,
                    "writes per commit": round(landed / commits, 2) if commits else "-",
                    "rows landed/s": round(speed),
                    "vs Iceberg": "—" if writer == ICEBERG else round(ratio(speed, base), 2),
                    "p50 ms": round(median(lat)) if lat else "-",
                    "p99 ms": round(percentile(lat, 99)) if lat else "-",
                    "app CPU s per landed write (JVM + Python)": _cpu_per_write(runs, landed),
                }
            )
            if writer == FENCED and landed != writes:
                res.warnings.append(f"{catalog['label']}: fencedlake landed {landed} of {writes} writes")
        _goals(res, catalog["label"], samples.get((name, ICEBERG), []), samples.get((name, FENCED), []))
    res.notes.append(f"{reps} interleaved round(s) per (catalog, writer); rows/s is the median over rounds.")
    if not warmup:
        res.notes.append("No warm-up rounds (the CI smoke size): the figures include cold starts; do not publish them.")
    res.data = {"samples": {f"{n}/{w}": v for (n, w), v in samples.items()}, "apps": apps, **prof}
    return res


def _cpu_per_write(runs: list[dict[str, Any]], landed: int) -> str:
    """The applications' CPU seconds (JVM, their Python processes) per landed write, over ``runs``."""
    if not landed:
        return "-"
    jvm, py = (sum(s.get("cpu_s", {}).get(k, 0.0) for s in runs) / landed for k in ("jvm", "python"))
    return f"{jvm + py:.2f} ({jvm:.2f} + {py:.2f})"


#: Issue 31's goals against the anchor: landed rows/s at least this many times Iceberg's, and a p50 no longer.
GOAL_ROWS_RATIO = 1.5


def _goals(res: SuiteResult, label: str, iceberg: list[dict[str, Any]], fenced: list[dict[str, Any]]) -> None:
    """WARN lines for the goals fencedlake missed beside Iceberg's writer on one catalog (never a failure)."""
    if not iceberg or not fenced:
        return
    speed = ratio(median([s["rows_per_s"] for s in fenced]), median([s["rows_per_s"] for s in iceberg]))
    if speed < GOAL_ROWS_RATIO:
        res.warnings.append(f"{label}: fencedlake's landed rows/s {speed:.2f}x Iceberg's (goal >= {GOAL_ROWS_RATIO}x)")
    mine, theirs = ([x for s in runs for x in s["latencies"]] for runs in (fenced, iceberg))
    if mine and theirs and median(mine) > median(theirs):
        res.warnings.append(
            f"{label}: fencedlake's p50 {median(mine):.0f} ms > Iceberg's {median(theirs):.0f} ms (goal: no longer)"
        )


@contextlib.contextmanager
def network_latency(store_ms: int, catalog_ms: int) -> Iterator[str]:
    """Route the suite's S3, PostgreSQL and REST clients through toxiproxy with this latency added per response.

    The applications reach the services through proxies (integration/faults/toxiproxy.py): the environment's
    ``FENCEDLAKE_IT_*`` addresses are pointed at them for the block. The REST fixture's own S3 traffic is
    the fixture's, not the writers': it is not delayed. Yields a note for the report.
    """
    from integration.faults.toxiproxy import start_service, stop_service

    keys = {"FENCEDLAKE_IT_PG_URI": catalog_ms, "FENCEDLAKE_IT_ICEBERG_REST_URI": catalog_ms}
    keys["FENCEDLAKE_IT_S3_ENDPOINT"] = store_ms
    saved = {k: os.environ.get(k) for k in keys}
    api = start_service()
    try:
        for key, ms in keys.items():
            value = saved[key]
            if not value:
                continue
            parts = urlsplit(value)
            proxy = api.create(f"anchor-{key.lower()}", upstream=f"{parts.hostname}:{parts.port}")
            proxy.add_toxic("latency", latency=ms)
            os.environ[key] = value.replace(parts.netloc.rsplit("@", 1)[-1], proxy.listen, 1)
        yield f"network latency through toxiproxy: {store_ms} ms per S3 response, {catalog_ms} ms per catalog response"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop_service()


def _jars() -> list[str]:
    out = subprocess.run(
        [str(ROOT / "integration" / "jvm" / "fetch.sh"), "--classpath", "spark"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise BenchmarkError(f"integration/jvm/fetch.sh failed: {out.stderr[-1000:]}")
    return [p for p in out.stdout.strip().split(":") if p.endswith(".jar")]


def main(argv: list[str] | None = None) -> int:
    """``--app``: be an application; else run the suite (``--quick``/``--full``) and write its results."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.anchor", description=__doc__.split("\n\n")[0])
    p.add_argument("--app", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--full", action="store_true", help="the real measurement (default: --quick sizes)")
    p.add_argument("--quick", action="store_true", help="CI sizes (the default)")
    p.add_argument("--out", default=str(ROOT / ".benchmarks-out"), help="results directory [.benchmarks-out]")
    p.add_argument("--apps", type=int, help="applications (default: the profile's)")
    p.add_argument("--threads", type=int, help="threads per application (default: the profile's)")
    p.add_argument("--reps", type=int, help="interleaved rounds per (catalog, writer) (default: the profile's)")
    p.add_argument(
        "--latency",
        metavar="STORE_MS,CATALOG_MS",
        help="add this latency to every S3 / catalog response through toxiproxy (e.g. 20,100)",
    )
    args = p.parse_args(argv)
    if args.app:
        app_main()
        return 0
    mode = "full" if args.full else "quick"
    prof = dict(PROFILES[mode])
    prof.update({k: v for k in ("apps", "threads", "reps") if (v := getattr(args, k)) is not None})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        note = ""
        if args.latency:
            store_ms, catalog_ms = (int(x) for x in args.latency.split(","))
            note = stack.enter_context(network_latency(store_ms, catalog_ms))
            mode += f"-latency-{store_ms}-{catalog_ms}"
        res = run(**prof, jars=_jars())
        if note:
            res.notes.append(note)
    res.seconds = time.perf_counter() - t0
    mode += f"-{prof['apps']}x{prof['threads']}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"results-anchor-{mode}.md").write_text(res.markdown())
    (out / f"results-anchor-{mode}.json").write_text(json.dumps(res.to_json(), indent=1, default=str))
    print(res.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
