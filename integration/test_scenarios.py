"""Issue 5's field scenarios on the real services, on each catalog x store target (integration/targets.py).

The home target is the PostgreSQL SqlCatalog with warehouse and WAL on S3; the field report,
kill -9 matrix, zombie and lagging-writer scenarios also run on the Iceberg REST catalog, on
Azure Blob (Azurite) and on GCS (fake-gcs-server) -- a CI-sized selection, every scenario on
every target with ``FENCEDLAKE_IT_FULL=1``. REST catalog faults are in integration/test_rest.py.

Every scenario checks the table EXACTLY -- the sorted id list with multiplicity,
so one lost or one duplicated row fails it -- plus ``check_table`` (I1-I7 on
the commit records, WAL objects and data files), and records its metrics
(commits, catalog commits, group-commit factor, p50/p99 commit latency,
conflicts absorbed, unknown outcomes resolved, fences) in
``scenarios_support.REPORT``, which the suite prints at the end and writes to
``.integration/scenario-metrics.json``.

1. The field report: A apps (OS processes) x W writers (threads, each its own
   plan/write/commit) on one table at once; 4x4 and 4x1.
2. ``kill -9`` at every named fail point (``pause``, then SIGKILL); the next
   writer and the restarted writer finish or fence the work; ``gc`` killed
   mid-way is finished by the next ``gc``.
3. A SIGSTOPped zombie resumed after its ``writer.id`` reopened elsewhere.
4. Object-store faults between client and server (a proxy on loopback):
   responses lost after the server applied a PUT (dropped connection, 500,
   timeout), 500s, slow responses.
5. Catalog faults: PostgreSQL restarted mid-run; a catalog commit whose
   outcome is unknown (the response lost, the request lost, pyiceberg's
   ``CommitStateUnknownException``) resolved by lookup.
6. A lagging writer whose entry a peer committed long ago, and one whose WAL
   position was truncated by ``gc`` while it was paused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from integration.conftest import Services, own_server, own_server_env
from integration.faults.inprocess import (
    DROP_AFTER,
    ERROR_AFTER,
    ERROR_BEFORE,
    LOSE_REQUEST,
    LOSE_RESPONSE,
    SLOW,
    TIMEOUT_AFTER,
    FaultPolicy,
    PgCommitLossProxy,
    S3FaultProxy,
)
from integration.scenarios_support import (
    REPORT,
    Lane,
    attempt_write,
    context,
    data_files,
    ids_of,
    outcomes_by_seq,
    process_state,
    result_record,
    rows,
    store_exists,
    table_ids,
    violations,
    wait_for,
)
from integration.targets import FULL, target_options, targets_for
from pyspark_fenced_sink.failpoints import DURABLE_AT
from pyspark_fenced_sink.ops.gc import gc, truncate_wal
from pyspark_fenced_sink.testing.harness import commit, plan_options, write_tasks
from pyspark_fenced_sink.testing.invariants import pending_after_recover

pytestmark = [pytest.mark.integration, pytest.mark.multiprocess]

SEED = [-1]
APP_BASE = 100_000  # lane ``a`` writes ids from a * APP_BASE


def _seed(options: dict[str, str]) -> None:
    """Create the table with one row (id -1): the scenarios race on commits, not on table creation."""
    record = attempt_write(options, rows("seed", -1, 1))
    assert record["ok"], record


def _assert_exact(options: dict[str, str], expected: list[int], *, truncated: bool = False) -> None:
    found = table_ids(options)
    want = sorted(expected)
    if found != want:
        lost = sorted((Counter(want) - Counter(found)).elements())
        extra = sorted((Counter(found) - Counter(want)).elements())
        pytest.fail(f"table not exact: {len(lost)} lost {lost[:10]}, {len(extra)} duplicated/unexpected {extra[:10]}")
    assert violations(options, truncated=truncated) == []


def _lane_spec(options: dict[str, str], app: str, **spec: Any) -> dict[str, Any]:
    return {"options": options, "app": app, "threads": 1, "writes": 1, "rows": 20, **spec}


def _run_lanes(lanes: list[Lane], start_file: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """Release lanes together once all are ready; wait for every one; their records."""
    try:
        for lane in lanes:
            wait_for("lane ready", lane.is_ready, 120, lane)
        start_file.touch()
        records = []
        for lane in lanes:
            rc = lane.wait(timeout)
            assert rc == 0, f"lane pid {lane.pid} exited {rc}:\n{lane.stderr_tail()}"
            records.extend(lane.records)
        return records
    finally:
        for lane in lanes:
            lane.kill()


def _planned_ids(apps: int, threads: int, writes: int, count: int) -> list[int]:
    """Every id the lanes of ``_lane_spec(..., base=app * APP_BASE)`` are asked to write, each once."""
    return [
        i
        for a in range(apps)
        for t in range(threads)
        for w in range(writes)
        for i in ids_of(a * APP_BASE + (t * writes + w) * count, count)
    ]


def _stop_marker_wait(lane: Lane, marker: Path, timeout: float = 120) -> None:
    """Wait until the lane froze itself (SIGSTOP) at its fail point."""
    wait_for(f"{marker.name}", marker.exists, timeout, lane)
    wait_for(f"pid {lane.pid} stopped", lambda: process_state(lane.pid) == "T", 30, lane)


# ------------------------------------------------------------------ 1. the field report


def _field_report_cases() -> list[Any]:
    """4x4 (two writes each) and 4x1 on pg-s3; 4x4 with one write each on the other targets (CI size)."""
    cases = []
    for target in targets_for("field-report"):
        full = target == "pg-s3" or FULL
        cases.append(pytest.param(target, 4, 4, 2 if full else 1, id=f"{target}-4-apps-x-4-writers"))
        if full:
            cases.append(pytest.param(target, 4, 1, 3, id=f"{target}-4-apps-x-1-writer"))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("target", "apps", "writers", "writes"), _field_report_cases())
def test_field_report_apps_times_writers_all_commit_and_no_conflict_surfaces(
    services: Services, tmp_path: Path, target: str, apps: int, writers: int, writes: int
) -> None:
    """A apps x W writers per app on one table at once: every write succeeds, every row lands exactly once."""
    t0 = time.monotonic()
    options = target_options(services, target)
    _seed(options)
    start = tmp_path / "go"
    lanes = [
        Lane(
            "lane",
            _lane_spec(
                options,
                f"app{a}",
                threads=writers,
                writes=writes,
                rows=50,
                base=a * APP_BASE,
                stable="mixed",
                start_file=str(start),
            ),
        )
        for a in range(apps)
    ]
    records = _run_lanes(lanes, start)

    assert len(records) == apps * writers * writes
    assert [r for r in records if not r["ok"]] == [], "a writer saw an error (a conflict surfaced?)"
    assert Counter(r["outcome"] for r in records) == {"APPLIED": len(records)}
    _assert_exact(options, SEED + _planned_ids(apps, writers, writes, 50))
    catalog_commits = sum(r["catalog_commits"] for r in records)
    # Every write was decided by exactly one commit, its own or a peer's; group commit shares them.
    assert catalog_commits + sum(r["by_peer"] for r in records) >= len(records)
    assert 1 <= catalog_commits <= len(records)
    REPORT.record(f"1-field-report-{apps}x{writers}-{target}", records, seconds=time.monotonic() - t0)


# ------------------------------------------------------------------ 2. kill -9 at every fail point

#: Fail points of a batch write, and whether the victim's WAL entry is durable when it fires.
WRITE_POINTS = DURABLE_AT
#: gc's fail points; before-delete first (the victims above leave orphan files for it to find).
GC_POINTS = ("gc.before-delete", "gc.after-barrier")
VICTIM_BATCH = 7


def test_kill_matrix_covers_every_named_fail_point() -> None:
    """The matrix below kills at every fail point the sink declares (a new one must be added here).

    ``stream.after-register`` is passed only by streaming runs: tests/spark/test_streaming.py's kill matrix kills
    a whole Spark application there. ``read.before-file`` is on the read path, which writes nothing:
    tests/spark/test_stream_read.py kills a fencedlake -> fencedlake pipeline there. The ``compact.*`` points are
    compaction's own steps: tests/ops/test_compaction_crash.py kills a compaction at each; the ``upsert.*`` points
    are an upsert's: tests/test_upsert_crash.py kills an upsert at each.
    """
    from pyspark_fenced_sink.failpoints import POINTS

    elsewhere = {"stream.after-register", "read.before-file", "compact.after-plan", "compact.after-rewrite"}
    elsewhere |= {"upsert.after-key-file-written", "upsert.after-deletes-written", "upsert.after-tombstones-merged"}
    assert set(WRITE_POINTS) | set(GC_POINTS) | elsewhere == POINTS


#: The CI-sized kill matrix on targets other than pg-s3: a point before the WAL put (orphans for gc),
#: one after it, one after the manifests were written; and gc before it deletes.
CI_WRITE_POINTS = ("commit.before-wal-put", "commit.after-wal-put", "commit.after-manifests-written")
CI_GC_POINTS = ("gc.before-delete",)


def _points(target: str) -> tuple[list[str], list[str]]:
    """(write fail points, gc fail points) the matrix kills at on ``target``."""
    if target == "pg-s3" or FULL:
        return list(WRITE_POINTS), list(GC_POINTS)
    return list(CI_WRITE_POINTS), list(CI_GC_POINTS)


def _in_profile(target: str, point: str) -> None:
    """Skip a (target, point) pair outside the CI profile (pytest groups the matrix by target only when the
    target is parametrized on its own, so the pairs are a product and the profile is applied here)."""
    writes, gcs = _points(target)
    if point not in writes and point not in gcs:
        pytest.skip(f"CI profile: {target} kills at {writes + gcs} only (FENCEDLAKE_IT_FULL=1 runs every point)")


@dataclass
class KillMatrix:
    """One table shared by the whole matrix; one pre-started victim process per fail point."""

    target: str
    options: dict[str, str]
    victims: dict[str, Lane]
    start_dir: Path
    marker_dir: Path
    expected: list[int] = field(default_factory=lambda: list(SEED))
    records: list[dict[str, Any]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)


@pytest.fixture(scope="module")
def kill_matrix(
    services: Services, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[KillMatrix]:
    """Victims for every point of the target (``request.param``) start together, each waits for its release."""
    target = request.param
    root = tmp_path_factory.mktemp(f"kill-matrix-{target}")
    options = target_options(services, target, f"kill-matrix-{uuid.uuid4().hex[:12]}")
    _seed(options)
    start_dir, marker_dir = root / "start", root / "markers"
    start_dir.mkdir()
    marker_dir.mkdir()
    victims = {}
    writes, gcs = _points(target)
    for point in [*writes, *gcs]:
        i = [*WRITE_POINTS, *GC_POINTS].index(point)
        env = {"FENCEDLAKE_FAILPOINTS": f"{point}=pause", "FENCEDLAKE_FAILPOINT_DIR": str(marker_dir)}
        start = str(start_dir / point)
        if point in GC_POINTS:
            victims[point] = Lane("gc", {"options": options, "start_file": start}, env=env)
        else:
            spec = _lane_spec(options, f"victim{i}", base=10_000 * (i + 1), first_batch=VICTIM_BATCH, start_file=start)
            victims[point] = Lane("lane", spec, env=env)
    matrix = KillMatrix(target, options, victims, start_dir, marker_dir)
    yield matrix
    for lane in victims.values():
        lane.kill()


def _kill_at(matrix: KillMatrix, point: str) -> Lane:
    """Release the point's victim, wait until it blocks at the point, SIGKILL it."""
    victim = matrix.victims[point]
    wait_for("victim ready", victim.is_ready, 120, victim)
    (matrix.start_dir / point).touch()
    wait_for(f"{point} paused", (matrix.marker_dir / f"{point}.hit").exists, 120, victim)
    victim.kill()
    assert victim.proc.returncode == -signal.SIGKILL
    assert victim.records == [], f"the victim reported before dying: {victim.records}"
    return victim


