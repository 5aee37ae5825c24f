"""Schedules: which fault hits which link when, applied by a thread while the apps write.

A :class:`Schedule` is a name, the latency every link has for the whole run, and timed
:class:`Step` s. :func:`run_schedule` applies them against a :class:`~integration.faults.network.Network`
(each step's fault is recorded with its time) and always heals everything at the end.
:data:`CI` is the sized profile ``make test`` runs; :data:`FULL` (``FENCEDLAKE_FAULTS_FULL=1``)
adds one schedule per fault kind with longer outages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from integration.faults.network import Network

__all__ = ["CI", "FULL", "Schedule", "Step", "run_schedule"]


@dataclass(frozen=True)
class Step:
    """At ``at`` seconds, ``what`` for ``hold`` seconds: ``toxic`` (``kind`` on ``app``'s ``service`` link),
    ``partition`` (``app`` from every service), ``down`` (``service`` for every app) or ``restart`` (the proxy)."""

    at: float
    what: str
    hold: float = 0.0
    app: str = ""
    service: str = ""
    kind: str = ""
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: tuple[tuple[str, object], ...] = ()

    def describe(self) -> str:
        where = "/".join(filter(None, (self.app, self.service)))
        return f"{self.what}{':' + self.kind if self.kind else ''}@{where or 'all'} {self.hold:g}s"


@dataclass(frozen=True)
class Schedule:
    """Latency on every link for the whole run (store, catalog: ms, with jitter), then the steps."""

    name: str
    steps: tuple[Step, ...]
    store_latency_ms: int = 20
    catalog_latency_ms: int = 100
    jitter_ms: int = 5
    length_s: float = field(default=0.0)

    @property
    def end_s(self) -> float:
        """When the last step is over (the apps stop writing then)."""
        return max([self.length_s, *(s.at + s.hold for s in self.steps)])


def _apply(net: Network, step: Step, t0: float) -> Callable[[], None]:
    """Start ``step``; return what ends it."""
    net.record(time.monotonic() - t0, step.describe(), step.app or step.service)
    if step.what == "toxic":
        proxy = net.link(step.app, step.service)
        name = proxy.add_toxic(
            step.kind, stream=step.stream, toxicity=step.toxicity, name=f"step-{step.at:g}", **dict(step.attributes)
        )
        return lambda: proxy.remove_toxic(name)
    if step.what == "partition":
        ctx = net.partitioned(step.app)
    elif step.what == "down":
        ctx = net.down(step.service)
    elif step.what == "restart":
        net.restart_proxy()
        return lambda: None
    else:
        raise ValueError(f"unknown step {step.what!r}")
    ctx.__enter__()
    return lambda: ctx.__exit__(None, None, None)


def run_schedule(net: Network, schedule: Schedule, stop: threading.Event) -> threading.Thread:
    """Apply ``schedule`` on a thread from now (latency at once); the thread ends when the schedule does."""
    for (_, service), proxy in list(net.links.items()):
        latency = schedule.catalog_latency_ms if service in ("pg", "rest") else schedule.store_latency_ms
        proxy.add_toxic("latency", name="latency", latency=latency, jitter=schedule.jitter_ms)
    net.record(0.0, f"latency {schedule.store_latency_ms}/{schedule.catalog_latency_ms} ms +-{schedule.jitter_ms}", "")

    def run() -> None:
        t0 = time.monotonic()
        ends: list[tuple[float, Callable[[], None]]] = []
        steps = sorted(schedule.steps, key=lambda s: s.at)
        try:
            while (steps or ends) and not stop.is_set():
                now = time.monotonic() - t0
                while steps and steps[0].at <= now:
                    step = steps.pop(0)
                    ends.append((step.at + step.hold, _apply(net, step, t0)))
                for due in [e for e in ends if e[0] <= now]:
                    ends.remove(due)
                    due[1]()
                time.sleep(0.05)
        finally:
            for _, end in ends:
                end()
            net.api.reset()  # healed: no toxic, every proxy enabled

    thread = threading.Thread(target=run, name=f"schedule-{schedule.name}", daemon=True)
    thread.start()
    return thread


def _toxic(at: float, hold: float, app: str, service: str, kind: str, **attributes: object) -> Step:
    return Step(at, "toxic", hold, app, service, kind, attributes=tuple(attributes.items()))


#: The CI profile: one run with every kind of fault in turn (58 s of faults): resets, cut responses and sliced
#: packets on S3, a stalled catalog connection, a partition of one app for longer than the catalog's request
#: timeout (12 s > 10 s, BOUNDS), the catalog down for every app (15 s, also past that timeout), the proxy
#: restarted. Its steps are those of "mixed-long" (85 s of faults), with shorter holds and gaps; that one and
#: the longer outages of each kind run with ``FENCEDLAKE_FAULTS_FULL=1``.
CI = (
    Schedule(
        "mixed",
        (
            _toxic(3, 4, "lane0", "s3", "reset_peer", timeout=0),
            _toxic(8, 4, "lane1", "s3", "limit_data", bytes=300),
            _toxic(13, 4, "spark0", "s3", "slicer", average_size=64, size_variation=32, delay=200),
            _toxic(18, 5, "lane0", "pg", "timeout", timeout=3000),
            Step(24, "partition", 12, app="lane1"),
            Step(37, "down", 15, service="pg"),
            Step(53, "restart"),
        ),
        length_s=58,
    ),
)

#: ``FENCEDLAKE_FAULTS_FULL=1``: one schedule per kind of fault, longer outages, the CI one too.
FULL = (
    *CI,
    Schedule(
        "mixed-long",
        (
            _toxic(4, 5, "lane0", "s3", "reset_peer", timeout=0),
            _toxic(10, 5, "lane1", "s3", "limit_data", bytes=300),
            _toxic(16, 5, "spark0", "s3", "slicer", average_size=64, size_variation=32, delay=200),
            _toxic(22, 6, "lane0", "pg", "timeout", timeout=3000),
            Step(30, "partition", 12, app="lane1"),
            Step(45, "down", 30, service="pg"),
            Step(80, "restart"),
        ),
        length_s=85,
    ),
    Schedule("resets", tuple(_toxic(3 + 10 * k, 6, f"lane{k % 2}", "s3", "reset_peer", timeout=0) for k in range(4))),
    Schedule(
        "cut-responses",
        (
            _toxic(3, 8, "lane0", "s3", "limit_data", bytes=200),
            _toxic(14, 8, "lane1", "pg", "limit_data", bytes=500),
            _toxic(25, 8, "spark0", "s3", "slicer", average_size=16, size_variation=8, delay=1000),
        ),
    ),
    Schedule("stalls", (_toxic(3, 10, "lane0", "s3", "timeout", timeout=0), _toxic(16, 10, "lane1", "pg", "timeout"))),
    Schedule("partition-60s", (Step(5, "partition", 60, app="spark0"),)),
    Schedule("partition-10s", (Step(5, "partition", 10, app="lane0"), Step(20, "partition", 10, app="lane1"))),
    Schedule("catalog-down-30s", (Step(5, "down", 30, service="pg"),)),
    Schedule("store-down-30s", (Step(5, "down", 30, service="s3"),)),
    Schedule("proxy-restarts", (Step(5, "restart"), Step(20, "restart"), Step(35, "restart")), length_s=45),
)
