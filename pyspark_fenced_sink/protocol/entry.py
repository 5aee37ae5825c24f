"""WAL entries: their kinds, write modes and the JSON codec (PROTOCOL.md §3, §5.1, §5.2; driver).

Kinds: ``data`` (a write's files and how they change the table: :class:`WriteMode`),
``fence`` (a barrier: the writer's epoch), ``expire`` (gc's barrier), ``skip`` (an
operator's no-op at a lost position) and ``publish``. An ``upsert`` data entry
also carries its key and order columns (``protocol.upsert.UpsertSpec``) and its
delete-key files (PROTOCOL.md §5.4). Entries that use no version-3 field are
written as version 2, so a fleet upgrading writer by writer keeps working; a
version-2 reader refuses a version-3 entry with an upgrade hint; upsert entries
(and compactions that fold delete files) are version 4, refused by readers of 2
and 3 the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.codec import MALFORMED, dumps, loads_versioned
from pyspark_fenced_sink.protocol.layout import seq_of
from pyspark_fenced_sink.protocol.upsert import UpsertSpec

__all__ = [
    "FILE_PARTITION_KEY",
    "FILE_PATH_KEY",
    "FILE_SPEC_KEY",
    "FORMAT_VERSION",
    "MAIN_BRANCH",
    "TOKEN_CHARS",
    "EntryKind",
    "WalEntry",
    "WriteMode",
    "decode_entry",
    "encode_entry",
    "encoded_partition",
    "encoded_path",
    "encoded_spec_id",
    "partitions_of",
]


FORMAT_VERSION = 4
#: Entries that use nothing of version 3 are written as version 2 (readable by older fencedlake).
_BASE_VERSION = 2
#: Entries of version 3: write modes, branches, properties, publish, compaction (not upserts).
_MODES_VERSION = 3
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
    after its first applied entry, if that entry takes them (:attr:`takes_appends`);
    upserts join a commit of appends and upserts the same way (:attr:`merges_keys`).

    * ``APPEND`` adds files;
    * ``OVERWRITE`` removes every live file of the branch (static overwrite);
    * ``DYNAMIC`` removes the live files of the partitions in the entry's partition set;
    * ``REPLACE_WHERE`` removes the live files whose rows all match the entry's row filter,
      and is refused if a live file has rows on both sides of it;
    * ``PUBLISH`` fast-forwards main to the entry's branch (``publish`` entries);
    * ``COMPACT`` replaces the entry's input files (``WalEntry.inputs``) by its files, rows unchanged
      (a ``replace`` snapshot), and is refused unless every input is still live; it commits alone;
    * ``UPSERT`` adds its files and deletes, by position, the rows that lose per key
      (``protocol.upsert``); appends and other upserts join its commit, and it joins an append's.
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
        """True if appends after an entry of this mode may join its catalog commit."""
        return self not in (WriteMode.PUBLISH, WriteMode.COMPACT)

    @property
    def merges_keys(self) -> bool:
        """True for modes whose commits apply upserts (appends and upserts, in WAL order)."""
        return self in (WriteMode.APPEND, WriteMode.UPSERT)


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
        folded: ``COMPACT``: the paths of the position delete files it folds into its files, sorted.
        upsert: ``UPSERT``: the key and order columns.
        deletes: ``UPSERT``: its delete-key files (encoded like ``files``; ``protocol.upsert``).
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
    folded: tuple[str, ...] = ()
    upsert: UpsertSpec | None = None
    deletes: tuple[Mapping[str, Any], ...] = ()

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
        or entry.branch is not None
        or entry.properties
        or entry.inputs
    )


def encode_entry(entry: WalEntry) -> bytes:
    """Serialize an entry (compact JSON, format-versioned: 2 unless it needs 3)."""
    version = FORMAT_VERSION if _uses_version_4(entry) else _MODES_VERSION if _uses_version_3(entry) else _BASE_VERSION
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
        "folded": list(entry.folded) or None,
        "upsert": None if entry.upsert is None else entry.upsert.encode(),
        "deletes": list(entry.deletes) or None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return dumps(body).encode()


def decode_entry(data: bytes, key: str = "?") -> WalEntry:
    """Parse an entry; raise CorruptControlDataError naming ``key`` if it is not one."""
    try:
        body = loads_versioned(data, (_BASE_VERSION, _MODES_VERSION, FORMAT_VERSION), f"WAL object {key}")
        upsert = body.get("upsert")
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
            folded=_path_tuple(body.get("folded"), "folded"),
            upsert=None if upsert is None else UpsertSpec.decode(upsert),
            deletes=_file_tuple(body.get("deletes")),
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


def _path_tuple(value: Any, name: str = "inputs") -> tuple[str, ...]:
    """The ``inputs`` (or ``folded``) field: a JSON list of file paths, or absent."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{name}' must be a list of file paths, found {json.dumps(value)[:80]}")
    return tuple(value)


def _property_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """The ``props`` field: a JSON object of strings, or absent."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"'props' must be an object of strings, found {json.dumps(value)[:80]}")
    return tuple(sorted(value.items()))


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
