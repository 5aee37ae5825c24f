"""Schedules, writer programs and invariant checks for the model-based test.

One *schedule* = a fresh catalog with one table, a random mix of simulated
processes (anonymous batch appends, static and dynamic overwrites and
replace-where writes, some to a branch and some with snapshot properties, a
``publish`` of that branch, compactions that replace some of main's live files
by one file holding their rows, ``writer.id`` batch jobs with batch ids, zombies
and retries of fenced batches, streaming runs that restart, replay and
overlap, a gc process that truncates the WAL, expires
anonymous writes and removes orphan files, a helper that runs ``recover``,
and "another tool" performing ordinary catalog operations: drop and
re-create, rename and re-create, purge, removing or editing the state
property, changing and reverting the partition spec, losing a control
object — each followed by the operator's way out where one is needed; other
engines' writes, rollbacks, ref moves and renames and stream readers come from
``tests/model/foreign.py``), random
faults (crashes at any request, ambiguous puts, unknown catalog commit
outcomes, slow processes with stale views), a seeded interleaving, then a
final repair/recover per table and the invariants I1-I9 (``check``), among
them that every branch holds exactly what replaying the applied entries in WAL
order gives (``_replay``: an oracle written apart from the code under test).
Every process runs the production code paths (``fencing``, ``outcome``,
``commit``, ``repair``, ``ops.gc``, ``replace``).

Model data files carry a partition ``part`` (0 or 1) and the range
``lo..hi`` of a column ``v``; model row filters are ``part = P`` and
``v >= K`` (``memory_port.model_match``). A file holds the rows of its ``key``,
a compaction's output those of its inputs (``keys``; :func:`keys_of`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark_fenced_sink.errors import (
    CommitOutcomeUnknownError,
    CorruptControlDataError,
    FencedLakeError,
    FencedWriterError,
    InvalidOptionsError,
    SkipRefused,
    TableChangedError,
    TableStateError,
    WriteRejectedError,
)
from pyspark_fenced_sink.ops.gc import collectable, expire_writes, truncate_wal
from pyspark_fenced_sink.protocol.commit import recorded_token, recover
from pyspark_fenced_sink.protocol.committer import Committer
from pyspark_fenced_sink.protocol.context import CommitContext
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, TOKEN_CHARS, EntryKind, WalEntry, WriteMode, decode_entry
from pyspark_fenced_sink.protocol.fencing import WriterIdentity, open_writer, stream_epoch
from pyspark_fenced_sink.protocol.file_refs import encoded_path
from pyspark_fenced_sink.protocol.filetag import FileTag, table_tag
from pyspark_fenced_sink.protocol.layout import control_root, seq_of, wal_key
from pyspark_fenced_sink.protocol.outcome import data_entry, finish_write
from pyspark_fenced_sink.protocol.publish import publish_entry
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.repair import repair_state, skip_position
from pyspark_fenced_sink.protocol.view import TableIdentity, bind
from pyspark_fenced_sink.protocol.wal import SEAL_WRITER, Wal
from pyspark_fenced_sink.store.memory import MemoryStore

from . import upsert_oracle, upserts
from .memory_port import NAME, MemoryCatalog, MemoryTable, MemoryTablePort
from .oracle import replay
from .sched import Scheduler, ScheduleStuck

#: The key prefix of rows another engine wrote (no WAL entry carries them; ``tests/model/foreign.py``).
OTHER = "other-engine:"

#: What a write may legitimately end with besides success (recorded on the Write, checked by ``check``).
WRITE_ERRORS = (
    FencedWriterError,
    WriteRejectedError,
    CommitOutcomeUnknownError,
    TableStateError,
    TableChangedError,  # also: the table was dropped and not (yet) re-created
)


@dataclass
class Faults:
    """Fault rates of one schedule."""

    crash_p: float = 0.0
    ambiguous_put: float = 0.0
    unknown_commit: float = 0.0
    slow: bool = False


@dataclass
class Write:
    """One write attempt and what its process saw."""

    proc: str
    key: str
    table_uuid: str | None = None
    barrier: tuple[int, str] | None = None
    entry: WalEntry | None = None
    outcome: Outcome | None = None
    by_peer: bool = False
    error: BaseException | None = None


@dataclass
class Env:
    """Shared world of one schedule."""

    sched: Scheduler
    rng: random.Random
    faults: Faults
    catalog: MemoryCatalog = field(default_factory=MemoryCatalog)
    stores: dict[str, MemoryStore] = field(default_factory=dict)
    disk: dict[str, FileTag] = field(default_factory=dict)
    deleted_by_gc: set[str] = field(default_factory=set)
    purged: set[str] = field(default_factory=set)
    writes: list[Write] = field(default_factory=list)
    spark_log: dict[str, int] = field(default_factory=dict)
    rebase_on_conflict: bool = False
    #: The catalog behind the processes: the in-memory one unless a backend
    #: (``tests/model/sqlite_backend``) installs a real catalog port.
    port_factory: Callable[[Env], Any] | None = None
    #: Encodes one data file (path, key, part, lo, hi) for a WAL entry; the default is a bare model dict.
    encode_file: Callable[[str, str, int, int, int], dict[str, Any]] = lambda path, key, part, lo, hi: {
        "p": path,
        "key": key,
        "s": 0,
        "pt": [f"p{part}"],
        "part": part,
        "lo": lo,
        "hi": hi,
    }
    #: True when the backend supports the catalog operations of ``other_tool`` (the in-memory catalog).
    catalog_ops: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    #: Streaming runs refused as fenced: (process, writer, run, the run that was current).
    fences: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    #: Incarnations opened (a batch open or a streaming registration returned): (writer, epoch, barrier token
    #: prefix, virtual time), and when each WAL object was created: (control root, seq) -> (time, token prefix).
    opens: list[tuple[str, int, str, float]] = field(default_factory=list)
    #: Batch jobs' incarnations by (writer, run): when the open started and returned, the tail an idempotent
    #: job's open listed (None: it put a barrier) and the table's uuid. ``_check_open_order`` orders them.
    jobs: dict[tuple[str, str], tuple[float, float, int | None, str | None]] = field(default_factory=dict)
    #: The barrier a job's open put, by (writer, run): (its seq, its token prefix).
    barriers: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    #: Whether a ``writer.id`` job also has a batch id's open (no barrier, PROTOCOL.md §7): its own stream.
    kinds: random.Random = field(default_factory=random.Random)
    #: The pace the catalog reports (``TableView.pace``): None, or writers spread their claims over a
    #: window above the tail (more holes, voided by commits).
    pace: float | None = None
    created_at: dict[tuple[str, int], tuple[float, str]] = field(default_factory=dict)
    #: Spawn the zombie race (an old incarnation stalling between its claim's LIST and PUT, a newer one opening).
    zombie: bool = False
    #: In a zombie race, also a lower barrier (``lower_barrier_job``) that crawls between its put and its seal.
    lower_barrier: bool = False
    #: Processes that slow to a crawl after their next LIST, until their next put.
    stall_after_list: set[str] = field(default_factory=set)
    #: Processes that slow to a crawl after their next WAL put, until their next LIST (``crawling`` meanwhile).
    stall_after_put: set[str] = field(default_factory=set)
    crawling: set[str] = field(default_factory=set)
    _ambiguous_streak: Counter[str] = field(default_factory=Counter)
    #: Draws for the write modes (mode, filter, branch, properties, file partitions): a stream of its own, so
    #: a schedule without them (``features`` False) interleaves exactly as before they existed.
    feat: random.Random = field(default_factory=random.Random)
    features: bool = True
    #: Whether a schedule gets upsert writers (``upserts.spawn``): a stream of its own, so a schedule without
    #: them draws from ``feat`` exactly as before upserts existed.
    upsert_draw: random.Random = field(default_factory=random.Random)
    #: How long a ``writer.id`` job's tasks run between its open and its commit (the Spark shape).
    tasks: random.Random = field(default_factory=random.Random)
    #: Model files may hold NaN rows in ``v`` (a double in the in-memory catalog; the SQLite backend's is a long).
    nan_rows: bool = True
    #: State of the processes ``tests/model/foreign.py`` adds (stream readers), by name.
    extra: dict[str, Any] = field(default_factory=dict)
    #: Writers keep the WAL entries they decode, as the sink's processes do (``protocol.kept.KeptEntries``): each
    #: context belongs to one of two model processes in turn (no draw from ``rng``), and the schedule's own id
    #: keeps schedules apart in the one real process that runs them. Operators' contexts keep none (the CLI).
    keep_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    contexts: Iterator[int] = field(default_factory=itertools.count)
    #: Waits no writer should have made (``_watch_waits``): a waiter behind barriers and seals only.
    needless_waits: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.catalog.created:
            self.catalog.create().spec_id = 0

    @property
    def table(self) -> MemoryTable:
        """The first table of the schedule (the one a backend mirrors)."""
        return self.catalog.created[0]

    def store_for(self, root: str) -> MemoryStore:
        store = self.stores.get(root)
        if store is None:
            store = self.stores[root] = MemoryStore()
            store.before_op = self._before_op
            store.before_put = self._put_fault
            store.created = lambda key, data: self._created(root, key, data)
        return store

    def _before_op(self, kind: str, key: str) -> None:
        proc = self.sched.current()
        if proc is not None and kind == "list" and proc.name in self.stall_after_list:
            self.extra["stalled after list"] = proc.name
            if not self.lower_barrier:
                proc.weight = 0.02  # listed: now it crawls until its put
            else:  # from its next request (its LIST's time, and so its claim window, stays short)
                self.extra["crawls next"] = proc.name
        elif proc is not None and self.extra.get("crawls next") == proc.name:
            # Slower than the zombie race's default, beside a lower barrier that crawls slower still: the zombie's
            # put then mostly comes between the newer barrier's open and the lower one's seal.
            proc.weight = 0.002
            self.extra["crawls next"] = None
        if proc is not None and kind == "list" and proc.name in self.crawling:
            self.crawling.discard(proc.name)
            proc.weight = 1.0  # it lists (a barrier's seal, a commit): it goes on at full speed
        self.sched.checkpoint()

    def _put_fault(self, key: str) -> str | None:
        proc = self.sched.current()
        if proc is None:
            return None
        if proc.name in self.stall_after_list and proc.weight < 0.1:
            self.stall_after_list.discard(proc.name)
            proc.weight = 1.0
        if proc.name.startswith("jumper") and seq_of(key) is not None:
            self.extra["jumper puts"] = self.extra.get("jumper puts", 0) + 1
        if proc.name in self.stall_after_put and seq_of(key) is not None:
            self.stall_after_put.discard(proc.name)
            self.crawling.add(proc.name)
            proc.weight = 0.0005  # put (a barrier, an entry): now it crawls until its next LIST
            self.extra[f"put by {proc.name}"] = True
        # At most 2 faults per process and key: a create_resolved call (5 attempts) can always finish.
        streak = f"{proc.name}:{key}"
        if self.rng.random() >= self.faults.ambiguous_put or self._ambiguous_streak[streak] >= 2:
            return None
        self._ambiguous_streak[streak] += 1
        self.injected["put"] += 1
        return self.rng.choice(["lost-before", "lost-after"])

    def _created(self, root: str, key: str, data: bytes) -> None:
        seq = seq_of(key)
        if seq is not None:
            try:
                token = decode_entry(data).token[:TOKEN_CHARS]
            except CorruptControlDataError:
                return
            self.created_at[(root, seq)] = (self.sched.clock, token)

    def _commit_fault(self) -> str | None:
        if self.sched.current() is None or self.rng.random() >= self.faults.unknown_commit:
            return None
        self.injected["commit"] += 1
        return self.rng.choice(["unknown-before", "unknown-after"])

    def port(self) -> Any:
        if self.port_factory is not None:
            return self.port_factory(self)
        return MemoryTablePort(
            self.catalog,
            checkpoint=self.sched.checkpoint,
            fault=self._commit_fault,
            rebase_on_conflict=self.rebase_on_conflict,
            pace=self.pace,
        )

    def ctx(self, *, check: bool = True, keep: bool = True) -> CommitContext:
        """One process's context: reads the table behind the name once, binds to its identity.

        ``keep``: its WAL keeps decoded entries with one of two model processes (``keep_id``); False for operators.
        """
        port = self.port()
        raw = port.load()
        view = bind(raw, port.name) if check else raw
        root = view.state.root if check else None
        if root is None:  # unchecked (repair): the root of the table's own identity
            root = control_root(raw.location or "", str(raw.table_uuid))
        ctx = CommitContext(
            port=port,
            wal=Wal(
                self.store_for(root),
                label="model",
                sleep=self.sched.sleep,
                parallel_reads=False,  # every read a scheduling point, in order
                rng=random.Random(self.rng.random()),
                clock=self.sched.now,
                keep=f"{self.keep_id}/p{next(self.contexts) % 2}/{root}" if keep else None,
            ),
            identity=TableIdentity(str(raw.table_uuid), root),
            max_wait_s=120.0,
            max_group=self.rng.choice([2, 5, 1000]),
            backoff_cap_s=1.0,
            sleep=self.sched.sleep,
            now=self.sched.now,
            rng=random.Random(self.rng.random()),
        )
        if check:
            ctx.check(raw)
        return ctx

    def filter_ids(self, row_filter: str | None) -> tuple[tuple[str, int], ...]:
        """A model filter's column bound to its field id in the table's columns now (planning).

        Raises:
            InvalidOptionsError: the column does not exist now (another engine renamed it).
        """
        if row_filter is None:
            return ()
        name = row_filter.split()[0]
        ids = {n: i for i, n in self.table.columns.items()}
        if name not in ids:
            raise InvalidOptionsError(f"option replace-where={row_filter!r}: the table has no column {name!r}")
        return ((name, ids[name]),)

    def write_files(self, tag: FileTag, key: str, count: int, row_filter: str | None = None) -> list[dict[str, Any]]:
        """Executors write ``count`` files for logical row set ``key`` (rows satisfying ``row_filter``)."""
        files = []
        for i in range(count):
            name = FileTag(tag.writer, tag.ephemeral, tag.epoch, tag.opened, tag.batch, i, 0, table=tag.table)
            part, lo = self.feat.randint(0, 1), self.feat.randint(0, 9)
            if row_filter is not None:  # the executors' check: every row written satisfies the filter
                column, _, value = row_filter.split()
                part, lo = (int(value), lo) if column == "part" else (part, max(lo, int(value)))
            hi = min(9, lo + self.feat.randint(0, 2))
            encoded = self.encode_file(name.file_name(), f"{key}#{i}", part, lo, hi)
            if self.nan_rows and self.features and row_filter is None and self.feat.random() < 0.15:
                encoded["nan"] = True  # rows with NaN in v: fencedlake's files count them (statistics "full")
            self.disk[str(encoded["p"])] = FileTag.parse(name.file_name()) or tag
            files.append(encoded)
        return files

    def remove_files(self, paths: Any) -> None:
        for p in paths:
            self.disk.pop(p, None)


# ---------------------------------------------------------------------------------------------- programs


def _begin(env: Env, write: Write) -> CommitContext | None:
    """The write's context, or None (recorded as the write's error) if the table cannot be written now."""
    env.writes.append(write)
    try:
        ctx = env.ctx()
    except WRITE_ERRORS as e:
        write.error = e
        return None
    write.table_uuid = ctx.identity.uuid if ctx.identity else None
    return ctx


def _open(
    env: Env, write: Write, writer: str | None, *, idempotent: bool = False
) -> tuple[CommitContext, Any, Any] | None:
    """``_begin``, then read the table and open ``writer`` (None: anonymous): ``(ctx, view, identity)``, or None
    (recorded as the write's error) if the write cannot start. A job's open is recorded in ``env.jobs``; a
    barrier's also in ``env.opens``."""
    ctx = _begin(env, write)
    if ctx is None:
        return None
    run = uuid.UUID(int=env.kinds.getrandbits(128)).hex
    if writer is not None:  # an open that never returns may still have put its barrier: it is never "older"
        env.jobs[(writer, run)] = (env.sched.clock, float("inf"), None, write.table_uuid)
    try:
        view = ctx.load()
        ident = open_writer(ctx, writer, run=run, view=view, idempotent=idempotent)
    except WRITE_ERRORS as e:
        write.error = e
        return None
    if writer is not None:
        env.jobs[(writer, run)] = (env.jobs[(writer, run)][0], env.sched.clock, ident.tail, write.table_uuid)
        if env.lower_barrier and write.proc == "newer":  # the zombie race's newer open returned: the zombie puts now
            for proc in env.sched.procs:
                if proc.name == "zombie" and proc.weight < 0.1:
                    proc.weight = 50.0
        if ident.epoch is not None:
            write.barrier = (ident.epoch, str(ident.barrier_token))
            env.barriers[(writer, run)] = (ident.epoch, str(ident.barrier_token)[:TOKEN_CHARS])
            env.opens.append((writer, ident.epoch, str(ident.barrier_token)[:TOKEN_CHARS], env.sched.clock))
    return ctx, view, ident


def _run_write(env: Env, write: Write, entry: WalEntry, ctx: CommitContext, view: Any = None) -> None:
    write.entry = entry
    try:
        result = finish_write(ctx, entry, env.remove_files, view=view)
        write.outcome, write.by_peer = result.outcome, result.by_peer
    except WRITE_ERRORS as e:
        write.error = e


def _tag(
    ctx: CommitContext, writer: str, ephemeral: bool, epoch: int | None, opened: int, batch: int | None
) -> FileTag:
    return FileTag(writer, ephemeral, epoch, opened, batch, table=table_tag(ctx.identity.uuid if ctx.identity else ""))


@dataclass(frozen=True)
class Target:
    """Where and how a write lands: mode, row filter (replace-where), branch, snapshot properties."""

    mode: str = "append"
    row_filter: str | None = None
    branch: str | None = None
    properties: tuple[tuple[str, str], ...] = ()

    @classmethod
    def draw(cls, rng: random.Random, name: str, modes: tuple[str, ...], weights: tuple[float, ...]) -> Target:
        mode = rng.choices(modes, weights)[0]
        row_filter = rng.choice(["part = 0", "part = 1", "v >= 5", "v >= 8"]) if mode == "filter" else None
        branch = "audit" if rng.random() < 0.15 else None
        properties = (("job", rng.choice([name, "shared"])),) if rng.random() < 0.2 else ()
        return cls(mode, row_filter, branch, properties)


def anon_write(env: Env, name: str, target: Target) -> None:
    write = Write(name, f"anon:{name}")
    opened = _open(env, write, None)
    if opened is None:
        return
    ctx, view, ident = opened
    try:
        filter_ids = env.filter_ids(target.row_filter)  # planning binds the filter to the table's columns
    except InvalidOptionsError as e:
        write.error = e
        return
    tag = _tag(ctx, ident.writer, True, None, ident.opened, None)
    files = env.write_files(tag, write.key, env.rng.randint(0, 2), target.row_filter)
    entry = data_entry(
        ident,
        files,
        mode=target.mode,
        spec_id=view.spec_id,
        row_filter=target.row_filter,
        filter_ids=filter_ids,
        branch=target.branch,
        properties=dict(target.properties),
    )
    _run_write(env, write, entry, ctx)


def keys_of(f: Mapping[str, Any]) -> list[str]:
    """The row sets a model file holds: its own key, or (a compaction's output) its inputs' keys."""
    return [str(k) for k in f["keys"]] if "keys" in f else [str(f["key"])]


def compact_process(env: Env, name: str, delay: float, *, wait_for_deletes: bool = False) -> None:
    """``fencedlake compact``: read main's live files, rewrite 1-3 of one partition into one, put a compact entry.

    ``wait_for_deletes``: wait (longer) for main to have position delete files too (upserts'), to fold them.
    """
    env.sched.sleep(delay)
    write = Write(name, f"compact:{name}")
    opened = _open(env, write, None)
    if opened is None:
        return
    ctx, view, ident = opened
    parts: list[int] = []
    live: list[Mapping[str, Any]] = []
    for _ in range(40 if wait_for_deletes else 4):  # wait (a little) for main to have a file
        table = env.catalog.tables.get(NAME)
        if table is None or table.uuid != view.table_uuid:
            return
        with table.lock:  # planning: the files live on main now, and their deletes
            live = list(table.files)
            deletes = dict(table.deletes.get(MAIN_BRANCH, {}))
        parts = sorted({int(f["part"]) for f in live})
        if parts and (deletes or not wait_for_deletes):
            break
        env.sched.sleep(0.3)
    env.sched.checkpoint()
    if not parts:
        return
    part = env.feat.choice(parts)
    candidates = sorted((f for f in live if f["part"] == part), key=lambda f: str(f["p"]))
    inputs = env.feat.sample(candidates, min(len(candidates), env.feat.randint(1, 3)))
    tag = _tag(ctx, ident.writer, True, None, ident.opened, None)
    out_name = FileTag(tag.writer, True, None, tag.opened, None, 0, 0, table=tag.table).file_name()
    lo, hi = min(int(f["lo"]) for f in inputs), max(int(f["hi"]) for f in inputs)
    rows, folded = upserts.compacted(deletes, inputs)
    out = {
        **env.encode_file(out_name, f"{write.key}#0", part, lo, hi),
        "keys": sorted(k for f in inputs for k in keys_of(f)),
        **({"rows": rows} if rows else {}),
        "nan": any(f.get("nan") for f in inputs),
    }
    env.disk[str(out["p"])] = FileTag.parse(out_name) or tag
    paths = [encoded_path(f) for f in inputs]
    entry = data_entry(ident, [out], mode=WriteMode.COMPACT, spec_id=view.spec_id, inputs=paths, folded=folded)
    _run_write(env, write, entry, ctx)


def publish_process(env: Env, name: str, delay: float) -> None:
    """``fencedlake publish TABLE audit``: fast-forward main to the branch through the WAL."""
    env.sched.sleep(delay)
    write = Write(name, f"publish:{name}")
    ctx = _begin(env, write)
    if ctx is not None:
        _run_write(env, write, publish_entry("audit"), ctx)


def batch_job(
    env: Env, name: str, writer: str, batch: int, retries: int = 1, *, idempotent: bool | None = None
) -> None:
    """A ``writer.id`` job; a fenced attempt is retried with the same batch id by a new incarnation.

    Half the jobs (unless ``idempotent`` says) open as the sink opens a job with a batch id (no barrier,
    ordered by the tail it took); the others put a barrier, as a ``writer.id`` job without one does (the
    model's batch ids judge both).
    """
    if idempotent is None:
        idempotent = env.kinds.random() < 0.5
    for attempt in range(retries + 1):
        write = Write(f"{name}", f"{writer}:b{batch}:{name}:{attempt}")
        opened = _open(env, write, writer, idempotent=idempotent)
        if opened is None:
            return
        ctx, view, ident = opened
        for _ in range(env.tasks.randint(0, 40)):  # its tasks run (others go on): its barrier is pending meanwhile
            env.sched.checkpoint()
        files = env.write_files(_tag(ctx, writer, False, ident.epoch, ident.opened, batch), write.key, 1)
        _run_write(env, write, data_entry(ident, files, batch=batch, spec_id=view.spec_id), ctx)
        if not isinstance(write.error, FencedWriterError):
            return


def zombie_job(env: Env, name: str) -> None:
    """An incarnation of writer ``late`` that stalls between its data claim's LIST and its PUT (I4 in real time).

    A newer incarnation opens meanwhile (``newer_job``); writers that claimed past positions left holes below
    its barrier. The barrier seals them, so the stalled put cannot land below the barrier and be applied.
    """
    write = Write(name, f"late:b0:{name}")
    opened = _open(env, write, "late", idempotent=env.kinds.random() < 0.5)
    if opened is None:
        return
    ctx, view, ident = opened
    files = env.write_files(_tag(ctx, "late", False, ident.epoch, ident.opened, 0), write.key, 1)
    env.stall_after_list.add(name)
    _run_write(env, write, data_entry(ident, files, batch=0, spec_id=view.spec_id), ctx)


def newer_job(env: Env, name: str, delay: float) -> None:
    """The newer incarnation of writer ``late``: opens after the zombie listed for its data put, then writes batch 1.

    It waits for that moment in scheduler steps (at most a few hundred), not on the clock: every process's sleep
    moves the model's one clock, so a delay alone would often open the newer incarnation before the zombie.
    """
    env.sched.sleep(delay)
    _await(env, "stalled after list", "zombie")
    if env.lower_barrier:
        _await(env, "put by lower", True)
    batch_job(env, name, "late", 1, retries=0)


def lower_barrier_job(env: Env, name: str, steps: int) -> None:
    """A barrier of writer ``low`` put while the zombie stalls, whose open crawls between its put and its seal.

    ``steps`` scheduler steps after the zombie listed (the jumpers take positions meanwhile), it opens;
    the newer incarnation's barrier lands above it, and the holes below this one are this seal's to fill,
    but it is slow: the newer barrier must fill them itself before its open returns (PROTOCOL.md §7,
    ``Wal._seal_after_lower``), or the zombie's late put lands in one and is applied.
    """
    _await(env, "stalled after list", "zombie")
    # The jumpers' puts first: then the position the zombie is about to take may lie below.
    _await_until(env, lambda: env.extra.get("jumper puts", 0) >= 4)
    for _ in range(steps):
        env.sched.checkpoint()
    env.stall_after_put.add(name)
    batch_job(env, name, "low", 0, retries=0, idempotent=False)


def _jump(env: Env, name: str) -> None:
    """A zombie race's anonymous append; with a lower barrier, put once the zombie listed (so some land above the
    position it is about to take, and the lower barrier's claim above them leaves that position below it)."""
    if env.lower_barrier:  # and crawl after the put: no commit of theirs voids the zombie's position meanwhile
        _await(env, "stalled after list", "zombie")
        env.stall_after_put.add(name)
    anon_write(env, name, Target())


def _await(env: Env, what: str, value: object) -> None:
    """Wait (at most a few hundred scheduler steps, not on the clock) until ``env.extra[what]`` is ``value``."""
    _await_until(env, lambda: env.extra.get(what) == value)


def _await_until(env: Env, done: Callable[[], bool]) -> None:
    """Wait at most 400 scheduler steps (not on the clock) until ``done()``."""
    for _ in range(400):
        if done():
            return
        env.sched.checkpoint()


def stream_run(
    env: Env, name: str, writer: str, query: str, batches: int, delay: int, target: Target, skip: int = 0
) -> None:
    """A streaming run; ``skip`` > 0 models a lost checkpoint that jumps batch ids."""
    for _ in range(delay):
        env.sched.sleep(0.01)
    run = uuid.UUID(int=env.rng.getrandbits(128)).hex
    first = env.spark_log.get(writer, -1) + 1 + skip
    for b in range(first, first + batches):
        write = Write(name, f"{writer}:s{b}:{run[:6]}")
        ctx = _begin(env, write)
        if ctx is None:
            return
        try:
            view = ctx.load()
            current = view.state.writers.get(writer)
            epoch = stream_epoch(ctx, view.state, writer, run, query)
            env.opens.append((writer, epoch, f"run:{run}", env.sched.clock))  # its barrier names the run
        except FencedWriterError as e:
            write.error = e
            env.fences.append((name, writer, run, current.run if current else None))
            return
        except WRITE_ERRORS as e:
            write.error = e
            return
        files = env.write_files(_tag(ctx, writer, False, None, 0, b), write.key, 1, target.row_filter)
        identity = WriterIdentity(writer, False, epoch, view.state.upper, run)
        entry = data_entry(
            identity,
            files,
            batch=b,
            query=query,
            strict=True,
            mode=target.mode,
            spec_id=view.spec_id,
            branch=target.branch,
            properties=dict(target.properties),
        )
        registered = current is None or current.run != run  # as the sink: a fresh read after a registration
        _run_write(env, write, entry, ctx, None if registered else view)
        if isinstance(write.error, FencedWriterError):
            now = env.port().load_unchecked() if env.port_factory is None else None
            fencer = now.state.writers.get(writer) if now is not None else None
            env.fences.append((name, writer, run, fencer.run if fencer else None))
        if write.error is not None:
            return
        env.sched.checkpoint()  # Spark may die after the sink committed, before its commit log
        env.spark_log[writer] = max(env.spark_log.get(writer, -1), b)


def gc_process(env: Env, rounds: int) -> None:
    for _ in range(rounds):
        env.sched.sleep(env.rng.uniform(0.01, 0.2))
        try:
            ctx = env.ctx()
            action = env.rng.choice(["truncate", "truncate", "expire", "orphans"])
            if action == "truncate":
                truncate_wal(ctx)
            elif action == "expire":
                upper = ctx.load().state.upper
                expire_writes(ctx, env.rng.randint(0, upper))
            else:
                _collect_orphans(env, ctx)
        except (CorruptControlDataError, *WRITE_ERRORS):
            continue  # the table is being dropped, repaired, or a damaged object skipped: the next round


def _collect_orphans(env: Env, ctx: CommitContext) -> None:
    view = ctx.load()
    own = table_tag(view.table_uuid or "")
    table = next(t for t in env.catalog.created if t.uuid == view.table_uuid)
    with table.lock:
        referenced = set(table.ever_referenced)
    for path, tag in list(env.disk.items()):
        if tag.table == own and path not in referenced and collectable(tag, view.state):
            env.sched.checkpoint()
            env.disk.pop(path, None)
            env.deleted_by_gc.add(path)


def recover_process(env: Env) -> None:
    env.sched.sleep(env.rng.uniform(0.0, 0.5))
    try:
        recover(env.ctx())
    except (CorruptControlDataError, *WRITE_ERRORS):
        return


def other_tool(env: Env, ops: list[str]) -> None:
    """Ordinary catalog operations by another tool, each followed by the operator's way out if needed."""
    port = MemoryTablePort(env.catalog, checkpoint=env.sched.checkpoint)
    for op in ops:
        env.sched.sleep(env.rng.uniform(0.05, 0.4))
        if op in ("drop", "rename", "purge"):
            old = env.catalog.drop() if op != "rename" else env.catalog.tables.get(NAME)
            if op == "rename" and old is not None:
                env.catalog.rename(NAME, f"model.old{len(env.catalog.created)}")
            if op == "purge" and old is not None:
                for path in list(old.ever_referenced):  # the data files go; _fencedlake/ survives a purge
                    env.disk.pop(path, None)
                    env.purged.add(path)
            env.sched.checkpoint()
            env.catalog.create().spec_id = 0
        elif op in ("lose-state", "edit-state"):
            if op == "lose-state":
                port.lose_state()
            else:
                t = port.table
                with t.lock:
                    if len(t.states) > 2:
                        t.state, t.version = t.states[-2], t.version + 1  # restored from older metadata
            env.sched.sleep(env.rng.uniform(0.05, 0.2))
            _repair(env)
        elif op == "spec":
            port.change_spec(1)
            env.sched.sleep(env.rng.uniform(0.05, 0.5))
            port.change_spec(0)  # reverted: Iceberg reuses the old spec id
        elif op == "lose-object":
            _lose_and_skip(env)


def _repair(env: Env) -> None:
    for _ in range(5):
        try:
            ctx = env.ctx(check=False, keep=False)
            repair_state(ctx, ctx.identity.uuid, ctx.identity.root)  # type: ignore[union-attr]
            return
        except (TableStateError, CommitOutcomeUnknownError, TableChangedError):
            env.sched.sleep(0.05)


def _token_of(raw: bytes) -> str:
    """The owner token prefix of a WAL object, or "" if it is no JSON object."""
    try:
        return str(json.loads(raw).get("token", ""))[:TOKEN_CHARS]
    except (ValueError, AttributeError):
        return ""


def _lose_and_skip(env: Env) -> None:
    """The object at the upper is damaged while later ones wait; the operator moves it aside and skips it.

    Damage is atomic with reading the upper (an object that blocks the table keeps the upper at it): no
    committer can read a damaged entry, so none can reconcile past it.
    """
    original: bytes | None = None
    try:
        ctx = env.ctx(keep=False)  # the operator's CLI
        table = next(t for t in env.catalog.created if t.uuid == ctx.identity.uuid)  # type: ignore[union-attr]
        objects = ctx.wal.store.objects  # type: ignore[attr-defined]
        with table.lock:
            upper = table.state.upper
            if sum(1 for k in objects if (s := seq_of(k)) is not None and s >= upper) < 2:
                return
            original = objects.get(wal_key(upper))
            if original is None:  # a hole at the upper: nothing to damage
                return
            objects[wal_key(upper)] = b"{damaged"
            env.extra.setdefault("damaged", set()).add((upper, _token_of(original)))
        env.injected["damaged objects"] += 1
        env.sched.sleep(env.rng.uniform(0.05, 0.3))
        ctx.wal.store.delete(wal_key(upper))  # moved aside by the operator
    except (CorruptControlDataError, *WRITE_ERRORS):
        return
    try:
        skip_position(ctx, upper, "damaged object moved aside (model)")
    except SkipRefused:
        # "reconciled meanwhile; nothing to skip": if a committer had read the entry before the damage, its
        # record names it; the operator puts the entry back from a backup, so the position holds it again. A
        # restore is a copy: it replaces what a stale put may have left there since (a seal or a claim whose
        # writer read an older upper: inert below the upper, PROTOCOL.md §3 "Reads", §8.1).
        if original is not None and _token_of(original):
            try:
                named = recorded_token(ctx, ctx.load(), upper)
            except (CorruptControlDataError, *WRITE_ERRORS):
                return
            if named == _token_of(original):
                ctx.wal.store.objects[wal_key(upper)] = original  # type: ignore[attr-defined]
    except (CorruptControlDataError, *WRITE_ERRORS):
        return


# ---------------------------------------------------------------------------------------------- schedules


def build_schedule(env: Env) -> None:
    """Spawn a random mix of processes."""
    rng, sched, f = env.rng, env.sched, env.faults

    def spawn(name: str, fn: Callable[[], Any], *, crashable: bool = True) -> None:
        weight = 0.1 if f.slow and rng.random() < 0.3 else 1.0
        sched.spawn(name, fn, weight=weight, crash_p=f.crash_p if crashable else 0.0)

    feat = env.feat
    anon_modes = ("append", "overwrite", "dynamic", "filter")
    for i in range(rng.randint(0, 3)):
        target = Target("overwrite" if rng.random() < 0.15 else "append")
        if env.features:
            target = Target.draw(feat, f"anon{i}", anon_modes, (0.6, 0.1, 0.15, 0.15))
        spawn(f"anon{i}", lambda i=i, t=target: anon_write(env, f"anon{i}", t))
    for i in range(rng.randint(0, 2)):
        batch = rng.randint(0, 2)
        spawn(f"job{i}", lambda i=i, b=batch: batch_job(env, f"job{i}", "nightly", b))
    if env.kinds.random() < 0.3:  # a job re-run soon after: its open may list the tail an earlier open listed
        delay, batch = env.kinds.uniform(0.0, 0.2), env.kinds.randint(0, 2)
        spawn("rerun", lambda: (env.sched.sleep(delay), batch_job(env, "rerun", "nightly", batch)))
    for q in range(rng.randint(0, 2)):
        writer, query = f"stream{q}", f"query{q}"
        for r in range(rng.randint(1, 2)):
            target = Target("overwrite" if rng.random() < 0.1 else "append")
            if env.features:
                target = Target.draw(feat, writer, ("append", "overwrite", "dynamic"), (0.85, 0.1, 0.05))
            odd = rng.random()
            q_run = f"other-{query}" if odd < 0.05 else query  # another query reusing the writer.id
            skip = 3 if 0.05 <= odd < 0.1 else 0  # a lost checkpoint
            spawn(
                f"{writer}.run{r}",
                lambda w=writer, q=q_run, r=r, t=target, k=skip: stream_run(
                    env, f"{w}.run{r}", w, q, rng.randint(1, 3), r * 5, t, k
                ),
            )
    if env.zombie:
        spawn("zombie", lambda: zombie_job(env, "zombie"), crashable=False)
        delay = feat.uniform(0.05, 0.3)
        spawn("newer", lambda: newer_job(env, "newer", delay), crashable=False)
        for i in range(4):  # they take positions above the zombie's claim, so newer's barrier lands above it
            spawn(f"jumper{i}", lambda i=i: _jump(env, f"jumper{i}"))
        if env.lower_barrier:
            steps = env.tasks.randint(0, 10)
            spawn("lower", lambda: lower_barrier_job(env, "lower", steps), crashable=False)
    if rng.random() < 0.4:
        spawn("gc", lambda: gc_process(env, rng.randint(1, 6)))
    if rng.random() < 0.3:
        spawn("recover", lambda: recover_process(env))
    if env.catalog_ops and rng.random() < 0.35:
        choices = ["drop", "rename", "purge", "lose-state", "edit-state", "spec", "spec", "lose-object"]
        ops = [rng.choice(choices) for _ in range(rng.randint(1, 2))]
        spawn("tool", lambda: other_tool(env, ops), crashable=False)
    if env.features and feat.random() < 0.3:
        delay = feat.uniform(0.05, 0.6)
        spawn("publish", lambda: publish_process(env, "publish", delay))
    upserts.spawn(env, spawn)
    if env.features and feat.random() < 0.5:
        for c in range(feat.randint(1, 2)):
            delay = feat.uniform(0.1, 1.0)
            spawn(f"compact{c}", lambda c=c, d=delay: compact_process(env, f"compact{c}", d))
    from . import foreign  # other engines and a stream reader (tests/model/foreign.py)

    foreign.spawn(env, spawn)


class Backend(Protocol):
    """A real catalog under the model (see ``tests/model/sqlite_backend``)."""

    def install(self, env: Env, seed: int) -> None:
        """Set ``env.port_factory`` and ``env.encode_file`` for a fresh table."""

    def final_port(self, env: Env) -> Any:
        """A port without checkpoints or faults, for the final ``recover``."""

    def verify(self, env: Env) -> list[str]:
        """Differences between the real table and ``env.table`` (the mirror ``check`` reads)."""


@dataclass
class Final:
    """One table after the schedule: its final context and what the final recover did."""

    table: MemoryTable
    ctx: CommitContext
    pending_before: int
    commits: int


def _finish_tables(env: Env, backend: Backend | None) -> list[Final]:
    """Repair (if needed) and recover every table the schedule created, without faults."""
    out = []
    for table in env.catalog.created:
        if backend is not None:
            port = backend.final_port(env)
        else:
            names = [n for n, t in env.catalog.tables.items() if t is table]
            name = names[0] if names else f"model.dropped-{table.uuid}"
            if not names:
                env.catalog.tables[name] = table  # reachable again for the final checks only
            port = MemoryTablePort(env.catalog, name=name)
        raw = port.load()
        root = raw.state.root if not raw.fresh and raw.state.root else control_root(raw.location or "", table.uuid)
        ctx = CommitContext(
            port=port, wal=Wal(env.store_for(root), label="model", parallel_reads=False), max_group=1000
        )
        try:
            ctx.check(raw)
        except TableStateError:  # lost or edited by the tool and not repaired before the schedule ended
            repair_state(ctx, table.uuid, root)
        pending_before = len(ctx.wal.scan(ctx.load().state.upper))
        out.append(Final(table, ctx, pending_before, len(recover(ctx))))
    return out


def run_schedule(
    seed: int, *, rebase_on_conflict: bool = False, stats: Counter[str] | None = None, backend: Backend | None = None
) -> list[str]:
    """Run one schedule; return the invariant violations (empty if none).

    Each violation starts with the invariants it breaks (``"I1/I9: ..."``) or a rule of the model's
    own (``tests/model/mutation.RULES``). ``stats`` (if given) is updated with counts of the hard
    cases the schedule reached.
    """
    rng = random.Random(seed)
    faults = Faults(
        crash_p=rng.choice([0.0, 0.0, 0.01, 0.03]),
        ambiguous_put=rng.choice([0.0, 0.0, 0.1, 0.3]),
        unknown_commit=rng.choice([0.0, 0.0, 0.1, 0.3]),
        slow=rng.random() < 0.3,
    )
    env = Env(Scheduler(rng), rng, faults, rebase_on_conflict=rebase_on_conflict)
    env.feat = random.Random(seed * 1_000_003 + 7)
    env.features = env.feat.random() < 0.6
    spread = random.Random(seed * 1_000_033 + 11)  # its own stream: schedules without a pace stay as they were
    env.pace = spread.choice([None, None, 20.0, 60.0, 150.0])
    env.zombie = env.pace is not None and spread.random() < 0.3
    env.lower_barrier = env.zombie and random.Random(seed * 1_000_099 + 23).random() < 0.5  # a stream of its own
    env.upsert_draw = random.Random(seed * 1_000_037 + 13)  # its own stream too (``upserts.spawn``)
    env.tasks = random.Random(seed * 1_000_039 + 17)  # how long a writer.id job's tasks run (its own stream)
    env.kinds = random.Random(seed * 1_000_081 + 19)  # which jobs open with a batch id's open (its own stream)
    if backend is not None:
        backend.install(env, seed)
    build_schedule(env)
    try:
        with _watch_waits(env):
            env.sched.run()
        finals = _finish_tables(env, backend)
    except ScheduleStuck as e:
        return [f"I5: processes still ran when the step budget ran out: {e}"]
    except FencedLakeError as e:  # the final repair and recover, with every fault gone, must finish each table
        return [f"I5: the final recover raised {type(e).__name__}: {e}"]
    if stats is not None:
        stats.update(coverage(env, finals))
    violations = env.needless_waits[:3] + check(env, finals)
    return violations + (backend.verify(env) if backend is not None else [])


@contextlib.contextmanager
def _watch_waits(env: Env) -> Iterator[None]:
    """Check every sleep of a waiting writer against the WAL as it is (PROTOCOL.md §3, "one committer at a time").

    A waiter sleeps only behind an entry it read whose writer commits it (``protocol.waiting.Ahead``). The
    entry it waits behind must really be one: never a barrier or a seal skip, which nobody commits for its
    own sake — a writer waiting behind those waits out a patience for nothing. Checked while that position
    is still pending: a waiter whose view of the table is older than a commit that reconciled the position
    (it re-reads the table after a fraction of the cadence) may have kept the entry that was there before
    the position was truncated and a stale barrier put landed in it (PROTOCOL.md §3 "Reads", §7). A waiter
    that read a damaged object there waits behind it until an operator skips it: what it read counts.
    """
    original = Committer.sleep

    def sleep(self: Committer) -> Any:
        upper = self.view.state.upper
        blocker = self.waiting.ahead.blocker(upper)
        real = [t.state.upper for t in env.catalog.created if t.uuid == self.view.table_uuid]
        if blocker is not None and real and blocker < real[-1]:
            return original(self)  # reconciled already: the waiter's view is old, not held up by a barrier
        store = self.ctx.wal.store
        raw = store.objects.get(wal_key(blocker)) if blocker is not None and isinstance(store, MemoryStore) else None
        try:
            found = decode_entry(raw) if raw is not None else None
        except CorruptControlDataError:
            found = None
        read = self.cache.get(blocker) if blocker is not None else None
        if read is None or found is None or read.token != found.token:
            found = None  # it waits behind what it read there: a damaged object, since moved aside and skipped
        if found is not None and (found.kind is EntryKind.FENCE or found.writer == SEAL_WRITER):
            proc = env.sched.current()
            env.needless_waits.append(
                f"I5: {proc.name if proc else '?'} waited at WAL seq {self.seq} (upper {upper}) behind "
                f"position {blocker}, a {found.kind.value} nobody commits for its own sake"
            )
        return original(self)

    Committer.sleep = sleep  # type: ignore[method-assign]
    try:
        yield
    finally:
        Committer.sleep = original  # type: ignore[method-assign]


def _entries(store: MemoryStore) -> dict[int, WalEntry]:
    """The decodable WAL entries. A malformed object left behind is one a commit voided (inert, never read);
    one still pending is caught by the "pending after recover" check, one reconciled by its token."""
    out = {}
    for key, data in store.objects.items():
        seq = seq_of(key)
        if seq is not None:
            try:
                out[seq] = decode_entry(data, key)
            except CorruptControlDataError:
                continue
    return out


def coverage(env: Env, finals: list[Final]) -> Counter[str]:
    """Which hard cases this schedule reached."""
    c: Counter[str] = Counter()
    c["schedules"] += 1
    for final in finals:
        t = final.table
        voided: set[int] = set()
        for _, r in t.records:
            for i, (_, code) in enumerate(r.outcomes):
                c[f"outcome:{Outcome(code).name}"] += 1
                if code == Outcome.VOID.value:
                    voided.add(r.first + i)
        c["puts landed in a voided hole"] += len(voided & set(final.ctx.wal.scan(0)))
        c["multi-entry commits"] += sum(1 for _, r in t.records if len(r.outcomes) > 1)
        c["stale commit conflicts"] += sum(int(r.metrics.get("conf", 0)) for _, r in t.records)
    c["tables"] += len(finals)
    c["tables re-created"] += len(finals) - 1
    c["crashed processes"] += sum(p.crashed for p in env.sched.procs)
    c["files removed by gc"] += len(env.deleted_by_gc)
    c["fenced errors"] += sum(isinstance(w.error, FencedWriterError) for w in env.writes)
    c["state refused (lost/edited)"] += sum(isinstance(w.error, TableStateError) for w in env.writes)
    c["table changed under a write"] += sum(isinstance(w.error, TableChangedError) for w in env.writes)
    c["applied by a peer's commit"] += sum(w.by_peer and w.outcome is Outcome.APPLIED for w in env.writes)
    for w in env.writes:
        if w.entry is not None and w.outcome is Outcome.APPLIED:
            c[f"{w.entry.mode.value} applied"] += 1
            c["branch writes applied"] += w.entry.branch is not None
            c["writes with snapshot properties applied"] += bool(w.entry.properties)
    c["overwrites applied"] = c["overwrite applied"]
    c["compaction refused"] += sum(
        w.entry is not None
        and w.entry.mode is WriteMode.COMPACT
        and isinstance(w.error, WriteRejectedError)
        and w.error.fields.get("outcome") == Outcome.REFUSED.name
        for w in env.writes
    )
    c["fenced batch retried and applied"] += sum(
        1
        for a, b in itertools.pairwise(env.writes)
        if a.proc == b.proc and isinstance(a.error, FencedWriterError) and b.outcome is Outcome.APPLIED
    )
    for w in env.writes:  # batch jobs opened without a barrier (a batch id's open, PROTOCOL.md §7)
        if w.entry is not None and w.entry.tail is not None:
            c["idempotent job applied"] += w.outcome is Outcome.APPLIED
            c["idempotent job duplicate"] += w.outcome is Outcome.DUPLICATE
            c["idempotent job fenced"] += isinstance(w.error, FencedWriterError)
            c["idempotent zombie fenced"] += isinstance(w.error, FencedWriterError) and w.proc == "zombie"
    c["ambiguous puts injected"] += env.injected["put"]
    c["unknown commits injected"] += env.injected["commit"]
    c["damaged objects skipped"] += env.injected["damaged objects"]
    c.update(upserts.coverage(env, finals))
    from . import foreign

    c.update(foreign.coverage(env, [f.table for f in finals]))
    return c


# ---------------------------------------------------------------------------------------------- invariants


def check(env: Env, finals: list[Final]) -> list[str]:
    """Check I1-I9 on every table after a schedule and its final repair/recover."""
    v: list[str] = []
    for p in env.sched.procs:
        if p.error is not None:
            v.append(f"process {p.name} raised {type(p.error).__name__}: {p.error}")
    by_uuid = {f.table.uuid: f for f in finals}
    writes_of = {u: [w for w in env.writes if w.table_uuid == u] for u in by_uuid}
    key_table = {w.key: w.table_uuid for w in env.writes}
    for final in finals:
        v.extend(_check_table(env, final, writes_of[final.table.uuid], key_table))
    for w in env.writes:
        proc = next(p for p in env.sched.procs if p.name == w.proc)
        if isinstance(w.error, CommitOutcomeUnknownError) and not proc.crashed and not _identity_event(env):
            v.append(f"I5: {w.proc} ended with an unknown outcome without faults preventing it: {w.error}")
    v.extend(_check_false_fences(env, finals))
    from . import foreign

    v.extend(foreign.check(env, [f.table for f in finals]))
    missing = [
        p for f in finals for p in f.table.all_live() if str(p["p"]) not in env.disk and str(p["p"]) not in env.purged
    ]
    if missing:
        paths = [str(p["p"]) for p in missing]
        gc_deleted = [p for p in paths if p in env.deleted_by_gc]
        v.append(f"I6: files referenced by a live table were deleted: {paths[:5]} (by gc: {gc_deleted[:5]})")
    return v


def _identity_event(env: Env) -> bool:
    """True if another tool changed the table's identity or state (writes may end "unknown" then)."""
    return any(p.name.startswith("tool") for p in env.sched.procs)


def _check_table(env: Env, final: Final, writes: list[Write], key_table: Mapping[str, str | None]) -> list[str]:
    v: list[str] = []
    t, ctx = final.table, final.ctx
    name = f"table {t.uuid[:8]}"
    # I2: the committed upper never goes backwards.
    uppers = [s.upper for s in t.states]
    if any(b < a for a, b in itertools.pairwise(uppers)):
        v.append(f"I2: {name}: committed upper went backwards: {uppers}")
    # I3: commit records partition [0, upper): every position reconciled exactly once; nothing pinned.
    covered = Counter(s for _, r in t.records for s in range(r.first, r.last + 1))
    if sorted(covered) != list(range(t.state.upper)) or any(c != 1 for c in covered.values()):
        v.append(f"I3: {name}: positions reconciled != exactly once each: {sorted(covered.items())[:20]}")
    leftover = ctx.wal.scan(t.state.upper)
    if leftover:
        v.append(f"I3/I5: {name}: entries still pending after recover: {leftover}")
    # Entries that cannot join a commit started by another (a replace, a publish, another branch or other
    # snapshot properties) may each need a commit of their own.
    breaks = sum(
        1
        for w in writes
        if w.entry is not None and (w.entry.mode.replaces_rows or w.entry.branch or w.entry.properties)
    )
    bound = final.pending_before // 2 + breaks + 2
    if final.commits > bound:
        v.append(f"I5: {name}: recover needed {final.commits} commits for {final.pending_before} pending")
    store = ctx.wal.store
    entries = _entries(store)  # type: ignore[arg-type]
    outcome_at = _outcomes(t)
    # I6 (reuse): a position that was never truncated holds exactly the entry reconciled there. (A put into
    # a truncated position, or into a hole a commit voided, leaves an inert object there; the checks below
    # show nobody relied on it.)
    checkpoint = ctx.wal.latest_checkpoint()
    truncated_below = checkpoint[0] - 1 if checkpoint is not None else 0
    for seq, entry in entries.items():
        found = outcome_at.get(seq)
        inert_skip = entry.kind is EntryKind.SKIP  # lost a race with a committer that read the object before
        # A damaged object the operator moved aside, reconciled from a copy a committer had read before the
        # damage; a writer's put took the freed position meanwhile (its writer finds the record and re-appends);
        # or a put that landed in a hole a commit had voided.
        inert = inert_skip or (found is not None and (seq, found[0]) in env.extra.get("damaged", ()))
        inert = inert or (found is not None and found[1] is Outcome.VOID)  # a put into a voided hole
        if found is not None and found[0] != entry.token[:TOKEN_CHARS] and seq >= truncated_below and not inert:
            v.append(f"I6: {name}: WAL position {seq} below the upper holds another entry than the one reconciled")
    # I4: an epoch a writer used is a barrier of its own that was reconciled (never a reused position).
    for w in writes:
        if w.barrier is not None and w.barrier[0] < t.state.upper:
            found = outcome_at.get(w.barrier[0])
            damaged_and_skipped = found is not None and found[1] is Outcome.SKIPPED
            # A damaged barrier moved aside by the operator: its writer's entries are fenced, never applied.
            damaged = (w.barrier[0], w.barrier[1][:TOKEN_CHARS]) in env.extra.get("damaged", ())
            if (found is None or found[0] != w.barrier[1][:TOKEN_CHARS]) and not damaged_and_skipped and not damaged:
                v.append(f"I4: {w.proc} used epoch {w.barrier[0]}, but its barrier was never reconciled there")
    by_token = {w.entry.token[:TOKEN_CHARS]: w.entry for w in writes if w.entry is not None}
    by_token.update({e.token[:TOKEN_CHARS]: e for e in entries.values()})
    applied_tokens = Counter(tok for tok, o in outcome_at.values() if o is Outcome.APPLIED)
    for branch in (MAIN_BRANCH, *t.branches):
        dup_keys = {k: c for k, c in Counter(k for f in t.live(branch) for k in keys_of(f)).items() if c > 1}
        if dup_keys:
            v.append(f"I1: {name}: duplicated rows on branch {branch}: {dup_keys}")
    keys = {k for f in t.all_live() for k in keys_of(f)}
    if any(c > 1 for c in applied_tokens.values()):
        v.append(f"I1/I7: {name}: an entry was applied twice: {[k for k, c in applied_tokens.items() if c > 1]}")
    # I8: rows of a table come only from writes made to that table (never another table's replayed log).
    foreign = sorted({k for k in keys if key_table.get(k.rsplit("#", 1)[0]) != t.uuid and not k.startswith(OTHER)})
    if foreign:
        v.append(f"I8: {name}: rows written to another table (by identity) are in this one: {foreign[:4]}")
    applied_keys = {
        k
        for tok, o in outcome_at.values()
        if o is Outcome.APPLIED and (entry := by_token.get(tok)) is not None
        for f in entry.files
        for k in keys_of(f)
    }
    for key in sorted(k for k in keys - applied_keys if not k.startswith(OTHER)):
        v.append(f"model: {name}: {key} is in the table but no applied entry carries it")
    # I1/I9: every branch holds exactly what replaying the applied entries in WAL order gives (rows too).
    rows = upsert_oracle.RowOracle()
    v.extend(replay(t, outcome_at, by_token, rows))
    v.extend(rows.compare(t, outcome_at, by_token))
    for w in writes:
        if w.entry is None:
            continue
        if w.outcome is Outcome.DUPLICATE:
            v.extend(_check_duplicate(w, outcome_at, by_token))
        elif w.outcome is Outcome.APPLIED:
            v.extend(
                f"I1/I9: {w.proc} reported APPLIED for {k} but it was never applied"
                for f in w.entry.files
                for k in keys_of(f)
                if k not in applied_keys
            )
        paths = {str(f["p"]) for f in w.entry.files}
        if isinstance(w.error, (FencedWriterError, WriteRejectedError)) and paths & t.ever_referenced:
            v.append(f"I1/I4/I9: {w.proc} got {type(w.error).__name__} but its files were applied")
    v.extend(_check_fencing(outcome_at, by_token))
    v.extend(_check_fencing_in_time(env, final, outcome_at, by_token))
    v.extend(_check_open_order(env, final, outcome_at, by_token))
    if {str(f["p"]) for f in t.all_live()} - t.ever_referenced:
        v.append("model bug: live files not recorded as referenced")
    return v


def _check_fencing_in_time(
    env: Env, final: Final, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]
) -> list[str]:
    """I4 in real time: no entry of an older epoch put after a newer incarnation opened is applied.

    (The position-based check cannot see an entry put into a hole *below* the newer barrier after it
    opened: barriers seal the holes below them so that no such put can succeed.)
    """
    root = _root_of(env, final)
    opened: dict[str, list[tuple[int, float]]] = {}
    for writer, epoch, token, at in env.opens:
        found = outcome_at.get(epoch)
        if found is None or found[1] is not Outcome.BARRIER:
            continue
        barrier = by_token.get(found[0])
        # A batch open names its barrier's token; a streaming run its run id (an earlier table behind the same
        # name may have had a barrier at the same position: only the opener's own one counts).
        if token.startswith("run:"):
            ours = barrier is not None and barrier.writer == writer and barrier.run == token[4:]
        else:
            ours = found[0] == token
        if ours:
            opened.setdefault(writer, []).append((epoch, at))
    v = []
    for seq, (tok, outcome) in outcome_at.items():
        entry = by_token.get(tok)
        put = env.created_at.get((root, seq))
        if outcome is not Outcome.APPLIED or entry is None or entry.epoch is None or put is None or put[1] != tok:
            continue
        for epoch, at in opened.get(entry.writer, []):
            if epoch > entry.epoch and at < put[0]:
                v.append(
                    f"I4: {entry.writer} epoch {entry.epoch}'s entry put at t={put[0]:.3f} (seq {seq}) was applied "
                    f"although epoch {epoch} had opened at t={at:.3f}"
                )
    return v


