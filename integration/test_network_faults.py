"""Real networks between every writer and its services: toxiproxy links, schedules, a history checker.

Every app under test reaches S3 and PostgreSQL (and Iceberg's REST fixture) through its own
toxiproxy links (integration/faults/network.py); nothing in the writers is faked.

1. botocore's own retry of a conditional PUT whose first answer was lost (the server applied
   it, the connection was reset on the way back): the retry gets 412 and the owner token
   says the object is ours (I7).
2. A toxic on one kind of request -- the WAL LIST + PUT, what follows the put (LIST, entry
   reads, manifest writes), the catalog commit, the table read at planning -- armed at the
   fail point before it: resets, responses cut after N bytes, stalls, sliced packets.
3. Schedules (integration/faults/schedule.py): a batch-thread app, an idempotent-jobs app and
   a Spark application (batch jobs, a streaming query, upserts) write at once while the
   schedule applies latency to every link and, in turn, resets, cut responses, stalls, a
   partition of one app, the catalog down, the proxy restarted; then the table is recovered
   and the history checked (integration/faults/history.py) and ``gc`` must leave no orphan.

CI runs a sized profile (one mixed schedule; 7 of the 40 request-kind cases, a baseline among them;
about 6 minutes on a quiet machine);
``FENCEDLAKE_FAULTS_FULL=1`` runs every schedule and the whole matrix. Figures go to
``.integration/network-faults.json`` (docs/FAULTS.md).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.conftest import Services
from integration.faults.history import attempt, check, check_upserts
from integration.faults.network import BOUNDS, Network
from integration.faults.schedule import CI, FULL, Schedule, run_schedule
from integration.faults.toxiproxy import Toxiproxy, start_service, stop_service
from integration.scenarios_support import Lane, context, data_files, outcomes_by_seq, wait_for
from integration.targets import target_options

pytestmark = [pytest.mark.integration, pytest.mark.multiprocess]

FAULTS_FULL = os.environ.get("FENCEDLAKE_FAULTS_FULL", "") == "1"
#: The stated bound: no attempt of a write takes longer than commit.max-wait-ms plus this (planning, the claim's
#: store requests and one catalog request in flight at the deadline, each bounded by BOUNDS' timeouts).
HANG_SLACK_S = 90.0
#: A Spark application's write also waits for Spark: planning and commit in Python workers the JVM starts, tasks
#: retried after a failure (spark.task.maxFailures). Measured up to 3 minutes under a load of 12-16 on 2 cores.
SPARK_SLACK_S = 180.0
REPORT: dict[str, Any] = {}


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[Toxiproxy]:
    """The toxiproxy server for this module (built with Go the first time; skipped where Go is missing)."""
    api = start_service()
    api.reset()
    yield api
    stop_service()
    if REPORT:
        (_state_dir() / "network-faults.json").write_text(json.dumps(REPORT, indent=2, sort_keys=True) + "\n")


def _state_dir() -> Path:
    """Where the figures go (``$FENCEDLAKE_IT_STATE``, default ``.integration``)."""
    path = Path(os.environ.get("FENCEDLAKE_IT_STATE") or Path(__file__).parents[1] / ".integration")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def network(services: Services, toxiproxy: Toxiproxy) -> Iterator[Network]:
    """Links for this test's apps; removed afterwards."""
    net = Network.of(
        toxiproxy, s3_endpoint=services.s3_endpoint, pg_uri=services.pg_uri, rest_uri=services.iceberg_rest_uri
    )
    yield net
    for proxy in net.links.values():
        net.api.delete(proxy.name)


# ------------------------------------------------------------------ 1. botocore's retry of a lost answer


def _link_props(services: Services, link: Any) -> dict[str, str]:
    """FileIO properties of an S3 client that reaches the S3 server through ``link``."""
    return {
        "s3.endpoint": f"http://{link.listen}",
        "s3.access-key-id": services.aws_access_key_id,
        "s3.secret-access-key": services.aws_secret_access_key,
        "s3.region": services.aws_region,
        "s3.request-timeout": "5",
    }


def _claim_counting_puts(store: Any) -> tuple[Any, list[bool]]:
    """``claim_key`` of one WAL entry through ``store``, and what each of its ``put_if_absent`` calls answered."""
    from pyspark_fenced_sink.store.base import claim_key

    puts: list[bool] = []
    real_put = store.put_if_absent

    def counted(key: str, data: bytes) -> bool:
        puts.append(real_put(key, data))
        return puts[-1]

    store.put_if_absent = counted
    body = b'{"token": "mine-0123456789"}'
    claim = claim_key(store, "wal/00000000000000000001", body, "mine-0123456789", lambda b: json.loads(b)["token"])
    assert store.get("wal/00000000000000000001") == body
    return claim, puts


