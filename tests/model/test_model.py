"""Model-based interleaving test of the Spark-free core (invariants I1-I9).

Thousands of seeded schedules of concurrent writers (appends, static and
dynamic overwrites, replace-where, branch writes, snapshot properties,
publishes), zombies, crashes, ambiguous puts, unknown commit outcomes, gc and
recover, other engines changing the table between any two protocol steps and
stream readers of main (``tests/model/foreign.py``) run the production
protocol code over the in-memory store and an in-memory catalog register;
every schedule is checked
(``tests/model/harness.check``, ``tests/model/oracle.replay``). A second test
repeats schedules over a real SQLite catalog through pyiceberg
(``tests/model/sqlite_backend``). The mutation tests prove the model catches
the bugs this project exists to prevent. A failing seed reproduces with
``FENCEDLAKE_MODEL_SEED=<seed> pytest tests/model/test_model.py``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import pyspark_fenced_sink.iceberg.planning.lineage as lineage_module
import pyspark_fenced_sink.protocol.commit as commit_module
import pyspark_fenced_sink.protocol.committer as committer_module
import pyspark_fenced_sink.protocol.context as context_module
import pyspark_fenced_sink.protocol.entry as entry_module
import pyspark_fenced_sink.protocol.fencing as fencing_module
import pyspark_fenced_sink.protocol.reconcile as reconcile_module
import pyspark_fenced_sink.protocol.replace as replace_module
import pyspark_fenced_sink.protocol.view as view_module
import pyspark_fenced_sink.protocol.waiting as waiting_module
import pyspark_fenced_sink.protocol.wal as wal_module
from pyspark_fenced_sink.errors import InvalidOptionsError, StoreError
from pyspark_fenced_sink.protocol.entry import WriteMode
from pyspark_fenced_sink.protocol.layout import seq_of
from pyspark_fenced_sink.protocol.reconcile import Outcome, Position
from pyspark_fenced_sink.protocol.replace import Match
from pyspark_fenced_sink.store.base import Claim
from pyspark_fenced_sink.store.memory import MemoryStore
from tests.profile import FULL

from . import harness as harness_module
from . import memory_port as memory_port_module
from .harness import run_schedule
from .mutation import ModelCrash, Mutant, MutantSurvived, catch
from .parallel import catch_named, run_schedules
from .sqlite_backend import SqliteBackend

pytestmark = pytest.mark.model

#: Random schedules of the invariant test. The CI profile runs seeds 0-2999: the seeds within which every
#: mutant below must be caught (MUTANT_BUDGET), and every hard case the test asserts is reached there (the
#: rarest, "stream refused (main lost delivered rows)", 7 times in 3,000). ``FENCEDLAKE_FULL=1`` runs 10,000
#: (seeds 0-9999, the same checks); ``FENCEDLAKE_MODEL_SCHEDULES`` sets the count in either profile.
SCHEDULES = int(os.environ.get("FENCEDLAKE_MODEL_SCHEDULES", "10000" if FULL else "3000"))
MUTANT_BUDGET = 3000


def _seeds() -> range:
    seed = os.environ.get("FENCEDLAKE_MODEL_SEED")
    return range(int(seed), int(seed) + 1) if seed else range(SCHEDULES)


#: Schedules whose writers once ran out of time (I5): long runs of seal skips below barriers, passed two
#: positions per commit by committers whose group limit was 2, while upserts and appends took commits apart.
#: Only the entries a commit applies count toward the limit, and a plan reads on past the rest (PROTOCOL.md §5).
#: (Seeds 360 and 6677 first; re-picked when issue 31's commit loop changed the requests a schedule makes, and
#: again when idempotent jobs stopped putting barriers, when the claim window's cap rose from 32 to 64, and when
#: idempotent jobs of writers without barriers stopped listing at open and the zombie race gained a lower barrier:
#: the two schedules among the first 500 with the longest runs of skips beside applied upserts.)
SKIP_RUN_SEEDS = (30, 420)


@pytest.mark.parametrize("seed", SKIP_RUN_SEEDS)
def test_runs_of_skips_do_not_starve_a_small_group_limit(seed: int) -> None:
    """The two schedules keep every invariant, I5 among them, and still hold the long runs of skips."""
    stats: Counter[str] = Counter()
    assert run_schedule(seed, stats=stats) == []
    assert stats["outcome:SKIPPED"] >= 20 and stats["upsert applied"] > 0


def test_random_schedules_keep_every_invariant() -> None:
    """Thousands of random schedules (:data:`SCHEDULES`): every invariant holds after every one, and the hard
    cases occur."""
    started = time.monotonic()
    stats, failures = run_schedules(_seeds())
    elapsed = time.monotonic() - started
    print(f"\nmodel: {stats['schedules']} schedules in {elapsed:.0f}s")
    for name, count in sorted(stats.items()):
        print(f"  {name}: {count}")
    assert not failures, f"invariant violations (seed, first violations): {failures}"
    if len(_seeds()) >= 1000:
        for case in (
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
            "outcome:SPEC_CHANGED",
            "outcome:SKIPPED",
            "tables re-created",
            "table changed under a write",
            "state refused (lost/edited)",
            "damaged objects skipped",
            "fenced batch retried and applied",
            "idempotent job applied",
            "idempotent job duplicate",
            "idempotent job fenced",
            "idempotent zombie fenced",
            "dynamic applied",
            "filter applied",
            "outcome:REFUSED",
            "publish applied",
            "branch writes applied",
            "writes with snapshot properties applied",
            "compact applied",
            "compaction refused",
            "other engine: minimal-summary appends",
            "other engine: rename",
            "other engine: rollback-bare",
            "other engine: replace-main",
            "malformed entries put",
            "stream rejoined main's lineage",
            "stream refused (main lost delivered rows)",
        ):
            assert stats[case] > 0, f"no schedule reached {case!r}: the model lost coverage"


def _decide_turning(outcome: Outcome) -> Callable[..., object]:
    """A reconciliation that applies entries it should have classified as ``outcome``."""
    original = reconcile_module._decide

    def decide(*args: object) -> tuple[Outcome, str]:
        result, detail = original(*args)  # type: ignore[arg-type]
        return (Outcome.APPLIED, "") if result is outcome else (result, detail)

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
            return Claim.OURS if store.put_if_absent(key, data) else Claim.THEIRS
        except StoreError:
            continue
    raise StoreError("not confirmed")


def _root_of_location(location: str, table_uuid: str) -> str:
    """Control data bound to the table's location instead of its UUID (issue: drop + re-create)."""
    return f"{location.rstrip('/')}/_fencedlake"


