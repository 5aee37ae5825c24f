"""Upserts and deletes by key: the apply-time decision and the remembered deletes (PROTOCOL.md §5.5; pure, driver).

An ``upsert`` entry carries rows (its data files) and delete rows (its
*delete-key files*: the key and order columns of the rows that matched
``upsert-delete-where``). When a commit applies it — in WAL order, on the
version being committed on — the catalog side gathers, for every key the
entry names, the candidates and asks :func:`resolve` which rows lose:

* ``LIVE`` — rows of the branch live before the entry (in a data file, not
  deleted by a position delete);
* ``TOMBSTONE`` — remembered deletes of the key (ordered upserts on main only);
* ``ROW`` / ``DELETE`` — the entry's own rows and delete rows, each with its
  rank (its position inside the entry: later is greater).

With an order column (``upsert-order``) the greatest order value wins (a null
order is lower than any value); the entry is later in the WAL than everything
it is compared with, so it wins ties. Inside one entry a delete wins a tie, then
the later row. When the entry's best row wins, every live row of the key and
the entry's other rows lose (a winning delete leaves the key absent); when it
loses, all the entry's rows of the key lose and the live rows stay. Without an
order column the entry's row replaces the key unconditionally, and two rows of
one key in the entry make the entry a duplicate (refused, naming the key).

Every decision is a function of the candidates alone: total, deterministic,
no I/O, vectorized over numpy arrays (keys as group numbers, order values as
ranks: the caller maps its values to them). The same function serves the Iceberg
port and the model test.

A delete is remembered (:func:`remember_deletes`): an applied ordered upsert on
main adds its delete-key files to the committed state's tombstone list, so a
later lower-order row of a deleted key loses. The catalog side merges the list
into one file when it holds more than :data:`TOMBSTONE_FILES_MAX` files, dropping
deletes older than the table's ``fencedlake.tombstone-retention-ms``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from pyspark_fenced_sink.protocol.codec import field as checked
from pyspark_fenced_sink.protocol.codec import is_count, is_text

__all__ = [
    "TOMBSTONE_FILES_MAX",
    "TOMBSTONE_RETENTION_MS_DEFAULT",
    "TOMBSTONE_RETENTION_PROPERTY",
    "Resolution",
    "Source",
    "UpsertSpec",
    "remember_deletes",
    "resolve",
]

#: Tombstone files the committed state lists at most; a commit that would list more merges them into one.
TOMBSTONE_FILES_MAX = 16
#: The table property bounding how long a remembered delete is kept (ms since the delete was written).
TOMBSTONE_RETENTION_PROPERTY = "fencedlake.tombstone-retention-ms"
TOMBSTONE_RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000
#: Keys of a tombstone reference in the state (besides the delete-key file's own encoding).
TOMBSTONE_MS_KEY = "ms"
TOMBSTONE_ORDER_KEY = "o"
TOMBSTONE_KEYS_KEY = "k"


class Source(IntEnum):
    """Where a candidate row of a key comes from."""

    LIVE = 0
    TOMBSTONE = 1
    ROW = 2
    DELETE = 3


@dataclass(frozen=True)
class UpsertSpec:
    """How an upsert entry matches and orders rows (resolved to field ids on the driver).

    Attributes:
        keys: The key columns as (field id, name when planned); rows match by these field ids.
        order: The order column (field id, name), or None: the later WAL position wins.
        delete_where: The ``upsert-delete-where`` filter, if any (informational: executors applied it).
    """

    keys: tuple[tuple[int, str], ...]
    order: tuple[int, str] | None = None
    delete_where: str | None = None

    @property
    def ordered(self) -> bool:
        """True if the greatest order value wins (``upsert-order``)."""
        return self.order is not None

    @property
    def key_ids(self) -> tuple[int, ...]:
        """The key columns' field ids."""
        return tuple(i for i, _ in self.keys)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The key columns' names when the write was planned."""
        return tuple(n for _, n in self.keys)

    def encode(self) -> dict[str, Any]:
        """JSON form inside a WAL entry."""
        body: dict[str, Any] = {"k": [[i, n] for i, n in self.keys]}
        if self.order is not None:
            body["o"] = list(self.order)
        if self.delete_where is not None:
            body["dw"] = self.delete_where
        return body

    @classmethod
    def decode(cls, body: Any) -> UpsertSpec:
        """Parse :meth:`encode`'s form, validating every field (ValueError naming the field if malformed)."""
        if not isinstance(body, dict):
            raise ValueError(f"field 'upsert': expected an object, found {type(body).__name__}")
        keys = checked(
            body, "k", "a non-empty list of [field id, name] pairs", _key_list, required=True, where="upsert"
        )
        order = checked(body, "o", "a [field id, name] pair", _key_pair, where="upsert")
        where = checked(body, "dw", "a row filter", is_text, where="upsert")
        return cls(
            keys=tuple((i, n) for i, n in keys),
            order=None if order is None else (order[0], order[1]),
            delete_where=where,
        )


def _key_pair(value: Any) -> bool:
    """A JSON [field id, name] pair."""
    return isinstance(value, list) and len(value) == 2 and is_count(value[0]) and is_text(value[1])


def _key_list(value: Any) -> bool:
    """A non-empty JSON list of [field id, name] pairs."""
    return isinstance(value, list) and bool(value) and all(map(_key_pair, value))