def test_botocore_retry_of_a_conditional_put_whose_answer_was_lost_is_resolved_by_the_owner_token(
    services: Services, network: Network
) -> None:
    """The WAL put lands, its answer is reset on the way back; botocore re-sends it (412): the token says ours."""
    from pyspark_fenced_sink.store.base import Claim
    from pyspark_fenced_sink.store.s3 import S3Store, s3_filesystem

    link = network.link("i7", "s3")
    fs = s3_filesystem(_link_props(services, link))
    store = S3Store(f"{services.s3_bucket}/it/i7-{uuid.uuid4().hex[:12]}", fs)
    fs.connect()
    sends: list[int] = []
    toxic = link.add_toxic("reset_peer", stream="downstream", timeout=0)  # answers lost, requests applied

    def before_send(**kwargs: Any) -> None:
        sends.append(1)
        if len(sends) == 2:
            link.remove_toxic(toxic)  # botocore's own retry gets through (and finds the object)

    fs.s3.meta.events.register("before-send.s3.PutObject", before_send)
    claim, puts = _claim_counting_puts(store)

    assert len(sends) == 2, f"botocore sent the PUT {len(sends)} times: its own retry was not exercised"
    assert puts == [False], "the retry's 412 must reach the protocol as 'exists', resolved by the token"
    assert claim is Claim.OURS


def test_http_store_retry_of_a_conditional_put_whose_answer_was_lost_is_resolved_by_the_owner_token(
    services: Services, network: Network
) -> None:
    """The same through the plain-HTTP S3 store the WAL uses by default: its own retry's 412 is resolved as ours."""
    from pyspark_fenced_sink.store.base import Claim
    from pyspark_fenced_sink.store.s3_http import S3HttpStore, http_store

    link = network.link("i7-http", "s3")
    store = http_store(f"{services.s3_bucket}/it/i7h-{uuid.uuid4().hex[:12]}", _link_props(services, link))
    assert isinstance(store, S3HttpStore)
    sends: list[str] = []
    toxic = link.add_toxic("reset_peer", stream="downstream", timeout=0)  # answers lost, requests applied
    real_once = store.client._once

    def once(method: str, *args: Any) -> Any:
        sends.append(method)
        try:
            return real_once(method, *args)
        finally:
            if len(sends) == 1:
                link.remove_toxic(toxic)  # the client's own retry gets through (and finds the object)

    store.client._once = once  # type: ignore[method-assign]
    claim, puts = _claim_counting_puts(store)

    assert sends[:2] == ["PUT", "PUT"], f"the client's own retry was not exercised: {sends}"
    assert puts == [False], "the retry's 412 must reach the protocol as 'exists', resolved by the token"
    assert claim is Claim.OURS


# ------------------------------------------------------------------ 2. a toxic on one kind of request

#: Request kind -> (fail point it is armed at, links it hits; "catalog" is PostgreSQL or the REST fixture).
#: "table-read" is armed before planning.
REQUEST_KINDS = {
    "wal-list-put": ("commit.before-wal-put", ("s3",)),
    "after-put": ("commit.after-wal-put", ("s3",)),
    "catalog-commit": ("commit.before-catalog-commit", ("catalog",)),
    "table-read": ("", ("catalog", "s3")),
}
TOXICS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "none": (None, {}),  # the baseline each fault's latency is compared with, in the same run
    "reset": ("reset_peer", {"timeout": 0}),
    "cut": ("limit_data", {"bytes": 120}),
    "stall": ("timeout", {"timeout": 2500}),
    "sliced": ("slicer", {"average_size": 16, "size_variation": 8, "delay": 500}),
}
#: The CI profile: a baseline and each kind of request once.
_CI_PAIRS = {
    ("wal-list-put", "none"),
    ("wal-list-put", "reset"),
    ("after-put", "cut"),
    ("catalog-commit", "stall"),
    ("table-read", "cut"),
}


#: On Apache Iceberg's REST fixture (behind its own link), the CI profile: a commit whose answer never comes
#: (the request timeout, then an unknown outcome resolved by reading back) and a table read reset.
_CI_REST_PAIRS = {("catalog-commit", "stall"), ("table-read", "reset")}


def _request_cases() -> list[Any]:
    return [
        pytest.param(target, kind, toxic, id=f"{target}-{kind}-{toxic}")
        for target, pairs in (("pg-s3", _CI_PAIRS), ("iceberg-rest-s3", _CI_REST_PAIRS))
        for kind in REQUEST_KINDS
        for toxic in TOXICS
        if FAULTS_FULL or (kind, toxic) in pairs
    ]