_ORIGINAL_KEPT_GET = wal_module.KeptEntries.get
_ORIGINAL_KEEP = wal_module.KeptEntries.keep


def _kept_get_by_process(self, root, seq):  # type: ignore[no-untyped-def]
    """Kept entries looked up by the model process only, not by control root (a re-created table's log too)."""
    return _ORIGINAL_KEPT_GET(self, root.split("/mem", 1)[0], seq)


def _keep_by_process(self, root, seq, entry, size):  # type: ignore[no-untyped-def]
    return _ORIGINAL_KEEP(self, root.split("/mem", 1)[0], seq, entry, size)


def _bind_lost_state_as_fresh(view, name):  # type: ignore[no-untyped-def]
    """A table without its state property read as fresh although its snapshots carry commit records."""
    return view_module.bind(replace(view, recorded_upper=None) if view.fresh else view, name)


def _truncate_to_the_upper(self, upper):  # type: ignore[no-untyped-def]
    """WAL truncation that also deletes the object at upper - 1."""
    doomed = [k for k in self.store.list("wal/") if (s := seq_of(k)) is not None and s < upper]
    for key in doomed:
        self.store.delete(key)
    return len(doomed)


def _trusting_put_barrier(ctx, entry, start):  # type: ignore[no-untyped-def]
    """A barrier that trusts the position its put landed in (it may have been truncated meanwhile)."""
    return ctx.wal.append(entry, start)


