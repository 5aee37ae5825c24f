"""Upserts in the model-based test: schedules where upsert writers race every other process (PROTOCOL.md §5.5).

Every in-memory schedule below spawns 2-3 upsert writers (random keys, order values,
delete rows) besides the usual mix; each schedule is checked by ``harness.check``,
which includes the row-level replay and the serial oracle (``upsert_oracle``). The
mutants prove those checks catch the ways upserts go wrong.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import pyspark_fenced_sink.protocol.reconcile as reconcile_module
import pyspark_fenced_sink.protocol.replace as replace_module
import pyspark_fenced_sink.protocol.upsert as upsert_module
from tests.profile import FULL

from . import upserts
from .mutation import Mutant
from .parallel import catch_named, run_schedules

pytestmark = pytest.mark.model

#: Schedules of the two invariant tests together (half each, upsert-order forced on / off). The CI profile runs
#: 1,000 (seeds 0-499 each): as many as the mutants' budget, and every case the test asserts is reached there
#: (the rarest, compactions folding deletes without upsert-order, 24 times). ``FENCEDLAKE_FULL=1`` runs 2,000
#: (seeds 0-999 each, the same checks); ``FENCEDLAKE_MODEL_UPSERT_SCHEDULES`` sets the count in either profile.
SCHEDULES = int(os.environ.get("FENCEDLAKE_MODEL_UPSERT_SCHEDULES", "2000" if FULL else "1000"))
MUTANT_BUDGET = 1000


@pytest.mark.parametrize("ordered", [True, False], ids=["upsert-order", "no-order"])
def test_upsert_schedules_keep_every_invariant(ordered: bool) -> None:
    """Upsert writers in every schedule: every invariant, the row replay and the serial oracle hold."""
    stats, failures = run_schedules(range(SCHEDULES // 2), forced=ordered)
    print({k: v for k, v in sorted(stats.items()) if "upsert" in k or "delet" in k or "tombstone" in k})
    assert not failures, f"invariant violations (seed, first violations): {failures}"
    if SCHEDULES >= 1000:
        cases = ["rows deleted by position", "compactions folding deletes applied", "outcome:REFUSED"]
        cases += ["ordered upserts applied", "tombstone files remembered"] if ordered else ["unordered upserts applied"]
        cases += [] if ordered else ["upserts refused (duplicate key)"]
        for case in cases:
            assert stats[case] > 0, f"no schedule reached {case!r}: the model lost coverage"


def _ties_by_arrival(best, existing, present, is_delete):  # type: ignore[no-untyped-def]
    """A tie goes to the row that arrived first (the live one), not to the later WAL position."""
    return ~present | (best > existing)


def _delete_always_applies(best, existing, present, is_delete):  # type: ignore[no-untyped-def]
    """A delete row removes the key even when the live row is newer."""
    return is_delete | ~present | (best >= existing)


def _order_ignored(best, existing, present, is_delete):  # type: ignore[no-untyped-def]
    """The entry always wins, as without an order column."""
    return np.ones_like(present)


def _old_row_left(live_of_won_keys):  # type: ignore[no-untyped-def]
    """The winning row is added but the key's old live row is not deleted."""
    return np.zeros_like(live_of_won_keys)


def _forget_deletes(tombstones, entry, outcome):  # type: ignore[no-untyped-def]
    """Deletes are never remembered."""
    return tombstones


#: The schedules' upserts with upsert-order, or without (``upserts.FORCED``).
_ORDERED, _UNORDERED = (upserts, "FORCED", True), (upserts, "FORCED", False)

#: Each broken variant of the upsert rules: caught by the upsert oracle ("rows"), with upsert-order forced on or off.
MUTANTS = {
    "order ignored (the later WAL position always wins)": Mutant(
        "rows", (upsert_module, "_entry_wins", _order_ignored), _ORDERED
    ),
    "ties by arrival": Mutant("rows", (upsert_module, "_entry_wins", _ties_by_arrival), _ORDERED),
    "a delete applied to a newer row": Mutant("rows", (upsert_module, "_entry_wins", _delete_always_applies), _ORDERED),
    "a key's old row left live": Mutant("rows", (upsert_module, "_replaced", _old_row_left), _UNORDERED),
    "deletes not remembered": Mutant("rows", (reconcile_module, "remembered", _forget_deletes), _ORDERED),
    "a compaction ignores deletes added since it read its inputs": Mutant(
        "rows", (replace_module, "check_folded", lambda entry, applying: None), _ORDERED
    ),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_model_catches_a_broken_upsert(name: str) -> None:
    """Each deliberately broken variant of the upsert rules breaks the invariant it declares within the budget."""
    caught = catch_named(__name__, "MUTANTS", name, MUTANT_BUDGET)
    print(f"\n{name}: {MUTANTS[name].breaks} broken at schedule {caught.seed}: {caught.violations[0][:200]}")
    assert MUTANTS[name].breaks in caught.invariants