@pytest.mark.parametrize(("point", "durable"), list(WRITE_POINTS.items()), ids=list(WRITE_POINTS))
@pytest.mark.parametrize("kill_matrix", targets_for("kill-9"), indirect=True)
def test_kill9_at_fail_point_then_next_writer_and_restart_finish_it_exactly_once(
    kill_matrix: KillMatrix, point: str, durable: bool
) -> None:
    """SIGKILL at ``point``: a peer's write lands the victim's entry iff it was durable; the restarted
    victim (same writer.id and batch id) is then a duplicate iff it was durable, else applied."""
    m = kill_matrix
    _in_profile(m.target, point)
    i = list(WRITE_POINTS).index(point)
    _kill_at(m, point)
    victim_ids = ids_of(10_000 * (i + 1), 20)

    peer = attempt_write(m.options, rows("peer", 1_000_000 + i * 100, 10))
    assert peer["ok"] and peer["outcome"] == "APPLIED", peer
    helps = durable and point != "commit.after-catalog-commit"  # the catalog commit had not landed yet
    assert peer["for_peers"] == (1 if helps else 0), peer
    m.expected += ids_of(1_000_000 + i * 100, 10) + (victim_ids if durable else [])
    _assert_exact(m.options, m.expected)

    restart = {**m.options, "writer.id": f"victim{i}-t0", "writer.batch-id": str(VICTIM_BATCH)}
    rerun = attempt_write(restart, rows(f"victim{i}-t0", victim_ids[0], 20))
    assert rerun["ok"], rerun
    assert rerun["outcome"] == ("DUPLICATE" if durable else "APPLIED"), rerun
    if not durable:
        m.expected += victim_ids
    _assert_exact(m.options, m.expected)
    m.records += [peer, rerun]
    REPORT.record(f"2-kill-9-matrix-{m.target}", m.records, seconds=time.monotonic() - m.t0)


