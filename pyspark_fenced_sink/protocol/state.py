"""The committed state and the commit records (PROTOCOL.md §1, §4; driver).

The committed state — the table UUID it belongs to and the control root its
WAL lives under (PROTOCOL.md §1.1, identity), the upper (every WAL position
below it has been reconciled), each stable writer's epoch, run, query and
exact set of applied batch ids, the ``gc`` expiry mark, and the remembered
deletes of ordered upserts (the tombstone files, PROTOCOL.md §5.5) — is one JSON
table property, ``fencedlake.state``, written in the same catalog commit as
the data it describes. Table properties are part of the table metadata, not
of a snapshot: they survive snapshot expiry and commits by other engines
(which carry properties over unchanged).

Each fencedlake commit also leaves a *commit record* in its snapshot summary:
the range of WAL positions it reconciled and, for each, the first
``TOKEN_CHARS`` characters of the entry's owner token and its outcome. A
writer whose entry a peer reconciled finds its outcome there (PROTOCOL.md §6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.batches import BatchIds
from pyspark_fenced_sink.protocol.codec import MALFORMED, dumps, loads_versioned
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS

__all__ = [
    "SERIAL_REF",
    "STATE_PROPERTY",
    "SUMMARY_PREFIX",
    "SUMMARY_PUBLISHED",
    "SUMMARY_UPSERT",
    "CommitRecord",
    "CommittedState",
    "WriterState",
    "decode_record",
    "encode_record",
]

STATE_PROPERTY = "fencedlake.state"
STATE_VERSION = 2
#: A state that lists tombstone files is written as version 3 (an older fencedlake would drop the list).
_TOMBSTONES_VERSION = 3
SUMMARY_SEQS = "fencedlake.seqs"
SUMMARY_OUTCOMES = "fencedlake.outcomes"
SUMMARY_METRICS = "fencedlake.commit"
#: Summary key of a publish commit's snapshot: ``<branch>@<snapshot id>`` main was fast-forwarded to.
SUMMARY_PUBLISHED = "fencedlake.published"
#: Summary key of a commit that applied upserts: keys inserted, updated, deleted, unchanged; files read.
SUMMARY_UPSERT = "fencedlake.upsert"
#: Snapshot-summary keys of fencedlake's own; snapshot properties may not use the ``fencedlake.`` prefix.
SUMMARY_PREFIX = "fencedlake."
#: A tag every fencedlake commit on a branch other than main moves to its new snapshot, and every
#: fencedlake commit asserts: with main's tip, it makes any two concurrent commits conflict, whatever
#: branches they write (PROTOCOL.md §5.1).
SERIAL_REF = "fencedlake-serial"


@dataclass(frozen=True)
class WriterState:
    """What the table remembers about one stable writer id.

    Attributes:
        epoch: The WAL position of the barrier that opened the current incarnation; None if no barrier of
            the writer was ever reconciled (only idempotent jobs, ``tail``, wrote as it).
        run: The current incarnation's run id.
        query: The streaming query the writer id belongs to, if any.
        batches: Every batch id applied by any incarnation of this writer, exactly.
        tail: The highest WAL tail an idempotent job of this writer saw at its open, of those whose
            entries were reconciled and not fenced (PROTOCOL.md §7); None if none was.
    """

    epoch: int | None
    run: str | None = None
    query: str | None = None
    batches: BatchIds = field(default_factory=BatchIds)
    tail: int | None = None

    def encode(self) -> dict[str, Any]:
        """JSON form inside the state property."""
        body: dict[str, Any] = {"batches": self.batches.encode()}
        pairs = (("epoch", self.epoch), ("run", self.run), ("query", self.query), ("tail", self.tail))
        body.update({k: v for k, v in pairs if v is not None})
        return body

    @classmethod
    def decode(cls, body: Mapping[str, Any]) -> WriterState:
        """Parse :meth:`encode`'s form (ValueError/TypeError/KeyError if malformed)."""
        unknown = set(body) - {"epoch", "run", "query", "batches", "tail"}
        if unknown:
            raise ValueError(f"unknown writer field(s) {sorted(unknown)}")
        if "epoch" not in body and "tail" not in body:
            raise KeyError("a writer needs an epoch or a tail")
        run, query, epoch, tail = body.get("run"), body.get("query"), body.get("epoch"), body.get("tail")
        return cls(
            epoch=None if epoch is None else int(epoch),
            tail=None if tail is None else int(tail),
            run=None if run is None else str(run),
            query=None if query is None else str(query),
            batches=BatchIds.decode(body.get("batches", {})),
        )


