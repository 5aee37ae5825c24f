"""Model-based interleaving test of the Spark-free core (invariants I1-I7).

Thousands of seeded schedules of concurrent writers, zombies, crashes,
ambiguous puts, unknown commit outcomes, gc and recover run the production
protocol code over the in-memory store and an in-memory catalog register;
every schedule is checked (``tests/model/harness.check``). A second test
repeats schedules over a real SQLite catalog through pyiceberg
(``tests/model/sqlite_backend``). The mutation tests prove the model catches
the bugs this project exists to prevent. A failing seed reproduces with
``FENCEDLAKE_MODEL_SEED=<seed> pytest tests/model/test_model.py``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

import pyspark_fenced_sink.protocol.commit as commit_module
import pyspark_fenced_sink.protocol.reconcile as reconcile_module
import pyspark_fenced_sink.protocol.wal as wal_module
from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.protocol.reconcile import Outcome, Position
from pyspark_fenced_sink.store.memory import MemoryStore

from .harness import run_schedule
from .sqlite_backend import SqliteBackend

pytestmark = pytest.mark.model

SCHEDULES = int(os.environ.get("FENCEDLAKE_MODEL_SCHEDULES", "10000"))
MUTANT_BUDGET = 3000


def _seeds() -> range:
    seed = os.environ.get("FENCEDLAKE_MODEL_SEED")
    return range(int(seed), int(seed) + 1) if seed else range(SCHEDULES)


def test_random_schedules_keep_every_invariant() -> None:
    """>= 10,000 random schedules: every invariant holds after every one, and the hard cases occur."""
    stats: Counter[str] = Counter()
    failures = []
    started = time.monotonic()
    for seed in _seeds():
        violations = run_schedule(seed, stats=stats)
        if violations:
            failures.append((seed, violations[:3]))
            if len(failures) >= 5:
                break
    elapsed = time.monotonic() - started
    print(f"\nmodel: {stats['schedules']} schedules in {elapsed:.0f}s")
    for name, count in sorted(stats.items()):
        print(f"  {name}: {count}")
    assert not failures, f"invariant violations (seed, first violations): {failures}"
    if len(_seeds()) >= 1000:
        for case in (
            "truncated position reused",
            "outcome:FENCED",
            "outcome:DUPLICATE",
            "outcome:GAP",
            "outcome:QUERY_MISMATCH",
            "outcome:EXPIRED",
            "files removed by gc",
            "applied by a peer's commit",
            "stale commit conflicts",
            "crashed processes",
            "ambiguous puts injected",
            "unknown commits injected",
            "overwrites applied",
        ):
            assert stats[case] > 0, f"no schedule reached {case!r}: the model lost coverage"


def _patched(target: object, name: str, value: object) -> contextlib.AbstractContextManager[None]:
    @contextlib.contextmanager
    def cm() -> Iterator[None]:
        old = getattr(target, name)
        setattr(target, name, value)
        try:
            yield
        finally:
            setattr(target, name, old)

    return cm()


def _decide_turning(outcome: Outcome) -> Callable[..., object]:
    """A reconciliation that applies entries it should have classified as ``outcome``."""
    original = reconcile_module._decide

    def decide(seq, entry, writers, expired_before):  # type: ignore[no-untyped-def]
        result, detail, expired = original(seq, entry, writers, expired_before)
        if result is not outcome:
            return result, detail, expired
        current = writers.get(entry.writer)
        if current is not None and entry.batch is not None:
            writers[entry.writer] = replace(current, last_batch=max(entry.batch, current.last_batch or 0))
        return Outcome.APPLIED, "", expired

    return decide


def _two_way_position(seq: int, upper: int) -> Position:
    """The two-way classification "== upper -> apply, else stash" (no "below" branch; PROTOCOL.md §12)."""
    return Position.AT if seq == upper else Position.ABOVE


def _plain_put(self: MemoryStore, key: str, data: bytes) -> bool:
    """A plain PUT that overwrites a peer's entry (PROTOCOL.md §12)."""
    self._op("put", key)
    self.objects[key] = bytes(data)
    return True


