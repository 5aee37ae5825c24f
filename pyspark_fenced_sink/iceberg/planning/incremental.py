"""Streaming read planning: offsets over the main branch's snapshot lineage (PROTOCOL.md §14.1; driver).

An offset ``(snapshot_id, position)`` says every row of the snapshots before it,
plus the first ``position`` files of its own list, was emitted; lists are fixed
once a snapshot commits, so every replay plans the same files. Where a stream
starts (:data:`START`), which snapshot operations are read, skipped or refused,
how a fully read snapshot may expire, and how an offset main's lineage no longer
holds rejoins it (``lineage``) are PROTOCOL.md §14.1's table. An upsert commit
that replaced or deleted rows is an ``overwrite`` snapshot (§5.5), refused by
name or skipped by option; one that only added keys is an ``append`` and is read.

"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.snapshots import Operation, Snapshot

from pyspark_fenced_sink.errors import InvalidOptionsError, ReadRefusedError
from pyspark_fenced_sink.iceberg.planning.lineage import LineageLost, ancestors, rejoin
from pyspark_fenced_sink.iceberg.planning.scan import ReadPoint, plan_files
from pyspark_fenced_sink.options.read import (
    START_SNAPSHOT_ID,
    STREAMING_SKIP_DELETE,
    STREAMING_SKIP_OVERWRITE,
    ReadOptions,
)
from pyspark_fenced_sink.protocol.state import SUMMARY_UPSERT

__all__ = ["START", "StreamLimits", "StreamOffset", "StreamPlanner"]


@dataclass(frozen=True)
class StreamOffset:
    """A point in the stream (see the module docstring); Spark checkpoints :meth:`to_json`."""

    snapshot_id: int
    position: int = 0
    scan_all: bool = False
    complete: bool = False
    sequence: int = 0

    @property
    def is_start(self) -> bool:
        """True before the stream's first snapshot is known."""
        return self.snapshot_id == -1

    def to_json(self) -> dict[str, Any]:
        """The JSON object Spark stores in its offset log."""
        return {
            "snapshot_id": self.snapshot_id,
            "position": self.position,
            "scan_all": self.scan_all,
            "complete": self.complete,
            "sequence": self.sequence,
        }

    @classmethod
    def from_json(cls, data: Any) -> StreamOffset:
        """Parse an offset from Spark's offset log.

        Raises:
            ReadRefusedError: it is not an offset this reader wrote (another source's checkpoint).
        """
        try:
            offset = cls(
                int(data["snapshot_id"]),
                int(data["position"]),
                bool(data["scan_all"]),
                bool(data["complete"]),
                int(data.get("sequence", 0)),
            )
        except (KeyError, TypeError, ValueError):
            offset = None
        if offset is None or offset.position < 0:
            raise ReadRefusedError(
                f"stream offset {data!r} is not a fencedlake offset (expected snapshot_id, position, scan_all, "
                "complete): the checkpoint belongs to another source; use a new checkpointLocation"
            )
        return offset


#: Before the first snapshot: the stream's start is resolved against the first batch's lineage.
START = StreamOffset(-1, 0, False, True, 0)


@dataclass(frozen=True)
class StreamLimits:
    """Admission control for one micro-batch (None: unbounded). At least one file is always admitted."""

    max_files: int | None = None
    max_rows: int | None = None

    def full(self, files: int, rows: int, next_rows: int) -> bool:
        """True if a file of ``next_rows`` rows may not join a batch of ``files`` files and ``rows`` rows."""
        if files == 0:
            return False
        if self.max_files is not None and files >= self.max_files:
            return True
        return self.max_rows is not None and rows + next_rows > self.max_rows


@dataclass(frozen=True)
class _Step:
    snapshot: Snapshot
    scan_all: bool
    begin: int
    skip: frozenset[str] = frozenset()  # files delivered before main moved off the offset's lineage


def _sequence(step: _Step) -> int:
    return step.snapshot.sequence_number or 0


