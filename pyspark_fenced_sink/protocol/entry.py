"""WAL entries: their kinds, write modes and the JSON codec (PROTOCOL.md §3, §5.1, §5.2; driver).

Kinds: ``data`` (a write's files and how they change the table: :class:`WriteMode`),
``fence`` (a barrier: the writer's epoch), ``expire`` (gc's barrier), ``skip`` (an
operator's no-op at a lost position) and ``publish``. An ``upsert`` data entry
also carries its key and order columns (``protocol.upsert.UpsertSpec``) and its
delete-key files (PROTOCOL.md §5.5). Entries that use no version-3 field are
written as version 2, so a fleet upgrading writer by writer keeps working; a
version-2 reader refuses a version-3 entry with an upgrade hint; upsert entries
(and compactions that fold delete files) are version 4, refused by readers of 2
and 3 the same way.
Decoding validates every field of every kind (:func:`decode_entry`, §5.4, §8.1).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as attribute
from enum import Enum
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.codec import (
    MALFORMED,
    dumps,
    field,
    is_bool,
    is_count,
    is_str,
    is_text,
    loads_versioned,
    name_ids,
    partition_lists,
    str_pairs,
    text_list,
)
from pyspark_fenced_sink.protocol.file_refs import file_list, key_file_refs, partitions_of
from pyspark_fenced_sink.protocol.layout import seq_of
from pyspark_fenced_sink.protocol.upsert import UpsertSpec

__all__ = [
    "FORMAT_VERSION",
    "MAIN_BRANCH",
    "TOKEN_CHARS",
    "EntryKind",
    "WalEntry",
    "WriteMode",
    "decode_entry",
    "encode_entry",
]


FORMAT_VERSION = 5
#: Entries that use nothing of version 3 are written as version 2 (readable by older fencedlake).
_BASE_VERSION = 2
#: Entries of version 3: write modes, branches, properties, publish, compaction (not upserts).
_MODES_VERSION = 3
#: Entries of version 4: upserts (and compactions that fold delete files).
_UPSERT_VERSION = 4
TOKEN_CHARS = 12  # the prefix of an owner token recorded in snapshot summaries
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
    (``iceberg.commit.producers.PRODUCERS``); what a mode removes is decided, at apply
    time, by ``protocol.replace.removals``. Reconciliation starts a new commit
    before an applied entry that replaces rows (:attr:`replaces_rows`), and only
    appends to the same branch with the same snapshot properties join a commit
    after its first applied entry, if that entry takes them (:attr:`takes_appends`:
    only an append does, so an entry that replaces rows always commits alone);
    upserts are the one exception: upserts to the same branch with the same snapshot
    properties join a commit that starts with an upsert (:attr:`takes_upserts`).

    * ``APPEND`` adds files;
    * ``OVERWRITE`` removes every live file of the branch (static overwrite);
    * ``DYNAMIC`` removes the live files of the partitions in the entry's partition set;
    * ``REPLACE_WHERE`` removes the live files whose rows all match the entry's row filter,
      and is refused if a live file has rows on both sides of it;
    * ``PUBLISH`` fast-forwards main to the entry's branch (``publish`` entries);
    * ``COMPACT`` replaces the entry's input files (``WalEntry.inputs``) by its files, rows unchanged
      (a ``replace`` snapshot), and is refused unless every input is still live; it commits alone;
    * ``UPSERT`` adds its files and deletes, by position, the rows that lose per key
      (``protocol.upsert``); only other upserts join its commit, in WAL order (PROTOCOL.md §5.5).
    """

    APPEND = "append"
    OVERWRITE = "overwrite"
    DYNAMIC = "dynamic"
    REPLACE_WHERE = "filter"
    PUBLISH = "publish"
    COMPACT = "compact"
    UPSERT = "upsert"

    @property
    def replaces_rows(self) -> bool:
        """True if applying the entry can remove rows that were live before it."""
        return self is not WriteMode.APPEND

    @property
    def takes_appends(self) -> bool:
        """True if appends after an entry of this mode may join its catalog commit.

        Only appends do: a commit that replaces rows is an ``overwrite`` (or ``replace``) snapshot, which
        stream readers may skip (``streaming-skip-overwrite-snapshots``), and appended rows inside it would
        be skipped with it (PROTOCOL.md §5.1).
        """
        return self is WriteMode.APPEND

    @property
    def takes_upserts(self) -> bool:
        """True if upserts after an entry of this mode may join its catalog commit: only upserts do.

        Appends never join an upsert's commit (nor an upsert an append's): an upsert's commit is an
        ``overwrite`` snapshot when it deletes rows, and stream readers that skip those would skip the
        appended rows with it (PROTOCOL.md §5.5).
        """
        return self is WriteMode.UPSERT


