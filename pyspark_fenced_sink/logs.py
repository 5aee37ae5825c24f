"""Logging convention: ``logging.getLogger(__name__)``, children of ``pyspark_fenced_sink`` (PROTOCOL.md §10).

Importing attaches nothing. :func:`configure_from_env` (each driver step, the CLI)
attaches one stderr handler when ``FENCEDLAKE_LOG_LEVEL`` is set, for the Python
workers Spark starts, whose logging nobody configures.
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["LOG_LEVEL_ENV", "ROOT_LOGGER", "configure_from_env"]

LOG_LEVEL_ENV = "FENCEDLAKE_LOG_LEVEL"
ROOT_LOGGER = "pyspark_fenced_sink"
_lock = threading.Lock()
_handler: logging.Handler | None = None


def configure_from_env() -> None:
    """Attach one stderr handler to the package's logger if ``FENCEDLAKE_LOG_LEVEL`` is set (once)."""
    global _handler
    level = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    if not level:
        return
    with _lock:
        logger = logging.getLogger(ROOT_LOGGER)
        if _handler is None:
            _handler = logging.StreamHandler()
            _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(_handler)
        numeric = logging.getLevelName(level)  # an int for a known level name
        logger.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