@pytest.mark.parametrize("point", GC_POINTS)
@pytest.mark.parametrize("kill_matrix", targets_for("kill-9"), indirect=True)
def test_kill9_of_gc_at_fail_point_then_next_gc_finishes_it(kill_matrix: KillMatrix, point: str) -> None:
    """``gc`` SIGKILLed at ``point``: the next ``gc`` finishes (no orphan left), writes go on, the table is exact."""
    m = kill_matrix
    _in_profile(m.target, point)
    live, listed = data_files(m.options)
    if point == "gc.before-delete":
        assert listed - live, "no orphan files for gc to delete: the kill would prove nothing"
    _kill_at(m, point)

    report = gc(context(m.options), grace_s=0)
    live, listed = data_files(m.options)
    assert listed == live, f"gc left orphans: {sorted(listed - live)[:5]}"
    if point == "gc.before-delete":
        assert report.orphans, "the next gc found none of the orphans the killed gc was about to delete"
    k = len(m.records)
    peer = attempt_write(m.options, rows("peer", 2_000_000 + k * 100, 10))
    assert peer["ok"] and peer["outcome"] == "APPLIED", peer
    m.expected += ids_of(2_000_000 + k * 100, 10)
    _assert_exact(m.options, m.expected, truncated=True)
    m.records.append(peer)
    REPORT.record(f"2-kill-9-matrix-{m.target}", m.records, seconds=time.monotonic() - m.t0)


