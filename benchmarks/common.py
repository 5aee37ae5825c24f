"""Shared helpers: interleaved repetitions, statistics, result records, Markdown tables."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "COMMIT_STEPS",
    "BenchmarkError",
    "SuiteResult",
    "format_profile",
    "interleaved",
    "markdown_table",
    "median",
    "paired_ratios",
    "percentile",
    "profile_top",
    "ratio",
    "step_breakdown",
    "stopwatch",
]


class BenchmarkError(Exception):
    """The benchmark measured something other than what it claims (e.g. a wrong row count)."""


@dataclass
class SuiteResult:
    """One suite's outcome: a table (columns + rows), notes, warnings and raw samples.

    Attributes:
        suite: Short name (``throughput``, ``requests``, ...).
        title: Heading for the report.
        columns: Column names of ``rows``, in order.
        rows: One dict per table row.
        notes: Lines printed under the table (context, breakdowns, profiles).
        warnings: Targets missed (printed as ``WARN``; never a failure).
        data: Raw samples and parameters, kept in the JSON only.
        seconds: Wall time the suite took.
        error: The exception text if the suite failed.
    """

    suite: str
    title: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict."""
        return asdict(self)

    def markdown(self) -> str:
        """The suite as Markdown: heading, table, notes, warnings."""
        out = [f"### {self.title}", ""]
        if self.error:
            out += [f"**FAILED**: `{self.error}`", ""]
        if self.rows:
            out += [markdown_table(self.columns, self.rows), ""]
        out += [f"- {n}" for n in self.notes]
        out += [f"- **WARN** {w}" for w in self.warnings]
        if self.notes or self.warnings:
            out.append("")
        return "\n".join(out)


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by linear interpolation (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0 or NaN."""
    return a / b if b and not math.isnan(b) else math.nan


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed: ...``; ``elapsed()`` is the seconds since entry (frozen at exit)."""
    t0 = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - t0
    end.append(time.perf_counter())


def interleaved(
    variants: Sequence[tuple[str, Callable[[int], float]]],
    reps: int,
    *,
    warmup: bool = True,
    log: Callable[[str], None] = print,
    warm_rounds: int = 1,
) -> dict[str, list[float]]:
    """Run every variant once per round, ``reps`` rounds, alternating the order (ABC, CBA, ABC...).

    Each variant is ``fn(rep) -> seconds`` (it times itself so that setup and
    verification stay out of the measurement; rep is -1 for the ``warm_rounds``
    warm-up rounds, run first and not returned when ``warmup``).
    Alternating the order cancels a linear drift of the machine (page cache,
    a neighbour's load) between the first and the last variant of a round.

    Returns:
        Variant name -> measured seconds, one per round, in round order.
    """
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    rounds = ([-1] * warm_rounds if warmup else []) + list(range(reps))
    for r in rounds:
        order = list(variants) if r < 0 or r % 2 == 0 else list(reversed(variants))
        for name, fn in order:
            seconds = fn(r)
            if r >= 0:
                samples[name].append(seconds)
            log(f"  {'warm-up' if r < 0 else f'rep {r + 1}/{reps}'} {name}: {seconds:.2f}s")
    return samples


def paired_ratios(samples: Mapping[str, Sequence[float]], name: str, baseline: str) -> list[float]:
    """Per-round ``baseline_seconds / name_seconds`` (speed of ``name`` relative to ``baseline``)."""
    return [ratio(b, a) for a, b in zip(samples[name], samples[baseline], strict=True)]


def profile_top(profiler: Any, n: int = 12, *, key: str = "self") -> list[dict[str, Any]]:
    """The ``n`` costliest functions of a ``cProfile.Profile``, by self (``tottime``) or cumulative time.

    Each item: ``function`` (``file:line(name)``), ``self_s``, ``cum_s``, ``calls``, ``share`` (of the
    profile's total self time, or for ``key="cum"`` of the root's cumulative time).
    """
    import os
    import pstats

    stats = profiler if isinstance(profiler, pstats.Stats) else pstats.Stats(profiler)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or math.nan
    index = 2 if key == "self" else 3
    top = sorted(raw.items(), key=lambda kv: kv[1][index], reverse=True)[:n]
    return [
        {
            "function": f"{os.path.basename(f)}:{line}({fn})",
            "self_s": tt,
            "cum_s": ct,
            "calls": nc,
            "share": (tt if key == "self" else ct) / total,
        }
        for (f, line, fn), (_cc, nc, tt, ct, _callers) in top
    ]


def format_profile(items: Sequence[Mapping[str, Any]], n: int = 6, *, key: str = "self") -> str:
    """``fn 1.2s (40%); ...`` for a note line."""
    field_ = "self_s" if key == "self" else "cum_s"
    return "; ".join(f"{p['function']} {p[field_]:.2f}s ({p['share']:.0%})" for p in items[:n])


#: Steps of a fencedlake commit, as (label, file, function) in a cProfile listing ("file:line(function)").
COMMIT_STEPS: tuple[tuple[str, str, str], ...] = (
    ("catalog load_table (+ metadata.json parse)", "sql.py", "load_table"),
    ("control LIST (Wal.scan)", "wal.py", "scan"),
    ("control GET (Wal.read)", "wal.py", "read"),
    ("conditional PUT (put_if_absent)", "local.py", "put_if_absent"),
    ("IcebergTablePort.commit", "table_port.py", "commit"),
    ("  manifest + manifest list writes", "snapshot.py", "_commit"),
    ("  catalog commit_table", "sql.py", "commit_table"),
    ("    update_table_metadata (deep copies)", "__init__.py", "update_table_metadata"),
    ("backoff sleep", "~", "<built-in method time.sleep>"),
)


def step_breakdown(cum: Sequence[Mapping[str, Any]], steps: Sequence[tuple[str, str, str]] = COMMIT_STEPS) -> str:
    """``label 12.3 ms (40%); ...`` for the steps found in a cumulative profile (shares of the profile total)."""
    out = []
    for label, file, func in steps:
        hits = [p for p in cum if p["function"].startswith(f"{file}:") and p["function"].endswith(f"({func})")]
        if hits:
            best = max(hits, key=lambda p: p["cum_s"])
            calls = f" x{best['calls']}" if best["calls"] > 1 else ""
            out.append(f"{label.strip()}{calls} {best['cum_s'] * 1000:.1f} ms ({best['share']:.0%})")
    return "; ".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value)


def markdown_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A GitHub Markdown table of ``rows`` (missing cells empty)."""
    cells = [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(row) + " |" for row in cells)])
