"""Suite "scaling": commit latency and requests vs table history (issue 6.5; manifest merge: issue 18).

Does any step on a commit's hot path read the whole WAL or the whole snapshot
history? Two series, each point a fresh table, measured with sequential,
uncontended 10-row writes (the sink's driver and executor code through
:mod:`benchmarks.sinkdriver`):

* **WAL history**: H entries already reconciled and still in the WAL (no
  ``gc`` truncation), applied by a few group commits (``recover``, up to 1,000
  entries per catalog commit), so the snapshot count stays small. The entries
  are seeded straight into the table's control directory (the same bytes
  ``Wal.append`` writes, without an fsync each) to keep the build fast.
* **snapshot history**: S earlier fencedlake commits, one snapshot each.

At each point the baseline is a plain pyiceberg ``fast_append`` of the same
kind of data files into a twin table (the same metadata registered under a
second name: an identical history), measured in the same run, interleaved: Iceberg itself reads the whole
metadata.json (every snapshot is listed in it) on every load, so what
matters is fencedlake's latency *relative* to that baseline, and its own
requests, as history grows. Reported per point: commit latency p50 (and the
ratio to the baseline), control-store requests by kind, keys the LISTs
returned and the time they took, catalog calls, Iceberg file requests, and
the metadata.json size. A cProfile of one commit at the largest point of
each series says where the time goes. A third series (``manifest_merge``)
compares append commits with manifest merging on and off.
"""

from __future__ import annotations

import cProfile
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import manifest_merge
from benchmarks.common import BenchmarkError, SuiteResult, median, profile_top, ratio, step_breakdown
from benchmarks.data import SPARK_SCHEMA, arrow_rows
from benchmarks.request_budget import Counts, by_kind, counting, pyiceberg_append
from pyspark_fenced_sink.testing import harness

__all__ = ["run"]

ROWS = 10
GROUP = 1000  # entries per catalog commit while seeding the WAL history (the sink's default max group)


class _Ids:
    def __init__(self) -> None:
        self.next = 0

    def rows(self) -> Any:
        start, self.next = self.next, self.next + ROWS
        return arrow_rows(start, ROWS, total=10**12)


def _seed_wal(wh: str, table: str, entries: int, log: Callable[[str], None]) -> None:
    """Put ``entries`` anonymous empty data entries after the tail, then reconcile them with ``recover``."""
    from pyspark_fenced_sink.iceberg.catalogs import open_table
    from pyspark_fenced_sink.protocol.commit import recover
    from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, encode_entry
    from pyspark_fenced_sink.protocol.fencing import new_token
    from pyspark_fenced_sink.protocol.layout import wal_key
    from pyspark_fenced_sink.store.local import LocalStore

    harness.plan(wh, table, schema=SPARK_SCHEMA)  # creates the table
    opened = open_table(harness.catalog_of(wh), table)
    ctx, view = opened.ctx, opened.view
    start = view.state.upper
    if ctx.wal.scan(start):
        raise BenchmarkError(f"{table}: the WAL has pending entries before seeding")
    t0 = time.perf_counter()
    store = ctx.wal.store
    for seq in range(start, start + entries):
        entry = WalEntry(kind=EntryKind.DATA, token=new_token(), writer="bench-history", ephemeral=True, opened=start)
        data = encode_entry(entry)
        if isinstance(store, LocalStore):
            path = store.root / wal_key(seq)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        elif not store.put_if_absent(wal_key(seq), data):
            raise BenchmarkError(f"{table}: WAL position {seq} was taken while seeding")
    ctx.max_group = GROUP
    records = recover(ctx)
    upper = ctx.port.load().state.upper
    if upper != start + entries:
        raise BenchmarkError(f"{table}: upper {upper} after seeding, expected {start + entries}")
    log(f"    seeded {entries:,} WAL entries, {len(records)} catalog commits, in {time.perf_counter() - t0:.1f}s")


def _metadata_kb(catalog: Any, table: str) -> float:
    location = catalog.load_table(table).metadata_location
    return os.path.getsize(location.removeprefix("file://")) / 1000


def _snapshots(catalog: Any, table: str) -> int:
    return len(catalog.load_table(table).metadata.snapshots)