# ------------------------------------------------------------------ 3. the SIGSTOPped zombie


def _wal_summary(options: dict[str, str]) -> list[str]:
    """Each WAL entry still present: seq, kind, writer, epoch, batch and its recorded outcome (diagnostics)."""
    return [
        f"{seq} {e.kind.value} {e.writer} epoch={e.epoch} batch={e.batch} -> {code}"
        for seq, (e, code) in sorted(outcomes_by_seq(options).items())
    ]


def _zombie_cases() -> list[Any]:
    return [
        pytest.param(target, reopened, id=f"{target}-{reopened}")
        for target in targets_for("zombie")
        for reopened in (["opened", "committed"] if target == "pg-s3" or FULL else ["committed"])
    ]


@pytest.mark.parametrize(("target", "reopened"), _zombie_cases())
def test_sigstopped_zombie_resumed_after_reopen_elsewhere_is_fenced_and_lands_nothing(
    services: Services, tmp_path: Path, target: str, reopened: str
) -> None:
    """A writer frozen (SIGSTOP) just before its WAL put resumes after its writer.id reopened in another
    process (barrier only, or barrier and a commit): FencedWriterError, nothing of it lands, its files are removed."""
    t0 = time.monotonic()
    options = target_options(services, target)
    _seed(options)
    zombie = Lane(
        "lane",
        _lane_spec(
            options,
            "orders",
            writes=2,
            rows=30,
            base=1000,
            stop_at="commit.before-wal-put",
            stop_nth=2,
            marker_dir=str(tmp_path),
        ),
    )
    try:
        _stop_marker_wait(zombie, tmp_path / "commit.before-wal-put.stopped")
        wait_for("batch 0 reported", lambda: len(zombie.records) >= 1, 30)
        assert [r["outcome"] for r in zombie.records] == ["APPLIED"], zombie.records  # batch 0 landed before

        # The new incarnation, in this process: same writer.id, opened with a fence barrier (a writer.id job
        # without a batch id; a job with one puts no barrier and is ordered by the WAL tail its open listed,
        # which here may equal the zombie's: PROTOCOL.md section 7, tests/test_crash_recovery.py).
        new = {**options, "writer.id": "orders-t0"}
        plan = plan_options(new)  # opens: the fence barrier is durable
        messages = write_tasks(plan, rows("orders-t0", 5000, 30))
        mine: list[dict[str, Any]] = []
        if reopened == "committed":
            mine.append(result_record(commit(plan, messages, abort=False)))
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(120) == 0, zombie.stderr_tail()
    finally:
        zombie.kill()
    if reopened == "opened":
        mine.append(result_record(commit(plan, messages, abort=False)))

    fenced = zombie.records[1]
    assert not fenced["ok"] and fenced["error"] == "FencedWriterError" and fenced["stage"] == "wal", json.dumps(
        {"zombie": zombie.records, "new": mine, "wal": _wal_summary(options)}, default=str
    )
    assert mine[0]["outcome"] == "APPLIED", mine
    exists = store_exists(options)
    assert fenced["files"] and not any(exists(p) for p in fenced["files"]), "the zombie's files were left behind"
    # The zombie's entry may still be pending (decided FENCED at an unchanged version needs no commit of
    # its own, PROTOCOL.md section 6): the next commit records it, and applies nothing of it.
    assert pending_after_recover(context(options)) == []
    _assert_exact(options, SEED + ids_of(1000, 30) + ids_of(5000, 30))
    codes = sorted(
        code or "pending"
        for entry, code in outcomes_by_seq(options).values()
        if entry.writer == "orders-t0" and entry.kind.value == "data" and entry.batch in (1, None)
    )
    assert codes == ["A", "F"], codes  # the new incarnation's entry applied, the zombie's fenced
    REPORT.record(f"3-zombie-sigstop-{reopened}-{target}", zombie.records + mine, seconds=time.monotonic() - t0)


