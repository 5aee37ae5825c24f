"""A deterministic scheduler for simulated processes (model-based test).

Each simulated process is a real thread running unmodified protocol code;
exactly one runs at a time. Every object-store and catalog request (and every
backoff sleep) is a *checkpoint* where the running process hands control back
and the scheduler, driven by a seeded RNG, picks who runs next — so a schedule
is reproducible from its seed. A crash is delivered at a checkpoint as
:class:`SimulatedCrash` (a BaseException, so ``except Exception`` in the code
under test cannot swallow it); once crashed, every later checkpoint of that
process raises again, so no I/O happens in its ``finally`` blocks — like
``kill -9``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class SimulatedCrash(BaseException):
    """The process was killed at a checkpoint."""


class ScheduleStuck(AssertionError):
    """Processes were still running when the step budget ran out (a liveness failure)."""


@dataclass
class Proc:
    name: str
    fn: Callable[[], Any]
    weight: float = 1.0
    crash_p: float = 0.0
    go: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    crashed: bool = False
    result: Any = None
    error: BaseException | None = None
    steps: int = 0


class Scheduler:
    """Runs procs one at a time, switching at checkpoints; virtual clock for sleeps."""

    def __init__(self, rng: random.Random, *, max_steps: int = 20_000) -> None:
        self.rng = rng
        self.max_steps = max_steps
        self.procs: list[Proc] = []
        self.clock = 0.0
        self.steps = 0
        self._back = threading.Lock()  # held by the scheduler while a proc runs
        self._back.acquire()
        self._local = threading.local()

    def spawn(self, name: str, fn: Callable[[], Any], *, weight: float = 1.0, crash_p: float = 0.0) -> Proc:
        proc = Proc(name, fn, weight, crash_p)
        proc.go.acquire()  # held = not this proc's turn; release() hands it the turn
        self.procs.append(proc)
        return proc

    def current(self) -> Proc | None:
        return getattr(self._local, "proc", None)

    def checkpoint(self) -> None:
        """Yield to the scheduler (no-op outside a simulated process)."""
        proc = self.current()
        if proc is None:
            return
        self.clock += 0.001
        proc.steps += 1
        if proc.crashed:
            raise SimulatedCrash(proc.name)
        self._back.release()
        proc.go.acquire()
        if proc.crashed:
            raise SimulatedCrash(proc.name)

    def sleep(self, seconds: float) -> None:
        self.clock += seconds
        self.checkpoint()

    def now(self) -> float:
        return self.clock

    def _body(self, proc: Proc) -> None:
        self._local.proc = proc
        proc.go.acquire()
        try:
            if proc.crashed:
                raise SimulatedCrash(proc.name)
            proc.result = proc.fn()
        except SimulatedCrash:
            proc.crashed = True
        except BaseException as e:  # noqa: BLE001 - recorded and checked by the test
            proc.error = e
        finally:
            proc.done = True
            self._back.release()

    def run(self) -> None:
        threads = [threading.Thread(target=self._body, args=(p,), daemon=True) for p in self.procs]
        for t in threads:
            t.start()
        try:
            while True:
                runnable = [p for p in self.procs if not p.done]
                if not runnable:
                    return
                if self.steps >= self.max_steps:
                    raise ScheduleStuck(f"still running after {self.steps} steps: {[p.name for p in runnable]}")
                self.steps += 1
                proc = self.rng.choices(runnable, weights=[p.weight for p in runnable])[0]
                if proc.crash_p and self.rng.random() < proc.crash_p:
                    proc.crashed = True
                proc.go.release()
                self._back.acquire()
        finally:
            for p in self.procs:
                if not p.done:
                    p.crashed = True
                    p.go.release()
                    self._back.acquire()
            for t in threads:
                t.join(timeout=5)