@pytest.mark.parametrize(("target", "kind", "toxic"), _request_cases())
def test_toxic_on_one_kind_of_request_loses_and_duplicates_nothing(
    services: Services, network: Network, target: str, kind: str, toxic: str
) -> None:
    """A toxic armed just before one kind of request, for 1.5 s: each write lands once or raises a typed error."""
    from pyspark_fenced_sink import failpoints
    from pyspark_fenced_sink.protocol.commit import recover
    from pyspark_fenced_sink.spark.messages import written
    from pyspark_fenced_sink.testing.harness import commit, plan_options, rows, write_tasks

    direct = target_options(services, target)
    options = network.options("req", direct)
    point, services_hit = REQUEST_KINDS[kind]
    catalog = "rest" if target == "iceberg-rest-s3" else "pg"
    links = tuple(catalog if s == "catalog" else s for s in services_hit)
    toxic_kind, attributes = TOXICS[toxic]
    armed: list[str] = []
    timers: list[threading.Timer] = []
    lock = threading.Lock()

    def arm() -> None:
        with lock:
            if armed:
                return
            for service in links:
                proxy = network.link("req", service)
                armed.append(service)
                if toxic_kind is not None:
                    name = proxy.add_toxic(toxic_kind, name="req", **attributes)
                    timer = threading.Timer(1.5, proxy.remove_toxic, args=(name,))
                    timer.start()
                    timers.append(timer)

    def write(i: int, *, faulty: bool = True) -> str:
        if faulty and not point:
            arm()
        plan = plan_options({**options, "writer.id": "req", "writer.batch-id": str(i)} if i % 2 else options)
        messages = write_tasks(plan, rows("req", i * 100, 20), 2)
        try:
            return commit(plan, messages, abort=False).outcome.name
        except BaseException:
            plan.abort(written(messages, plan.opts.table))
            raise

    seed = attempt("seed", (-200, 20), time.monotonic(), lambda: write(-2, faulty=False), app="req")
    assert seed["ok"], seed["message"]
    failpoints.set_handler(lambda name: arm() if name == point else None)
    records = []
    try:
        for i in range(3):
            armed.clear()
            records.append(attempt(f"w{i}", (i * 100, 20), time.monotonic(), lambda i=i: write(i), app="req"))
            for timer in timers:  # the toxic is gone before the next write (at once if the write outlasted it)
                timer.join()
            timers.clear()
    finally:
        failpoints.set_handler(None)
    assert armed, f"the fail point {point} was never reached: the toxic hit nothing"

    ctx = context(direct)
    recover(ctx)
    table = ctx.port.table(ctx.port.load())
    ids = table.scan().to_arrow().column("id").to_pylist()
    entries = outcomes_by_seq(direct)
    verdict = check([seed, *records], ids, lambda seq: entries.get(seq, (None, None))[1], bound_s=_bound_s())
    assert verdict.violations == [], verdict.violations
    # A fault of 1.5 s, far shorter than commit.max-wait-ms, must not leave an outcome open.
    unknown = [r["message"] for r in records if r.get("unknown")]
    assert unknown == [], unknown
    REPORT.setdefault("requests", {})[f"{target}/{kind}/{toxic}"] = {
        "ok": sum(r["ok"] for r in records),
        "errors": sorted(f"{r.get('error')}: {str(r.get('message'))[:200]}" for r in records if not r["ok"]),
        "seconds": [r["seconds"] for r in records],
    }


def _bound_s() -> float:
    return int(BOUNDS["commit.max-wait-ms"]) / 1000 + HANG_SLACK_S


# ------------------------------------------------------------------ 3. schedules over several apps


def _apps(net: Network, direct: dict[str, str], upsert_direct: dict[str, str], root: Path) -> dict[str, Lane]:
    start, stop = str(root / "go"), str(root / "stop")
    common = {"start_file": start, "stop_file": stop, "rows": 20, "min_writes": 2, "max_writes": 200}
    specs = {
        "lane0": {"kind": "lane", "threads": 2, "stable": False, "base": 1_000_000, "gap_s": 0.7},
        "lane1": {"kind": "lane", "threads": 2, "stable": True, "retries": 30, "base": 2_000_000, "gap_s": 0.7},
        "spark0": {
            "kind": "spark",
            "base": 3_000_000,
            "retries": 30,
            "gap_s": 1.0,
            "stream_dir": str(root / "stream-in"),
            "checkpoint": str(root / "checkpoint"),
            "upsert_options": {**net.options("spark0", upsert_direct), "upsert-keys": "id", "upsert-order": "v"},
        },
    }
    return {
        app: Lane(
            "app", {**common, **spec, "app": app, "options": net.options(app, direct)}, module="integration.faults.app"
        )
        for app, spec in specs.items()
    }


