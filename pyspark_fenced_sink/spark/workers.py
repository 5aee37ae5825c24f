"""``settle``: freeze what the heavy imports allocated, once per Spark Python worker (issue 31; driver and executors).

pyspark's daemon runs a full ``gc.collect()`` after every request a reused
Python worker serves. A worker that has loaded pyiceberg, pyarrow and
SQLAlchemy holds 100-170k objects, so that collection costs 50-80 ms of CPU per
request, and a write makes about four requests (planning, two tasks, commit).
:func:`settle`, called at every entry point Spark runs in a Python worker (the
data source's factories, the writers' ``write``/``commit``/``abort``, the
readers' ``partitions``/``read``), imports the modules that role needs, then
runs ``gc.collect(); gc.freeze()`` once: the import-time objects move to the
permanent generation, which no collection traverses, and what a request leaves
behind (~4k objects) is all the daemon's collection still scans.

Only in Spark's Python workers (a ``pyspark.worker`` or ``pyspark.sql.worker.*``
module is loaded, or the process is the daemon's fork): never in the user's
own Python process, whose heap is theirs. ``FENCEDLAKE_GC_FREEZE=0`` (``false``,
``off``) in the workers' environment turns it off (to measure what it buys:
``benchmarks/spark_concurrency.py``). Imports only the standard library at
module load.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
import threading
import time
from enum import Enum

__all__ = ["GC_FREEZE_ENV", "Role", "in_spark_worker", "settle"]

logger = logging.getLogger(__name__)

#: Environment variable: ``0``/``false``/``off`` turns :func:`settle` off.
GC_FREEZE_ENV = "FENCEDLAKE_GC_FREEZE"


class Role(str, Enum):
    """What a Python worker does for the sink: which modules it needs settled."""

    #: Planning and commit workers on the driver host (``writer()``, ``commit()``, ``partitions()``).
    DRIVER = "driver"
    #: Executor tasks of a write (Arrow batches to data files).
    WRITE_TASK = "write-task"
    #: Executor tasks of a read (data files to Arrow batches).
    READ_TASK = "read-task"


#: Modules each role imports before it freezes; optional ones (a catalog's extra) are skipped if missing.
_MODULES: dict[Role, tuple[str, ...]] = {
    Role.DRIVER: (
        "pyspark_fenced_sink.write.transaction",
        "pyspark_fenced_sink.iceberg.catalogs",
        "pyspark_fenced_sink.spark.reader",
        "pyiceberg.io.pyarrow",
        "pyiceberg.catalog.sql",
        "pyiceberg.catalog.rest",
    ),
    Role.WRITE_TASK: ("pyspark_fenced_sink.write.task", "pyspark_fenced_sink.spark.messages", "pyarrow.parquet"),
    Role.READ_TASK: ("pyspark_fenced_sink.read.task", "pyarrow.parquet"),
}
_OPTIONAL = frozenset({"pyiceberg.catalog.sql", "pyiceberg.catalog.rest"})

_settled: set[Role] = set()
_lock = threading.Lock()
_worker: list[bool] = []  # the answer of in_spark_worker(), computed once


def in_spark_worker() -> bool:
    """True if this process is one of Spark's Python workers (not the user's driver program)."""
    if not _worker:
        main = getattr(sys.modules.get("__main__"), "__spec__", None)
        _worker.append(
            getattr(main, "name", None) in ("pyspark.daemon", "pyspark.worker")
            or "pyspark.worker" in sys.modules
            or any(name.startswith("pyspark.sql.worker.") for name in list(sys.modules))
        )
    return _worker[0]


def _enabled() -> bool:
    return os.environ.get(GC_FREEZE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def settle(role: Role) -> bool:
    """Import ``role``'s modules, then ``gc.collect(); gc.freeze()``, once per role and process.

    A no-op outside Spark's Python workers, when turned off by :data:`GC_FREEZE_ENV`, and
    on every later call for the same role (one set lookup). A worker that serves several
    roles (local mode shares one pool) collects once per role, at most three times.

    Returns:
        True if this call froze the heap.
    """
    if role in _settled:
        return False
    with _lock:
        if role in _settled:
            return False
        _settled.add(role)
        if not _enabled() or not in_spark_worker():
            return False
        started = time.perf_counter()
        for name in _MODULES[role]:
            try:
                importlib.import_module(name)
            except ImportError:
                if name not in _OPTIONAL:
                    raise
        imported = time.perf_counter()
        gc.collect()
        gc.freeze()
        logger.debug(
            "fencedlake: %s worker %d froze %d objects (imports %.0f ms, collection %.0f ms)",
            role.value,
            os.getpid(),
            gc.get_freeze_count(),
            (imported - started) * 1000,
            (time.perf_counter() - imported) * 1000,
        )
        return True
