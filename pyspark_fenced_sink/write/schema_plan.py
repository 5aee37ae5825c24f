"""What a write's data needs from its table's schema: the verdict of the schema check (PROTOCOL.md step 0; driver).

The Spark face checks a DataFrame against the table (``spark.schema_to_iceberg``) and
returns a :class:`SchemaPlan`; the write transaction applies its additions
(``merge-schema``) to the table in one schema update before any task runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.types import IcebergType

if TYPE_CHECKING:
    from pyiceberg.table.update.schema import UpdateSchema

__all__ = ["SchemaAddition", "SchemaPlan", "apply_additions"]


@dataclass(frozen=True)
class SchemaAddition:
    """A column the DataFrame has and the table lacks, to be added (merge-schema).

    Attributes:
        parent: Path of the enclosing struct, ``()`` for a top-level column; a
            struct inside a list or map is reached through ``element``,
            ``key`` or ``value``, e.g. ``("items", "element")``.
        name: The new column's name.
        field_type: Its Iceberg type (nested field ids are placeholders; the
            catalog assigns real ones). The column itself is always optional.
    """

    parent: tuple[str, ...]
    name: str
    field_type: IcebergType

    @property
    def path(self) -> str:
        """The new column's dotted path, e.g. ``payload.items.element.x``."""
        return ".".join((*self.parent, self.name))


@dataclass(frozen=True)
class SchemaPlan:
    """The verdict of :func:`check_write_schema`: the write is compatible.

    Attributes:
        additions: Columns to add to the table first (only with merge-schema).
        missing: Paths of optional table columns the DataFrame lacks; executors
            write them as nulls.
        promoted: Paths of columns written with a safe type promotion.
    """

    additions: tuple[SchemaAddition, ...] = ()
    missing: tuple[str, ...] = ()
    promoted: tuple[str, ...] = ()

    @property
    def changes_table(self) -> bool:
        """True when the table's schema must be updated before the write."""
        return bool(self.additions)


def apply_additions(update_schema: UpdateSchema, plan: SchemaPlan) -> None:
    """Add ``plan.additions`` to a pyiceberg ``UpdateSchema`` (optional columns).

    The caller owns the transaction and its commit, e.g.::

        with table.update_schema() as update:
            apply_additions(update, plan)

    Args:
        update_schema: A ``pyiceberg.table.update.schema.UpdateSchema``.
        plan: The plan returned by :func:`check_write_schema`.
    """
    for addition in plan.additions:
        update_schema.add_column((*addition.parent, addition.name), addition.field_type, required=False)