def _latency_cost(records: list[dict[str, Any]], net: Network, schedule: Schedule) -> dict[str, Any]:
    """Median attempt seconds inside each fault's window, beside those outside every window."""
    windows = [(s.at, s.at + s.hold + 1, s.describe()) for s in schedule.steps]
    inside = {w[2]: [r["seconds"] for r in records if w[0] <= r["t"] <= w[1]] for w in windows}
    outside = [r["seconds"] for r in records if not any(w[0] <= r["t"] <= w[1] for w in windows)]
    return {
        "baseline_p50_s": round(statistics.median(outside), 2) if outside else None,
        "per_fault": {
            name: {"attempts": len(v), "p50_s": round(statistics.median(v), 2), "max_s": max(v)}
            for name, v in inside.items()
            if v
        },
    }


@pytest.mark.slow
@pytest.mark.parametrize("schedule", FULL if FAULTS_FULL else CI, ids=lambda s: s.name)
def test_schedule_over_several_apps_keeps_every_write_exact(
    services: Services, network: Network, tmp_path: Path, schedule: Schedule
) -> None:
    """Batch threads, idempotent jobs and a Spark app (batch, stream, upserts) under the schedule: the history holds."""
    from pyspark_fenced_sink.ops.gc import gc
    from pyspark_fenced_sink.protocol.commit import recover

    t0 = time.monotonic()
    direct = target_options(services, "pg-s3")
    upsert_direct = {**target_options(services, "pg-s3"), "table": f"up_{uuid.uuid4().hex[:12]}.keys"}
    seed = attempt("seed", (-1, 1), t0, lambda: _seed(direct), app="test")
    assert seed["ok"], seed
    apps = _apps(network, direct, upsert_direct, tmp_path)
    stop = threading.Event()
    try:
        for lane in apps.values():
            wait_for("app ready", lane.is_ready, 300, lane)
        runner = run_schedule(network, schedule, stop)
        (tmp_path / "go").touch()
        runner.join(schedule.end_s + 120)
        (tmp_path / "stop").touch()
        for name, lane in apps.items():
            assert lane.wait(_bound_s() * 3) == 0, f"{name} exited non-zero:\n{lane.stderr_tail()}"
    finally:
        stop.set()
        for lane in apps.values():
            lane.kill()
    records = [r for lane in apps.values() for r in lane.records if "op" in r]
    streams = {
        r["writer_id"]: r["stream_inputs"] for lane in apps.values() for r in lane.records if "stream_inputs" in r
    }

    ctx = context(direct)
    recover(ctx)  # the next commit
    table = ctx.port.table(ctx.port.load())
    ids = table.scan().to_arrow().column("id").to_pylist()
    entries = outcomes_by_seq(direct)
    outcome_at = lambda seq: entries.get(seq, (None, None))[1]  # noqa: E731
    batches = {
        writer: (
            inputs,
            [e.batch for e, code in entries.values() if e.writer == writer and e.kind.value == "data" and code == "A"],
        )
        for writer, inputs in streams.items()
    }
    verdict = check(
        [seed, *(r for r in records if r.get("kind") != "upsert")],
        ids,
        outcome_at,
        bound_s=_bound_s(),
        spark_slack_s=SPARK_SLACK_S,
        stream_batches=batches,
    )
    uctx = context(upsert_direct)
    recover(uctx)
    utable = uctx.port.table(uctx.port.load()).scan().to_arrow()
    by_key: dict[int, list[int]] = {}
    for key, value in zip(utable.column("id").to_pylist(), utable.column("v").to_pylist(), strict=True):
        by_key.setdefault(key, []).append(value)
    uentries = outcomes_by_seq(upsert_direct)
    upserts = check_upserts(
        [r for r in records if r.get("kind") == "upsert"], by_key, lambda seq: uentries.get(seq, (None, None))[1]
    )
    gc(ctx, grace_s=0)
    live, listed = data_files(direct)
    orphans = sorted(listed - live)

    history = _state_dir() / f"network-faults-{schedule.name}.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in records))
    REPORT.setdefault("schedules", {})[schedule.name] = {
        "faults": network.faults,
        "counts": dict(verdict.counts + upserts.counts),
        "errors": sorted({f"{r.get('error')}" for r in records if not r["ok"]}),
        "seconds": round(time.monotonic() - t0, 1),
        "latency": _latency_cost(records, network, schedule),
    }
    assert verdict.violations + upserts.violations == [], "\n".join(verdict.violations + upserts.violations)
    assert orphans == [], f"gc left files no snapshot references: {orphans[:5]}"
    assert verdict.counts["writes_in_table"] >= 10, verdict.counts  # the apps did write under the schedule


def _seed(options: dict[str, str]) -> str:
    """Create the table with one row (id -1) before the apps race."""
    from pyspark_fenced_sink.testing.harness import commit, plan_options, rows, write_tasks

    plan = plan_options(options)
    return commit(plan, write_tasks(plan, rows("seed", -1, 1), 1)).outcome.name
