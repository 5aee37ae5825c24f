"""Decoding validates every field of every entry kind, naming seq and object (PROTOCOL.md §8.1, issue 24).

A damaged entry that decodes would fail later, inside some committer's commit,
without naming the object the operator must move aside and ``skip``. Every
shape fencedlake never writes is therefore ``CorruptControlDataError`` at
decode time, naming the WAL object and its seq.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.entry import decode_entry
from pyspark_fenced_sink.protocol.layout import wal_key

KEY = wal_key(41)


def _raw(**body: Any) -> bytes:
    return json.dumps({"v": 3, "token": "t", "writer": "w", **body}).encode()


@pytest.mark.xfail(strict=True, reason="issue 24 failure 6: a publish entry without a branch decodes")
def test_a_publish_entry_without_a_branch_is_corrupt_naming_seq_and_object() -> None:
    """The decoder refuses it, and the message names the object and the ``skip`` command with its seq."""
    with pytest.raises(CorruptControlDataError, match=rf"{KEY}.*branch.*fencedlake skip TABLE 41"):
        decode_entry(_raw(kind="publish", mode="publish"), KEY)