# ------------------------------------------------------------------ 4. object-store faults


@pytest.mark.slow
def test_s3_faults_between_client_and_server_lose_nothing_duplicate_nothing_fence_nothing(
    services: Services, tmp_path: Path
) -> None:
    """Through a faulty S3 proxy -- PUT applied then response dropped / 500 / timed out, 500s, slow
    responses -- 3 apps x 2 writers commit every row once, no false fence, every WAL put resolved by token."""
    apps, threads, writes, count = 3, 2, 3, 25
    t0 = time.monotonic()
    direct = target_options(services, "pg-s3")
    _seed(direct)
    with S3FaultProxy(services.s3_endpoint, FaultPolicy(), hold_s=3.0) as proxy:
        # S3 reads time out after 1.5 s (the table's FileIO property; the store's default is 10 s), so injected
        # timeouts cost seconds.
        options = {**direct, "catalog.s3.endpoint": proxy.endpoint, "catalog.s3.request-timeout": "1.5"}
        start = tmp_path / "go"
        lanes = [
            Lane(
                "lane",
                _lane_spec(
                    options,
                    f"app{a}",
                    threads=threads,
                    writes=writes,
                    rows=count,
                    base=a * APP_BASE,
                    stable="mixed",
                    start_file=str(start),
                ),
            )
            for a in range(apps)
        ]
        records = _run_lanes(lanes, start)
        injected, self_412, requests = dict(proxy.injected), proxy.self_412, proxy.requests

    assert [r for r in records if not r["ok"]] == [], "a write failed (a false fence or an unresolved fault)"
    assert Counter(r["outcome"] for r in records) == {"APPLIED": apps * threads * writes}
    _assert_exact(direct, SEED + _planned_ids(apps, threads, writes, count))
    entries = outcomes_by_seq(direct)
    tokens = Counter(entry.token for entry, _ in entries.values())
    assert [t for t, n in tokens.items() if n > 1] == [], "one put landed at two WAL positions"
    assert {code for entry, code in entries.values() if entry.kind.value == "data"} == {"A"}
    for kind, what in [
        (DROP_AFTER, "wal"),
        (ERROR_AFTER, "wal"),
        (ERROR_BEFORE, "wal"),
        (TIMEOUT_AFTER, "wal"),
        (DROP_AFTER, "data"),
        (ERROR_BEFORE, "other"),
        (SLOW, "other"),
    ]:
        assert injected.get((kind, what), 0) >= 1, f"no {kind} fault on a {what} request was injected: {injected}"
    assert self_412 >= 1, "no retried put-if-absent met its own earlier success: the token path was not exercised"
    REPORT.record(
        "4-s3-faults",
        records,
        seconds=time.monotonic() - t0,
        requests=requests,
        faults_injected={f"{kind}/{what}": n for (kind, what), n in sorted(injected.items())},
        self_412_resolved=self_412,
    )


