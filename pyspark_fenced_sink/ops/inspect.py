"""Read-only views of a table's protocol state for the CLI (PROTOCOL.md §1, §5, §10).

``wal_rows`` classifies WAL entries the way reconciliation does — below the
committed upper: the outcome its commit record holds; at or above: what the
next commit would decide (the pure ``reconcile`` on the current state, nothing
committed). ``recent_commits`` decodes the commit records and metrics that
every fencedlake snapshot carries in its summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS, WalEntry
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.metrics import Metric, metric_int, metric_text
from pyspark_fenced_sink.protocol.reconcile import Outcome, Position, position, reconcile
from pyspark_fenced_sink.protocol.state import SUMMARY_UPSERT, decode_record
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.wal import holes

__all__ = ["live_paths_of", "pending_summary", "recent_commits", "wal_rows"]


def _row(seq: int, entry: WalEntry, where: Position, outcome: str | None) -> dict[str, Any]:
    return {
        "seq": seq,
        "position": where.name.lower(),
        "outcome": outcome,
        "kind": entry.kind.value,
        "writer": entry.writer,
        "epoch": entry.epoch,
        "tail": entry.tail,
        "batch": entry.batch,
        "mode": entry.mode.value,
        "branch": entry.target,
        "files": len(entry.files),
        "rows": entry.rows,
        "token": entry.token[:TOKEN_CHARS],
        "created_ms": entry.created_ms,
    }


def wal_rows(
    ctx: CommitContext, view: TableView, start: int, *, limit: int, live_paths: Callable[[], set[str]] | None = None
) -> list[dict[str, Any]]:
    """Up to ``limit`` WAL entries from ``start`` on, each with its position and (known or planned) outcome.

    ``live_paths`` (the current snapshot's data files) answers entries whose commit record expired: an
    entry whose files are live was applied; one whose files are not was rejected, or applied and
    overwritten later (PROTOCOL.md §6).
    """
    upper = view.state.upper
    seqs = ctx.wal.scan(start)[:limit]
    entries = {s: e for s in seqs if (e := ctx.wal.read(s)) is not None}
    pending = {s: e for s, e in entries.items() if s >= upper}
    planned: dict[int, str] = {}
    if pending:
        # What the next commit would decide (reading every pending entry, not only those listed).
        everything = {s: e for s in ctx.wal.scan(upper) if (e := entries.get(s) or ctx.wal.read(s)) is not None}
        plan = reconcile(
            view.state,
            everything,
            max_group=len(everything) + 1,
            spec_id=view.spec_id,
            voids=holes(everything, upper),
        )
        planned = {upper + i: d.outcome.name for i, d in enumerate(plan.decisions)}
    rows = []
    for seq, entry in sorted(entries.items()):
        where = position(seq, upper)
        if where is Position.BELOW:
            record = ctx.port.find_record(view, seq)
            found = record.find(seq) if record is not None else None
            if found is None:
                outcome = _without_record(entry, live_paths)
            elif found[0] != entry.token[:TOKEN_CHARS]:
                outcome = "not this entry (an inert object at a reconciled position)"
            else:
                outcome = Outcome(found[1]).name
        else:
            outcome = f"next commit: {planned[seq]}" if seq in planned else "waits (behind a gap or an overwrite)"
        rows.append(_row(seq, entry, where, outcome))
    return rows


def _without_record(entry: WalEntry, live_paths: Callable[[], set[str]] | None) -> str:
    if not entry.files or live_paths is None:
        return "unknown (record expired)"
    if all(encoded_path(f) in live_paths() for f in entry.files):
        return "APPLIED (record expired; its files are live)"
    return "unknown (record expired; its files are not live: rejected, or applied and overwritten later)"


def _number(value: Any) -> Any:
    """An integer for a numeric summary string (snapshot summaries hold strings), else the value."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def pending_summary(rows: list[dict[str, Any]], now_ms: int) -> dict[str, Any]:
    """What the pending entries mean: how many add data, how many are decided and only wait to be recorded.

    An entry at or above the upper is not necessarily stuck: a re-run decided as a duplicate (and its open
    barrier) is decided without a catalog commit, and the next commit on the table records it.
    """
    applies = [r for r in rows if r["outcome"] == "next commit: APPLIED"]
    blocked = [r for r in rows if not str(r["outcome"]).startswith("next commit: ")]
    decided = [r for r in rows if r not in applies and r not in blocked]
    oldest = min((r["created_ms"] for r in rows if r.get("created_ms")), default=None)
    return {
        "pending": len(rows),
        "pending_to_apply": len(applies),
        "pending_decided_awaiting_record": len(decided),
        "pending_blocked": len(blocked),
        "oldest_pending_age_s": None if oldest is None else round((now_ms - oldest) / 1000, 1),
    }


def live_paths_of(table: Any) -> Callable[[], set[str]]:
    """A lazy, cached reader of the data files live in ``table``'s current snapshot."""
    cache: list[set[str]] = []

    def read() -> set[str]:
        if not cache:
            snapshot = table.current_snapshot()
            cache.append(
                set()
                if snapshot is None
                else {
                    e.data_file.file_path
                    for m in snapshot.manifests(table.io)
                    for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
                }
            )
        return cache[0]

    return read


def recent_commits(table: Any, count: int) -> list[dict[str, Any]]:
    """The newest ``count`` snapshots of the main branch, with fencedlake's commit record when present."""
    out: list[dict[str, Any]] = []
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    while snapshot is not None and len(out) < count:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        record = decode_record(summary)
        row: dict[str, Any] = {
            "snapshot_id": snapshot.snapshot_id,
            "timestamp_ms": snapshot.timestamp_ms,
            "operation": snapshot.summary.operation.value if snapshot.summary else None,
            "added_rows": _number(summary.get("added-records")),
            "seqs": None,
        }
        if record is not None:
            m = record.metrics
            row.update(
                seqs=f"{record.first}-{record.last}",
                latency_ms=metric_int(m, Metric.LATENCY_MS),
                attempts=metric_int(m, Metric.ATTEMPTS),
                conflicts=metric_int(m, Metric.CONFLICTS),
                group=metric_int(m, Metric.GROUP),
                applied=metric_int(m, Metric.APPLIED),
                for_peers=metric_int(m, Metric.FOR_PEERS),
                waited_ms=metric_int(m, Metric.WAITED_MS),
                waited_for=metric_text(m, Metric.WAITED_FOR),
                helper=bool(metric_int(m, Metric.HELPER)),
                voided=metric_int(m, Metric.VOIDED) or 0,
                oldest_write_ms=metric_int(m, Metric.AGE_MAX_MS),
                untuned=metric_int(m, Metric.UNTUNED) or 0,
                fences=sum(1 for _, o in record.outcomes if o == Outcome.FENCED.value),
                barriers=sum(1 for _, o in record.outcomes if o == Outcome.BARRIER.value),
            )
        row.update(upsert_metrics(summary))
        out.append(row)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return out


def upsert_metrics(summary: Mapping[str, str]) -> dict[str, Any]:
    """What an upsert commit did, from its ``fencedlake.upsert`` summary (PROTOCOL.md §5.5); {} for others.

    ``keys_rewritten`` counts keys whose live row an upsert replaced or deleted; ``files_read`` the data and
    delete files the commit had to read (the rest came from the committer's cache).
    """
    text = summary.get(SUMMARY_UPSERT)
    if not text:
        return {}
    m = {k: _number(v) for k, _, v in (p.partition("=") for p in text.split(","))}
    return {
        "keys_inserted": m.get("ins", 0),
        "keys_rewritten": (m.get("upd") or 0) + (m.get("del") or 0),
        "keys_unchanged": m.get("same", 0),
        "files_read": m.get("read", 0),
        "delete_files_added": m.get("deletes", 0),
    }
