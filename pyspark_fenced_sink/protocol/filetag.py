"""Data-file names that say who wrote them (PROTOCOL.md step 2; executors).

Every Parquet file fencedlake writes is named from a :class:`FileTag`::

    {kind}-{table}-{writer}~{epoch}~{opened}~{batch}~{task}-{attempt}-{nonce}.parquet

``kind`` is ``s`` for a stable ``writer.id`` and ``e`` for the anonymous
(ephemeral) writer a batch job gets without one; ``table`` is the first 12
hex digits of the table's UUID, so two tables that share a location (a rename,
then a new table under the old name) never judge each other's files; ``x``
stands for an unknown field. The nonce makes the name unique across tasks,
attempts and writers. (Names without a table tag, kinds ``w``/``a``, come from
earlier pre-releases and are never collected.)

Files a *commit* writes while it applies upserts (PROTOCOL.md §5.5) are named
from an :class:`ApplyTag` instead::

    {kind}-{table}-{upper:020d}-{nonce}.parquet

``kind`` is ``d`` for a position delete file and ``t`` for a merged tombstone
file; ``upper`` is the committed upper of the version the commit attempt was
built on. Once the committed upper is above it, no attempt that could still land
references the file: ``gc`` judges such files by that and by what references them.
``gc`` parses names to decide, from the committed writer state alone, whether
a file that no snapshot and no pending WAL entry references can ever be
referenced again (PROTOCOL.md, "Orphan files"). Files whose names do not parse
are never touched.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

__all__ = ["ApplyTag", "FileTag", "table_tag"]

_NAME = re.compile(
    r"^(?:(?P<kind>[se])-(?P<table>[0-9a-f]{12})-|(?P<legacy>[wa])-)(?P<writer>[A-Za-z0-9_.-]+)~(?P<epoch>\d+|x)~(?P<opened>\d+|x)~"
    r"(?P<batch>\d+|x)~(?P<task>\d+)-(?P<attempt>\d+)-(?P<nonce>[0-9a-f]+)\.parquet$"
)


def _opt(value: int | None) -> str:
    return "x" if value is None else str(value)


def _parse_opt(text: str) -> int | None:
    return None if text == "x" else int(text)


@dataclass(frozen=True)
class FileTag:
    """Who wrote a data file: enough for ``gc`` to classify it safely.

    Attributes:
        writer: The writer id (stable or anonymous).
        ephemeral: True for the anonymous writer of a batch job without ``writer.id``.
        epoch: The writer's epoch when known at task time (batch writers), else None.
        opened: The committed upper the writer saw when it opened.
        batch: ``writer.batch-id`` or the streaming batch id, if any.
        task: Spark partition id.
        attempt: Spark task attempt id.
        nonce: Random hex making the name unique.
        table: The table tag (:func:`table_tag` of its UUID); "" in names of earlier pre-releases.
    """

    writer: str
    ephemeral: bool
    epoch: int | None
    opened: int | None
    batch: int | None
    task: int = 0
    attempt: int = 0
    nonce: str = ""
    table: str = ""

    def file_name(self) -> str:
        """The Parquet file name for this tag (a fresh nonce if none is set)."""
        nonce = self.nonce or secrets.token_hex(8)
        legacy = "a" if self.ephemeral else "w"
        kind = f"{'e' if self.ephemeral else 's'}-{self.table}" if self.table else legacy
        return (
            f"{kind}-{self.writer}~{_opt(self.epoch)}~{_opt(self.opened)}~{_opt(self.batch)}"
            f"~{self.task}-{self.attempt}-{nonce}.parquet"
        )

    @classmethod
    def parse(cls, file_name: str) -> FileTag | None:
        """Parse a base name written by :meth:`file_name`; None for any other name."""
        m = _NAME.match(file_name)
        if m is None:
            return None
        return cls(
            writer=m["writer"],
            ephemeral=(m["kind"] or m["legacy"]) in ("e", "a"),
            epoch=_parse_opt(m["epoch"]),
            opened=_parse_opt(m["opened"]),
            batch=_parse_opt(m["batch"]),
            task=int(m["task"]),
            attempt=int(m["attempt"]),
            nonce=m["nonce"],
            table=m["table"] or "",
        )


_APPLY_NAME = re.compile(r"^(?P<kind>[dt])-(?P<table>[0-9a-f]{12})-(?P<upper>\d{20})-(?P<nonce>[0-9a-f]+)\.parquet$")


@dataclass(frozen=True)
class ApplyTag:
    """A file a commit attempt wrote: a position delete file (``d``) or a merged tombstone file (``t``).

    Attributes:
        kind: ``d`` or ``t``.
        table: The table tag.
        upper: The committed upper of the version the attempt was built on.
        nonce: Random hex making the name unique.
    """

    kind: str
    table: str
    upper: int
    nonce: str = ""

    def file_name(self) -> str:
        """The Parquet file name for this tag (a fresh nonce if none is set)."""
        return f"{self.kind}-{self.table}-{self.upper:020d}-{self.nonce or secrets.token_hex(8)}.parquet"

    @classmethod
    def parse(cls, file_name: str) -> ApplyTag | None:
        """Parse a base name written by :meth:`file_name`; None for any other name."""
        m = _APPLY_NAME.match(file_name)
        return None if m is None else cls(m["kind"], m["table"], int(m["upper"]), m["nonce"])


def table_tag(table_uuid: str) -> str:
    """The table tag of data file names: the first 12 hex digits of the table UUID."""
    return table_uuid.replace("-", "").lower()[:12]