# ------------------------------------------------------------------ 5. catalog faults


def _dispose_cached_catalogs() -> None:
    """Drop pooled PostgreSQL connections this process holds (they died with the server)."""
    from pyspark_fenced_sink.iceberg import catalogs

    for catalog in list(catalogs._cache.values()):
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


@pytest.mark.parametrize("mode", [LOSE_RESPONSE, LOSE_REQUEST, "commit-state-unknown"])
def test_unknown_catalog_commit_outcome_is_resolved_by_lookup_never_retried_blindly(
    services: Services, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The catalog commit's outcome is lost (PostgreSQL applied it / never got it / pyiceberg says
    CommitStateUnknown): the writer re-reads, finds what happened, and its rows land exactly once."""
    from sqlalchemy.engine import make_url

    t0 = time.monotonic()
    url = make_url(services.pg_uri)
    with PgCommitLossProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        direct = target_options(services, "pg-s3")
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        options = {**direct, "catalog.uri": proxied}
        _seed(options)
        landed = mode != LOSE_REQUEST
        if mode == "commit-state-unknown":
            from pyiceberg.exceptions import CommitStateUnknownException

            from pyspark_fenced_sink.iceberg.commit.table_port import IcebergTablePort

            real = IcebergTablePort._submit
            calls: list[int] = []

            def submit_then_lose(table: Any, tx: Any, requirements: tuple[Any, ...]) -> None:
                real(table, tx, requirements)
                if not calls:
                    calls.append(1)
                    raise CommitStateUnknownException("injected: the commit landed, its response was lost")

            monkeypatch.setattr(IcebergTablePort, "_submit", staticmethod(submit_then_lose))
        else:
            proxy.arm(mode)
        first = attempt_write(options, rows("w", 100, 40))
        monkeypatch.undo()
        after = attempt_write(options, rows("w", 200, 40))
        lost = list(proxy.lost)

    assert first["ok"] and first["outcome"] == "APPLIED", first
    assert first["unknowns"] == 1, first
    # Landed: one attempt, then found by its token in the commit record -- no second commit (never a blind
    # retry); the record found is the one this writer sent, so it counts as its catalog commit. Not landed:
    # re-read, still pending, committed by a second attempt.
    expected = (1, 1, False) if landed else (2, 1, False)
    assert (first["attempts"], first["catalog_commits"], first["by_peer"]) == expected, first
    if mode != "commit-state-unknown":
        assert lost == [(mode, landed)], lost
    assert after["ok"] and after["outcome"] == "APPLIED", after
    _assert_exact(direct, SEED + ids_of(100, 40) + ids_of(200, 40))
    REPORT.record(f"5-catalog-unknown-{mode}", [first, after], seconds=time.monotonic() - t0)


#: The restart test's own PostgreSQL server (postgres.sh on this port): stopping it touches no other module's
#: catalog, so the suite's modules may run side by side (scripts/test.sh).
RESTART_PG_PORT = int(os.environ.get("FENCEDLAKE_IT_RESTART_PG_PORT", "24339"))
RESTART_PG_ENV = own_server_env("FENCEDLAKE_IT_PG_PORT", RESTART_PG_PORT, "restart")


@pytest.fixture
def restart_pg(services: Services) -> Iterator[tuple[str, Services]]:
    """``(postgres.sh path, services)`` of a PostgreSQL server started for one test, stopped after it; run the
    script with ``RESTART_PG_ENV`` to reach that server."""
    if services.target != "local":
        pytest.skip("restarting PostgreSQL needs the local target's integration/services/postgres.sh")
    from sqlalchemy.engine import make_url

    uri = make_url(services.pg_uri).set(port=RESTART_PG_PORT).render_as_string(hide_password=False)
    with own_server("postgres.sh", RESTART_PG_ENV) as script:
        yield script, replace(services, pg_uri=uri)


def test_postgres_restart_mid_run_loses_and_duplicates_nothing(
    restart_pg: tuple[str, Services], tmp_path: Path
) -> None:
    """PostgreSQL stopped and started while 2 apps x 2 writers commit: a write fails only before anything is
    durable or as "outcome unknown"; retried batches (same writer.id and batch id) land exactly once."""
    script, services = restart_pg
    apps, threads, writes, count = 2, 2, 10, 20
    t0 = time.monotonic()
    options = target_options(services, "pg-s3")
    _seed(options)
    start = tmp_path / "go"
    lanes = [
        Lane(
            "lane",
            _lane_spec(
                options,
                f"app{a}",
                threads=threads,
                writes=writes,
                rows=count,
                base=a * APP_BASE,
                stable=True,
                retries=30,
                retry_sleep_s=0.5,
                start_file=str(start),
                gap_s=0.3,  # ~3 s of writes per thread: the restart meets some of them
            ),
        )
        for a in range(apps)
    ]
    records = []
    try:
        for lane in lanes:
            wait_for("lane ready", lane.is_ready, 120, lane)
        start.touch()
        wait_for("4 writes before the restart", lambda: sum(len(lane.records) for lane in lanes) >= 4, 120)
        down = time.monotonic()
        try:
            subprocess.run([script, "stop"], check=True, capture_output=True, timeout=120, env=RESTART_PG_ENV)
            time.sleep(1.0)
        finally:
            subprocess.run([script, "start"], check=True, capture_output=True, timeout=180, env=RESTART_PG_ENV)
            _dispose_cached_catalogs()
        outage_s = time.monotonic() - down
        for lane in lanes:
            assert lane.wait(300) == 0, lane.stderr_tail()
            records.extend(lane.records)
    finally:
        for lane in lanes:
            lane.kill()

    failed = [r for r in records if not r["ok"]]
    finals = {(r["app"], r["thread"], r["write"]): r for r in records}
    assert len(finals) == apps * threads * writes, sorted(finals)
    assert [r for r in finals.values() if not r["ok"]] == [], "a batch still failed after its retries"
    # The errors contract: a raise after the WAL put must say "outcome unknown" (I1).
    wrong = [r for r in failed if r["stage"] == "wal" and r["error"] != "CommitOutcomeUnknownError"]
    assert wrong == [], "\n".join(f"{r['error']} at {' > '.join(r['where'])}: {r['message'][:120]}" for r in wrong)
    assert failed or any(r["unknowns"] for r in records if r["ok"]), "no writer noticed the outage"
    _assert_exact(options, SEED + _planned_ids(apps, threads, writes, count))
    entries = outcomes_by_seq(options).values()
    applied = Counter((e.writer, e.batch) for e, code in entries if code == "A" and e.batch is not None)
    assert set(applied.values()) == {1} and len(applied) == apps * threads * writes, applied
    REPORT.record(
        "5-postgres-restart",
        records,
        seconds=time.monotonic() - t0,
        outage_s=round(outage_s, 1),
        failed_by_stage=dict(Counter(f"{r['stage']}:{r['error']}" for r in failed)),
    )


# ------------------------------------------------------------------ 6. the lagging writer


def _lagging_cases() -> list[Any]:
    points = ["commit.after-wal-put", "commit.before-catalog-commit", "commit.after-manifests-written"]
    return [
        pytest.param(target, point, id=f"{target}-{point}")
        for target in targets_for("lagging")
        for point in (points if target == "pg-s3" or FULL else points[-1:])
    ]


@pytest.mark.parametrize(("target", "point"), _lagging_cases())
def test_lagging_writer_whose_entry_a_peer_committed_long_ago_converges_and_reports_success(
    services: Services, tmp_path: Path, target: str, point: str
) -> None:
    """A writer frozen at ``point`` with its entry durable; a peer applies it, five more commits follow;
    resumed, the writer finds its outcome in the peer's commit record and reports success."""
    t0 = time.monotonic()
    options = target_options(services, target)
    _seed(options)
    lag = Lane("lane", _lane_spec(options, "lag", rows=25, base=1000, stop_at=point, marker_dir=str(tmp_path)))
    peers = []
    try:
        _stop_marker_wait(lag, tmp_path / f"{point}.stopped")
        for k in range(6):
            peers.append(attempt_write(options, rows("peer", 5000 + k * 10, 10)))
        os.kill(lag.pid, signal.SIGCONT)
        assert lag.wait(120) == 0, lag.stderr_tail()
    finally:
        lag.kill()

    assert all(p["ok"] and p["outcome"] == "APPLIED" for p in peers), peers
    assert peers[0]["for_peers"] == 1, peers[0]  # the first peer's commit applied the lagging entry
    [mine] = lag.records
    assert mine["ok"] and mine["outcome"] == "APPLIED", mine
    assert mine["by_peer"] and mine["catalog_commits"] == 0, mine
    _assert_exact(options, SEED + ids_of(1000, 25) + [i for k in range(6) for i in ids_of(5000 + k * 10, 10)])
    REPORT.record(f"6-lagging-{point}-{target}", [*peers, mine], seconds=time.monotonic() - t0)


