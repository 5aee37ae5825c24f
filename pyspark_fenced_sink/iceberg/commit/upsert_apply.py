"""Applying upserts inside the one catalog commit (PROTOCOL.md §5.5, "Apply"; driver).

:func:`upsert_producer` is the producer of ``WriteMode.UPSERT`` commits
(``iceberg.commit.producers.PRODUCERS``): the plan's upserts (only upserts join an
upsert's commit, ``WriteMode.takes_upserts``), in WAL order, on the version
being committed on. For each upsert it reads the entry's
keys, prunes the branch's live data files by partition (when the spec is a
function of the key columns) and by key-column bounds, reads the candidates' key
and order columns and live positions (``iceberg.commit.key_index``, cached), the
remembered deletes (``iceberg.commit.tombstones``), and lets ``protocol.upsert.resolve``
decide which rows lose. Losers of all the commit's upserts become one
file-scoped position delete file per touched data file (``iceberg.commit.row_delta``).

The snapshot is an ``overwrite`` (it deletes rows), or an ``append`` when the
upserts only added new keys (nothing deleted: a stream of appends delivers it).

A decision the data does not allow (a key column dropped, an unreadable file,
equality deletes on the branch, a duplicate key without an order) raises
``EntryRefused`` naming the entry: the commit loop decides it REFUSED and the
rest of the plan goes on.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.iceberg.codec.datafiles import decode_data_file
from pyspark_fenced_sink.iceberg.codec.key_files import decode_bounds
from pyspark_fenced_sink.iceberg.commit.branches import StagedCommit
from pyspark_fenced_sink.iceberg.commit.key_index import (
    POS,
    Reads,
    Unreadable,
    column_name,
    delete_positions,
    drop_null_keys,
    key_table,
    live_mask,
    manifest_entries,
    physical,
)
from pyspark_fenced_sink.iceberg.commit.row_delta import RowDelta, named_data_file, write_position_deletes
from pyspark_fenced_sink.iceberg.commit.tombstones import merge_tombstones
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.file_refs import encoded_spec_id
from pyspark_fenced_sink.protocol.filetag import ApplyTag, table_tag
from pyspark_fenced_sink.protocol.reconcile import Outcome, remembered
from pyspark_fenced_sink.protocol.replace import EntryRefused
from pyspark_fenced_sink.protocol.state import SUMMARY_UPSERT
from pyspark_fenced_sink.protocol.upsert import TOMBSTONE_ORDER_KEY, Resolution, Source, resolve

__all__ = ["upsert_producer"]

logger = logging.getLogger(__name__)

#: Key types whose manifest bounds prune candidate files (others are always candidates).
_BOUNDED = (IntegerType, LongType, StringType, DateType, TimestampType, TimestamptzType, DecimalType)
#: Ranks of an entry's rows: file index * _RANK_STRIDE + position (later is greater).
_RANK_STRIDE = 1 << 40


@dataclass
class _Live:
    """The branch's live data files and position delete files at the commit's base (plus the commit's own)."""

    files: dict[str, DataFile] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)
    named: dict[str, list[tuple[DataFile, int]]] = field(default_factory=dict)
    scoped: dict[tuple[int, tuple[Any, ...]], list[tuple[DataFile, int]]] = field(default_factory=dict)
    equality: str | None = None


def _partition(df: DataFile) -> tuple[Any, ...]:
    return tuple(df.partition[i] for i in range(len(df.partition)))


def _read_live(staged: StagedCommit, reads: Reads) -> _Live:
    live = _Live()
    snapshot = staged.tip
    if snapshot is None:
        return live
    io = staged.table.io
    for manifest in snapshot.manifests(io):
        for entry in manifest_entries(io, manifest, reads):
            df, seq = entry.data_file, int(entry.sequence_number or 0)
            if df.content == DataFileContent.DATA:
                live.files[df.file_path] = df
                live.seqs[df.file_path] = seq
            elif df.content == DataFileContent.POSITION_DELETES:
                named = named_data_file(df)
                if named is not None:
                    live.named.setdefault(named, []).append((df, seq))
                else:
                    live.scoped.setdefault((df.spec_id, _partition(df)), []).append((df, seq))
            else:
                live.equality = df.file_path
    return live