def _check_open_order(
    env: Env, final: Final, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]
) -> list[str]:
    """I4 for batch jobs, by when their opens ran (``env.jobs``), whatever kind each open was (§7).

    Job B opened *after* job A when B's open started after A's returned. Then no entry of A is applied
    after B took effect (B's barrier reconciled, or B's entry decided other than FENCED) — unless both
    opened without a barrier and listed the same tail (not ordered: their batch ids decide); and if B put
    a barrier, no entry of A put after B's open returned is applied at all (the barrier sealed the holes
    below it) — unless B's barrier was damaged and the operator skipped it: it never took effect, so it
    fenced nothing (PROTOCOL.md §8.1). Writers (and runs) outside ``env.jobs`` are streams, checked by the
    other I4 checks.
    """
    root = _root_of(env, final)
    took_effect: dict[tuple[str, str], int] = {}
    for seq in sorted(outcome_at):
        tok, outcome = outcome_at[seq]
        entry = by_token.get(tok)
        if entry is None or entry.run is None or outcome is Outcome.FENCED:
            continue
        if entry.kind is EntryKind.FENCE or entry.tail is not None:
            took_effect.setdefault((entry.writer, entry.run), seq)
    v = []
    for seq, (tok, outcome) in sorted(outcome_at.items()):
        entry = by_token.get(tok)
        if outcome is not Outcome.APPLIED or entry is None or entry.run is None:
            continue
        mine = env.jobs.get((entry.writer, entry.run))
        if mine is None or mine[3] != final.table.uuid:
            continue
        put = env.created_at.get((root, seq))
        for (writer, run), (started, returned, tail, uuid_) in env.jobs.items():
            if writer != entry.writer or uuid_ != mine[3] or started <= mine[1]:
                continue  # another writer or table, or an open that began before this one's returned (not ordered)
            if tail is not None and tail == mine[2]:
                continue  # two opens without a barrier that listed the same tail
            effect = took_effect.get((writer, run))
            if effect is not None and effect < seq:
                v.append(
                    f"I4: {writer} run {entry.run[:8]} (opened by t={mine[1]:.3f}) applied at seq {seq} after run "
                    f"{run[:8]}, opened at t={started:.3f}, took effect at seq {effect}"
                )
            if (
                tail is None
                and put is not None
                and put[1] == tok
                and put[0] > returned
                and not _skipped(env, env.barriers.get((writer, run)), outcome_at)
            ):
                v.append(
                    f"I4: {writer} run {entry.run[:8]}'s entry put at t={put[0]:.3f} (seq {seq}) was applied although "
                    f"run {run[:8]} opened with a barrier after it, by t={returned:.3f}"
                )
    return v


