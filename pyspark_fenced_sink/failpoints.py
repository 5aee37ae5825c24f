"""Named fail points at protocol steps (PROTOCOL.md §9).

Armed by ``FENCEDLAKE_FAILPOINTS`` or the sink option ``test.failpoints``
(``name=action[@N];...``); actions ``raise``, ``crash`` (``os._exit``), ``pause``
(a marker file, then block for a harness's ``kill -9``) and ``sleep:MS``; ``@N``
fires on the N-th hit. :data:`DURABLE_AT` says, for a batch write's points,
whether its WAL entry is durable there (the crash matrices' expectations).
Unarmed points cost one dict lookup.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["DURABLE_AT", "POINTS", "FailPointError", "configure", "hit", "set_handler", "validate"]

ENV = "FENCEDLAKE_FAILPOINTS"
DIR_ENV = "FENCEDLAKE_FAILPOINT_DIR"

POINTS = frozenset(
    {
        "executor.after-file-written",
        "driver.after-open",
        "stream.after-register",
        "commit.before-wal-put",
        "commit.after-wal-put",
        "commit.before-catalog-commit",
        "commit.after-manifests-written",
        "commit.after-catalog-commit",
        "gc.after-barrier",
        "gc.before-delete",
        "read.before-file",
        "compact.after-plan",
        "compact.after-rewrite",
        "upsert.after-key-file-written",
        "upsert.after-deletes-written",
        "upsert.after-tombstones-merged",
    }
)


#: Fail points of a batch write, in protocol order, and whether the writer's WAL entry is durable when it fires
#: (a crash there leaves work the next committer must finish). The crash matrices use it.
DURABLE_AT = {
    "executor.after-file-written": False,
    "driver.after-open": False,
    "commit.before-wal-put": False,
    "commit.after-wal-put": True,
    "commit.before-catalog-commit": True,
    "commit.after-manifests-written": True,
    "commit.after-catalog-commit": True,
}


class FailPointError(RuntimeError):
    """Raised by a fail point armed with ``raise``."""


_lock = threading.Lock()
_handler: Callable[[str], None] | None = None
_option_spec = ""
_parsed: tuple[str, dict[str, tuple[str, int | None]]] = ("", {})
_hits: dict[str, int] = {}


def _parse(spec: str) -> dict[str, tuple[str, int | None]]:
    out: dict[str, tuple[str, int | None]] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, action = part.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or name not in POINTS:
            raise ValueError(f"bad fail point {part!r}: expected one of {sorted(POINTS)} as name=action")
        nth: int | None = None
        if "@" in action:
            action, _, count = action.partition("@")
            if not count.isdigit() or int(count) < 1:
                raise ValueError(f"bad fail point count {count!r} for {name}: expected @N with N >= 1")
            nth = int(count)
        if action not in ("raise", "crash", "pause") and not (
            action.startswith("sleep:") and action[len("sleep:") :].isdigit()
        ):
            raise ValueError(f"bad fail point action {action!r} for {name}: expected raise, crash, pause or sleep:MS")
        out[name] = (action, nth)
    return out


def validate(spec: str) -> None:
    """Raise ValueError if ``spec`` is not a valid fail point specification."""
    _parse(spec)


def configure(spec: str | None) -> None:
    """Arm fail points from an option value (added to the environment's)."""
    global _option_spec
    with _lock:
        _option_spec = spec or ""


def set_handler(handler: Callable[[str], None] | None) -> None:
    """Install a callable run at every fail point (tests of the core), or None."""
    global _handler
    _handler = handler


def _armed() -> dict[str, tuple[str, int | None]]:
    global _parsed
    spec = ";".join(filter(None, (os.environ.get(ENV, ""), _option_spec)))
    if spec != _parsed[0]:
        _parsed = (spec, _parse(spec))
        _hits.clear()  # @N counts hits since these fail points were armed
    return _parsed[1]


def hit(name: str) -> None:
    """Run the fail point ``name``: a no-op unless armed."""
    if name not in POINTS:
        raise ValueError(f"unknown fail point {name!r}")
    if _handler is not None:
        _handler(name)
    with _lock:
        armed = _armed().get(name)
        if armed is None:
            return
        count = _hits[name] = _hits.get(name, 0) + 1
    action, nth = armed
    if nth is not None and count != nth:
        return
    if action == "raise":
        raise FailPointError(f"fail point {name} fired")
    if action == "crash":
        os._exit(86)
    if action == "pause":
        marker = Path(os.environ.get(DIR_ENV, ".")) / f"{name}.hit"
        marker.write_text(str(os.getpid()))
        while True:
            time.sleep(3600)
    time.sleep(int(action.split(":", 1)[1]) / 1000.0)
