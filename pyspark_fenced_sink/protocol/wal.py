"""The write-ahead log: entry codec, key layout, put-if-absent append (PROTOCOL.md §3; driver).

Every entry is one immutable object at ``wal/{seq:020d}.json`` under the
table's control prefix, created with put-if-absent at the first free position
after the tail the writer sees (``Wal.append``). A position is never
overwritten; a writer that loses a position to a peer moves on to the new
tail. The entry carries its writer's owner ``token``: a put answered "already
exists" is resolved by reading the object back and comparing tokens (our own
earlier attempt landed, or a peer's entry is there), never by guessing
(invariant I7).

Entry kinds:

* ``data``   — a write's files (or none) and how they change the table
  (:class:`WriteMode`: append, overwrite, dynamic partition overwrite with its
  partition set, replace-where with its row filter, compaction with its input
  files), the target branch and snapshot properties, with the writer identity,
  epoch, batch id and run;
* ``fence``  — a fence barrier: the writer's epoch becomes this entry's seq;
  older epochs' entries after it are never applied (I4). Batch writers put
  one when they open, streaming runs when they register, the CLI to fence;
* ``expire`` — ``gc``'s barrier: anonymous writes opened before
  ``expire_before`` are rejected from here on (I6);
* ``skip``   — an operator's no-op at a position whose object was lost or
  damaged (``fencedlake skip``), with the operator's reason;
* ``publish`` — fast-forward main to a branch (``fencedlake publish``).

Format compatibility: entries are written with format version 2 unless they use
a field added in version 3 (a write mode other than append/overwrite, a
partition set, a row filter, a branch, snapshot properties, a publish entry,
compaction inputs), so
a fleet that upgrades writer by writer keeps working for plain appends; a
version-2 reader refuses a version-3 entry with an upgrade hint instead of
misreading it (e.g. applying a branch write to main). Version 3 readers read both.

Truncation keeps the object at ``upper - 1``, so a LIST from any upper a
writer ever read finds a tail at or above the current upper minus one and no
put can land in a truncated position (PROTOCOL.md §8). ``gc`` leaves a
checkpoint of the committed state before truncating
(``checkpoints/{upper:020d}.json``), from which ``fencedlake repair-state``
rebuilds a lost state property together with the WAL and the commit records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, CorruptControlDataError, StoreError
from pyspark_fenced_sink.protocol.codec import MALFORMED, dumps, loads_versioned
from pyspark_fenced_sink.protocol.layout import (
    CHECKPOINT_PREFIX,
    WAL_PREFIX,
    checkpoint_key,
    checkpoint_upper,
    run_key,
    seq_of,
    wal_key,
)
from pyspark_fenced_sink.store.base import Claim, ObjectStore, claim_key, create_resolved

__all__ = [
    "FILE_PARTITION_KEY",
    "FILE_PATH_KEY",
    "FILE_SPEC_KEY",
    "FORMAT_VERSION",
    "MAIN_BRANCH",
    "TOKEN_CHARS",
    "EntryKind",
    "Wal",
    "WalEntry",
    "WriteMode",
    "decode_entry",
    "encode_entry",
    "encoded_partition",
    "encoded_path",
    "encoded_spec_id",
    "partitions_of",
]

FORMAT_VERSION = 3
#: Entries that use nothing of version 3 are written as version 2 (readable by older fencedlake).
_BASE_VERSION = 2
TOKEN_CHARS = 12  # the prefix of an owner token recorded in snapshot summaries
#: The keys of an encoded data file that the protocol itself reads; the rest of the
#: encoding belongs to the Iceberg adapter (``iceberg.datafiles``).
FILE_PATH_KEY = "p"
FILE_SPEC_KEY = "s"
FILE_PARTITION_KEY = "pt"
#: The branch an entry without ``branch`` writes to.
MAIN_BRANCH = "main"


class EntryKind(str, Enum):
    """What a WAL entry does when it is reconciled."""

    DATA = "data"
    FENCE = "fence"
    EXPIRE = "expire"
    SKIP = "skip"
    PUBLISH = "publish"


class WriteMode(str, Enum):
    """How an applied entry changes its branch (PROTOCOL.md §5.1).

    The catalog side maps each mode to one snapshot producer
    (``iceberg.table_port._PRODUCERS``); what a mode removes is decided, at apply
    time, by ``protocol.replace.removals``. Reconciliation starts a new commit
    before an applied entry that replaces rows (:attr:`replaces_rows`), and only
    appends to the same branch with the same snapshot properties join a commit
    after its first applied entry, if that entry takes them (:attr:`takes_appends`).

    * ``APPEND`` adds files;
    * ``OVERWRITE`` removes every live file of the branch (static overwrite);
    * ``DYNAMIC`` removes the live files of the partitions in the entry's partition set;
    * ``REPLACE_WHERE`` removes the live files whose rows all match the entry's row filter,
      and is refused if a live file has rows on both sides of it;
    * ``PUBLISH`` fast-forwards main to the entry's branch (``publish`` entries);
    * ``COMPACT`` replaces the entry's input files (``WalEntry.inputs``) by its files, rows unchanged
      (a ``replace`` snapshot), and is refused unless every input is still live; it commits alone.
    """

    APPEND = "append"
    OVERWRITE = "overwrite"
    DYNAMIC = "dynamic"
    REPLACE_WHERE = "filter"
    PUBLISH = "publish"
    COMPACT = "compact"

    @property
    def replaces_rows(self) -> bool:
        """True if applying the entry can remove rows that were live before it."""
        return self is not WriteMode.APPEND

    @property
    def takes_appends(self) -> bool:
        """True if appends after an entry of this mode may join its catalog commit."""
        return self not in (WriteMode.PUBLISH, WriteMode.COMPACT)


@dataclass(frozen=True)
class WalEntry:
    """One WAL entry.

    Attributes:
        kind: data, fence, expire, skip or publish.
        token: The owner token (unique per write attempt); resolves ambiguous puts.
        writer: The writer id.
        ephemeral: True for a batch job's anonymous writer (no epoch, no state kept).
        epoch: The writer's epoch (the seq of the barrier that opened it); None for
            anonymous writers and barriers.
        run: The incarnation (streaming run id or batch write id) that wrote it.
        query: The streaming query id (stable across restarts), if any.
        batch: ``writer.batch-id`` or the streaming batch id, if any.
        strict: Batch ids must follow without gaps (streaming).
        mode: How the files change the table (:class:`WriteMode`).
        files: Encoded DataFiles (``datafiles.encode_data_file``).
        opened: The committed upper when the writer opened (``gc`` expiry of anonymous writes).
        expire_before: For ``expire`` entries: reject anonymous writes opened before this upper.
        created_ms: Wall clock when the entry was built (informational).
        rows: Rows in ``files`` (informational).
        spec_id: The partition spec the files were written with.
        reason: For ``skip`` entries: the operator's reason.
        untuned: The write ran at Spark's untuned Arrow setting (informational; commit metrics count it).
        partitions: ``DYNAMIC``: the partition set (encoded partition tuples under ``spec_id``), sorted.
        row_filter: ``REPLACE_WHERE``: the row filter (an Iceberg expression, as the user wrote it).
        branch: The branch the entry writes to (``publish``: the branch main is fast-forwarded to);
            None is main.
        properties: Snapshot properties for the commit that applies the entry, as sorted (key, value) pairs.
        inputs: ``COMPACT``: the paths of the data files the entry's files replace, sorted.
    """

    kind: EntryKind
    token: str
    writer: str
    ephemeral: bool = False
    epoch: int | None = None
    run: str | None = None
    query: str | None = None
    batch: int | None = None
    strict: bool = False
    mode: WriteMode = WriteMode.APPEND
    files: tuple[Mapping[str, Any], ...] = ()
    opened: int = 0
    expire_before: int | None = None
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    rows: int = 0
    spec_id: int | None = None
    reason: str | None = None
    untuned: bool = False
    partitions: tuple[tuple[str | None, ...], ...] = ()
    row_filter: str | None = None
    branch: str | None = None
    properties: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Callers may pass the enums' string values (``mode="overwrite"``); store the enums.
        object.__setattr__(self, "kind", EntryKind(self.kind))
        object.__setattr__(self, "mode", WriteMode(self.mode))
        if self.branch == MAIN_BRANCH:
            object.__setattr__(self, "branch", None)

    @property
    def target(self) -> str:
        """The branch the entry changes: ``branch`` or main (a publish changes main)."""
        return MAIN_BRANCH if self.kind is EntryKind.PUBLISH else (self.branch or MAIN_BRANCH)

    def with_token(self, token: str) -> WalEntry:
        """A copy with another owner token."""
        return replace(self, token=token)


def _uses_version_3(entry: WalEntry) -> bool:
    """True if the entry carries anything a format-2 reader would misread or drop."""
    return bool(
        entry.kind is EntryKind.PUBLISH
        or entry.mode not in (WriteMode.APPEND, WriteMode.OVERWRITE)
        or entry.partitions
        or entry.row_filter is not None
        or entry.branch is not None
        or entry.properties
        or entry.inputs
    )


def encode_entry(entry: WalEntry) -> bytes:
    """Serialize an entry (compact JSON, format-versioned: 2 unless it needs 3)."""
    version = FORMAT_VERSION if _uses_version_3(entry) else _BASE_VERSION
    body: dict[str, Any] = {"v": version, "kind": entry.kind.value, "token": entry.token, "writer": entry.writer}
    optional = {
        "ephemeral": entry.ephemeral or None,
        "epoch": entry.epoch,
        "run": entry.run,
        "query": entry.query,
        "batch": entry.batch,
        "strict": entry.strict or None,
        "mode": None if entry.mode is WriteMode.APPEND else entry.mode.value,
        "files": list(entry.files) or None,
        "opened": entry.opened or None,
        "expire_before": entry.expire_before,
        "created_ms": entry.created_ms,
        "rows": entry.rows or None,
        "spec_id": entry.spec_id,
        "reason": entry.reason,
        "untuned": entry.untuned or None,
        "parts": [list(p) for p in entry.partitions] or None,
        "filter": entry.row_filter,
        "branch": entry.branch,
        "props": dict(entry.properties) or None,
        "inputs": list(entry.inputs) or None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return dumps(body).encode()


def decode_entry(data: bytes, key: str = "?") -> WalEntry:
    """Parse an entry; raise CorruptControlDataError naming ``key`` if it is not one."""
    try:
        body = loads_versioned(data, (_BASE_VERSION, FORMAT_VERSION), f"WAL object {key}")
        mode = WriteMode(body.get("mode", WriteMode.APPEND.value))
        return WalEntry(
            kind=EntryKind(body["kind"]),
            token=str(body["token"]),
            writer=str(body["writer"]),
            ephemeral=bool(body.get("ephemeral", False)),
            epoch=_opt_int(body.get("epoch")),
            run=body.get("run"),
            query=body.get("query"),
            batch=_opt_int(body.get("batch")),
            strict=bool(body.get("strict", False)),
            mode=mode,
            files=_file_tuple(body.get("files")),
            opened=int(body.get("opened", 0)),
            expire_before=_opt_int(body.get("expire_before")),
            created_ms=int(body.get("created_ms", 0)),
            rows=int(body.get("rows", 0)),
            spec_id=_opt_int(body.get("spec_id")),
            reason=None if body.get("reason") is None else str(body["reason"]),
            untuned=bool(body.get("untuned", False)),
            partitions=_partition_tuple(body.get("parts")),
            row_filter=None if body.get("filter") is None else str(body["filter"]),
            branch=None if body.get("branch") is None else str(body["branch"]),
            properties=_property_pairs(body.get("props")),
            inputs=_path_tuple(body.get("inputs")),
        )
    except MALFORMED as e:
        seq = seq_of(key)
        raise CorruptControlDataError(
            f"WAL object {key} is not a valid fencedlake entry ({e}); every commit on the table waits behind it. "
            f"Move the object out of the WAL (keep it for inspection), then run "
            f"`fencedlake skip TABLE {'SEQ' if seq is None else seq} --reason '...'` to record the position as "
            "skipped; its writer, if alive, puts its entry again"
        ) from e


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _file_tuple(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The ``files`` field: a JSON list of objects (encoded DataFiles), or absent; anything else is corrupt."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"'files' must be a list of encoded data files, found {json.dumps(value)[:80]}")
    return tuple(value)


def _partition_tuple(value: Any) -> tuple[tuple[str | None, ...], ...]:
    """The ``parts`` field: a JSON list of lists of encoded partition values (strings or null), or absent."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(p, list) and all(v is None or isinstance(v, str) for v in p) for p in value
    ):
        raise ValueError(f"'parts' must be a list of encoded partition tuples, found {json.dumps(value)[:80]}")
    return tuple(tuple(p) for p in value)