def _skipped(env: Env, barrier: tuple[int, str] | None, outcome_at: Mapping[int, tuple[str, Outcome]]) -> bool:
    """True if ``barrier`` (seq, token prefix) was damaged, moved aside and skipped by the operator (never took
    effect: its writer is fenced, and it fences nobody, PROTOCOL.md §8.1)."""
    if barrier is None or barrier not in env.extra.get("damaged", ()):
        return False
    found = outcome_at.get(barrier[0])
    return found is not None and found[0] != barrier[1]


def _check_false_fences(env: Env, finals: list[Final]) -> list[str]:
    """I4, the other way round: a run is fenced only by a run that first registered after it did.

    A registration is a barrier reconciled where it lies (an object left by a put into a truncated
    position or a voided hole, whose writer put its barrier again higher, never registered anything).
    """
    v = []
    first: dict[tuple[str, str], int] = {}
    recorded = {id(f.ctx.wal.store): _outcomes(f.table) for f in finals}
    for store in env.stores.values():
        outcome_at = recorded.get(id(store), {})
        for seq, entry in sorted(_entries(store).items()):
            found = outcome_at.get(seq)
            if found is not None and found[0] != entry.token[:TOKEN_CHARS]:
                continue
            if entry.kind is EntryKind.FENCE and entry.strict and entry.run is not None:
                first.setdefault((entry.writer, entry.run), seq)
    for proc, writer, run, fencer in env.fences:
        own, other = first.get((writer, run)), first.get((writer, fencer or ""))
        if own is not None and other is not None and other < own:
            v.append(f"I4: {proc} (registered at seq {own}) was fenced by run {fencer} registered earlier ({other})")
    # A batch job is fenced only if another open of its writer had not returned before its own started, or if
    # the operator skipped its damaged barrier.
    by_uuid = {f.table.uuid: _outcomes(f.table) for f in finals}
    for w in env.writes:
        key = None if w.entry is None else (w.entry.writer, w.entry.run or "")
        mine = env.jobs.get(key) if key is not None else None
        if mine is None or not isinstance(w.error, FencedWriterError):
            continue
        if _skipped(env, env.barriers.get(key), by_uuid.get(mine[3], {})):  # type: ignore[arg-type]
            continue
        if not any(
            k != key and k[0] == key[0] and job[1] >= mine[0] and job[3] == mine[3] for k, job in env.jobs.items()
        ):
            v.append(f"I4: {w.proc} was fenced although every other open of {key[0]} returned before its own began")
    return v