def _no_token_check(store, key, data, token, token_of, *, attempts=5, sleep=None):  # type: ignore[no-untyped-def]
    """Treat every "already exists" as a peer's, without reading the owner token."""
    for _ in range(attempts):
        try:
            return store.put_if_absent(key, data)
        except StoreError:
            continue
    raise StoreError("not confirmed")


MUTANTS = {
    "pyiceberg retry on (rebases stale commits)": (contextlib.nullcontext(), {"rebase_on_conflict": True}),
    "two-way position (below the upper is stashed)": (_patched(commit_module, "position", _two_way_position), {}),
    "two-way batch ids (duplicates applied)": (
        _patched(reconcile_module, "_decide", _decide_turning(Outcome.DUPLICATE)),
        {},
    ),
    "no fencing (zombie entries applied)": (_patched(reconcile_module, "_decide", _decide_turning(Outcome.FENCED)), {}),
    "plain PUT instead of put-if-absent": (_patched(MemoryStore, "put_if_absent", _plain_put), {}),
    "retried put guesses instead of reading the token": (_patched(wal_module, "create_resolved", _no_token_check), {}),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_model_catches_a_broken_protocol(mutant: str) -> None:
    """Each deliberately broken variant of the protocol violates an invariant within the budget."""
    patch, kwargs = MUTANTS[mutant]
    with patch:
        for seed in range(MUTANT_BUDGET):
            try:
                violations = run_schedule(seed, **kwargs)
            except Exception as e:  # noqa: BLE001 - a crash of the model is a caught bug too
                violations = [f"{type(e).__name__}: {e}"]
            if violations:
                print(f"\n{mutant}: caught at schedule {seed}: {violations[0][:200]}")
                return
    pytest.fail(f"mutant {mutant!r} survived {MUTANT_BUDGET} schedules: the model is too weak")


SQLITE_SCHEDULES = int(os.environ.get("FENCEDLAKE_MODEL_SQLITE_SCHEDULES", "300"))


@pytest.fixture(scope="module")
def sqlite_backend(tmp_path_factory: pytest.TempPathFactory) -> SqliteBackend:
    return SqliteBackend(tmp_path_factory.mktemp("model-sqlite"))


def test_schedules_over_a_real_sqlite_catalog_keep_every_invariant(sqlite_backend: SqliteBackend) -> None:
    """The same schedules through pyiceberg and a real SQLite catalog (snapshots, properties, CAS)."""
    stats: Counter[str] = Counter()
    failures = []
    started = time.monotonic()
    for seed in range(SQLITE_SCHEDULES):
        violations = run_schedule(seed, stats=stats, backend=sqlite_backend)
        if violations:
            failures.append((seed, violations[:3]))
            if len(failures) >= 3:
                break
    print(f"\nmodel over SQLite: {stats['schedules']} schedules in {time.monotonic() - started:.0f}s")
    assert not failures, f"invariant violations (seed, first violations): {failures}"
    if SQLITE_SCHEDULES >= 100:
        for case in ("applied by a peer's commit", "stale commit conflicts", "outcome:FENCED", "overwrites applied"):
            assert stats[case] > 0, f"no SQLite schedule reached {case!r}"


def test_real_pyiceberg_retry_is_caught_over_sqlite(sqlite_backend: SqliteBackend) -> None:
    """The mutant "pyiceberg retry on", with pyiceberg's real commit_transaction retry, breaks an invariant."""
    for seed in range(SQLITE_SCHEDULES):
        violations = run_schedule(seed, rebase_on_conflict=True, backend=sqlite_backend)
        if violations:
            print(f"\npyiceberg's retry caught at SQLite schedule {seed}: {violations[0][:200]}")
            return
    pytest.fail(f"pyiceberg's own retry survived {SQLITE_SCHEDULES} SQLite schedules: the model is too weak")