def _path_tuple(value: Any) -> tuple[str, ...]:
    """The ``inputs`` field: a JSON list of file paths, or absent."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'inputs' must be a list of file paths, found {json.dumps(value)[:80]}")
    return tuple(value)


def _property_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """The ``props`` field: a JSON object of strings, or absent."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"'props' must be an object of strings, found {json.dumps(value)[:80]}")
    return tuple(sorted(value.items()))


def _entry_token(raw: bytes) -> str:
    """The owner token of an encoded entry; "" for a damaged object (never ours: the caller moves on)."""
    try:
        return decode_entry(raw).token
    except CorruptControlDataError:
        return ""


def _token_of(raw: bytes) -> str:
    return str(json.loads(raw).get("token"))


def encoded_path(encoded: Mapping[str, Any]) -> str:
    """The file path of an encoded data file (without decoding it)."""
    return str(encoded[FILE_PATH_KEY])


def encoded_spec_id(encoded: Mapping[str, Any]) -> int:
    """The partition spec id of an encoded data file (without decoding it)."""
    return int(encoded[FILE_SPEC_KEY])


def encoded_partition(encoded: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The encoded partition values of an encoded data file (one per partition field; () unpartitioned)."""
    return tuple(encoded.get(FILE_PARTITION_KEY) or ())


def partitions_of(files: Iterable[Mapping[str, Any]]) -> tuple[tuple[str | None, ...], ...]:
    """The sorted set of encoded partition tuples of ``files`` (a dynamic overwrite's partition set)."""
    found = {encoded_partition(f) for f in files}
    return tuple(sorted(found, key=lambda p: tuple((v is None, v or "") for v in p)))


class Wal:
    """Reads and appends WAL entries in one control store."""

    put_attempts = 5

    def __init__(self, store: ObjectStore, *, label: str = "", sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.label = label or repr(store)
        self.sleep = sleep

    def scan(self, start: int) -> list[int]:
        """Positions present at or after ``start``, sorted (one LIST request)."""
        after = wal_key(start - 1) if start > 0 else ""
        seqs = (seq_of(k) for k in self.store.list(WAL_PREFIX, after))
        return sorted(s for s in seqs if s is not None and s >= start)

    def occupied(self, seq: int) -> bool:
        """True if an object (readable or not) is at position ``seq``."""
        return self.store.get(wal_key(seq)) is not None

    def read(self, seq: int) -> WalEntry | None:
        """The entry at ``seq``, or None if the position is empty."""
        data = self.store.get(wal_key(seq))
        return None if data is None else decode_entry(data, f"{self.label}/{wal_key(seq)}")

    def append(self, entry: WalEntry, start: int) -> int:
        """Put ``entry`` at the first free position after the tail seen from ``start``; returns its seq.

        See :meth:`append_claim`; a caller that cannot handle a vanished position
        itself must not use this (barriers use ``fencing.put_barrier``).
        """
        return self.append_claim(entry, start)[0]

    def append_claim(self, entry: WalEntry, start: int) -> tuple[int, bool]:
        """Put ``entry`` at the first free position after the tail seen from ``start``.

        Returns (seq, vanished). ``vanished`` is True when the position answered
        "exists" and the object was gone before it could be read: it was
        reconciled and truncated meanwhile, and whether it was our own earlier
        attempt (a lost response) only the commit record of ``seq`` can tell —
        the caller looks it up (PROTOCOL.md §6). The key is never created again.

        Raises StoreError if nothing can have been written, or
        CommitOutcomeUnknownError if a put may have landed but could not be confirmed.
        """
        data = encode_entry(entry)
        seqs = self.scan(start)
        seq = seqs[-1] + 1 if seqs else start
        while True:
            claim = self._claim(seq, data, entry.token)
            if claim is not Claim.THEIRS:
                return seq, claim is Claim.VANISHED
            seqs = self.scan(seq + 1)
            seq = seqs[-1] + 1 if seqs else seq + 1

    def truncate(self, upper: int) -> int:
        """Delete positions below ``upper - 1`` (``upper``: the committed upper); returns how many.

        The object at ``upper - 1`` is kept: a writer listing from any upper it
        read earlier then finds a tail at or above it, so no put (data entry or
        barrier) can land in a truncated position.
        """
        deleted = 0
        for key in self.store.list(WAL_PREFIX):
            seq = seq_of(key)
            if seq is None:
                continue
            if seq >= upper - 1:
                break
            self.store.delete(key)
            deleted += 1
        return deleted

    def truncatable(self, upper: int) -> int:
        """How many positions :meth:`truncate` would delete now (``gc --dry-run``)."""
        return sum(1 for k in self.store.list(WAL_PREFIX) if (s := seq_of(k)) is not None and s < upper - 1)

    def put_checkpoint(self, upper: int, state_text: str) -> None:
        """Keep the committed state at ``upper`` (before truncating below it); an existing one is kept.

        The state at an upper is unique (reconciliation is deterministic), so an existing checkpoint
        there holds the same text; an ambiguous put is retried and resolved by comparing the text.
        """
        create_resolved(
            self.store, checkpoint_key(upper), state_text.encode(), state_text, bytes.decode, sleep=self.sleep
        )

    def latest_checkpoint(self, at_most: int = 2**63) -> tuple[int, str] | None:
        """(upper, state text) of the newest checkpoint at or below ``at_most``, or None (one LIST, one GET)."""
        found = [u for k in self.store.list(CHECKPOINT_PREFIX) if (u := checkpoint_upper(k)) is not None]
        for upper in sorted((u for u in found if u <= at_most), reverse=True):
            data = self.store.get(checkpoint_key(upper))
            if data is not None:
                return upper, data.decode()
        return None

    def remove(self, seq: int) -> None:
        """Delete the object at ``seq`` (only ever below the committed upper)."""
        self.store.delete(wal_key(seq))

    def put_skip(self, seq: int, entry: WalEntry) -> bool:
        """Put an operator's ``skip`` entry at exactly ``seq`` (put-if-absent); False if the position is taken."""
        return self._claim(seq, encode_entry(entry), entry.token) is Claim.OURS

    def register_run(self, writer_id: str, run: str, epoch: int) -> int:
        """Record that streaming run ``run`` of ``writer_id`` registered with the barrier at ``epoch``.

        Put-if-absent: a registration that already exists (this run's earlier
        attempt) wins. Returns the epoch the registry holds for the run.
        """
        key = run_key(writer_id, run)
        body = {"writer": writer_id, "run": run, "epoch": epoch, "opened_ms": int(time.time() * 1000)}
        token = f"{run}@{epoch}"
        if create_resolved(
            self.store, key, dumps({**body, "token": token}).encode(), token, _token_of, sleep=self.sleep
        ):
            return epoch
        recorded = self.run_epoch(writer_id, run)
        return epoch if recorded is None else recorded

    def run_epoch(self, writer_id: str, run: str) -> int | None:
        """The epoch streaming run ``run`` registered with, or None if it never registered."""
        key = run_key(writer_id, run)
        data = self.store.get(key)
        if data is None:
            return None
        try:
            return int(json.loads(data)["epoch"])
        except MALFORMED as e:
            raise CorruptControlDataError(f"run registry object {self.label}/{key} is damaged ({e})") from e

    def _claim(self, seq: int, data: bytes, token: str) -> Claim:
        """Whose the object at ``seq`` is after a put-if-absent of ``data`` (I7)."""
        key = wal_key(seq)
        try:
            return claim_key(self.store, key, data, token, _entry_token, attempts=self.put_attempts, sleep=self.sleep)
        except StoreError as e:
            if e.ambiguous:
                raise CommitOutcomeUnknownError(
                    f"WAL put at {self.label}/{key} may have landed but could not be confirmed ({e}); "
                    "the next commit on the table resolves it",
                    seq=seq,
                ) from e
            raise