@dataclass(frozen=True)
class WalEntry:
    """One WAL entry.

    Attributes:
        kind: data, fence, expire, skip or publish.
        token: The owner token (unique per write attempt); resolves ambiguous puts.
        writer: The writer id.
        ephemeral: True for a batch job's anonymous writer (no epoch, no state kept).
        epoch: The writer's epoch (the seq of the barrier that opened it); None for
            anonymous writers, barriers and idempotent jobs (``tail``).
        tail: An idempotent batch job's (``writer.id`` + ``writer.batch-id``) open: the WAL tail its
            open listed, which orders its incarnation instead of a barrier (PROTOCOL.md §7); None otherwise.
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
        filter_ids: ``REPLACE_WHERE``: each column name of the filter -> the field id it bound to when the
            write was planned (the filter is applied by field id: a rename between put and apply keeps it).
        branch: The branch the entry writes to (``publish``: the branch main is fast-forwarded to);
            None is main.
        properties: Snapshot properties for the commit that applies the entry, as sorted (key, value) pairs.
        inputs: ``COMPACT``: the paths of the data files the entry's files replace, sorted.
        folded: ``COMPACT``: the paths of the position delete files it folds into its files, sorted.
        upsert: ``UPSERT``: the key and order columns.
        deletes: ``UPSERT``: its delete-key files (encoded like ``files``; ``protocol.upsert``).
        floor: The first position its writer could have claimed (one past the tail it listed) when
            that is below the entry's own: the positions in between that no object fills were
            jumped over and are *holes*, which a commit voids (PROTOCOL.md §3 step 3). None: the
            entry took the first free position.
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
    created_ms: int = attribute(default_factory=lambda: int(time.time() * 1000))
    rows: int = 0
    spec_id: int | None = None
    reason: str | None = None
    untuned: bool = False
    partitions: tuple[tuple[str | None, ...], ...] = ()
    row_filter: str | None = None
    filter_ids: tuple[tuple[str, int], ...] = ()
    branch: str | None = None
    properties: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()
    upsert: UpsertSpec | None = None
    deletes: tuple[Mapping[str, Any], ...] = ()
    floor: int | None = None
    tail: int | None = None

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


def _uses_version_5(entry: WalEntry) -> bool:
    """True if the entry is an idempotent job's, ordered by ``tail``: a reader of version 4 would fence it."""
    return entry.tail is not None


def _uses_version_4(entry: WalEntry) -> bool:
    """True if the entry is an upsert (or folds delete files): readers of version 3 would misapply it."""
    return bool(entry.mode is WriteMode.UPSERT or entry.upsert is not None or entry.deletes or entry.folded)


def _uses_version_3(entry: WalEntry) -> bool:
    """True if the entry carries anything a format-2 reader would misread or drop."""
    return bool(
        entry.kind is EntryKind.PUBLISH
        or entry.mode not in (WriteMode.APPEND, WriteMode.OVERWRITE)
        or entry.partitions
        or entry.row_filter is not None
        or entry.filter_ids
        or entry.branch is not None
        or entry.properties
        or entry.inputs
    )


