"""How big the hermetic suite runs: CI-sized by default, every case with ``FENCEDLAKE_FULL=1``.

The CI-sized profile keeps one case of each kind where a full parametrization
repeats the same shape at the cost of a Spark application per case; the
docstring of each such constant says what the CI profile keeps and where the
rest is covered. docs/DEVELOPING.md lists the flags.
"""

from __future__ import annotations

import os

#: Run every case of the profiled parametrizations.
FULL = os.environ.get("FENCEDLAKE_FULL", "") == "1"
