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

The second tax is pyspark's: every request a worker serves starts with
``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``),
and before Python 3.13 a zip importer answers that by reading its archive's
whole directory again -- one read per importer, and a worker holds ~16 for the
packages of ``pyspark.zip`` plus two for the ``spark-core`` jar on its path:
100-120 ms of CPU per request, 3-4 requests per write. :func:`settle` also
makes a zip importer re-read its archive only when the file changed (size or
modification time): the directory of an unchanged archive is taken from
zipimport's own cache, which every importer of that archive shares. Python
3.13 and later already drop the cache lazily, and are left alone.

Only in Spark's Python workers (a ``pyspark.worker`` or ``pyspark.sql.worker.*``
module is loaded, or the process is the daemon's fork): never in the user's
own Python process, whose heap is theirs. ``FENCEDLAKE_GC_FREEZE=0`` (``false``,
``off``) in the workers' environment turns the freeze off, ``FENCEDLAKE_ZIP_CACHE=0``
the zip importers' change (to measure what each buys: ``benchmarks/spark_concurrency.py``).
Imports only the standard library at module load.
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

__all__ = ["GC_FREEZE_ENV", "ZIP_CACHE_ENV", "Role", "in_spark_worker", "settle"]

logger = logging.getLogger(__name__)

#: Environment variable: ``0``/``false``/``off`` turns :func:`settle`'s freeze off.
GC_FREEZE_ENV = "FENCEDLAKE_GC_FREEZE"
#: Environment variable: ``0``/``false``/``off`` leaves the zip importers' cache invalidation as Python has it.
ZIP_CACHE_ENV = "FENCEDLAKE_ZIP_CACHE"


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


def _enabled(variable: str = GC_FREEZE_ENV) -> bool:
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "off", "no")


def _reread_changed_archives_only() -> bool:
    """Make ``zipimporter.invalidate_caches`` re-read an archive only if it changed; True if installed.

    The stdlib method (Python 3.8-3.12) re-reads the archive's directory into ``_files`` and
    zipimport's ``_zip_directory_cache`` each time. This one keeps the (size, mtime) it saw per
    archive; unchanged, the importer takes the cached directory (what the stdlib would have read);
    changed or unknown, it calls the stdlib method. Left alone where the method or the cache differs
    from that shape (Python 3.13 invalidates lazily).
    """
    import zipimport

    original = zipimport.zipimporter.invalidate_caches
    cache = getattr(zipimport, "_zip_directory_cache", None)
    if sys.version_info >= (3, 13) or not isinstance(cache, dict) or getattr(original, "_fencedlake", False):
        return False
    seen: dict[str, tuple[int, int]] = {}

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        try:
            st = os.stat(self.archive)
        except OSError:
            original(self)
            return
        signature = (st.st_size, st.st_mtime_ns)
        files = cache.get(self.archive)
        if files is not None and seen.get(self.archive) == signature:
            self._files = files  # type: ignore[attr-defined]  # the stdlib method sets the same attribute
            return
        original(self)
        seen[self.archive] = signature

    invalidate_caches._fencedlake = True  # type: ignore[attr-defined]
    invalidate_caches.__doc__ = original.__doc__
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    return True


def settle(role: Role) -> bool:
    """Import ``role``'s modules, then ``gc.collect(); gc.freeze()``, once per role and process.

    The first call in a worker also makes zip importers re-read only changed archives (unless
    :data:`ZIP_CACHE_ENV` turns that off). A no-op outside Spark's Python workers, and on every
    later call for the same role (one set lookup); :data:`GC_FREEZE_ENV` turns the freeze off.
    A worker that serves several roles (local mode shares one pool) collects once per role, at
    most three times.

    Returns:
        True if this call froze the heap.
    """
    if role in _settled:
        return False
    with _lock:
        if role in _settled:
            return False
        first = not _settled
        _settled.add(role)
        if not in_spark_worker():
            return False
        if first and _enabled(ZIP_CACHE_ENV):
            _reread_changed_archives_only()
        if not _enabled():
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