def _version_of(entry: WalEntry) -> int:
    """The lowest format version that holds ``entry``."""
    if _uses_version_5(entry):
        return FORMAT_VERSION
    return _UPSERT_VERSION if _uses_version_4(entry) else _MODES_VERSION if _uses_version_3(entry) else _BASE_VERSION


def encode_entry(entry: WalEntry) -> bytes:
    """Serialize an entry (compact JSON, format-versioned: the lowest of 2 to 5 that holds it)."""
    version = _version_of(entry)
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
        "fids": dict(entry.filter_ids) or None,
        "branch": entry.branch,
        "props": dict(entry.properties) or None,
        "inputs": list(entry.inputs) or None,
        "folded": list(entry.folded) or None,
        "upsert": None if entry.upsert is None else entry.upsert.encode(),
        "deletes": list(entry.deletes) or None,
        "floor": entry.floor,
        "tail": entry.tail,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return dumps(body).encode()


def decode_entry(data: bytes, key: str = "?") -> WalEntry:
    """Parse and validate an entry; raise CorruptControlDataError naming ``key`` and its seq if it is not one.

    Every field is checked for its JSON type and range, and every entry for the fields its kind and mode
    need and the ones they never carry (:func:`_check_kind`): a damaged entry that decoded would fail later,
    inside some committer's commit, without naming the object to move aside. Unknown keys are ignored.
    """
    try:
        body = loads_versioned(
            data, (_BASE_VERSION, _MODES_VERSION, _UPSERT_VERSION, FORMAT_VERSION), f"WAL object {key}"
        )
        entry = WalEntry(
            kind=EntryKind(field(body, "kind", "an entry kind", is_text, required=True)),
            token=field(body, "token", "a non-empty owner token", is_text, required=True),
            writer=field(body, "writer", "a non-empty writer id", is_text, required=True),
            ephemeral=field(body, "ephemeral", "true or false", is_bool, False),
            epoch=field(body, "epoch", "a WAL position", is_count),
            run=field(body, "run", "a run id", is_text),
            query=field(body, "query", "a query id", is_text),
            batch=field(body, "batch", "a batch id", is_count),
            strict=field(body, "strict", "true or false", is_bool, False),
            mode=WriteMode(field(body, "mode", "a write mode", is_text, WriteMode.APPEND.value)),
            files=file_list(body.get("files")),
            opened=field(body, "opened", "a WAL position", is_count, 0),
            expire_before=field(body, "expire_before", "a WAL position", is_count),
            created_ms=field(body, "created_ms", "a time in ms", is_count, 0),
            rows=field(body, "rows", "a row count", is_count, 0),
            spec_id=field(body, "spec_id", "a partition spec id", is_count),
            reason=field(body, "reason", "a reason", is_str),
            untuned=field(body, "untuned", "true or false", is_bool, False),
            partitions=partition_lists(body, "parts"),
            row_filter=field(body, "filter", "a row filter", is_text),
            filter_ids=name_ids(body, "fids"),
            branch=field(body, "branch", "a branch name", is_text),
            properties=str_pairs(body, "props"),
            inputs=text_list(body, "inputs"),
            folded=text_list(body, "folded"),
            upsert=None if body.get("upsert") is None else UpsertSpec.decode(body["upsert"]),
            deletes=key_file_refs(body.get("deletes")),
            floor=field(body, "floor", "a WAL position", is_count),
            tail=field(body, "tail", "a WAL position", is_count),
        )
        _check_kind(entry)
        if body["v"] < _version_of(entry):  # no fencedlake writes it: a reader of that version would misapply it
            raise ValueError(
                f"field 'v': a version-{body['v']} entry cannot carry what version {_version_of(entry)} adds"
            )
        return entry
    except MALFORMED as e:
        seq = seq_of(key)
        raise CorruptControlDataError(
            f"WAL object {key} (seq {'?' if seq is None else seq}) is not a valid fencedlake entry ({e}); every "
            "commit on the table waits behind it. Move the object out of the WAL (keep it for inspection), then run "
            f"`fencedlake skip TABLE {'SEQ' if seq is None else seq} --reason '...'` to record the position as "
            "skipped; its writer, if alive, puts its entry again"
        ) from e