def _no_run_registry(self, writer_id, run):  # type: ignore[no-untyped-def]
    """Forget that a run registered before: a fenced zombie run registers again and fences the newer run."""
    return None


def _judge_batch_by_the_highest(entry, current):  # type: ignore[no-untyped-def]
    """Batch ids judged against the highest applied id (Delta's txnVersion rule): lower ids are duplicates."""
    last = current.batches.last
    if last is not None and entry.batch is not None and entry.batch <= last:
        return Outcome.DUPLICATE, "at or below the last applied batch"
    return None


def _live_at_write_time(t, branch, head):  # type: ignore[no-untyped-def]
    """A dynamic overwrite resolved against the files live when its writer read the table, not at apply time."""
    if head.mode is not WriteMode.DYNAMIC:
        return t.live(branch)
    files: list[object] = []
    for upper, committed_on, live in t.history:
        if upper > head.opened:
            break
        if committed_on == branch:
            files = list(live)
    return files


def _straddlers_removed_whole(entry, live, match=None):  # type: ignore[no-untyped-def]
    """Replace-where that removes a file straddling its filter instead of refusing (loses rows outside it)."""
    original = _ORIGINAL_REMOVALS
    if match is None:
        return original(entry, live)
    return original(entry, live, lambda f: Match.ALL if match(f) is Match.SOME else match(f))


_ORIGINAL_REMOVALS = replace_module.removals


def _compaction_without_liveness(entry, live, match=None):  # type: ignore[no-untyped-def]
    """A compaction applied with whichever of its inputs are still live (the rest already removed)."""
    if entry.mode is not WriteMode.COMPACT:
        return _ORIGINAL_REMOVALS(entry, live, match)
    wanted = set(entry.inputs)
    return [f for f in live if f.path in wanted]


def _publish_without_check(branch, main_head, branch_head, history):  # type: ignore[no-untyped-def]
    """A publish that moves main to the branch even when main changed data since the fork."""
    return branch_head if branch_head is not None else _ORIGINAL_FAST_FORWARD(branch, main_head, branch_head, history)


_ORIGINAL_FAST_FORWARD = replace_module.check_fast_forward


def _joins_ignoring(what: str) -> Callable[..., bool]:
    """Commit grouping that lets appends of another branch (or other snapshot properties) join."""

    def joins(head, entry):  # type: ignore[no-untyped-def]
        if not head.mode.takes_appends or entry.mode is not WriteMode.APPEND:
            return False
        same_branch = what == "branch" or entry.target == head.target
        same_props = what == "properties" or entry.properties == head.properties
        return same_branch and same_props

    return joins


def _filter_by_name(filter_ids, current):  # type: ignore[no-untyped-def]
    """A replace-where bound by the column names it was written with (every committer fails after a rename)."""
    names = set(current.values())
    for name, _ in filter_ids:
        if name not in names:
            raise InvalidOptionsError(f"option replace-where: could not find field with name {name}")
    return {name: name for name, _ in filter_ids}


def _nan_blind_missing_stats(columns):  # type: ignore[no-untyped-def]
    """Absent NaN counts read as zero (pyiceberg's strict metrics evaluator's reading)."""
    return next((f"{c.name}: no counts" for c in columns if c.values is None or c.nulls is None), None)


def _changed_by_counters_only(counters, own_manifests):  # type: ignore[no-untyped-def]
    """'Changed data' read from the summary counters alone (a minimal summary reads as no change)."""
    return any(int((counters or {}).get(key) or 0) > 0 for key in replace_module.DATA_COUNTERS)


def _never_rejoin(start, position, complete, head, parents, delivered_files):  # type: ignore[no-untyped-def]
    """A stream offset that must stay on main's lineage: anything else is refused."""
    raise lineage_module.LineageLost(start, "not an ancestor of main's head")


def _seal_nothing(self, upper, claimed):  # type: ignore[no-untyped-def]
    """A barrier that leaves the holes below it open (an older incarnation's late put can land below it)."""
    return [p for p in self.scan(upper) if p > claimed.seq]


