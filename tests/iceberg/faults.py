"""Catalog faults for real-catalog tests: a commit that loses the compare-and-swap."""

from __future__ import annotations

from typing import Any

import pytest
from pyiceberg.exceptions import CommitFailedException

__all__ = ["fail_next_commits"]


def fail_next_commits(monkeypatch: pytest.MonkeyPatch, catalog: Any, count: int = 1) -> None:
    """Make the next ``count`` catalog commits of ``catalog``'s class fail as a conflict (nothing applied)."""
    real = type(catalog).commit_table
    failures = [count]

    def conflicting(self: Any, table: Any, requirements: Any, updates: Any) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise CommitFailedException("Table has been updated by another process")
        return real(self, table, requirements, updates)

    monkeypatch.setattr(type(catalog), "commit_table", conflicting)
