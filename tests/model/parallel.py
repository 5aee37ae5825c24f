"""Many model schedules over every CPU: seeds dealt to worker processes, results merged.

The random-schedule tests and the mutant hunts are pure Python and each
schedule stands alone (its seed decides everything), so they run in a pool of
``FENCEDLAKE_MODEL_WORKERS`` processes (default: the CPUs this process may use),
made once per test run. Workers start with ``spawn``: nothing of the parent — a
SparkSession, a patched module — is inherited; a mutant is looked up by name in
its test module and applied for one share of seeds at a time (then restored).
Schedules over a real SQLite catalog (``sqlite_dir``) run the same way, each share
over its own catalog in a subdirectory (a table per seed, as in one process).
The same seeds, the same checks and the same first catching seed as one process
would give; only faster on a machine with more than one core.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .mutation import InvariantViolation, Mutant, catch, hunt, survived

__all__ = ["catch_named", "run_schedules"]

#: A run stops collecting after this many failing schedules (each worker stops at its own count).
MAX_FAILURES = 5
#: Seeds per share of a mutant hunt (the hunt stops at the first share, in seed order, that catches).
HUNT_SHARE = 40

Failure = tuple[int, list[str]]
_pool: ProcessPoolExecutor | None = None


def _workers() -> int:
    text = os.environ.get("FENCEDLAKE_MODEL_WORKERS")
    return max(1, int(text)) if text else max(1, len(os.sched_getaffinity(0)))


def _shared_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(_workers(), mp_context=multiprocessing.get_context("spawn"))
        atexit.register(_pool.shutdown, cancel_futures=True)
    return _pool


def _run(
    seeds: Sequence[int], forced: bool | None, sqlite_dir: str | None = None
) -> tuple[Counter[str], list[Failure]]:
    from . import upserts
    from .harness import run_schedule
    from .sqlite_backend import SqliteBackend

    before, upserts.FORCED = upserts.FORCED, forced
    stats: Counter[str] = Counter()
    failures: list[Failure] = []
    backend = SqliteBackend(Path(sqlite_dir)) if sqlite_dir is not None else None
    try:
        for seed in seeds:
            violations = run_schedule(seed, stats=stats, backend=backend)
            if violations:
                failures.append((seed, violations[:3]))
                if len(failures) >= MAX_FAILURES:
                    break
    finally:
        upserts.FORCED = before
    return stats, failures


def run_schedules(
    seeds: Sequence[int], *, forced: bool | None = None, sqlite_dir: Path | None = None
) -> tuple[Counter[str], list[Failure]]:
    """Run every schedule of ``seeds`` (``forced``: ``upserts.FORCED``); the merged stats and the failures by seed.

    ``sqlite_dir``: over a real SQLite catalog (``tests/model/sqlite_backend``), one per share in a subdirectory.
    """
    workers = min(_workers(), len(seeds))
    dirs = [str(sqlite_dir / f"share-{i}") if sqlite_dir is not None else None for i in range(max(1, workers))]
    if workers <= 1:
        return _run(seeds, forced, dirs[0])
    shares = [list(seeds[i::workers]) for i in range(workers)]  # dealt, so slow stretches of seeds spread out
    stats: Counter[str] = Counter()
    failures: list[Failure] = []
    for part, failed in _shared_pool().map(_run, shares, [forced] * workers, dirs):
        stats.update(part)
        failures.extend(failed)
    return stats, sorted(failures)[:MAX_FAILURES]


def _mutant(module: str, table: str, name: str) -> Mutant:
    mutants: dict[str, Mutant] = getattr(importlib.import_module(module), table)
    return mutants[name]


def _hunt_share(module: str, table: str, name: str, seeds: Sequence[int]) -> Failure | dict[str, int]:
    found = hunt(_mutant(module, table, name), seeds)
    return (found.seed, found.violations) if isinstance(found, InvariantViolation) else found


def catch_named(module: str, table: str, name: str, budget: int) -> InvariantViolation:
    """``catch(getattr(module, table)[name], range(budget))``, the seeds searched by the pool in shares."""
    mutant = _mutant(module, table, name)
    if _workers() <= 1:
        return catch(mutant, range(budget))
    pool = _shared_pool()
    futures = [
        pool.submit(_hunt_share, module, table, name, range(start, min(start + HUNT_SHARE, budget)))
        for start in range(0, budget, HUNT_SHARE)
    ]
    others: dict[str, int] = {}
    try:
        for future in futures:  # in seed order: the first share that catches holds the first catching seed
            found = future.result()
            if isinstance(found, tuple):
                return InvariantViolation(*found)
            for invariant, seed in found.items():
                others.setdefault(invariant, seed)
    finally:
        for future in futures:
            future.cancel()
    raise survived(mutant, others)