#: Fields only some entries carry: (field, attribute, the kinds and modes that may carry it).
_ONLY_ON: tuple[tuple[str, str, frozenset[EntryKind | WriteMode]], ...] = (
    ("files", "files", frozenset({EntryKind.DATA})),
    ("batch", "batch", frozenset({EntryKind.DATA})),
    ("epoch", "epoch", frozenset({EntryKind.DATA})),
    ("ephemeral", "ephemeral", frozenset({EntryKind.DATA})),
    ("opened", "opened", frozenset({EntryKind.DATA})),
    ("tail", "tail", frozenset({EntryKind.DATA})),
    ("spec_id", "spec_id", frozenset({EntryKind.DATA})),
    ("props", "properties", frozenset({EntryKind.DATA})),
    ("branch", "branch", frozenset({EntryKind.DATA, EntryKind.PUBLISH})),
    ("expire_before", "expire_before", frozenset({EntryKind.EXPIRE})),
    ("reason", "reason", frozenset({EntryKind.SKIP})),
    ("parts", "partitions", frozenset({WriteMode.DYNAMIC})),
    ("filter", "row_filter", frozenset({WriteMode.REPLACE_WHERE})),
    ("fids", "filter_ids", frozenset({WriteMode.REPLACE_WHERE})),
    ("inputs", "inputs", frozenset({WriteMode.COMPACT})),
    ("folded", "folded", frozenset({WriteMode.COMPACT})),
    ("upsert", "upsert", frozenset({WriteMode.UPSERT})),
    ("deletes", "deletes", frozenset({WriteMode.UPSERT})),
)


#: Fields an entry of a kind (or a data entry of a mode) cannot do without: (field, attribute).
_NEEDED: dict[EntryKind | WriteMode, tuple[str, str]] = {
    EntryKind.PUBLISH: ("branch", "branch"),
    EntryKind.EXPIRE: ("expire_before", "expire_before"),
    WriteMode.REPLACE_WHERE: ("filter", "row_filter"),
    WriteMode.COMPACT: ("inputs", "inputs"),
    WriteMode.UPSERT: ("upsert", "upsert"),
}


def _check_kind(entry: WalEntry) -> None:
    """Raise ValueError if ``entry`` lacks a field its kind or mode needs, or carries one they never do."""
    kind, mode = entry.kind, entry.mode
    if kind is EntryKind.DATA:
        modes = set(WriteMode) - {WriteMode.PUBLISH}
    else:
        modes = {WriteMode.PUBLISH} if kind is EntryKind.PUBLISH else {WriteMode.APPEND}
    if mode not in modes:
        raise ValueError(f"field 'mode': a {kind.value} entry cannot have mode {mode.value!r}")
    owners_of_entry: set[EntryKind | WriteMode] = {kind, mode} if kind is EntryKind.DATA else {kind}
    for name, attr, owners in _ONLY_ON:
        if getattr(entry, attr) not in (None, (), False, 0) and not owners & owners_of_entry:
            raise ValueError(f"field {name!r} is not part of a {kind.value} entry with mode {mode.value!r}")
    for owner in owners_of_entry:
        need = _NEEDED.get(owner)
        if need is not None and getattr(entry, need[1]) in (None, ()):
            raise ValueError(f"field {need[0]!r} is missing: a {kind.value} entry with mode {mode.value!r} needs it")
    if entry.tail is not None and (entry.ephemeral or entry.epoch is not None or entry.batch is None or entry.strict):
        raise ValueError("field 'tail': only an idempotent job's entry (a batch id, no epoch, not streaming) has one")
    if entry.strict and kind is EntryKind.DATA and entry.batch is None:
        raise ValueError("field 'batch' is missing: a streaming (strict) data entry needs its batch id")
    if mode is WriteMode.DYNAMIC and partitions_of(entry.files) != entry.partitions:
        raise ValueError("field 'parts' is not the set of partitions of the entry's files")
