"""Writing from several Python threads: make the session active in the calling thread (driver side).

Spark resolves ``format("fencedlake")`` — like every Python data source — in
the *active session* of the JVM thread that runs the call. py4j gives each new
Python thread its own JVM thread, which has no active session, so a
``df.write.format("fencedlake")...save()`` from a worker thread fails with::

    [DATA_SOURCE_NOT_FOUND] Failed to find the data source: fencedlake.

``pyspark.InheritableThread`` and an explicit ``spark.dataSource.register(...)``
do not change that, and neither does the JVM's default session (tested).
:func:`activate_session` makes ``spark`` the active session of the calling
thread: call it once at the start of each thread that writes, or pass it as a
``ThreadPoolExecutor`` initializer — one call for the whole pool::

    with ThreadPoolExecutor(8, initializer=activate_session, initargs=(spark,)) as pool:
        pool.map(write_one_table, tables)

Imports nothing beyond the standard library at module load (the package
re-exports it and Spark imports the package in every Python worker).
"""

from __future__ import annotations

from typing import Any

__all__ = ["activate_session"]


def activate_session(spark: Any) -> Any:
    """Make ``spark`` the active SparkSession of the calling thread; returns ``spark``.

    Idempotent and cheap (one py4j call). Needed in every Python thread other
    than the one that created the session, before its first ``format("fencedlake")``
    write or ``writeStream.start()``; harmless in the main thread. Uses the JVM
    gateway of classic sessions; a Spark Connect session has none in the client
    and is left as it is (not tested with Spark Connect).

    Args:
        spark: the SparkSession the thread writes with.
    """
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
    return spark