_ORIGINAL_SEAL = wal_module.Wal.seal


def _seal_without_looking_up(self, upper, claimed):  # type: ignore[no-untyped-def]
    """A barrier used at once although an in-flight commit may void its position as a hole."""
    _ORIGINAL_SEAL(self, upper, claimed)
    return []


_ORIGINAL_FENCED_BY = reconcile_module.fenced_by


def _tails_never_fence(entry, current):  # type: ignore[no-untyped-def]
    """An idempotent job's entry judged by barriers only: a job that opened later never fences it."""
    if entry.tail is not None and current is not None and current.tail is not None and entry.tail < current.tail:
        return None
    return _ORIGINAL_FENCED_BY(entry, current)


def _barriers_ignore_tails(entry, current):  # type: ignore[no-untyped-def]
    """A barrier's entry judged by barriers only: an idempotent job that opened after it never fences it."""
    if entry.tail is None and current is not None and current.tail is not None and entry.epoch == current.epoch:
        return None
    return _ORIGINAL_FENCED_BY(entry, current)


def _equal_tails_ordered(entry, current):  # type: ignore[no-untyped-def]
    """Two idempotent jobs that listed the same tail taken as ordered: the later-reconciled one is fenced."""
    if entry.tail is not None and current is not None and current.tail is not None and entry.tail == current.tail:
        return f"writer {entry.writer!r}'s job at tail {entry.tail} taken as older than its equal"
    return _ORIGINAL_FENCED_BY(entry, current)


_ORIGINAL_OPEN_WRITER = fencing_module.open_writer


def _open_at_the_upper(ctx, writer_id, *, run=None, view=None, idempotent=False):  # type: ignore[no-untyped-def]
    """An idempotent job's open that takes the committed upper for the tail, also for a writer that puts barriers."""
    ident = _ORIGINAL_OPEN_WRITER(ctx, writer_id, run=run, view=view, idempotent=idempotent)
    return replace(ident, tail=ident.opened) if ident.tail is not None else ident


def _barriers_unmarked(ctx, state, writer_id):  # type: ignore[no-untyped-def]
    """A writer's first barrier put without its mark: a job opening meanwhile takes the upper below it."""


