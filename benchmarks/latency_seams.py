"""Where the latency suite injects cloud latency, and how it counts requests (benchmarks only).

Three seams, each the one place the sink reaches the service it stands for;
nothing in the package changes:

* **The control store** (the WAL, the run registry, checkpoints): the store a
  control root resolves to is looked up in ``store.registry.SCHEMES`` every
  time a table is opened, so :func:`install_store` replaces each row's factory
  in the worker process with one that wraps the real store (``LocalStore`` for
  the embedded warehouse, ``S3Store`` for the REST test catalog's) in a
  :class:`SlowStore`. Every request sleeps half its latency before the
  real operation and half after (the store decides in the middle of a round
  trip, as a server does), and is counted by kind and by the protocol function
  that made it (the first caller frame inside the package).
* **Table reads**: ``load_table`` of the (per-process cached) catalog object,
  wrapped on the instance: every read of the table's current metadata — the
  plan's, the commit's first read and every re-read of the commit loop —
  sleeps the table-read latency first.
* **The catalog's compare-and-swap**: ``commit_table`` of the same catalog
  object (pyiceberg's ``Table._do_commit`` calls it on the catalog the table
  was loaded from), half the CAS latency before the real commit, half after.
  It stands for the whole commit request (manifests, metadata file, catalog
  update), which on a cloud catalog is one round trip of ~100 ms.

Latencies are drawn uniformly in ``latency * (1 ± jitter)``. The data files
themselves are written to the warehouse unchanged (on ``/dev/shm`` when it
exists, so the injected latency is the only one: a disk's fsync under hundreds
of small concurrent writes adds 50-150 ms of its own).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Latency", "Meter", "SlowStore", "install_catalog", "install_store", "origin"]

_PACKAGE = "pyspark_fenced_sink"
_SKIP = ("store/", "store\\")  # frames of the store layer itself are not an origin


@dataclass
class Latency:
    """Injected latencies in seconds, and their relative jitter (mutable: set per round)."""

    store_s: float = 0.020
    table_s: float = 0.020
    cas_s: float = 0.100
    jitter: float = 0.25
    rng: random.Random = field(default_factory=random.Random)

    def draw(self, seconds: float) -> float:
        """One latency around ``seconds`` (uniform within the jitter)."""
        if seconds <= 0:
            return 0.0
        return seconds * (1.0 + self.jitter * (2.0 * self.rng.random() - 1.0))


@dataclass
class Meter:
    """Requests counted in one worker process (thread-safe), reset per round."""

    store: Counter[str] = field(default_factory=Counter)
    origins: Counter[str] = field(default_factory=Counter)
    catalog: Counter[str] = field(default_factory=Counter)
    #: Wall milliseconds of the store requests by kind: the injected round trip plus the time the
    #: calling thread waited for a CPU (what a claim's LIST -> PUT window really is on a busy host).
    wall_ms: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_store(self, kind: str) -> None:
        where = origin()
        with self.lock:
            self.store[kind] += 1
            self.origins[f"{kind} {where}"] += 1

    def took(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.wall_ms[kind] += int(seconds * 1000)

    def count_catalog(self, kind: str) -> None:
        with self.lock:
            self.catalog[kind] += 1

    def take(self) -> dict[str, dict[str, int]]:
        """The counts so far, as plain dicts; the meter starts again from zero."""
        with self.lock:
            out = {
                "store": dict(self.store),
                "origins": dict(self.origins),
                "catalog": dict(self.catalog),
                "wall_ms": dict(self.wall_ms),
            }
            for counter in (self.store, self.origins, self.catalog, self.wall_ms):
                counter.clear()
        return out


def _name(frame: Any) -> str:
    path = frame.f_code.co_filename
    module = path.rsplit(_PACKAGE, 1)[1].strip("/\\").removesuffix(".py").replace("/", ".").replace("\\", ".")
    return f"{module}.{frame.f_code.co_name}"


def origin() -> str:
    """The package function that made this request, and its caller when that is the WAL's own layer.

    ``protocol.commit._drive > protocol.wal._claim``: the innermost frame of the package outside
    ``store/``, prefixed by the first package frame out of ``protocol/wal.py`` when it is in there.
    """
    frame: Any = sys._getframe(2)
    inner: str | None = None
    while frame is not None:
        path = frame.f_code.co_filename
        if _PACKAGE in path and not any(s in path for s in _SKIP):
            if not path.endswith("wal.py"):
                return f"{_name(frame)} > {inner}" if inner is not None else _name(frame)
            inner = inner or _name(frame)
        frame = frame.f_back
    return inner or "other"


class SlowStore:
    """An object store whose every request takes an injected round trip, counted by kind and origin."""

    def __init__(self, inner: Any, latency: Latency, meter: Meter) -> None:
        self.inner = inner
        self.latency = latency
        self.meter = meter

    def __repr__(self) -> str:
        return repr(self.inner)

    def _call(self, kind: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.meter.count_store(kind)
        rtt = self.latency.draw(self.latency.store_s)
        t0 = time.monotonic()
        time.sleep(rtt / 2)
        try:
            return fn(*args)
        finally:
            time.sleep(rtt / 2)
            self.meter.took(kind, time.monotonic() - t0)

    def get(self, key: str) -> bytes | None:
        return self._call("GET", self.inner.get, key)  # type: ignore[no-any-return]

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        return self._call("LIST", self.inner.list, prefix, start_after)  # type: ignore[no-any-return]

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return bool(self._call("PUT", self.inner.put_if_absent, key, data))

    def delete(self, key: str) -> None:
        self._call("DELETE", self.inner.delete, key)


def install_store(latency: Latency, meter: Meter) -> None:
    """Make every control store of this process a :class:`SlowStore` (each ``SCHEMES`` row's factory)."""
    from dataclasses import replace

    from pyspark_fenced_sink.store import registry

    def slowed(real: Callable[[str, Mapping[str, str]], Any]) -> Callable[[str, Mapping[str, str]], Any]:
        def slow(root: str, io_properties: Mapping[str, str]) -> Any:
            return SlowStore(real(root, io_properties), latency, meter)

        return slow

    for scheme, row in list(registry.SCHEMES.items()):
        registry.SCHEMES[scheme] = replace(row, store=slowed(row.store))


def install_catalog(catalog: Any, latency: Latency, meter: Meter) -> None:
    """Delay and count this catalog object's table reads and commits (once per catalog object)."""
    if getattr(catalog, "_fencedlake_bench_slow", False):
        return
    load_table, commit_table = catalog.load_table, catalog.commit_table

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        meter.count_catalog("table reads")
        time.sleep(latency.draw(latency.table_s))
        return load_table(*args, **kwargs)

    def slow_commit(*args: Any, **kwargs: Any) -> Any:
        meter.count_catalog("CAS attempts")
        rtt = latency.draw(latency.cas_s)
        time.sleep(rtt / 2)
        try:
            return commit_table(*args, **kwargs)
        finally:
            time.sleep(rtt / 2)

    catalog.load_table = slow_load
    catalog.commit_table = slow_commit
    catalog._fencedlake_bench_slow = True
