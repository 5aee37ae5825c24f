"""PNG charts of a run's results (matplotlib, Agg backend; skipped if matplotlib is missing).

One chart per suite present and not failed: ``bench-requests.png``, ``bench-latency.png``, ``bench-group-commit.png``,
``bench-scaling.png``, ``bench-throughput.png``, ``bench-streaming.png``. Redraw a saved run's
charts with ``python -m benchmarks.plot docs/benchmarks/results-full.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["plot_all"]

COLORS = {
    "fencedlake": "tab:blue",
    "pyiceberg": "tab:red",
    "pyiceberg no-retry": "tab:orange",
    "native": "tab:gray",
    "collect": "tab:purple",
    "python": "tab:green",
}


def _color(name: str) -> str:
    for prefix in ("pyiceberg no-retry", "pyiceberg", "fencedlake", "native", "collect", "python"):
        if name.startswith(prefix):
            return COLORS[prefix]
    return "tab:olive"


def plot_all(suites: dict[str, Any], directory: Path, caption: str) -> list[Path]:
    """Write one PNG per suite present (and not failed); return the paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    charts: dict[str, Callable[[Any, Any, str], Any]] = {
        "requests": _requests,
        "group-commit": _contention,
        "latency": _latency,
        "scaling": _scaling,
        "throughput": _throughput,
        "streaming": _streaming,
    }
    written = []
    for name, draw in charts.items():
        res = suites.get(name)
        if res is None or res.error or not res.rows:
            continue
        fig = draw(plt, res, caption)
        path = directory / f"bench-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def _requests(plt: Any, res: Any, caption: str) -> Any:
    kinds = ["GET", "LIST", "PUT", "cond. PUT", "DELETE", "HEAD", "catalog calls"]
    colors = ["tab:blue", "tab:cyan", "tab:green", "tab:red", "tab:brown", "tab:gray", "tab:purple"]
    labels = [f"{r['scenario']} [{r['phase']}]" for r in res.rows]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(labels) + 2.0))
    left = [0.0] * len(labels)
    for kind, color in zip(kinds, colors, strict=True):
        values = [float(r.get(kind, 0) or 0) for r in res.rows]
        ax.barh(labels[::-1], values[::-1], left=left[::-1], color=color, label=kind)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for i, r in enumerate(res.rows[::-1]):
        extra = r.get("total beyond")
        if isinstance(extra, (int, float)):
            ax.text(left[::-1][i], i, f"  +{extra:g} vs pyiceberg", va="center", fontsize=8)
    ax.set_xlabel("requests per commit (object store by kind + catalog calls)")
    ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    ax.set_title(f"Requests per uncontended commit ({caption})", fontsize=9)
    ax.set_xlim(0, max(left) * 1.35)
    return fig


def _contention(plt: Any, res: Any, caption: str) -> Any:
    rows = [r for r in res.rows if r["catalog"] == "sqlite"] or res.rows
    writers = list(dict.fromkeys(r["writer"] for r in rows))
    ns = sorted({r["N"] for r in rows})
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(13, 4))
    for w in writers:
        pts = sorted((r["N"], r) for r in rows if r["writer"] == w)
        xs = [n for n, _ in pts]
        a1.plot(xs, [r["rows landed/s"] for _, r in pts], "o-", color=_color(w), label=w)
        a2.plot(xs, [100 * r["landed"] / r["writes"] for _, r in pts], "o-", color=_color(w), label=w)
        a3.plot(xs, [r["p99 ms"] for _, r in pts], "o-", color=_color(w), label=f"{w} p99")
        a3.plot(xs, [r["p50 ms"] for _, r in pts], "o--", color=_color(w), alpha=0.6, label=f"{w} p50")
    fl = sorted((r["N"], r["group factor"]) for r in rows if r["writer"] == "fencedlake")
    if fl:
        ax = a1.twinx()
        ax.plot([n for n, _ in fl], [f for _, f in fl], "s:", color="tab:cyan", label="fencedlake group factor")
        ax.set_ylabel("fencedlake writes per catalog commit")
        ax.legend(loc="lower right", fontsize=7)
    for a in (a1, a2, a3):
        a.set_xscale("log", base=2)
        a.set_xticks(ns, [str(n) for n in ns])
        a.set_xlabel("concurrent committer processes N")
    a1.set_yscale("log")
    a1.set_ylabel("rows landed per second")
    a1.legend(fontsize=7, loc="upper left")
    a2.set_ylabel("writes landed (%)")
    a2.set_ylim(0, 105)
    a3.set_yscale("log")
    a3.set_ylabel("write latency (ms), landed writes")
    a3.legend(fontsize=6)
    fig.suptitle(f"Contention on one table, embedded SQLite catalog ({caption})", fontsize=10)
    return fig