#: Each broken variant, the invariant it must be caught by, and what it patches (``mutation.Mutant``).
MUTANTS = {
    "pyiceberg retry on (rebases stale commits)": Mutant("I2", rebase_on_conflict=True),
    "two-way position (below the upper is stashed)": Mutant("I5", (committer_module, "position", _two_way_position)),
    # A replay applied again: files the table references are deleted as a duplicate's (never caught as I1 here).
    "two-way batch ids (duplicates applied)": Mutant(
        "I6", (reconcile_module, "_decide", _decide_turning(Outcome.DUPLICATE))
    ),
    "no fencing (zombie entries applied)": Mutant("I4", (reconcile_module, "_decide", _decide_turning(Outcome.FENCED))),
    # Idempotent jobs (no barrier, PROTOCOL.md §7): each rule of ``reconcile.fenced_by`` that orders them.
    "a job that opened later does not fence an idempotent job": Mutant(
        "I4", (reconcile_module, "fenced_by", _tails_never_fence), (commit_module, "fenced_by", _tails_never_fence)
    ),
    "an idempotent job that opened later does not fence a barrier's entries": Mutant(
        "I4",
        (reconcile_module, "fenced_by", _barriers_ignore_tails),
        (commit_module, "fenced_by", _barriers_ignore_tails),
    ),
    "idempotent jobs with equal tails taken as ordered": Mutant(
        "I4", (reconcile_module, "fenced_by", _equal_tails_ordered), (commit_module, "fenced_by", _equal_tails_ordered)
    ),
    "an idempotent job's open takes the upper for the tail": Mutant(
        "I4", (harness_module, "open_writer", _open_at_the_upper)
    ),
    "a writer's first barrier is not marked": Mutant("I4", (fencing_module, "_mark_barriers", _barriers_unmarked)),
    # A peer's entry overwritten in its WAL position.
    "plain PUT instead of put-if-absent": Mutant("I6", (MemoryStore, "put_if_absent", _plain_put)),
    "retried put guesses instead of reading the token": Mutant("I7", (wal_module, "claim_key", _no_token_check)),
    "control data bound to the location, not the table UUID": Mutant(
        "I8", (view_module, "control_root", _root_of_location)
    ),
    # Read as fresh, the table's log is reconciled from position 0 again.
    "a lost state property is read as fresh": Mutant(
        "I3", (context_module, "bind", _bind_lost_state_as_fresh), (harness_module, "bind", _bind_lost_state_as_fresh)
    ),
    "a decision on catalog facts is reported without a commit": Mutant(
        "I9", (reconcile_module.Outcome, "external", property(lambda self: False))
    ),
    "truncation deletes the object at upper - 1": Mutant("I6", (wal_module.Wal, "truncate", _truncate_to_the_upper)),
    # PROTOCOL.md §3 "Reads": what a process keeps belongs to one control root (one table incarnation).
    "kept entries shared by every table of a process": Mutant(
        "I6", (wal_module.KeptEntries, "get", _kept_get_by_process), (wal_module.KeptEntries, "keep", _keep_by_process)
    ),
    "a barrier trusts the position its put landed in": Mutant(
        "I4", (fencing_module, "put_barrier", _trusting_put_barrier)
    ),
    "a fenced streaming run may register again": Mutant("I4", (wal_module.Wal, "run_epoch", _no_run_registry)),
    "batch ids judged by the highest applied id": Mutant(
        "I9", (reconcile_module, "_judge_batch", _judge_batch_by_the_highest)
    ),
    "dynamic overwrite resolved at write time, not apply time": Mutant(
        "I1", (memory_port_module, "live_files", _live_at_write_time)
    ),
    "replace-where removes a straddling file whole": Mutant(
        "model", (replace_module, "removals", _straddlers_removed_whole)
    ),
    "a compaction applied although an input was already removed": Mutant(
        "model", (replace_module, "removals", _compaction_without_liveness)
    ),
    "publish without the fast-forward check": Mutant(
        "model", (replace_module, "check_fast_forward", _publish_without_check)
    ),
    "a commit mixes branches": Mutant("model", (reconcile_module, "_joins", _joins_ignoring("branch"))),
    "a commit mixes snapshot properties": Mutant("model", (reconcile_module, "_joins", _joins_ignoring("properties"))),
    # Other engines at the seams (issue 24; tests/model/foreign.py). After a rename every committer fails: no progress.
    "a replace-where bound by column name at apply time": Mutant(
        "I5", (replace_module, "filter_columns_now", _filter_by_name)
    ),
    "an absent NaN count read as zero": Mutant("model", (replace_module, "missing_stats", _nan_blind_missing_stats)),
    "'main changed data' read from summary counters only": Mutant(
        "model", (replace_module, "changed_data", _changed_by_counters_only)
    ),
    "a stream offset must stay on main's lineage": Mutant("stream", (lineage_module, "rejoin", _never_rejoin)),
    # Appended rows in an overwrite snapshot: a stream reader that skips overwrites never delivers them.
    "appends join a replacing entry's commit": Mutant(
        "stream", (WriteMode, "takes_appends", property(lambda m: m not in (WriteMode.PUBLISH, WriteMode.COMPACT)))
    ),
    # A malformed entry (a kind without what it needs) must stay inert, never be reconciled.
    "the decoder checks types but not what each kind needs": Mutant(
        "I3", (entry_module, "_check_kind", lambda entry: None)
    ),
    "a barrier leaves the holes below it open": Mutant("I4", (wal_module.Wal, "seal", _seal_nothing)),
    "a barrier is used although a commit may void its position": Mutant(
        "I4", (wal_module.Wal, "seal", _seal_without_looking_up)
    ),
    "a barrier trusts a lower barrier to seal the holes below it": Mutant(
        "I4", (wal_module.Wal, "_seal_after_lower", lambda self, holes_below: None)
    ),
    # Who commits (issue 31): barriers and seals hold nobody up; a plan rests on what was really seen.
    "barriers and seals hold up the writers behind them": Mutant(
        "I5", (waiting_module, "commits_own_entry", lambda entry: True)
    ),
}