def _root_of(env: Env, final: Final) -> str:
    """The control root of a final table's WAL store."""
    return next((root for root, store in env.stores.items() if store is final.ctx.wal.store), "")


def _outcomes(t: MemoryTable) -> dict[int, tuple[str, Outcome]]:
    """Position -> (token prefix, outcome) of every commit record of ``t``."""
    return {r.first + i: (tok, Outcome(code)) for _, r in t.records for i, (tok, code) in enumerate(r.outcomes)}


def _check_duplicate(
    w: Write, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]
) -> list[str]:
    """A duplicate is success only if the writer had applied that exact batch id before (I9)."""
    assert w.entry is not None
    mine = next((s for s, (tok, _) in outcome_at.items() if tok == w.entry.token[:TOKEN_CHARS]), None)
    for s, (tok, o) in outcome_at.items():
        e = by_token.get(tok)
        if (
            o is Outcome.APPLIED
            and e is not None
            and e.writer == w.entry.writer
            and e.batch is not None
            and e.batch == w.entry.batch
            and (mine is None or s < mine)
        ):
            return []
    return [f"I9: {w.proc} reported DUPLICATE for batch {w.entry.batch} but that batch id was never applied"]


def _check_fencing(outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]) -> list[str]:
    """I4: no entry of epoch e is applied after a newer epoch of its writer opened."""
    v = []
    opened: dict[str, int] = {}
    for seq in sorted(outcome_at):
        tok, outcome = outcome_at[seq]
        entry = by_token.get(tok)
        if entry is None or entry.ephemeral:
            continue
        if outcome is Outcome.BARRIER:
            opened[entry.writer] = seq
            continue
        if outcome is Outcome.APPLIED and entry.epoch is not None and opened.get(entry.writer, -1) > entry.epoch:
            v.append(
                f"I4: {entry.writer} epoch {entry.epoch} applied at seq {seq} after epoch {opened[entry.writer]} opened"
            )
    return v
