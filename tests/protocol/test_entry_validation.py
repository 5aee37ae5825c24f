"""Decoding validates every field of every entry kind, naming seq and object (PROTOCOL.md §8.1, issue 24).

A damaged entry that decoded would fail later, inside some committer's commit,
without naming the object the operator must move aside and ``skip``. Every
shape fencedlake never writes is therefore ``CorruptControlDataError`` at
decode time, naming the WAL object and its seq.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.entry import EntryKind, WalEntry, WriteMode, decode_entry, encode_entry
from pyspark_fenced_sink.protocol.layout import wal_key
from pyspark_fenced_sink.protocol.upsert import UpsertSpec

KEY = wal_key(41)
FILE = {"p": "d/f.parquet", "s": 0, "pt": ["AQ=="]}
UPSERT = {"k": [[1, "id"]]}


def _raw(**body: Any) -> bytes:
    return json.dumps({"v": 3, "token": "t", "writer": "w", **body}).encode()


def test_a_publish_entry_without_a_branch_is_corrupt_naming_seq_and_object() -> None:
    """The decoder refuses it, and the message names the object and the ``skip`` command with its seq."""
    with pytest.raises(CorruptControlDataError, match=rf"{KEY} \(seq 41\).*branch.*fencedlake skip TABLE 41"):
        decode_entry(_raw(kind="publish", mode="publish"), KEY)


#: One damaged shape per rule: (name, body, the field the message must name).
DAMAGED: list[tuple[str, dict[str, Any], str]] = [
    ("publish-main", {"kind": "publish", "mode": "publish", "branch": "main"}, "branch"),
    ("publish-no-mode", {"kind": "publish", "branch": "audit"}, "mode"),
    ("publish-with-files", {"kind": "publish", "mode": "publish", "branch": "b", "files": [FILE]}, "files"),
    ("data-publish-mode", {"kind": "data", "mode": "publish", "branch": "b"}, "mode"),
    ("replace-where-no-filter", {"kind": "data", "mode": "filter"}, "filter"),
    ("filter-on-append", {"kind": "data", "filter": "x = 1"}, "filter"),
    ("filter-ids-on-append", {"kind": "data", "fids": {"x": 1}}, "fids"),
    ("compact-no-inputs", {"kind": "data", "mode": "compact", "files": [FILE]}, "inputs"),
    ("inputs-on-overwrite", {"kind": "data", "mode": "overwrite", "inputs": ["a"]}, "inputs"),
    ("parts-on-append", {"kind": "data", "parts": [["AQ=="]]}, "parts"),
    ("parts-not-the-files", {"kind": "data", "mode": "dynamic", "parts": [["Ag=="]], "files": [FILE]}, "parts"),
    ("expire-no-mark", {"kind": "expire"}, "expire_before"),
    ("expire-with-files", {"kind": "expire", "expire_before": 3, "files": [FILE]}, "files"),
    ("fence-with-batch", {"kind": "fence", "batch": 3}, "batch"),
    ("fence-with-mode", {"kind": "fence", "mode": "overwrite"}, "mode"),
    ("skip-with-branch", {"kind": "skip", "branch": "b"}, "branch"),
    ("reason-on-data", {"kind": "data", "reason": "why"}, "reason"),
    ("strict-without-batch", {"kind": "data", "strict": True, "epoch": 2}, "batch"),
    ("epoch-a-string", {"kind": "data", "epoch": "3"}, "epoch"),
    ("epoch-a-float", {"kind": "data", "epoch": 3.5}, "epoch"),
    ("epoch-negative", {"kind": "data", "epoch": -1}, "epoch"),
    ("batch-a-bool", {"kind": "data", "batch": True}, "batch"),
    ("opened-a-string", {"kind": "data", "opened": "0"}, "opened"),
    ("ephemeral-a-string", {"kind": "data", "ephemeral": "yes"}, "ephemeral"),
    ("token-empty", {"kind": "data", "token": ""}, "token"),
    ("writer-a-number", {"kind": "data", "writer": 5}, "writer"),
    ("branch-empty", {"kind": "data", "branch": ""}, "branch"),
    ("file-without-path", {"kind": "data", "files": [{"s": 0}]}, "files[0].p"),
    ("file-spec-a-string", {"kind": "data", "files": [{"p": "f", "s": "0"}]}, "files[0].s"),
    ("file-partition-numbers", {"kind": "data", "files": [{"p": "f", "s": 0, "pt": [1]}]}, "files[0].pt"),
    ("inputs-empty-path", {"kind": "data", "mode": "compact", "inputs": [""]}, "inputs"),
    ("props-not-strings", {"kind": "data", "props": {"k": 1}}, "props"),
    ("fids-not-ids", {"kind": "data", "mode": "filter", "filter": "x = 1", "fids": {"x": "1"}}, "fids"),
    # Upserts (format 4, PROTOCOL.md §5.5).
    ("upsert-no-spec", {"v": 4, "kind": "data", "mode": "upsert", "files": [FILE]}, "upsert"),
    ("upsert-spec-on-append", {"v": 4, "kind": "data", "upsert": UPSERT}, "upsert"),
    ("deletes-on-append", {"v": 4, "kind": "data", "deletes": [FILE]}, "deletes"),
    ("folded-on-upsert", {"v": 4, "kind": "data", "mode": "upsert", "upsert": UPSERT, "folded": ["d"]}, "folded"),
    ("upsert-not-an-object", {"v": 4, "kind": "data", "mode": "upsert", "upsert": "id"}, "upsert"),
    ("upsert-no-keys", {"v": 4, "kind": "data", "mode": "upsert", "upsert": {"k": []}}, "upsert.k"),
    ("upsert-key-id-a-string", {"v": 4, "kind": "data", "mode": "upsert", "upsert": {"k": [["1", "id"]]}}, "upsert.k"),
    ("upsert-order-no-name", {"v": 4, "kind": "data", "mode": "upsert", "upsert": {**UPSERT, "o": [2]}}, "upsert.o"),
    (
        "delete-file-rows-a-string",
        {"v": 4, "kind": "data", "mode": "upsert", "upsert": UPSERT, "deletes": [{"p": "k", "n": "2"}]},
        "deletes[0].n",
    ),
    (
        "delete-file-without-path",
        {"v": 4, "kind": "data", "mode": "upsert", "upsert": UPSERT, "deletes": [{"n": 2}]},
        "deletes[0].p",
    ),
    (
        "delete-file-bounds-not-by-id",
        {"v": 4, "kind": "data", "mode": "upsert", "upsert": UPSERT, "deletes": [{"p": "k", "lb": {"id": "AQ=="}}]},
        "deletes[0].lb",
    ),
    ("upsert-in-format-3", {"kind": "data", "mode": "upsert", "upsert": UPSERT}, "v"),
]


@pytest.mark.parametrize(("body", "field"), [(b, f) for _, b, f in DAMAGED], ids=[n for n, _, _ in DAMAGED])
def test_every_damaged_shape_is_corrupt_naming_the_field_seq_and_object(body: dict[str, Any], field: str) -> None:
    """Any field of the wrong type, range or kind: CorruptControlDataError naming field, seq 41 and its object."""
    with pytest.raises(CorruptControlDataError, match=rf"{KEY} \(seq 41\)") as err:
        decode_entry(_raw(**body), KEY)
    assert repr(field) in str(err.value) or f"'{field}'" in str(err.value), str(err.value)
    assert "fencedlake skip TABLE 41" in str(err.value)


VALID = {
    "replace-where-with-ids": WalEntry(
        kind=EntryKind.DATA,
        token="t",
        writer="w",
        mode=WriteMode.REPLACE_WHERE,
        row_filter="day = 'd1'",
        filter_ids=(("day", 2),),
    ),
    "compact": WalEntry(kind=EntryKind.DATA, token="t", writer="w", mode="compact", files=(FILE,), inputs=("a",)),
    "streaming": WalEntry(kind=EntryKind.DATA, token="t", writer="w", epoch=0, batch=0, strict=True),
    "empty-dynamic": WalEntry(kind=EntryKind.DATA, token="t", writer="w", mode=WriteMode.DYNAMIC),
    "skip-empty-reason": WalEntry(kind=EntryKind.SKIP, token="t", writer="operator", reason=""),
    "upsert": WalEntry(
        kind=EntryKind.DATA,
        token="t",
        writer="w",
        mode=WriteMode.UPSERT,
        files=(FILE,),
        upsert=UpsertSpec(keys=((1, "id"),), order=(2, "ts"), delete_where="op = 'D'"),
        deletes=({"p": "keys/k.parquet", "n": 2, "z": 100, "lb": {"1": "AQAAAA=="}, "ub": {"1": "AgAAAA=="}},),
    ),
    "compact-folding": WalEntry(
        kind=EntryKind.DATA, token="t", writer="w", mode="compact", files=(FILE,), inputs=("a",), folded=("d",)
    ),
}


@pytest.mark.parametrize("entry", VALID.values(), ids=VALID.keys())
def test_every_shape_fencedlake_writes_still_decodes(entry: WalEntry) -> None:
    """The validation refuses only what fencedlake never writes: its own entries round-trip."""
    assert decode_entry(encode_entry(entry), KEY) == entry
