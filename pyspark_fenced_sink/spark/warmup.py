"""``warm_workers``: start the Python workers N concurrent writes need before they run (issue 31).

Spark runs a Python data source's write as requests to pooled Python workers on
the driver host: one that plans it (``writer()``) and one that commits it
(``commit()``), each from a pool of its own. A pool grows only when every worker
in it is busy, so the first time N writes of an application overlap at a step,
one of them waits while Spark starts a new worker process and the sink imports
and freezes its modules in it (:mod:`pyspark_fenced_sink.spark.workers`): 1-3.5 s
on a 2-core host, against 0.2-0.4 s for the whole write with a warm pool. That
one-time cost is what a user's slowest write shows (docs/benchmarks.md §9.2).

:func:`warm_workers` pays it up front: ``n`` threads each run one *warm-up
write* -- ``format("fencedlake")`` with the option :data:`WARM_UP` and no table --
and each warm-up write's planning and commit steps wait at a rendezvous until
``n`` of them are in their step at once, so each pool holds ``n`` workers, every
one settled (imports done, heap frozen). A warm-up write touches no table, no
catalog and no store; its tasks write nothing. The rendezvous is a directory of
empty files under the driver host's temporary directory, named by a random
token (the planning and commit workers run on that host, also behind Spark
Connect), removed by the last worker to leave it.

Spark stops a pool's idle workers after one minute without any request to that
pool, so warm the pools right before the concurrent writes begin. A step that
cannot gather ``n`` workers within :data:`RENDEZVOUS_SECONDS` (Spark runs the
requests one at a time, or a worker failed to start) gives up, marks the
rendezvous so the others give up at once, and fails its warm-up write;
:func:`warm_workers` then logs a warning and returns ``met=False``: never an
error for the user's writes, which run as before. Imports only the standard
library and ``pyspark.sql.datasource`` at module load.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage

from pyspark_fenced_sink.errors import FencedLakeError, InvalidOptionsError

__all__ = ["MAX_WRITERS", "RENDEZVOUS_SECONDS", "WARM_UP", "WarmUp", "checked_writers", "warm_workers"]

logger = logging.getLogger(__name__)

#: The write option that makes a write a warm-up write: ``"<n>:<token>"`` (set by :func:`warm_workers` only).
WARM_UP = "fencedlake.warm-up"
#: How long a warm-up step waits for the other ``n - 1`` (Python start, imports and freeze take 1-3.5 s each).
RENDEZVOUS_SECONDS = 30.0
#: The most concurrent writes :func:`warm_workers` warms for (a settled worker: ~140 MB of its own, 200 MB resident).
MAX_WRITERS = 64
#: The steps whose pools a warm-up write grows, in the order a write reaches them.
STEPS = ("plan", "commit")
_GAVE_UP = "_gave-up"
_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class WarmUp:
    """One warm-up write's share of a rendezvous: ``n`` writes meet at each step under ``token``."""

    n: int
    token: str

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WarmUp | None:
        """The warm-up in a write's options, or None for an ordinary write."""
        value = options.get(WARM_UP)
        if value is None:
            return None
        count, _, token = str(value).partition(":")
        if not count.isdigit() or not 1 <= int(count) <= MAX_WRITERS or not token.isalnum():
            raise InvalidOptionsError(
                f"option {WARM_UP}={value!r}: expected '<1-{MAX_WRITERS}>:<token>' "
                "(set only by pyspark_fenced_sink.warm_workers)"
            )
        return cls(int(count), token)

    @property
    def directory(self) -> Path:
        """The rendezvous directory on the driver host."""
        return Path(tempfile.gettempdir()) / f"fencedlake-warm-up-{self.token}"

    def meet(self, step: str, *, seconds: float = RENDEZVOUS_SECONDS) -> None:
        """Settle this worker, then wait until ``n`` workers are in ``step`` at once.

        Each arrival is one empty file (named by the worker's pid and a random suffix). A worker
        that gives up leaves :data:`_GAVE_UP` behind, so the rest stop waiting. After the last
        step, the ``n``-th worker to leave removes the directory.

        Raises:
            FencedLakeError: the workers did not meet (this one or another gave up).
        """
        from pyspark_fenced_sink.spark.workers import Role, settle

        settle(Role.DRIVER)
        here = self.directory / step
        here.mkdir(parents=True, exist_ok=True)
        me = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (here / f"in-{me}").touch()
        deadline = time.monotonic() + seconds
        met = False
        while not (self.directory / _GAVE_UP).exists():
            if _count(here, "in-") >= self.n:
                met = True
                break
            if time.monotonic() > deadline:
                (self.directory / _GAVE_UP).touch()
                break
            time.sleep(_POLL_SECONDS)
        if not met:
            arrived = _count(here, "in-")
            raise FencedLakeError(
                f"warm-up: {arrived} of {self.n} Python workers were in the {step} step at once within "
                f"{seconds:g} s; the pool grows when writes need it"
            )
        if step == STEPS[-1]:
            (here / f"out-{me}").touch()
            if _count(here, "out-") >= self.n:
                shutil.rmtree(self.directory, ignore_errors=True)


