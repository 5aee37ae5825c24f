"""What the interop suite observed beside its assertions: Iceberg's own conflicts, outcomes, timings.

Tests call ``REPORT.record(name, **fields)``; the interop conftest prints every record at the end
of the run and writes them to ``.integration/interop-metrics.json`` (the state directory
integration/run.sh uses).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["REPORT", "InteropReport"]


@dataclass
class InteropReport:
    """Records by name, in the order they were made."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, name: str, **fields: Any) -> None:
        """Keep ``fields`` under ``name`` (a later record of the same name replaces it)."""
        self.records[name] = fields

    def path(self) -> Path:
        """Where the records are written."""
        root = Path(__file__).resolve().parents[2]
        return Path(os.environ.get("FENCEDLAKE_IT_STATE", root / ".integration")) / "interop-metrics.json"

    def write(self) -> Path:
        """Write the records as JSON; returns the path."""
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.records, indent=2, sort_keys=True) + "\n")
        return path

    def lines(self) -> list[str]:
        """One line per record: ``name: key=value ...``."""
        return [f"{name}: " + " ".join(f"{k}={v}" for k, v in fields.items()) for name, fields in self.records.items()]


REPORT = InteropReport()
