"""Spark services the integration suite starts on demand: a Spark Connect server, a standalone cluster.

Each module that needs one starts it through its script in ``integration/services/``
(``connect.sh``, ``cluster.sh``: the same scripts a developer runs by hand) and stops
it when the module ends, so a run of other modules pays nothing for them. Ports come
from ``FENCEDLAKE_IT_CONNECT_PORT`` (24334) and ``FENCEDLAKE_IT_MASTER_PORT`` (24335; the two
workers take the next two; web UIs take free ports).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "integration" / "services"
STATE = Path(os.environ.get("FENCEDLAKE_IT_STATE", ROOT / ".integration"))

CONNECT_PORT = int(os.environ.get("FENCEDLAKE_IT_CONNECT_PORT", "24334"))
MASTER_PORT = int(os.environ.get("FENCEDLAKE_IT_MASTER_PORT", "24335"))


def service(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``integration/services/<script> ARGS``; its output (raises on a non-zero exit, with the output)."""
    proc = subprocess.run(
        [str(SERVICES / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def connect_url() -> str:
    """The Connect server's URL (``sc://127.0.0.1:PORT``)."""
    return f"sc://127.0.0.1:{CONNECT_PORT}"


def connect_workdir() -> Path:
    """The directory the Connect server was started in (``connect.sh`` empties it on start)."""
    return STATE / "connect" / "work"


def master_url() -> str:
    """The standalone master's URL (``spark://127.0.0.1:PORT``)."""
    return f"spark://127.0.0.1:{MASTER_PORT}"


def pid_of(script_state: str) -> int:
    """The PID a service script recorded (``<state>/<name>/<name>.pid``), e.g. ``cluster/worker-1``."""
    directory = STATE / script_state
    return int((directory / f"{directory.name}.pid").read_text().strip())


def start(script: str, attempts: int = 3) -> str:
    """``service(script, "start")``, again after a bind failure: the ports are in the ephemeral range, where
    another process (a Spark driver or executor picking a random port) may hold one for a moment."""
    for attempt in range(1, attempts + 1):
        try:
            return service(script, "start", timeout=600)
        except RuntimeError as e:
            logs = (STATE / script.removesuffix(".sh")).rglob("*.log")
            text = str(e) + "".join(p.read_text(errors="replace") for p in logs if p.is_file())
            if attempt == attempts or ("BindException" not in text and "is taken" not in text):
                raise
            service(script, "stop")
            time.sleep(5 * attempt)
    raise AssertionError("unreachable")
