"""Schedules, writer programs and invariant checks for the model-based test.

One *schedule* = a fresh table, a random mix of simulated processes (anonymous
batch appends and overwrites, ``writer.id`` batch jobs with batch ids and
zombies, streaming runs that restart, replay and overlap, a gc process that
truncates the WAL, expires anonymous writes and removes orphan files, and a
helper that runs ``recover``), random faults (crashes at any request,
ambiguous puts, unknown catalog commit outcomes, slow processes with stale
views), a seeded interleaving, then a final ``recover`` and the invariants
I1-I7 (``check``). Every process runs the production code paths
(``fencing``, ``writes``, ``commit``, ``maintenance``).
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, FencedWriterError, WriteRejectedError
from pyspark_fenced_sink.ops.gc import collectable, expire_writes, truncate_wal
from pyspark_fenced_sink.protocol.commit import CommitContext, TableView, recover
from pyspark_fenced_sink.protocol.fencing import WriterIdentity, open_writer, stream_epoch
from pyspark_fenced_sink.protocol.filetag import FileTag
from pyspark_fenced_sink.protocol.layout import seq_of
from pyspark_fenced_sink.protocol.outcome import data_entry, finish_write
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.wal import TOKEN_CHARS, Wal, WalEntry, decode_entry
from pyspark_fenced_sink.store.memory import MemoryStore

from .memory_port import MemoryTable, MemoryTablePort
from .sched import Scheduler


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
    table: MemoryTable = field(default_factory=MemoryTable)
    store: MemoryStore = field(default_factory=MemoryStore)
    disk: dict[str, FileTag] = field(default_factory=dict)
    deleted_by_gc: set[str] = field(default_factory=set)
    writes: list[Write] = field(default_factory=list)
    spark_log: dict[str, int] = field(default_factory=dict)
    rebase_on_conflict: bool = False
    #: The catalog behind the processes: the in-memory register unless a backend
    #: (``tests/model/sqlite_backend``) installs a real catalog port.
    port_factory: Callable[[Env], Any] | None = None
    #: Encodes one data file for a WAL entry; the default is a bare model dict.
    encode_file: Callable[[str, str], dict[str, Any]] = lambda path, key: {"p": path, "key": key}
    injected: Counter[str] = field(default_factory=Counter)
    #: Streaming runs refused as fenced: (process, writer, run, the epoch that fenced it).
    fences: list[tuple[str, str, str, int]] = field(default_factory=list)
    _ambiguous_streak: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.store.before_op = lambda kind, key: self.sched.checkpoint()
        self.store.before_put = self._put_fault

    def _put_fault(self, key: str) -> str | None:
        proc = self.sched.current()
        if proc is None:
            return None
        # At most 2 faults per process and key: a create_resolved call (5 attempts) can always finish.
        streak = f"{proc.name}:{key}"
        if self.rng.random() >= self.faults.ambiguous_put or self._ambiguous_streak[streak] >= 2:
            return None
        self._ambiguous_streak[streak] += 1
        self.injected["put"] += 1
        return self.rng.choice(["lost-before", "lost-after"])

    def _commit_fault(self) -> str | None:
        if self.sched.current() is None or self.rng.random() >= self.faults.unknown_commit:
            return None
        self.injected["commit"] += 1
        return self.rng.choice(["unknown-before", "unknown-after"])

    def ctx(self) -> CommitContext:
        port = (
            self.port_factory(self)
            if self.port_factory is not None
            else MemoryTablePort(
                self.table,
                checkpoint=self.sched.checkpoint,
                fault=self._commit_fault,
                rebase_on_conflict=self.rebase_on_conflict,
            )
        )
        return CommitContext(
            port=port,
            wal=Wal(self.store, label="model", sleep=self.sched.sleep),
            max_wait_s=120.0,
            max_group=self.rng.choice([2, 5, 1000]),
            backoff_cap_s=1.0,
            sleep=self.sched.sleep,
            now=self.sched.now,
            rng=random.Random(self.rng.random()),
        )

    def write_files(self, tag: FileTag, key: str, count: int) -> list[dict[str, Any]]:
        """Executors write ``count`` files for logical row set ``key``."""
        files = []
        for i in range(count):
            name = FileTag(tag.writer, tag.ephemeral, tag.epoch, tag.opened, tag.batch, i, 0).file_name()
            encoded = self.encode_file(name, f"{key}#{i}")
            self.disk[str(encoded["p"])] = FileTag.parse(name) or tag
            files.append(encoded)
        return files

    def remove_files(self, paths: Any) -> None:
        for p in paths:
            self.disk.pop(p, None)


# ---------------------------------------------------------------------------------------------- programs


def _run_write(env: Env, write: Write, entry: WalEntry, ctx: CommitContext, view: TableView | None = None) -> None:
    write.entry = entry
    try:
        result = finish_write(ctx, entry, env.remove_files, view=view)
        write.outcome, write.by_peer = result.outcome, result.by_peer
    except (FencedWriterError, WriteRejectedError, CommitOutcomeUnknownError) as e:
        write.error = e


def anon_write(env: Env, name: str, mode: str) -> None:
    ctx = env.ctx()
    ident = open_writer(ctx, None)
    write = Write(name, f"anon:{name}")
    env.writes.append(write)
    files = env.write_files(FileTag(ident.writer, True, None, ident.opened, None), write.key, env.rng.randint(0, 2))
    _run_write(env, write, data_entry(ident, files, mode=mode), ctx)


def batch_job(env: Env, name: str, writer: str, batch: int) -> None:
    ctx = env.ctx()
    ident = open_writer(ctx, writer)
    write = Write(name, f"{writer}:b{batch}")
    env.writes.append(write)
    files = env.write_files(FileTag(writer, False, ident.epoch, ident.opened, batch), write.key, 1)
    _run_write(env, write, data_entry(ident, files, batch=batch), ctx)


def stream_run(
    env: Env, name: str, writer: str, query: str, batches: int, delay: int, mode: str, skip: int = 0
) -> None:
    """A streaming run; ``skip`` > 0 models a lost checkpoint that jumps batch ids."""
    for _ in range(delay):
        env.sched.sleep(0.01)
    ctx = env.ctx()
    run = uuid.UUID(int=env.rng.getrandbits(128)).hex
    first = env.spark_log.get(writer, -1) + 1 + skip
    for b in range(first, first + batches):
        write = Write(name, f"{writer}:s{b}")
        env.writes.append(write)
        files = env.write_files(FileTag(writer, False, None, 0, b), write.key, 1)
        view = ctx.port.load()
        try:
            epoch = stream_epoch(ctx, view.state, writer, run)
        except FencedWriterError as e:
            write.error = e
            env.fences.append((name, writer, run, view.state.writers[writer].epoch))
            return
        identity = WriterIdentity(writer, False, epoch, view.state.upper, run)
        entry = data_entry(identity, files, batch=b, query=query, strict=True, mode=mode)
        _run_write(env, write, entry, ctx, view)
        if write.error is not None:
            return
        env.sched.checkpoint()  # Spark may die after the sink committed, before its commit log
        env.spark_log[writer] = max(env.spark_log.get(writer, -1), b)


def gc_process(env: Env, rounds: int) -> None:
    ctx = env.ctx()
    for _ in range(rounds):
        env.sched.sleep(env.rng.uniform(0.01, 0.2))
        action = env.rng.choice(["truncate", "expire", "orphans"])
        if action == "truncate":
            truncate_wal(ctx)
        elif action == "expire":
            upper = ctx.port.load().state.upper
            expire_writes(ctx, env.rng.randint(0, upper))
        else:
            view = ctx.port.load()
            with env.table.lock:
                referenced = set(env.table.ever_referenced)
            for path, tag in list(env.disk.items()):
                if path not in referenced and collectable(tag, view.state):
                    env.sched.checkpoint()
                    env.disk.pop(path, None)
                    env.deleted_by_gc.add(path)


def recover_process(env: Env) -> None:
    env.sched.sleep(env.rng.uniform(0.0, 0.5))
    recover(env.ctx())


# ---------------------------------------------------------------------------------------------- schedules


def build_schedule(env: Env) -> None:
    """Spawn a random mix of processes."""
    rng, sched, f = env.rng, env.sched, env.faults

    def spawn(name: str, fn: Callable[[], Any], *, crashable: bool = True) -> None:
        weight = 0.1 if f.slow and rng.random() < 0.3 else 1.0
        sched.spawn(name, fn, weight=weight, crash_p=f.crash_p if crashable else 0.0)

    for i in range(rng.randint(0, 3)):
        mode = "overwrite" if rng.random() < 0.15 else "append"
        spawn(f"anon{i}", lambda i=i, mode=mode: anon_write(env, f"anon{i}", mode))
    for i in range(rng.randint(0, 2)):
        batch = rng.randint(0, 2)
        spawn(f"job{i}", lambda i=i, b=batch: batch_job(env, f"job{i}", "nightly", b))
    for q in range(rng.randint(0, 2)):
        writer, query = f"stream{q}", f"query{q}"
        for r in range(rng.randint(1, 2)):
            mode = "overwrite" if rng.random() < 0.1 else "append"
            odd = rng.random()
            q_run = f"other-{query}" if odd < 0.05 else query  # another query reusing the writer.id
            skip = 3 if 0.05 <= odd < 0.1 else 0  # a lost checkpoint
            spawn(
                f"{writer}.run{r}",
                lambda w=writer, q=q_run, r=r, m=mode, k=skip: stream_run(
                    env, f"{w}.run{r}", w, q, rng.randint(1, 3), r * 5, m, k
                ),
            )
    if rng.random() < 0.4:
        spawn("gc", lambda: gc_process(env, rng.randint(1, 4)))
    if rng.random() < 0.3:
        spawn("recover", lambda: recover_process(env))


class Backend(Protocol):
    """A real catalog under the model (see ``tests/model/sqlite_backend``)."""

    def install(self, env: Env, seed: int) -> None:
        """Set ``env.port_factory`` and ``env.encode_file`` for a fresh table."""

    def final_port(self, env: Env) -> Any:
        """A port without checkpoints or faults, for the final ``recover``."""

    def verify(self, env: Env) -> list[str]:
        """Differences between the real table and ``env.table`` (the mirror ``check`` reads)."""


def run_schedule(
    seed: int, *, rebase_on_conflict: bool = False, stats: Counter[str] | None = None, backend: Backend | None = None
) -> list[str]:
    """Run one schedule; return the invariant violations (empty if none).

    ``stats`` (if given) is updated with counts of the hard cases the schedule reached.
    """
    rng = random.Random(seed)
    faults = Faults(
        crash_p=rng.choice([0.0, 0.0, 0.01, 0.03]),
        ambiguous_put=rng.choice([0.0, 0.0, 0.1, 0.3]),
        unknown_commit=rng.choice([0.0, 0.0, 0.1, 0.3]),
        slow=rng.random() < 0.3,
    )
    env = Env(Scheduler(rng), rng, faults, rebase_on_conflict=rebase_on_conflict)
    if backend is not None:
        backend.install(env, seed)
    build_schedule(env)
    env.sched.run()
    port = backend.final_port(env) if backend is not None else MemoryTablePort(env.table)
    final_ctx = CommitContext(port=port, wal=Wal(env.store, label="model"), max_group=1000)
    pending_before = len(final_ctx.wal.scan(env.table.state.upper))
    commits = recover(final_ctx)
    if stats is not None:
        stats.update(coverage(env))
    violations = check(env, final_ctx, pending_before, len(commits))
    return violations + (backend.verify(env) if backend is not None else [])


def coverage(env: Env) -> Counter[str]:
    """Which hard cases this schedule reached."""
    c: Counter[str] = Counter()
    c["schedules"] += 1
    recorded = {}
    for _, r in env.table.records:
        for i, (tok, code) in enumerate(r.outcomes):
            recorded[r.first + i] = tok
            c[f"outcome:{Outcome(code).name}"] += 1
    for key, data in env.store.objects.items():
        seq = seq_of(key)
        if seq is not None and seq in recorded and decode_entry(data, key).token[:TOKEN_CHARS] != recorded[seq]:
            c["truncated position reused"] += 1
    c["crashed processes"] += sum(p.crashed for p in env.sched.procs)
    c["files removed by gc"] += len(env.deleted_by_gc)
    c["fenced errors"] += sum(isinstance(w.error, FencedWriterError) for w in env.writes)
    c["applied by a peer's commit"] += sum(w.by_peer and w.outcome is Outcome.APPLIED for w in env.writes)
    c["multi-entry commits"] += sum(1 for _, r in env.table.records if len(r.outcomes) > 1)
    c["overwrites applied"] += sum(
        1 for w in env.writes if w.entry is not None and w.entry.mode == "overwrite" and w.outcome is Outcome.APPLIED
    )
    c["stale commit conflicts"] += sum(int(r.metrics.get("conf", 0)) for _, r in env.table.records)
    c["ambiguous puts injected"] += env.injected["put"]
    c["unknown commits injected"] += env.injected["commit"]
    return c


# ---------------------------------------------------------------------------------------------- invariants


def _entries_by_token(env: Env) -> dict[str, WalEntry]:
    out = {}
    for w in env.writes:
        if w.entry is not None:
            out[w.entry.token[:TOKEN_CHARS]] = w.entry
    for key, data in env.store.objects.items():
        if seq_of(key) is not None:
            entry = decode_entry(data, key)
            out.setdefault(entry.token[:TOKEN_CHARS], entry)
    return out


def check(env: Env, ctx: CommitContext, pending_before: int, recover_commits: int) -> list[str]:
    """Check I1-I7 after a schedule and its final recover."""
    v: list[str] = []
    t = env.table
    procs = env.sched.procs
    for p in procs:
        if p.error is not None:
            v.append(f"process {p.name} raised {type(p.error).__name__}: {p.error}")
    # I2: the committed upper never goes backwards.
    uppers = [s.upper for s in t.states]
    if any(b < a for a, b in itertools.pairwise(uppers)):
        v.append(f"I2: committed upper went backwards: {uppers}")
    # I3: commit records partition [0, upper): every position reconciled exactly once; nothing pinned.
    covered = Counter(s for _, r in t.records for s in range(r.first, r.last + 1))
    if sorted(covered) != list(range(t.state.upper)) or any(c != 1 for c in covered.values()):
        v.append(f"I3: positions reconciled != exactly once each: {sorted(covered.items())[:20]}")
    leftover = ctx.wal.scan(t.state.upper)
    if leftover:
        v.append(f"I3/I5: entries still pending after recover: {leftover}")
    # I5: recover finishes pending work in a bounded number of catalog commits.
    overwrites = sum(1 for w in env.writes if w.entry is not None and w.entry.mode == "overwrite")
    bound = pending_before // 2 + overwrites + 2
    if recover_commits > bound:
        v.append(f"I5: recover needed {recover_commits} commits for {pending_before} pending (bound {bound})")
    by_token = _entries_by_token(env)
    outcome_at: dict[int, tuple[str, Outcome]] = {}
    for _, r in t.records:
        for i, (tok, code) in enumerate(r.outcomes):
            outcome_at[r.first + i] = (tok, Outcome(code))
    applied_tokens = Counter(tok for tok, o in outcome_at.values() if o is Outcome.APPLIED)
    # I1: no logical row set is in the table twice; no entry applied twice.
    keys = Counter(str(f["key"]) for f in t.files)
    dup_keys = {k: c for k, c in keys.items() if c > 1}
    if dup_keys:
        v.append(f"I1: duplicated rows in the table: {dup_keys}")
    if any(c > 1 for c in applied_tokens.values()):
        v.append(f"I1/I7: an entry was applied twice: {[k for k, c in applied_tokens.items() if c > 1]}")
    applied_seq_of_key: dict[str, int] = {}
    overwrite_seqs = []
    for s, (tok, o) in outcome_at.items():
        entry = by_token.get(tok)
        if o is Outcome.APPLIED and entry is not None:
            if entry.mode == "overwrite":
                overwrite_seqs.append(s)
            for f in entry.files:
                applied_seq_of_key[str(f["key"])] = s
    for key in keys:
        if key not in applied_seq_of_key:
            v.append(f"model: {key} is in the table but no applied entry carries it")
    for w in env.writes:
        proc = next(p for p in procs if p.name == w.proc)
        if isinstance(w.error, CommitOutcomeUnknownError) and not proc.crashed:
            v.append(f"I5: {w.proc} ended with an unknown outcome without faults preventing it: {w.error}")
        if w.entry is None:
            continue
        if w.outcome is Outcome.DUPLICATE:
            v.extend(_check_duplicate(w, outcome_at, by_token))
        elif w.outcome is Outcome.APPLIED:
            for f in w.entry.files:
                key = str(f["key"])
                applied_at = applied_seq_of_key.get(key)
                if applied_at is None:
                    v.append(f"I1: {w.proc} reported APPLIED for {key} but it was never applied")
                elif key not in keys and not any(s > applied_at for s in overwrite_seqs):
                    v.append(f"I1: {w.proc} reported APPLIED for {key} but its rows are not in the table")
        paths = {str(f["p"]) for f in w.entry.files}
        if isinstance(w.error, (FencedWriterError, WriteRejectedError)) and paths & t.ever_referenced:
            v.append(f"I1/I4: {w.proc} got {type(w.error).__name__} but its files were applied")
    # I6: every file a snapshot references still exists (no cleanup or gc removed one).
    missing = [p for p in t.ever_referenced if p not in env.disk]
    if missing:
        gc_deleted = [p for p in missing if p in env.deleted_by_gc]
        v.append(f"I6: files referenced by the table were deleted: {missing[:5]} (by gc: {gc_deleted[:5]})")
    v.extend(_check_fencing(outcome_at, by_token))
    v.extend(_check_false_fences(env, by_token))
    if {str(f["p"]) for f in t.files} - t.ever_referenced:
        v.append("model bug: live files not recorded as referenced")
    return v


def _check_false_fences(env: Env, by_token: Mapping[str, WalEntry]) -> list[str]:
    """I4, the other way round: a run is only fenced by an epoch claimed after its own claim."""
    v = []
    claims: dict[tuple[str, str], int] = {}
    for key, data in env.store.objects.items():
        seq = seq_of(key)
        entry = decode_entry(data, key) if seq is not None else None
        if entry is not None and entry.claims and entry.run is not None:
            claims[(entry.writer, entry.run)] = min(seq, claims.get((entry.writer, entry.run), seq))  # type: ignore[arg-type]
    for proc, writer, run, fencer_epoch in env.fences:
        own = claims.get((writer, run))
        if own is not None and fencer_epoch < own:
            v.append(f"I4: {proc} (claimed at seq {own}) was fenced by the older epoch {fencer_epoch}")
    return v


def _check_duplicate(
    w: Write, outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]
) -> list[str]:
    """A duplicate is success only if the writer had applied a batch at or above it, earlier."""
    assert w.entry is not None
    mine = next((s for s, (tok, _) in outcome_at.items() if tok == w.entry.token[:TOKEN_CHARS]), None)
    for s, (tok, o) in outcome_at.items():
        e = by_token.get(tok)
        if (
            o is Outcome.APPLIED
            and e is not None
            and e.writer == w.entry.writer
            and e.batch is not None
            and w.entry.batch is not None
            and e.batch >= w.entry.batch
            and (mine is None or s < mine)
        ):
            return []
    return [f"I1: {w.proc} reported DUPLICATE for batch {w.entry.batch} but no batch >= it was applied before"]


def _check_fencing(outcome_at: Mapping[int, tuple[str, Outcome]], by_token: Mapping[str, WalEntry]) -> list[str]:
    """I4: no entry of epoch e is applied after a newer epoch of its writer opened."""
    v = []
    opened: dict[str, int] = {}
    for seq in sorted(outcome_at):
        tok, outcome = outcome_at[seq]
        entry = by_token.get(tok)
        if entry is None or entry.ephemeral:
            continue
        if outcome is Outcome.BARRIER or (entry.claims and outcome is not Outcome.QUERY_MISMATCH):
            opened[entry.writer] = seq
            continue
        if outcome is Outcome.APPLIED and entry.epoch is not None and opened.get(entry.writer, -1) > entry.epoch:
            v.append(
                f"I4: {entry.writer} epoch {entry.epoch} applied at seq {seq} after epoch {opened[entry.writer]} opened"
            )
    return v
