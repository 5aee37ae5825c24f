"""A table version as a writer reads it, and the identity rules it must pass (PROTOCOL.md §1.1; pure).

:func:`bind` refuses a state property of another table's UUID (foreign), a
missing state on a table with fencedlake history (lost), and a state behind the
newest commit record (edited), each naming ``fencedlake repair-state``; a fresh
table's state is bound to its UUID and control root (I8).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark_fenced_sink.errors import TableStateError
from pyspark_fenced_sink.protocol.layout import control_root
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommittedState

__all__ = ["TableIdentity", "TableView", "bind"]


@dataclass(frozen=True)
class TableView:
    """A committed version of the table as one writer read it.

    Attributes:
        state: The fencedlake committed state in that version (bound by :func:`bind`).
        version: Changes with every catalog commit (e.g. the metadata location).
        snapshot_id: The current snapshot id of the main branch, if any.
        spec_id: The table's default partition spec id (None: not tracked).
        table_uuid: The table's UUID (None: a port that does not track identity).
        location: The table's current location.
        fresh: True if the table has no ``fencedlake.state`` property.
        recorded_upper: One past the last position of the newest commit record in the
            current snapshot's ancestry (None: no fencedlake commit there).
        state_error: Why the state property could not be read (damaged, another format
            version); ``state`` is then empty and :func:`bind` refuses the view.
        pace: WAL positions reconciled per second by the table's recent fencedlake commits
            (None: not known). It only tunes how writers claim positions and wait.
        cadence: Seconds between the table's recent fencedlake commits (None: not known).
    """

    state: CommittedState
    version: str
    snapshot_id: int | None = None
    spec_id: int | None = None
    table_uuid: str | None = None
    location: str | None = None
    fresh: bool = False
    recorded_upper: int | None = None
    state_error: str | None = None
    pace: float | None = None
    cadence: float | None = None


@dataclass(frozen=True)
class TableIdentity:
    """Whose control data a commit context reads and writes: a table UUID and its control root."""

    uuid: str
    root: str


def _repair_hint(name: str) -> str:
    return (
        f"rebuild the state from the commit records and the WAL with "
        f"`fencedlake repair-state {name}` (see `fencedlake repair-state --help`), or restore the property "
        "from an earlier metadata file"
    )


def bind(view: TableView, name: str) -> TableView:
    """Check ``view``'s state against its table identity; return it with the state bound.

    Raises:
        TableStateError: the state is foreign, lost or edited (operator action).
    """
    uuid, state = view.table_uuid, view.state
    if view.state_error is not None:
        raise TableStateError(f"table {name}: {view.state_error}; {_repair_hint(name)}", table=name)
    if uuid is None:
        return view
    if view.fresh:
        if view.recorded_upper is not None:
            raise TableStateError(
                f"table {name} has no {STATE_PROPERTY} property but its snapshots carry fencedlake commit "
                f"records up to WAL position {view.recorded_upper - 1}: the property was removed or rewritten "
                f"by another tool, and reading the table as fresh would apply its log again; {_repair_hint(name)}",
                table=name,
            )
        root = control_root(view.location or "", uuid)
        return replace(view, state=replace(state, table_uuid=uuid, root=root))
    if state.table_uuid != uuid:
        raise TableStateError(
            f"table {name} (uuid {uuid}) carries a {STATE_PROPERTY} property of table {state.table_uuid}: "
            f"it was copied from another table; {_repair_hint(name)}",
            table=name,
        )
    if view.recorded_upper is not None and state.upper < view.recorded_upper:
        raise TableStateError(
            f"table {name}: {STATE_PROPERTY} says upper {state.upper} but a commit record covers WAL positions "
            f"up to {view.recorded_upper - 1}: the property was edited or restored from old metadata; "
            f"{_repair_hint(name)}",
            table=name,
        )
    return view


def identity_of(view: TableView) -> TableIdentity | None:
    """The identity of a bound view (None if its port does not track identity)."""
    if view.table_uuid is None or view.state.root is None:
        return None
    return TableIdentity(view.table_uuid, view.state.root)
