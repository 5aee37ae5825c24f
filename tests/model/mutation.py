"""Mutation checks of the model: a broken variant of the protocol must be caught by the invariant it breaks.

A :class:`Mutant` names the invariant it must violate (``"I4"``, or one of the model's own
:data:`RULES`) and the attributes it patches. :func:`catch` runs schedules under it until one
breaks that invariant and returns the :class:`InvariantViolation`; a schedule whose violations
name no invariant (a simulated process that raised, the model's own bookkeeping) raises
:class:`ModelCrash` at once, and any exception escaping a schedule propagates: a mutant that
crashes the model (a signature mismatch, a typo) is never counted as caught. Every violation the
checks report starts with the invariants it breaks (``"I1/I9: ..."``) or the rule's name
(``"model: ..."``); a new check follows that form, a new mutant declares what it breaks::

    MUTANTS = {"a barrier leaves the holes below it open": Mutant("I4", (wal_module.Wal, "seal", _seal_nothing))}

    def test_model_catches_a_broken_protocol(name):
        caught = catch(MUTANTS[name], range(MUTANT_BUDGET))
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .harness import run_schedule

#: Rules of the model's own, besides the invariants I1-I9, that a violation may name.
RULES = {
    "model": "every branch holds what replaying the applied entries in WAL order gives: the write modes (oracle)",
    "rows": "upserts: at most one row per key, the one the serial rules pick (upsert_oracle)",
    "stream": "a stream reader of main delivers every appended row once, refusing only rows main lost (foreign)",
    "backend": "the real catalog under the model holds what the model's mirror holds (sqlite_backend)",
}
_TAG = re.compile(rf"(I[1-9](?:/I[1-9])*|{'|'.join(RULES)}): ")


def invariants_of(violation: str) -> frozenset[str]:
    """The invariants (``I1``-``I9``) or rules a violation names in its leading tag; empty if it names none."""
    tag = _TAG.match(violation)
    return frozenset(tag.group(1).split("/")) if tag else frozenset()


class InvariantViolation(AssertionError):
    """Schedule ``seed`` broke ``invariants`` (I1-I9 or :data:`RULES`); ``violations`` says how."""

    def __init__(self, seed: int, violations: list[str]) -> None:
        self.seed = seed
        self.violations = violations
        self.invariants = frozenset().union(*(invariants_of(v) for v in violations))
        super().__init__(f"schedule {seed} broke {', '.join(sorted(self.invariants))}: {violations[0][:300]}")


class ModelCrash(AssertionError):
    """A schedule reported violations that name no invariant: a process raised, or the model broke."""


class MutantSurvived(AssertionError):
    """No schedule within the budget broke the invariant the mutant declares."""


def check_schedule(seed: int, **kwargs: Any) -> None:
    """Run schedule ``seed`` (``run_schedule``'s keyword arguments).

    Raises:
        InvariantViolation: the schedule broke an invariant.
        ModelCrash: it reported a violation naming no invariant.
    """
    violations = run_schedule(seed, **kwargs)
    untagged = [v for v in violations if not invariants_of(v)]
    if untagged:
        raise ModelCrash(f"schedule {seed}: {untagged[0][:500]}")
    if violations:
        raise InvariantViolation(seed, violations)


class Mutant:
    """A deliberately broken protocol: the invariant it ``breaks``, its ``patches`` and ``run_schedule`` kwargs.

    ``Mutant("I4", (wal_module.Wal, "seal", _seal_nothing))``: each patch is (object, attribute, value).
    """

    def __init__(self, breaks: str, *patches: tuple[object, str, object], **kwargs: Any) -> None:
        if not invariants_of(f"{breaks}: ") or "/" in breaks:
            raise ValueError(f"a mutant breaks one of I1-I9 or {sorted(RULES)}, not {breaks!r}")
        self.breaks = breaks
        self.patches = patches
        self.kwargs = kwargs

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The patches in place (restored on exit, also after an error)."""
        with contextlib.ExitStack() as undo:
            for target, name, value in self.patches:
                undo.callback(setattr, target, name, getattr(target, name))
                setattr(target, name, value)
            yield


def catch(mutant: Mutant, seeds: Iterable[int]) -> InvariantViolation:
    """The first schedule of ``seeds`` that breaks ``mutant.breaks`` with the mutant applied.

    Schedules that break only other invariants are passed over (a broken protocol may break several).

    Raises:
        MutantSurvived: no schedule broke ``mutant.breaks`` (the other invariants broken, if any, named).
        ModelCrash: a schedule reported a violation naming no invariant.
    """
    found = hunt(mutant, seeds)
    if isinstance(found, InvariantViolation):
        return found
    raise survived(mutant, found)


def hunt(mutant: Mutant, seeds: Iterable[int]) -> InvariantViolation | dict[str, int]:
    """:func:`catch`'s search: the violation, or the other invariants broken on the way (first seed of each)."""
    others: dict[str, int] = {}
    with mutant.applied():
        for seed in seeds:
            try:
                check_schedule(seed, **mutant.kwargs)
            except InvariantViolation as caught:
                if mutant.breaks in caught.invariants:
                    return caught
                others.update(dict.fromkeys(sorted(caught.invariants - others.keys()), seed))
    return others


def survived(mutant: Mutant, others: dict[str, int]) -> MutantSurvived:
    """The error of a mutant no schedule caught (``others``: other invariants broken, first seed of each)."""
    broken = others or "none"
    return MutantSurvived(f"no schedule broke {mutant.breaks}; other invariants broken (first seed): {broken}")