class _KeyBounds:
    """The sorted key values of an entry per key column, to test a file's lower/upper bounds against."""

    def __init__(self, keys: pa.Table, ids: Sequence[int], schema: Schema) -> None:
        self.columns: list[tuple[int, Any, list[Any]]] = []
        for fid in ids:
            field_type = schema.find_field(fid).field_type
            if isinstance(field_type, _BOUNDED):
                values = sorted(set(physical(keys.column(column_name(fid)))))
                self.columns.append((fid, field_type, values))

    def may_hold(self, lower: Mapping[int, bytes] | None, upper: Mapping[int, bytes] | None) -> bool:
        for fid, field_type, values in self.columns:
            lo, hi = (lower or {}).get(fid), (upper or {}).get(fid)
            if lo is None or hi is None:
                continue
            try:
                lo_v, hi_v = from_bytes(field_type, lo), from_bytes(field_type, hi)
                i = bisect.bisect_left(values, lo_v)
                if i == len(values) or values[i] > hi_v:
                    return False
            except Exception:  # noqa: BLE001
                continue  # a bound in another type (a promoted column): no pruning on it
        return True


class _Partitions:
    """The partitions an entry's keys fall in, per partition spec whose fields are all transforms of keys."""

    def __init__(self, keys: pa.Table, ids: Sequence[int], schema: Schema, specs: Mapping[int, PartitionSpec]) -> None:
        self.keys, self.ids, self.schema, self.specs = keys, set(ids), schema, specs

    @functools.cache  # noqa: B019 - one instance per upsert entry
    def of_spec(self, spec_id: int) -> frozenset[tuple[Any, ...]] | None:
        spec = self.specs.get(spec_id)
        if spec is None or not spec.fields or not all(pf.source_id in self.ids for pf in spec.fields):
            return None
        try:
            columns = []
            for pf in spec.fields:
                source = self.keys.column(column_name(pf.source_id))
                values = pf.transform.pyarrow_transform(self.schema.find_field(pf.source_id).field_type)(source)
                columns.append([partition_record_value(pf, v, self.schema) for v in values.to_pylist()])
        except Exception:  # noqa: BLE001 - a transform pyarrow cannot run on this type: no pruning
            return None
        return frozenset(zip(*columns, strict=True))

    def may_hold(self, df: DataFile) -> bool:
        wanted = self.of_spec(df.spec_id)
        return wanted is None or _partition(df) in wanted


class _Candidates:
    """The candidate rows of one upsert, table by table, with where each row lives (file, position)."""

    def __init__(self, names: Sequence[str], order: str | None) -> None:
        self.names, self.order = list(names), order
        self.parts: list[pa.Table] = []
        self.paths: list[str] = []

    def add(
        self, table: pa.Table, source: Source, path: str | None, rank_base: int = 0, paths: Sequence[str] = ()
    ) -> None:
        """Rows of one file (``path``), or of several (``paths``, indexed by the table's ``_file`` column)."""
        n = table.num_rows
        if not n:
            return
        files: Any = pa.array(np.full(n, -1, np.int32))
        if paths:
            files = pc.add(table.column("_file"), pa.scalar(len(self.paths), pa.int32()))
            self.paths.extend(paths)
        elif path is not None:
            files = pa.array(np.full(n, len(self.paths), np.int32))
            self.paths.append(path)
        columns = {name: table.column(name) for name in self.names}
        if self.order is not None:
            columns["_o"] = table.column(self.order)
        positions = table.column(POS)
        columns.update(
            _src=pa.array(np.full(n, int(source), np.int8)),
            _rank=pc.add(positions, rank_base),
            _file=files,
            _pos=positions,
        )
        self.parts.append(pa.table(columns))

    def resolve(self, ordered: bool) -> tuple[Resolution, pa.Table]:
        """``protocol.upsert.resolve`` over every candidate: keys as group numbers, order values as ranks."""
        table = pa.concat_tables(self.parts)
        distinct = table.select(self.names).group_by(self.names).aggregate([])
        distinct = distinct.append_column("_gid", pa.array(np.arange(distinct.num_rows, dtype=np.int64)))
        table = table.join(distinct, keys=self.names, join_type="inner")
        orders = np.zeros(table.num_rows, np.int64)
        if ordered:
            column = table.column("_o")
            ranked = pc.rank(column, sort_keys="ascending", tiebreaker="dense").cast(pa.int64())
            orders = pc.if_else(pc.is_null(column), 0, ranked).to_numpy(zero_copy_only=False)
        res = resolve(
            table.column("_gid").to_numpy(),
            orders,
            table.column("_src").to_numpy(),
            table.column("_rank").to_numpy(),
            ordered=ordered,
        )
        return res, table