@dataclass(frozen=True)
class CommittedState:
    """The reconciled prefix of the WAL, as committed to the catalog.

    Attributes:
        upper: Every WAL position ``< upper`` has been reconciled.
        writers: Stable writer id -> its state.
        expired_before: Anonymous writes opened before this upper are rejected.
        table_uuid: The UUID of the table this state belongs to (None: not yet bound).
        root: The control root (URI) of the table's WAL (None: not yet bound).
        tombstones: The remembered deletes of ordered upserts on main: references to the delete-key
            files (and merged tombstone files) under the control root (``protocol.upsert``).
    """

    upper: int = 0
    writers: Mapping[str, WriterState] = field(default_factory=dict)
    expired_before: int = 0
    table_uuid: str | None = None
    root: str | None = None
    tombstones: tuple[Mapping[str, Any], ...] = ()

    def encode(self) -> str:
        """The value of the ``fencedlake.state`` property."""
        body: dict[str, Any] = {
            "v": _TOMBSTONES_VERSION if self.tombstones else STATE_VERSION,
            "table": self.table_uuid,
            "root": self.root,
            "upper": self.upper,
            "expired_before": self.expired_before,
            "writers": {w: s.encode() for w, s in sorted(self.writers.items())},
        }
        if self.tombstones:
            body["tombstones"] = [dict(t) for t in self.tombstones]
        return dumps(body)

    @classmethod
    def decode(cls, text: str | None, where: str = "table") -> CommittedState:
        """Parse the property value; None (never committed by fencedlake) is the empty state."""
        if text is None:
            return cls()
        try:
            body = loads_versioned(text, (STATE_VERSION, _TOMBSTONES_VERSION), f"{where}: property {STATE_PROPERTY}")
            table, root = body.get("table"), body.get("root")
            tombstones = body.get("tombstones", [])
            if not isinstance(tombstones, list) or not all(isinstance(t, dict) for t in tombstones):
                raise ValueError("'tombstones' must be a list of file references")
            return cls(
                upper=int(body["upper"]),
                writers={str(w): WriterState.decode(s) for w, s in body.get("writers", {}).items()},
                expired_before=int(body.get("expired_before", 0)),
                table_uuid=None if table is None else str(table),
                root=None if root is None else str(root),
                tombstones=tuple(tombstones),
            )
        except MALFORMED as e:
            raise CorruptControlDataError(
                f"{where}: property {STATE_PROPERTY} is not a valid fencedlake state ({e}); "
                "restore it from the previous metadata file or rebuild it with `fencedlake repair-state` "
                "(operator action)"
            ) from e


@dataclass(frozen=True)
class CommitRecord:
    """What one fencedlake catalog commit reconciled (kept in its snapshot summary).

    Attributes:
        first: First WAL position reconciled.
        outcomes: For each position from ``first`` on: (token prefix, outcome code).
        metrics: Compact commit metrics (latency, attempts, conflicts, group size, helped).
    """

    first: int
    outcomes: tuple[tuple[str, str], ...]
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @property
    def last(self) -> int:
        """Last WAL position reconciled (``first - 1`` if none)."""
        return self.first + len(self.outcomes) - 1

    def find(self, seq: int) -> tuple[str, str] | None:
        """(token prefix, outcome code) recorded for ``seq``, or None if outside the range."""
        if self.first <= seq <= self.last:
            return self.outcomes[seq - self.first]
        return None


def encode_record(record: CommitRecord) -> dict[str, str]:
    """Snapshot-summary properties for a commit record."""
    metrics = ",".join(f"{k}={v}" for k, v in record.metrics.items())
    return {
        SUMMARY_SEQS: f"{record.first}-{record.last}",
        SUMMARY_OUTCOMES: ",".join(f"{t[:TOKEN_CHARS]}:{o}" for t, o in record.outcomes),
        SUMMARY_METRICS: metrics,
    }


def decode_record(summary: Mapping[str, str]) -> CommitRecord | None:
    """The commit record in a snapshot summary, or None if it is not a fencedlake commit."""
    seqs = summary.get(SUMMARY_SEQS)
    if not seqs:
        return None
    try:
        first, _, last = seqs.partition("-")
        outcomes = tuple(_pairs(summary.get(SUMMARY_OUTCOMES, "")))
        if int(last) - int(first) + 1 != len(outcomes):
            raise ValueError(f"range {seqs} has {len(outcomes)} outcomes")
        metrics = dict(p.split("=", 1) for p in filter(None, summary.get(SUMMARY_METRICS, "").split(",")))
        return CommitRecord(first=int(first), outcomes=outcomes, metrics=metrics)
    except ValueError as e:
        raise CorruptControlDataError(f"snapshot summary has a malformed fencedlake commit record: {e}") from e


def _pairs(text: str) -> Iterable[tuple[str, str]]:
    for part in filter(None, text.split(",")):
        token, _, code = part.partition(":")
        yield token, code