def _count(here: Path, prefix: str) -> int:
    """How many workers left a ``prefix`` file in the step directory ``here``."""
    return sum(1 for p in here.iterdir() if p.name.startswith(prefix))


class WarmUpWriter(DataSourceWriter):
    """The batch writer of a warm-up write: its tasks write nothing, its commit meets the others."""

    def __init__(self, warm_up: WarmUp) -> None:
        self.warm_up = warm_up

    def write(self, iterator: Iterator[Any]) -> Any:
        """Settle the executor's Python worker for write tasks and drain the (empty) input.

        Draining matters: a worker whose input Spark finds unread at the end of the task
        is not reused, and the next write's task would start a new one.
        """
        from pyspark_fenced_sink.spark.workers import Role, settle

        settle(Role.WRITE_TASK)
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Any) -> None:
        """Hold this commit worker until ``n`` warm-up commits are in theirs."""
        self.warm_up.meet("commit")

    def abort(self, messages: Any) -> None:
        """Nothing to undo."""


def warm_up_writer(options: Mapping[str, str]) -> WarmUpWriter | None:
    """For ``FencedLakeDataSource.writer()``: a warm-up write's writer (after its planning step met), else None."""
    warm_up = WarmUp.parse(options)
    if warm_up is None:
        return None
    warm_up.meet("plan")
    return WarmUpWriter(warm_up)


def checked_writers(writers: Any) -> int:
    """``writers`` if it is an int from 1 to :data:`MAX_WRITERS`; else ValueError."""
    if isinstance(writers, bool) or not isinstance(writers, int) or not 1 <= writers <= MAX_WRITERS:
        raise ValueError(f"writers={writers!r}: expected an int from 1 to {MAX_WRITERS}")
    return writers


def warm_workers(spark: Any, writers: int, *, source: str = "fencedlake") -> dict[str, Any]:
    """Start the planning and commit workers ``writers`` concurrent fencedlake writes need, before they run.

    Runs ``writers`` warm-up writes from as many threads; their planning steps meet, then
    their commit steps (module docstring). Costs one Python worker start per missing
    worker (1-3.5 s each on a 2-core host, in parallel) and, per worker, the memory of the
    sink's imports (~140 MB not shared with other workers); a pool already that large
    answers in well under a second.
    Works on classic and Spark Connect sessions.

    Args:
        spark: the SparkSession the concurrent writes will use.
        writers: how many fencedlake writes of this application run at once (1 to :data:`MAX_WRITERS`).
        source: the format the writes name: ``fencedlake``, or the name a subclass of
            ``FencedLakeDataSource`` is registered under (Spark may keep its workers apart).

    Returns:
        ``{"writers": n, "seconds": wall time, "met": True if every step gathered n workers}``;
        if not, one WARNING names why (the writes run as before, the pools growing when needed).

    Raises:
        ValueError: ``writers`` is not an int from 1 to :data:`MAX_WRITERS`.
    """
    from concurrent.futures import ThreadPoolExecutor

    from pyspark_fenced_sink.spark.session import activate_session

    warm_up = WarmUp(checked_writers(writers), uuid.uuid4().hex)
    spec = f"{warm_up.n}:{warm_up.token}"
    logger.info("fencedlake: warming Python workers for %d concurrent writes", writers)
    started = time.perf_counter()

    def one(_: int) -> str | None:
        try:
            spark.range(0).write.format(source).option(WARM_UP, spec).mode("append").save()
        except Exception as e:  # noqa: BLE001 - a warm-up that fails leaves the pools to grow as writes need
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None

    with ThreadPoolExecutor(writers, initializer=activate_session, initargs=(spark,)) as pool:
        failures = [f for f in pool.map(one, range(writers)) if f is not None]
    seconds = time.perf_counter() - started
    shutil.rmtree(warm_up.directory, ignore_errors=True)  # left only if a step gave up (a classic session's host)
    if failures:
        logger.warning(
            "fencedlake: warming Python workers for %d concurrent writes: %d warm-up writes failed (%s); "
            "the pools grow when the writes need it",
            writers,
            len(failures),
            failures[0],
        )
    else:
        logger.info("fencedlake: warmed Python workers for %d concurrent writes in %.1f s", writers, seconds)
    return {"writers": writers, "seconds": seconds, "met": not failures}