@pytest.mark.parametrize("target", targets_for("lagging"))
def test_lagging_writer_with_a_stale_upper_appends_after_the_kept_tail_and_lands_once(
    services: Services, tmp_path: Path, target: str
) -> None:
    """A writer frozen before its WAL put with a stale upper; peers commit and gc truncates the WAL; resumed, its
    LIST from the stale upper finds the object gc keeps at upper - 1, so it appends after the tail and lands once."""
    t0 = time.monotonic()
    options = target_options(services, target)
    _seed(options)
    stale_upper = context(options).port.load().state.upper
    lag = Lane(
        "lane",
        _lane_spec(
            options, "lag", rows=25, base=1000, stable=False, stop_at="commit.before-wal-put", marker_dir=str(tmp_path)
        ),
    )
    peers = []
    try:
        _stop_marker_wait(lag, tmp_path / "commit.before-wal-put.stopped")
        for k in range(4):
            peers.append(attempt_write(options, rows("peer", 5000 + k * 10, 10)))
        assert truncate_wal(context(options)) >= 3
        upper_at_resume = context(options).port.load().state.upper
        os.kill(lag.pid, signal.SIGCONT)
        assert lag.wait(120) == 0, lag.stderr_tail()
    finally:
        lag.kill()

    [mine] = lag.records
    assert mine["ok"] and mine["outcome"] == "APPLIED", mine
    assert mine["seq"] >= upper_at_resume > stale_upper, mine  # never a truncated position
    entries = outcomes_by_seq(options)
    assert entries[mine["seq"]][1] == "A"
    _assert_exact(
        options, SEED + ids_of(1000, 25) + [i for k in range(4) for i in ids_of(5000 + k * 10, 10)], truncated=True
    )
    REPORT.record(f"6-lagging-truncated-position-{target}", [*peers, mine], seconds=time.monotonic() - t0)
