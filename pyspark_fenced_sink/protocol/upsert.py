"""Upserts and deletes by key: the apply-time decision and the remembered deletes (PROTOCOL.md §5.4; pure, driver).

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
no I/O. The same function serves the Iceberg port and the model test.

A delete is remembered (:func:`remember_deletes`): an applied ordered upsert on
main adds its delete-key files to the committed state's tombstone list, so a
later lower-order row of a deleted key loses. The catalog side merges the list
into one file when it holds more than :data:`TOMBSTONE_FILES_MAX` files, dropping
deletes older than the table's ``fencedlake.tombstone-retention-ms``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

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
    def decode(cls, body: Mapping[str, Any]) -> UpsertSpec:
        """Parse :meth:`encode`'s form (ValueError/TypeError/KeyError if malformed)."""
        keys = tuple((int(i), str(n)) for i, n in body["k"])
        if not keys:
            raise ValueError("an upsert names no key column")
        order = body.get("o")
        where = body.get("dw")
        return cls(
            keys=keys,
            order=None if order is None else (int(order[0]), str(order[1])),
            delete_where=None if where is None else str(where),
        )


@dataclass
class Resolution:
    """What applying one upsert entry does to its keys.

    Attributes:
        losers: Indices of ``LIVE`` and ``ROW`` candidates that must be deleted (position deletes).
        duplicate: A key with more than one row in an entry without an order column: the entry is
            refused and nothing of it applies (``losers`` is then empty).
        inserted: Keys the entry adds (no live row before).
        updated: Keys whose live row the entry's row replaces.
        deleted: Keys whose live rows a delete row removes.
        unchanged: Keys the entry does not change (its rows lost, or a delete of an absent key).
    """

    losers: list[int] = field(default_factory=list)
    duplicate: Hashable | None = None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0


def _rank(value: Any) -> tuple[int, Any]:
    """Order values compared with null lowest."""
    return (0, None) if value is None else (1, value)


def _entry_wins(best: tuple[int, Any], existing: tuple[int, Any] | None, is_delete: bool) -> bool:
    """True if the entry's best row (or delete) beats the key's live rows and remembered deletes.

    The entry is later in the WAL than everything it is compared with: it wins ties.
    """
    return existing is None or best >= existing


def _replaced(live: list[int], rows: list[int], winner: int | None) -> list[int]:
    """The losers when the entry wins: every live row of the key and the entry's other rows."""
    return live + [i for i in rows if i != winner]


def resolve(
    keys: Sequence[Hashable],
    orders: Sequence[Any],
    sources: Sequence[int],
    ranks: Sequence[int],
    *,
    ordered: bool,
) -> Resolution:
    """Decide which candidate rows lose (module docstring); candidates are parallel sequences.

    Args:
        keys: Each candidate's key (a hashable value or tuple).
        orders: Each candidate's order value (ignored without ``ordered``; None is lowest).
        sources: Each candidate's :class:`Source`.
        ranks: Each entry row's position inside the entry (later is greater); ignored for others.
        ordered: The entry has an order column.
    """
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = Resolution()
    for key, members in groups.items():
        mine = [i for i in members if sources[i] >= Source.ROW]
        if not mine:
            continue
        live = [i for i in members if sources[i] == Source.LIVE]
        rows = [i for i in mine if sources[i] == Source.ROW]
        if not ordered:
            if len(mine) > 1:
                return Resolution(duplicate=key)
            winner = mine[0]
            wins = True
        else:
            winner = max(mine, key=lambda i: (_rank(orders[i]), sources[i] == Source.DELETE, ranks[i]))
            existing = max(
                (_rank(orders[i]) for i in members if sources[i] in (Source.LIVE, Source.TOMBSTONE)), default=None
            )
            wins = _entry_wins(_rank(orders[winner]), existing, sources[winner] == Source.DELETE)
        if not wins:
            out.losers.extend(rows)
            out.unchanged += 1
            continue
        is_delete = sources[winner] == Source.DELETE
        out.losers.extend(_replaced(live, rows, None if is_delete else winner))
        if is_delete:
            out.deleted += bool(live)
            out.unchanged += not live
        elif live:
            out.updated += 1
        else:
            out.inserted += 1
    return out


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