class _Applier:
    """Applies one commit's upserts in WAL order, collecting the rows they delete."""

    def __init__(self, staged: StagedCommit) -> None:
        self.staged = staged
        self.io = staged.table.io
        metadata = staged.tx.table_metadata
        self.schema, self.specs = metadata.schema(), metadata.specs()
        self.mapping = metadata.name_mapping()
        self.types = {sid: spec.partition_type(self.schema) for sid, spec in self.specs.items()}
        self.format_version = metadata.format_version
        self.reads = Reads()
        self.live = _read_live(staged, self.reads)
        self.new: dict[str, list[np.ndarray]] = {}
        self.tombstones = staged.plan.base.tombstones
        self.counts: Counter[str] = Counter()

    def _decode(self, entry: WalEntry) -> list[DataFile]:
        return [decode_data_file(f, self.types[encoded_spec_id(f)], self.format_version) for f in entry.files]

    def _dead(self, path: str) -> list[np.ndarray]:
        out = []
        seq = self.live.seqs.get(path)
        if seq is not None:
            df = self.live.files[path]
            scoped = self.live.scoped.get((df.spec_id, _partition(df)), [])
            for delete_file, dseq in [*self.live.named.get(path, []), *scoped]:
                if dseq >= seq:
                    found = delete_positions(self.io, delete_file, self.reads).get(path)
                    if found is not None:
                        out.append(found)
        out.extend(self.new.get(path, ()))
        return out

    def append(self, entry: WalEntry) -> None:
        for df in self._decode(entry):
            self.live.files[df.file_path] = df

    def upsert(self, seq: int, entry: WalEntry, branch: str) -> None:
        spec = entry.upsert
        if spec is None:
            raise EntryRefused(f"WAL seq {seq} is an upsert without key columns (damaged entry)", seq)
        if self.live.equality is not None:
            raise EntryRefused(
                f"upsert refused: branch {branch} has a live equality delete file ({self.live.equality}); which rows "
                "are live cannot be told without applying it. Rewrite the table with another engine first",
                seq,
            )
        names = [column_name(i) for i in spec.key_ids]
        order = column_name(spec.order[0]) if spec.order is not None else None
        ids = [*spec.key_ids, *([spec.order[0]] if spec.order is not None else [])]
        own = self._decode(entry)
        rows = [drop_null_keys(self._keys(df.file_path, ids), names) for df in own]
        deletes = [drop_null_keys(self._keys(str(d["p"]), ids), names) for d in entry.deletes]
        everything = [t.select(names) for t in (*rows, *deletes) if t.num_rows]
        if not everything:
            self._add_own(own, entry)
            return
        keys = pa.concat_tables(everything).group_by(names).aggregate([])
        bounds, parts = (
            _KeyBounds(keys, spec.key_ids, self.schema),
            _Partitions(keys, spec.key_ids, self.schema, self.specs),
        )
        cand = _Candidates(names, order)
        mine = {df.file_path for df in own}
        found: list[pa.Table] = []
        paths: list[str] = []
        for path, df in self.live.files.items():
            if path in mine or not parts.may_hold(df) or not bounds.may_hold(df.lower_bounds, df.upper_bounds):
                continue
            table = self._keys(path, ids)
            mask = live_mask(table.num_rows, self._dead(path))
            table = table.filter(mask) if mask is not None else table
            found.append(table.append_column("_file", pa.array(np.full(table.num_rows, len(paths), np.int32))))
            paths.append(path)
        if found:  # one join for every candidate file: the join's setup costs more than small files' rows
            live = pa.concat_tables(found).join(keys, keys=names, join_type="inner")
            cand.add(live, Source.LIVE, None, paths=paths)
        self.counts["read"] += len(paths)
        if spec.order is not None and branch == MAIN_BRANCH:
            remembered_deletes = [
                kept
                for ref in self.tombstones
                if int(ref[TOMBSTONE_ORDER_KEY]) == spec.order[0]
                and bounds.may_hold(*decode_bounds(ref))
                and (kept := self._remembered(str(ref["p"]), ids)) is not None
            ]
            if remembered_deletes:
                tombs = pa.concat_tables(remembered_deletes).join(keys, keys=names, join_type="inner")
                cand.add(tombs, Source.TOMBSTONE, None)
        for n, (df, table) in enumerate(zip(own, rows, strict=True)):
            cand.add(table, Source.ROW, df.file_path, n * _RANK_STRIDE)
        for table in deletes:
            cand.add(table, Source.DELETE, None)
        out, table = cand.resolve(spec.ordered)
        if out.duplicate is not None:
            row = table.filter(pc.equal(table.column("_gid"), out.duplicate)).slice(0, 1).to_pylist()[0]
            key = {name: row[column_name(i)] for i, name in spec.keys}
            raise EntryRefused(
                f"upsert refused: key {key} appears more than once in the write and it has no upsert-order to "
                "choose; nothing of it was applied",
                seq,
            )
        losers = table.take(pa.array(out.losers, pa.int64())).select(["_file", "_pos"])
        files, positions = losers.column("_file").to_numpy(), losers.column("_pos").to_numpy()
        for f in np.unique(files[files >= 0]):
            self.new.setdefault(cand.paths[int(f)], []).append(positions[files == f])
        self.counts.update(ins=out.inserted, upd=out.updated, dele=out.deleted, same=out.unchanged)
        self._add_own(own, entry)

    def _add_own(self, own: list[DataFile], entry: WalEntry) -> None:
        for df in own:
            self.live.files[df.file_path] = df
        self.tombstones = remembered(self.tombstones, entry, Outcome.APPLIED)

    def _remembered(self, path: str, ids: Sequence[int]) -> pa.Table | None:
        """A listed tombstone file's keys and orders; None (logged) if it is gone: its deletes are forgotten."""
        try:
            return self._keys(path, ids)
        except Unreadable as e:
            logger.warning("fencedlake: remembered deletes in %s are forgotten: %s", path, e)
            return None

    def _keys(self, path: str, ids: Sequence[int]) -> pa.Table:
        return key_table(self.io, path, ids, self.schema, self.mapping, self.reads)