#: Mutants whose schedule is rare, with a budget of their own. A file of another engine with NaN rows, no NaN
#: counts and its range wholly inside a replace-where's, then that replace-where: about one schedule in 1,100
#: (8 of seeds 3,000-12,000, none below 3,000, after issue 31's open without a LIST): 12,000 catch it with
#: P > 0.9999 where 3,000 missed it.
RARE_BUDGETS = {"an absent NaN count read as zero": 12_000}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_model_catches_a_broken_protocol(name: str) -> None:
    """Each deliberately broken variant of the protocol breaks the invariant it declares within the budget."""
    caught = catch_named(__name__, "MUTANTS", name, RARE_BUDGETS.get(name, MUTANT_BUDGET))
    print(f"\n{name}: {MUTANTS[name].breaks} broken at schedule {caught.seed}: {caught.violations[0][:200]}")
    assert MUTANTS[name].breaks in caught.invariants


def test_a_mutant_that_crashes_the_model_is_not_caught() -> None:
    """A variant with the wrong signature makes processes raise TypeError: that is a crash, never a catch."""
    broken = Mutant("I4", (reconcile_module, "_decide", lambda: None))
    with pytest.raises((ModelCrash, TypeError)):
        catch(broken, range(3))


def test_a_mutant_caught_only_by_another_invariant_survives() -> None:
    """Schedules that break other invariants than the declared one do not count: the mutant survives."""
    wrong = Mutant("I8", rebase_on_conflict=True)  # the retry breaks I2 (and I1, I3, I9) at schedule 4
    with pytest.raises(MutantSurvived, match="I2"):
        catch(wrong, range(5))


SQLITE_SCHEDULES = int(os.environ.get("FENCEDLAKE_MODEL_SQLITE_SCHEDULES", "300"))


@pytest.fixture(scope="module")
def sqlite_backend(tmp_path_factory: pytest.TempPathFactory) -> SqliteBackend:
    return SqliteBackend(tmp_path_factory.mktemp("model-sqlite"))


def test_schedules_over_a_real_sqlite_catalog_keep_every_invariant(tmp_path: Path) -> None:
    """The same schedules through pyiceberg and a real SQLite catalog (snapshots, properties, CAS); in the
    process pool like the in-memory ones, each worker's share over its own SQLite catalog."""
    started = time.monotonic()
    stats, failures = run_schedules(range(SQLITE_SCHEDULES), sqlite_dir=tmp_path)
    print(f"\nmodel over SQLite: {stats['schedules']} schedules in {time.monotonic() - started:.0f}s")
    assert not failures, f"invariant violations (seed, first violations): {failures}"
    if SQLITE_SCHEDULES >= 100:
        for case in (
            "applied by a peer's commit",
            "stale commit conflicts",
            "outcome:FENCED",
            "overwrites applied",
            "dynamic applied",
            "filter applied",
            "outcome:REFUSED",
            "branch writes applied",
        ):
            assert stats[case] > 0, f"no SQLite schedule reached {case!r}"


def test_real_pyiceberg_retry_is_caught_over_sqlite(sqlite_backend: SqliteBackend) -> None:
    """The mutant "pyiceberg retry on", with pyiceberg's real commit_transaction retry, breaks an invariant."""
    for seed in range(SQLITE_SCHEDULES):
        violations = run_schedule(seed, rebase_on_conflict=True, backend=sqlite_backend)
        if violations:
            print(f"\npyiceberg's retry caught at SQLite schedule {seed}: {violations[0][:200]}")
            return
    pytest.fail(f"pyiceberg's own retry survived {SQLITE_SCHEDULES} SQLite schedules: the model is too weak")