def _latency(plt: Any, res: Any, caption: str) -> Any:
    """Writes/s and p99 (p50 dashed) vs W, log x: this version ('all') and the 'before' variant, SQLite."""
    rows = [r for r in res.rows if r["catalog"] == "sqlite" and r.get("variant", "all") in ("all", "before")]
    ws = sorted({r["W"] for r in rows})
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for variant, color, label in (
        ("before", "tab:red", "before (one tail, every writer commits)"),
        ("all", "tab:blue", "after"),
    ):
        pts = sorted((r["W"], r) for r in rows if r.get("variant", "all") == variant)
        if not pts:
            continue
        xs = [w for w, _ in pts]
        a1.plot(xs, [r["writes/s"] for _, r in pts], "o-", color=color, label=label)
        a2.plot(xs, [r["p99 s"] for _, r in pts], "o-", color=color, label=f"{label} p99")
        a2.plot(xs, [r["p50 s"] for _, r in pts], "o--", color=color, alpha=0.6, label=f"{label} p50")
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xticks(ws, [str(w) for w in ws])
        a.set_xlabel("concurrent writers W")
    a1.set_ylabel("landed writes per second")
    a1.set_ylim(bottom=0)
    a1.legend(fontsize=7, loc="upper left")
    a2.set_yscale("log")
    a2.set_ylabel("write latency (s)")
    a2.legend(fontsize=6)
    p = res.data.get("params", {})
    fig.suptitle(
        f"Commit path at cloud latency: store {p.get('store_s', 0) * 1000:.0f} ms, table read "
        f"{p.get('table_s', 0) * 1000:.0f} ms, CAS {p.get('cas_s', 0) * 1000:.0f} ms ({caption})",
        fontsize=10,
    )
    return fig


