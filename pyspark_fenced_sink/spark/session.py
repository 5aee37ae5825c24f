"""``activate_session``: writing from several Python threads (README "Writing from several threads"; driver).

Spark resolves ``format("fencedlake")`` in the active session of the calling
JVM thread, and py4j gives each new Python thread a JVM thread without one
(``DATA_SOURCE_NOT_FOUND``). :func:`activate_session` sets it for the calling
thread; pass it as a ``ThreadPoolExecutor`` initializer. Imports only the
standard library at module load.
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