def _write_deletes(staged: StagedCommit, applier: _Applier, producer: RowDelta) -> list[str]:
    """One position delete file per data file with new deletes; returns their paths."""
    tag = table_tag(str(staged.table.metadata.table_uuid))
    locations = staged.table.location_provider()
    written = []
    for path, positions in sorted(applier.new.items()):
        name = ApplyTag("d", tag, staged.plan.base.upper).file_name()
        target = locations.new_data_location(name)
        data_file = applier.live.files[path]
        ordered = np.unique(np.concatenate(positions))
        delete_file = write_position_deletes(staged.table.io, target, data_file, ordered, applier.format_version)
        written.append(target)
        producer.add_delete_file(delete_file)
    return written


def upsert_producer(staged: StagedCommit, lead: WalEntry | None) -> RowDelta:
    """The snapshot producer of a commit of upserts (the caller appends the entries' data files).

    Raises:
        EntryRefused: an upsert of the plan cannot be applied on this version (``seq`` names it).
    """
    started = time.monotonic()
    plan, entries = staged.plan, staged.entries
    applier = _Applier(staged)
    for seq in plan.apply:
        entry = entries[seq]
        try:
            if entry.mode is WriteMode.UPSERT:
                applier.upsert(seq, entry, staged.branch)
            else:  # reconciliation never groups an append with upserts; were it one, it would apply in order
                applier.append(entry)
        except Unreadable as e:
            raise EntryRefused(f"upsert refused: {e}; nothing of it was applied", seq) from e
    producer = RowDelta(
        operation=Operation.OVERWRITE if applier.new else Operation.APPEND,
        transaction=staged.tx,
        io=staged.table.io,
        branch=staged.branch,
        snapshot_properties=staged.summary,
    )
    written = _write_deletes(staged, applier, producer)
    staged.cleanups.append(lambda: _remove(staged, written))
    merged = merge_tombstones(staged, staged.state.tombstones, applier.reads)
    if merged is not None:
        staged.state = replace(staged.state, tombstones=merged)
    c, r = applier.counts, applier.reads
    staged.summary[SUMMARY_UPSERT] = (
        f"ins={c['ins']},upd={c['upd']},del={c['dele']},same={c['same']},candidates={c['read']},"
        f"read={r.files},cached={r.cached},bytes={r.bytes},manifests={r.manifests},deletes={len(written)},"
        f"ms={int((time.monotonic() - started) * 1000)}"
    )
    failpoints.hit("upsert.after-deletes-written")
    return producer


def _remove(staged: StagedCommit, paths: Sequence[str]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):  # an orphan gc removes (its name says which attempt wrote it)
            staged.table.io.delete(path)