class StreamPlanner:
    """Offsets and files of a stream over one table's main branch (lives in Spark's source runner)."""

    def __init__(self, opts: ReadOptions, schema: Schema, load: Callable[[], Any]) -> None:
        self.opts = opts
        self.schema = schema
        self._load = load
        self.table = load()
        self._files: dict[tuple[int, bool], tuple[int, list[FileScanTask]]] = {}

    def refresh(self) -> None:
        """Read the table's newest metadata (every trigger)."""
        self.table = self._load()

    def current(self) -> Snapshot | None:
        """The main branch's current snapshot."""
        snapshot: Snapshot | None = self.table.metadata.current_snapshot()
        return snapshot

    def snapshot(self, snapshot_id: int) -> Snapshot | None:
        """The table's snapshot ``snapshot_id``, or None (expired, or never existed)."""
        found: Snapshot | None = self.table.metadata.snapshot_by_id(snapshot_id)
        return found

    def _ancestors(self, tip: Snapshot) -> list[Snapshot]:
        out: list[Snapshot] = []
        current: Snapshot | None = tip
        while current is not None:
            out.append(current)
            parent = current.parent_snapshot_id
            current = self.snapshot(parent) if parent is not None else None
        return out

    def _first(self, tip: Snapshot) -> _Step | None:
        """The stream's first snapshot on ``tip``'s lineage (START resolved), or None if none yet."""
        ancestors = self._ancestors(tip)
        if self.opts.start_snapshot_id is not None:
            start = self.opts.start_snapshot_id
            if tip.snapshot_id == start:
                return None
            child = next((s for s in ancestors if s.parent_snapshot_id == start), None)
            if child is None:
                raise InvalidOptionsError(
                    f"{START_SNAPSHOT_ID} {start}: expected an ancestor of table {self.opts.table}'s snapshot "
                    f"{tip.snapshot_id} on the main branch, found none (expired, or not on the main branch)"
                )
            return _Step(child, False, 0)
        if self.opts.stream_from_timestamp_ms is not None:
            since = self.opts.stream_from_timestamp_ms
            first = None
            for snapshot in ancestors:  # newest first: the oldest of the unbroken run at or after the time
                if snapshot.timestamp_ms < since:
                    break
                first = snapshot
            return _Step(first, False, 0) if first is not None else None
        return _Step(ancestors[-1], True, 0)

    def _steps(self, start: StreamOffset, tip: Snapshot) -> list[_Step]:
        """The snapshots from ``start`` to ``tip`` (oldest first), each with where its files begin."""
        if start.is_start:
            first = self._first(tip)
            if first is None:
                return []
            chain = [s.snapshot_id for s in self._ancestors(tip)]
            newer = chain[: chain.index(first.snapshot.snapshot_id)]
            return [first, *(_Step(s, False, 0) for s in map(self.snapshot, reversed(newer)) if s is not None)]
        steps: list[_Step] = []
        current: Snapshot | None = tip
        while current is not None:
            if current.snapshot_id == start.snapshot_id:
                if not start.complete:
                    steps.append(_Step(current, start.scan_all, start.position))
                return steps[::-1]
            steps.append(_Step(current, False, 0))
            parent = current.parent_snapshot_id
            if start.complete and parent == start.snapshot_id:
                return steps[::-1]  # the start snapshot expired after it was read to its end
            current = self.snapshot(parent) if parent is not None else None
            if (
                current is None
                and start.complete
                and start.sequence
                and steps[-1].snapshot.sequence_number == start.sequence + 1
            ):
                return steps[::-1]  # expiry cut the parent link (pyiceberg does), but no commit fits between
        if self.snapshot(start.snapshot_id) is not None and not start.scan_all:
            return self._rejoined(start, tip)  # main moved past the offset by another way than a child
        raise self._lost(start.snapshot_id, tip, "it expired before it was read to its end")

    def _lost(self, snapshot_id: int, tip: Snapshot, why: str) -> ReadRefusedError:
        return ReadRefusedError(
            f"table {self.opts.table}: the stream's position, snapshot {snapshot_id}, is no longer in the "
            f"history of snapshot {tip.snapshot_id} on the main branch ({why}); the rows after it cannot be "
            f"told apart exactly. Restart the query with a new checkpointLocation and {START_SNAPSHOT_ID} set "
            "to the last snapshot it delivered",
            table=self.opts.table,
        )

    def _delivered(self, snapshot_id: int) -> list[str]:
        """What the stream delivers of a snapshot read whole: an append's added files, else nothing."""
        snapshot = self.snapshot(snapshot_id)
        if snapshot is None or snapshot.summary is None or snapshot.summary.operation != Operation.APPEND:
            return []
        return [t.file.file_path for t in self.files_of(snapshot, False)]

    def _rejoined(self, start: StreamOffset, tip: Snapshot) -> list[_Step]:
        """Main's snapshots after its newest common ancestor with ``start`` (``planning.lineage``).

        Each step skips the files the stream already delivered; refused if a delivered file is no longer on
        main's side.
        """
        parents = {s.snapshot_id: s.parent_snapshot_id for s in self.table.metadata.snapshots}
        try:
            found = rejoin(start.snapshot_id, start.position, start.complete, tip.snapshot_id, parents, self._delivered)
        except LineageLost as e:
            raise self._lost(start.snapshot_id, tip, e.why) from e
        main = ancestors(tip.snapshot_id, parents)
        newer = [s for s in map(self.snapshot, reversed(main[: main.index(found.ancestor)])) if s is not None]
        steps = [_Step(s, False, 0, frozenset(found.delivered)) for s in newer]
        held = {t.file.file_path for s in newer for t in self.files_of(s, False)}
        gone = next((path for path in found.delivered if path not in held), None)
        if gone is not None:
            raise self._lost(
                start.snapshot_id,
                tip,
                f"main was rolled back or replaced: snapshot {found.delivered[gone]} delivered file {gone}, which "
                "main no longer holds, and a stream cannot take rows back",
            )
        return steps

    def _readable(self, snapshot: Snapshot) -> bool:
        """True to read an append; False to skip; raises for a refused overwrite or delete."""
        operation = snapshot.summary.operation if snapshot.summary is not None else Operation.OVERWRITE
        if operation == Operation.APPEND:
            return True
        if operation == Operation.REPLACE:
            return False
        skip = {Operation.OVERWRITE: self.opts.skip_overwrite, Operation.DELETE: self.opts.skip_delete}.get(operation)
        if skip:
            return False
        option = STREAMING_SKIP_OVERWRITE if operation == Operation.OVERWRITE else STREAMING_SKIP_DELETE
        hint = f"set {option}=true to skip such snapshots" if skip is not None else "no option skips it"
        upserts = snapshot.summary is not None and SUMMARY_UPSERT in snapshot.summary.additional_properties
        what = "an upsert snapshot (rows replaced and deleted by key)" if upserts else f"a {operation.value} snapshot"
        raise ReadRefusedError(
            f"table {self.opts.table}: snapshot {snapshot.snapshot_id} is {what}, which "
            f"changes or removes rows a stream of appends has delivered; {hint} (its rows are then not "
            "streamed), or read the table in batch",
            table=self.opts.table,
        )

    def files_of(self, snapshot: Snapshot, scan_all: bool) -> list[FileScanTask]:
        """The snapshot's file list (cached): its added data files, or every live one for ``scan_all``."""
        key = (snapshot.snapshot_id, scan_all)
        cached = self._files.get(key)
        if cached is not None:
            return cached[1]
        if scan_all:
            point = ReadPoint(snapshot, self.schema, f"snapshot {snapshot.snapshot_id}")
            tasks = plan_files(self.table, point, AlwaysTrue(), self.opts.table)
        else:
            io = self.table.io
            tasks = [
                FileScanTask(entry.data_file)
                for manifest in snapshot.manifests(io)
                if manifest.content == ManifestContent.DATA and manifest.added_snapshot_id == snapshot.snapshot_id
                for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)
                if entry.status == ManifestEntryStatus.ADDED
                and entry.snapshot_id == snapshot.snapshot_id
                and entry.data_file.content == DataFileContent.DATA
            ]
        tasks.sort(key=lambda t: t.file.file_path)
        self._files[key] = (snapshot.sequence_number or 0, tasks)
        return tasks

    def latest(self, start: StreamOffset, limits: StreamLimits, tip: Snapshot | None) -> StreamOffset:
        """The end of the next micro-batch from ``start`` toward ``tip`` within ``limits`` (``start``: no data)."""
        if tip is None:
            return start
        end, files, rows = start, 0, 0
        steps = self._steps(start, tip)
        # After a rejoin, the batch reaches past every snapshot that re-adds a file delivered before: the
        # skip set lives only in this batch, so no later batch may meet such a file again.
        must = max((i for i, st in enumerate(steps) if self._skipped(st)), default=-1)
        for i, step in enumerate(steps):
            try:
                readable = step.scan_all or self._readable(step.snapshot)
            except ReadRefusedError:
                if end != start:
                    return end  # deliver every row before the refused snapshot first
                raise
            listed = self.files_of(step.snapshot, step.scan_all) if readable else []
            for position in range(step.begin, len(listed)):
                if listed[position].file.file_path in step.skip:
                    continue
                next_rows = listed[position].file.record_count
                if i > must and limits.full(files, rows, next_rows):
                    if position == 0:
                        return end
                    return StreamOffset(step.snapshot.snapshot_id, position, step.scan_all, False, _sequence(step))
                files, rows = files + 1, rows + next_rows
            end = StreamOffset(step.snapshot.snapshot_id, len(listed), step.scan_all, True, _sequence(step))
        return end

    def _skipped(self, step: _Step) -> bool:
        """True if ``step`` re-adds a file the stream delivered before main left its offset's lineage."""
        return bool(step.skip) and any(t.file.file_path in step.skip for t in self.files_of(step.snapshot, False))

    def plan(self, start: StreamOffset, end: StreamOffset) -> list[FileScanTask]:
        """The files between two offsets, in stream order (the same on every replay)."""
        if end.is_start or start == end:
            return []
        tip = self.snapshot(end.snapshot_id)
        if tip is None:
            self.refresh()
            tip = self.snapshot(end.snapshot_id)
        if tip is None:
            raise ReadRefusedError(
                f"table {self.opts.table}: snapshot {end.snapshot_id}, the end of a planned micro-batch, has "
                "expired before the batch was read; the batch cannot be replayed exactly. Restart the query with "
                f"a new checkpointLocation and {START_SNAPSHOT_ID}",
                table=self.opts.table,
            )
        out: list[FileScanTask] = []
        for step in self._steps(start, tip):
            if not step.scan_all and not self._readable(step.snapshot):
                continue
            stop = end.position if step.snapshot.snapshot_id == end.snapshot_id else None
            listed = self.files_of(step.snapshot, step.scan_all)[step.begin : stop]
            out.extend(t for t in listed if t.file.file_path not in step.skip)
        return out

    def forget_before(self, offset: StreamOffset) -> None:
        """Drop cached file lists of snapshots older than ``offset``'s (Spark committed up to it)."""
        snapshot = None if offset.is_start else self.snapshot(offset.snapshot_id)
        if snapshot is None or snapshot.sequence_number is None:
            return
        self._files = {k: v for k, v in self._files.items() if v[0] >= snapshot.sequence_number}