def _manifest_merge(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Commit p50 (solid) and full-scan planning (dashed) vs commits, one color per manifest-merge variant."""
    for variant, color in zip(
        ("manifest merge off", "manifest merge on", "manifest merge on + gc"),
        ("tab:red", "tab:blue", "tab:green"),
        strict=True,
    ):
        own = [r for r in rows if r["series"] == variant]
        if not own:
            continue
        xs = [r["commits"] for r in own]
        label = variant.removeprefix("manifest ")
        ax.plot(xs, [r["fencedlake commit p50 ms"] for r in own], "o-", color=color, label=f"{label}: commit p50")
        ax.plot(xs, [r["full-scan plan ms"] for r in own], "s--", color=color, alpha=0.6, label=f"{label}: planning")
    ax.set_xscale("log")
    ax.set_xlabel("commits (one manifest each before merging)")
    ax.set_ylabel("ms")
    ax.set_title("manifest merge on / off", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _scaling(plt: Any, res: Any, caption: str) -> Any:
    merge_rows = [r for r in res.rows if str(r["series"]).startswith("manifest ")]
    fig, axes = plt.subplots(1, 3 if merge_rows else 2, figsize=(16.5 if merge_rows else 11, 4))
    if merge_rows:
        _manifest_merge(axes[2], merge_rows)
    for ax, series, xkey in zip(axes, ("WAL history", "snapshot history"), ("WAL entries", "snapshots"), strict=False):
        rows = [r for r in res.rows if r["series"] == series]
        if not rows:
            ax.set_visible(False)
            continue
        xs = [r[xkey] for r in rows]
        ax.plot(xs, [r["fencedlake commit p50 ms"] for r in rows], "o-", color=_color("fencedlake"), label="fencedlake")
        ax.plot(
            xs, [r["pyiceberg append p50 ms"] for r in rows], "s-", color=_color("pyiceberg"), label="pyiceberg append"
        )
        ax.plot(xs, [r["LIST ms"] for r in rows], "^:", color="tab:cyan", label="fencedlake control LIST")
        ax.set_xscale("log")
        ax.set_xlabel(xkey)
        ax.set_ylabel("per commit (ms, p50)")
        ax.set_title(series, fontsize=9)
        ax2 = ax.twinx()
        ax2.plot(xs, [r["total requests"] for r in rows], "d--", color="tab:blue", alpha=0.4, label="fencedlake reqs")
        ax2.plot(xs, [r["pyiceberg requests"] for r in rows], "d--", color="tab:red", alpha=0.4, label="pyiceberg reqs")
        ax2.set_ylabel("requests per commit")
        ax2.set_ylim(0, max(r["total requests"] for r in rows) * 1.5)
        lines = ax.get_lines() + ax2.get_lines()
        ax.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="upper left")
    fig.suptitle(f"Commit cost vs table history ({caption})", fontsize=10)
    return fig


def _throughput(plt: Any, res: Any, caption: str) -> Any:
    sizes = list(dict.fromkeys(r["rows"] for r in res.rows))
    fig, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 3.8), squeeze=False)
    for ax, n in zip(axes[0], sizes, strict=True):
        rows = [r for r in res.rows if r["rows"] == n]
        names = [r["writer"] for r in rows]
        ax.barh(names[::-1], [r["rows/s"] / 1e6 for r in rows][::-1], color=[_color(x) for x in names][::-1])
        for i, r in enumerate(rows[::-1]):
            if r["vs"] != "(baseline)":
                ax.text(r["rows/s"] / 1e6, i, f" {r['ratio']:.2f}x {r['vs']}", va="center", fontsize=8)
        ax.set_xlabel("million rows per second (median)")
        ax.set_title(f"{n:,} rows", fontsize=9)
        ax.set_xlim(0, max(r["rows/s"] for r in rows) / 1e6 * 1.4)
    fig.suptitle(f"Batch write throughput, local[2] ({caption})", fontsize=10)
    return fig


def _streaming(plt: Any, res: Any, caption: str) -> Any:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    over = [r for r in res.rows if r["phase"] == "overhead"]
    sus = [r for r in res.rows if r["phase"] == "sustained"]
    if over:
        names = [r["sink"] for r in over]
        add = [r["addBatch p50 ms"] for r in over]
        a1.bar(names, add, color=[_color(x) for x in names], label="addBatch")
        a1.bar(names, [r["commitOffsets p50 ms"] for r in over], bottom=add, color="tab:cyan", label="commitOffsets")
        a1.axhline(300, color="tab:red", linestyle=":", label="target 300 ms")
        a1.set_ylabel("per micro-batch, p50 (ms)")
        a1.set_title(f"per-batch cost, {over[0]['rows/batch']:,}-row batches", fontsize=9)
        a1.legend(fontsize=7)
    if sus:
        names = [r["sink"] for r in sus]
        a2.bar(names, [r["rows/s"] / 1e3 for r in sus], color=[_color(x) for x in names])
        a2.axhline(100, color="tab:red", linestyle=":", label="target 100k rows/s")
        a2.set_ylabel("thousand rows per second")
        a2.set_title(f"sustained, {sus[0]['rows/batch']:,}-row batches", fontsize=9)
        a2.legend(fontsize=7)
    fig.suptitle(f"Structured Streaming, rate-micro-batch source ({caption})", fontsize=10)
    return fig


def main(argv: list[str] | None = None) -> int:
    """Redraw the charts of a saved ``results-<mode>.json`` next to it."""
    import json
    import os
    import sys

    from benchmarks.common import SuiteResult

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.plot RESULTS.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    report = json.loads(path.read_text())
    suites = {k: SuiteResult(**v) for k, v in report["suites"].items()}
    caption = f"{report['mode']}, {report['machine']['cpus']} CPUs, {os.uname().sysname} {os.uname().machine}"
    for chart in plot_all(suites, path.parent, caption):
        print(f"wrote {chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