@dataclass
class Resolution:
    """What applying one upsert entry does to its keys.

    Attributes:
        losers: Indices of ``LIVE`` and ``ROW`` candidates that must be deleted (position deletes).
        duplicate: A group (key) with more than one row in an entry without an order column: the entry is
            refused and nothing of it applies (``losers`` is then empty).
        inserted: Keys the entry adds (no live row before).
        updated: Keys whose live row the entry's row replaces.
        deleted: Keys whose live rows a delete row removes.
        unchanged: Keys the entry does not change (its rows lost, or a delete of an absent key).
    """

    losers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    duplicate: int | None = None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0


def _entry_wins(best: np.ndarray, existing: np.ndarray, present: np.ndarray, is_delete: np.ndarray) -> np.ndarray:
    """Per key: does the entry's best row (or delete) beat the key's live rows and remembered deletes?

    The entry is later in the WAL than everything it is compared with: it wins ties.
    """
    return ~present | (best >= existing)


def _replaced(live_of_won_keys: np.ndarray) -> np.ndarray:
    """Which live rows of keys the entry won are deleted: every one (at most one row per key remains)."""
    return live_of_won_keys


def resolve(
    groups: Sequence[int] | np.ndarray,
    orders: Sequence[int] | np.ndarray,
    sources: Sequence[int] | np.ndarray,
    ranks: Sequence[int] | np.ndarray,
    *,
    ordered: bool,
) -> Resolution:
    """Decide which candidate rows lose (module docstring); candidates are parallel arrays.

    Args:
        groups: Each candidate's key as a dense group number (equal keys, equal numbers; 0..K-1).
        orders: Each candidate's order value as an integer of the same order (a null lowest; equal values
            equal), e.g. its dense rank; ignored without ``ordered``.
        sources: Each candidate's :class:`Source`.
        ranks: Each entry row's position inside the entry (later is greater); ignored for others.
        ordered: The entry has an order column.
    """
    g = np.asarray(groups, dtype=np.int64)
    o = np.asarray(orders, dtype=np.int64) if ordered else np.zeros(len(g), np.int64)
    src = np.asarray(sources, dtype=np.int64)
    rank = np.asarray(ranks, dtype=np.int64)
    if not len(g):
        return Resolution()
    keys = int(g.max()) + 1
    mine = src >= Source.ROW
    is_live, is_row = src == Source.LIVE, src == Source.ROW
    has_mine = np.bincount(g[mine], minlength=keys) > 0
    if not ordered:
        counts = np.bincount(g[mine], minlength=keys)
        if (counts > 1).any():
            return Resolution(duplicate=int(np.argmax(counts > 1)))
        wins = has_mine.copy()
    # The entry's best row per key: greatest (order, delete before row, position); lexsort's last key sorts first.
    idx = np.flatnonzero(mine)
    sort = idx[np.lexsort((rank[idx], src[idx] == Source.DELETE, o[idx], g[idx]))]
    last = np.r_[g[sort][1:] != g[sort][:-1], True]
    winner = np.full(keys, -1, np.int64)
    winner[g[sort][last]] = sort[last]
    is_delete = np.zeros(keys, bool)
    is_delete[has_mine] = src[winner[has_mine]] == Source.DELETE
    if ordered:
        old = is_live | (src == Source.TOMBSTONE)
        existing = np.full(keys, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(existing, g[old], o[old])
        present = np.bincount(g[old], minlength=keys) > 0
        best = np.zeros(keys, np.int64)
        best[has_mine] = o[winner[has_mine]]
        wins = has_mine & _entry_wins(best, existing, present, is_delete)
    won = wins[g]
    live_losers = np.flatnonzero(_replaced(is_live & won & has_mine[g]))
    row_losers = np.flatnonzero(is_row & has_mine[g] & (~won | (np.arange(len(g)) != winner[g])))
    live_count = np.bincount(g[is_live], minlength=keys)
    touched = has_mine & wins
    return Resolution(
        losers=np.concatenate([live_losers, row_losers]),
        inserted=int((touched & ~is_delete & (live_count == 0)).sum()),
        updated=int((touched & ~is_delete & (live_count > 0)).sum()),
        deleted=int((touched & is_delete & (live_count > 0)).sum()),
        unchanged=int((has_mine & ~wins).sum() + (touched & is_delete & (live_count == 0)).sum()),
    )


def remember_deletes(
    tombstones: tuple[Mapping[str, Any], ...],
    spec: UpsertSpec | None,
    deletes: Sequence[Mapping[str, Any]],
    *,
    on_main: bool,
    created_ms: int,
) -> tuple[Mapping[str, Any], ...]:
    """The tombstone list after an applied upsert: plus its delete-key files if it is ordered and writes main.

    Each reference is the delete-key file's encoding plus when the deletes were written
    (:data:`TOMBSTONE_MS_KEY`, for the retention), the order column's field id they carry
    (:data:`TOMBSTONE_ORDER_KEY`: a later upsert compares only deletes of its own order column)
    and the key columns' field ids (:data:`TOMBSTONE_KEYS_KEY`).
    """
    if spec is None or spec.order is None or not deletes or not on_main:
        return tombstones
    stamp = {TOMBSTONE_MS_KEY: created_ms, TOMBSTONE_ORDER_KEY: spec.order[0], TOMBSTONE_KEYS_KEY: list(spec.key_ids)}
    added = tuple({**d, **stamp} for d in deletes)
    return tombstones + added