def _point(
    wh: str,
    series: str,
    size: int,
    commits: int,
    ids: _Ids,
    profile: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Build one table (and its twin) with ``size`` of history, then time and count ``commits`` commits each."""
    catalog = harness.open_catalog(wh)
    fl, base = f"bench.{series}_{size}", f"bench.{series}_{size}_base"
    t0 = time.perf_counter()
    harness.sink_write(wh, fl, ids.rows(), schema=SPARK_SCHEMA, tasks=1)  # creates the table
    if series == "wal":
        _seed_wal(wh, fl, size, log)
    else:
        for _ in range(size - 1):
            harness.sink_write(wh, fl, ids.rows(), schema=SPARK_SCHEMA, tasks=1)
    # The twin: the same metadata registered under a second name, so both start from an identical history
    # (same snapshots, same metadata.json); the baseline's commits are plain pyiceberg appends on it.
    catalog.register_table(base, catalog.load_table(fl).metadata_location)
    bp = harness.plan(wh, base, schema=SPARK_SCHEMA)
    built = {
        "wal_entries": _wal_len(wh, fl),
        "snapshots": _snapshots(catalog, fl),
        "metadata_kb": _metadata_kb(catalog, fl),
    }
    log(f"    {series}={size:,}: built {built['snapshots']} snapshots in {time.perf_counter() - t0:.1f}s")

    samples: dict[str, list[tuple[float, Counts]]] = {"fencedlake": [], "pyiceberg": []}

    def check(table: str, name: str) -> None:
        snapshot = catalog.load_table(table).current_snapshot()
        added = int(snapshot.summary.additional_properties.get("added-records", 0)) if snapshot else 0
        if added != ROWS:
            raise BenchmarkError(f"{series}={size} {name}: the commit added {added} rows, expected {ROWS}")

    for i in range(commits + 1):  # the first of each is a warm-up (caches, the twin's first load)
        for name in ("fencedlake", "pyiceberg") if i % 2 == 0 else ("pyiceberg", "fencedlake"):
            if name == "fencedlake":
                p = harness.plan(wh, fl, schema=SPARK_SCHEMA)
                messages = harness.write_tasks(p, ids.rows(), tasks=1)
                with counting(catalog) as c:
                    t = time.perf_counter()
                    res = harness.commit(p, messages)
                    elapsed = time.perf_counter() - t
                if res.outcome.name != "APPLIED":
                    raise BenchmarkError(f"{series}={size}: outcome {res.outcome.name}, expected APPLIED")
                check(fl, name)
            else:
                messages = harness.write_tasks(bp, ids.rows(), tasks=1)
                with counting(catalog) as c:
                    t = time.perf_counter()
                    pyiceberg_append(catalog, base, messages)
                    elapsed = time.perf_counter() - t
                check(base, name)
            if i > 0:
                samples[name].append((elapsed * 1000, c))

    prof = None
    if profile:
        p = harness.plan(wh, fl, schema=SPARK_SCHEMA)
        messages = harness.write_tasks(p, ids.rows(), tasks=1)
        profiler = cProfile.Profile()
        profiler.enable()
        harness.commit(p, messages)
        profiler.disable()
        prof = {"self": profile_top(profiler, 12), "cum": profile_top(profiler, 120, key="cum")}

    fc = [c for _, c in samples["fencedlake"]]
    bc = [c for _, c in samples["pyiceberg"]]
    fk, bk = _kinds(fc), _kinds(bc)
    state = catalog.load_table(fl).properties.get("fencedlake.state", "")
    return {
        "series": series,
        "size": size,
        **built,
        "state_bytes": len(state),
        "fl_ms": [ms for ms, _ in samples["fencedlake"]],
        "base_ms": [ms for ms, _ in samples["pyiceberg"]],
        "fl_kinds": fk,
        "base_kinds": bk,
        "store": {k: median([c.control.get(k, 0) for c in fc]) for k in ("GET", "LIST", "PUT_IF_ABSENT", "DELETE")},
        "listed": median([c.listed for c in fc]),
        "list_ms": median([c.control_seconds.get("LIST", 0.0) * 1000 for c in fc]),
        "store_ms": median([sum(c.control_seconds.values()) * 1000 for c in fc]),
        "profile": prof,
    }


def _wal_len(wh: str, table: str) -> int:
    from pyspark_fenced_sink.protocol.layout import control_root

    metadata = harness.open_catalog(wh).load_table(table).metadata
    wal = Path(control_root(metadata.location, str(metadata.table_uuid)).removeprefix("file://")) / "wal"
    return sum(1 for n in os.listdir(wal) if n.endswith(".json")) if wal.is_dir() else 0


def _kinds(samples: list[Counts]) -> dict[str, float]:
    keys = ("GET", "LIST", "PUT", "cond. PUT", "DELETE", "HEAD", "catalog")
    per = [by_kind(c.flat()) for c in samples]
    return {k: median([p[k] for p in per]) for k in keys}


def run(
    *,
    wal_sizes: Sequence[int],
    snapshot_sizes: Sequence[int],
    commits: int,
    merge_sizes: Sequence[int] = (),
    merge_min_count: int | None = None,
    workdir: str | None = None,
    log: Callable[[str], None] = print,
) -> SuiteResult:
    """One point per size of each series; ``commits`` measured commits per point and variant.

    ``merge_sizes``: commits per manifest-merge point; ``merge_min_count``: their min-count-to-merge (None:
    the default, 100; the quick run uses a small one so that it merges at small sizes).
    """
    result = SuiteResult("scaling", "Scaling: commit cost vs table history (issue 6.5)")
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fencedlake-bench-scale-", dir=workdir) as tmp:
        wh = str(Path(tmp) / "wh")
        ids = _Ids()
        for series, sizes in (("wal", wal_sizes), ("snapshots", snapshot_sizes)):
            for size in sizes:
                pt = _point(wh, series, size, commits, ids, profile=size == max(sizes), log=log)
                points.append(pt)
                log(
                    f"  {series}={size:,}: fencedlake commit p50 {median(pt['fl_ms']):.1f} ms, pyiceberg "
                    f"{median(pt['base_ms']):.1f} ms; store {pt['store']}, LIST returned {pt['listed']:.0f} keys "
                    f"in {pt['list_ms']:.2f} ms"
                )
        merge_points = [manifest_merge.point(wh, size, commits, log, merge_min_count) for size in merge_sizes]

    result.columns = [
        "series",
        "commits",
        "WAL entries",
        "snapshots",
        "metadata.json KB",
        "fencedlake commit p50 ms",
        "pyiceberg append p50 ms",
        "ratio",
        "store GET",
        "store LIST",
        "cond. PUT",
        "keys listed",
        "LIST ms",
        "catalog calls",
        "Iceberg GET",
        "total requests",
        "pyiceberg requests",
        "manifests",
        "full-scan plan ms",
        "commit p99 / max ms",
    ]
    for pt in points:
        fk, bk = pt["fl_kinds"], pt["base_kinds"]
        fl, base = median(pt["fl_ms"]), median(pt["base_ms"])
        result.rows.append(
            {
                "series": "WAL history" if pt["series"] == "wal" else "snapshot history",
                "WAL entries": pt["wal_entries"],
                "snapshots": pt["snapshots"],
                "metadata.json KB": pt["metadata_kb"],
                "fencedlake commit p50 ms": fl,
                "pyiceberg append p50 ms": base,
                "ratio": ratio(fl, base),
                "store GET": pt["store"]["GET"],
                "store LIST": pt["store"]["LIST"],
                "cond. PUT": pt["store"]["PUT_IF_ABSENT"],
                "keys listed": pt["listed"],
                "LIST ms": pt["list_ms"],
                "catalog calls": fk["catalog"],
                "Iceberg GET": fk["GET"] - pt["store"]["GET"],
                "total requests": sum(fk.values()),
                "pyiceberg requests": sum(bk.values()),
            }
        )
    merge_rows, merge_notes = manifest_merge.rows_and_notes(merge_points, merge_min_count)
    result.rows += merge_rows
    result.data["points"] = points
    result.data["merge_points"] = merge_points
    for series in ("wal", "snapshots"):
        pts = [p for p in points if p["series"] == series]
        if len(pts) < 2:
            continue
        lo, hi = pts[0], pts[-1]
        label = "WAL history" if series == "wal" else "snapshot history"
        grown = {
            k: (lo["fl_kinds"][k], hi["fl_kinds"][k])
            for k in lo["fl_kinds"]
            if hi["fl_kinds"][k] - hi["base_kinds"][k] > lo["fl_kinds"][k] - lo["base_kinds"][k]
        }
        if grown or hi["listed"] > lo["listed"]:
            result.warnings.append(
                f"{label}: fencedlake's requests per commit grow with history ({lo['size']:,} -> {hi['size']:,}): "
                + ", ".join(f"{k} {a:g} -> {b:g}" for k, (a, b) in grown.items())
                + (f"; keys listed {lo['listed']:g} -> {hi['listed']:g}" if hi["listed"] > lo["listed"] else "")
            )
        r_lo = ratio(median(lo["fl_ms"]), median(lo["base_ms"]))
        r_hi = ratio(median(hi["fl_ms"]), median(hi["base_ms"]))
        result.notes.append(
            f"{label} {lo['size']:,} -> {hi['size']:,}: fencedlake commit p50 {median(lo['fl_ms']):.1f} -> "
            f"{median(hi['fl_ms']):.1f} ms (x{ratio(median(hi['fl_ms']), median(lo['fl_ms'])):.2f}), pyiceberg "
            f"append {median(lo['base_ms']):.1f} -> {median(hi['base_ms']):.1f} ms "
            f"(x{ratio(median(hi['base_ms']), median(lo['base_ms'])):.2f}); ratio to pyiceberg {r_lo:.2f} -> "
            f"{r_hi:.2f}; control-store LIST {lo['list_ms']:.2f} -> {hi['list_ms']:.2f} ms"
        )
        if hi["profile"]:
            result.notes.append(
                f"Profile of one fencedlake commit at {label} {hi['size']:,} (cProfile, cumulative, share of the "
                "commit): " + step_breakdown(hi["profile"]["cum"])
            )
    result.notes += [
        "Each point: a fresh table and its twin (the same metadata registered under another name); "
        f"{commits} sequential {ROWS}-row commits each (plus one warm-up), interleaved; medians. WAL entries, "
        "snapshots and metadata.json size are the history before the measured commits. WAL history "
        f"is seeded with empty anonymous entries and reconciled by `recover` ({GROUP} per catalog commit); "
        "snapshot history by real one-write commits.",
        "store GET/LIST/cond. PUT = fencedlake's control-store requests per commit; keys listed = keys those "
        "LISTs returned; LIST ms = their time (LocalStore lists the whole directory and filters; S3Store "
        "passes StartAfter, so S3 returns only the tail); Iceberg GET = metadata.json / manifest-list / manifest "
        "reads; total requests = object-store requests + catalog calls, vs the pyiceberg baseline's.",
    ]
    result.notes += merge_notes
    return result
