"""A benchmark worker: a child Python process driven by JSON lines on stdin, answering on stdout.

The suites that need writers in several processes (``group_commit``, ``latency``) start them with
:class:`WorkerProcess`: one request per line on the child's stdin, one reply per line on its stdout
prefixed with :data:`MARK` (other stdout lines are ignored), the child's stderr kept in a file that a
failure quotes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks.common import BenchmarkError

__all__ = ["MARK", "WorkerProcess"]

#: Reply lines on a worker's stdout start with this.
MARK = "@@"


class WorkerProcess:
    """One worker process running ``python -m <argv...>`` in ``home`` (on ``PYTHONPATH``)."""

    def __init__(
        self,
        index: int,
        stderr_path: Path,
        argv: Sequence[str],
        home: Path,
        env: Mapping[str, str] | None = None,
        exit_timeout: float = 60.0,
    ) -> None:
        self.index = index
        self.stderr_path = stderr_path
        self.exit_timeout = exit_timeout
        full_env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(home), os.environ.get("PYTHONPATH")])),
        }
        full_env.pop("FENCEDLAKE_LOG_LEVEL", None)
        full_env.update(env or {})
        self._stderr: IO[bytes] = open(stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=home,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )

    def send(self, obj: Any) -> None:
        """Send one request: a string as is, anything else as JSON."""
        if self.proc.stdin is None:
            raise BenchmarkError(f"worker {self.index} has no stdin")
        self.proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.proc.stdin.flush()

    def receive(self, *, raise_on_error: bool = False) -> dict[str, Any]:
        """The next reply; with ``raise_on_error`` a reply ``{"ok": false, "error": ...}`` raises.

        Raises:
            BenchmarkError: the worker exited before replying (its stderr's tail quoted), or it reported
                an error and ``raise_on_error`` is set.
        """
        if self.proc.stdout is None:
            raise BenchmarkError(f"worker {self.index} has no stdout")
        for line in self.proc.stdout:
            if line.startswith(MARK):
                reply: dict[str, Any] = json.loads(line[len(MARK) :])
                if raise_on_error and reply.get("ok") is False:
                    raise BenchmarkError(f"worker {self.index}: {reply['error']}")
                return reply
        tail = self.stderr_path.read_text(errors="replace")[-3000:]
        raise BenchmarkError(f"worker {self.index} exited (code {self.proc.poll()}): {tail}")

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within ``exit_timeout``."""
        try:
            if self.proc.poll() is None:
                self.send({"cmd": "exit"})
                self.proc.wait(timeout=self.exit_timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            self._stderr.close()
