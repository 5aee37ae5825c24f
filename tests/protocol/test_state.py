"""Committed state (table property) and commit records (snapshot summary) (PROTOCOL.md §1, §4, §6; I2)."""

from __future__ import annotations

import json

import pytest

from pyspark_fenced_sink.errors import CorruptControlDataError
from pyspark_fenced_sink.protocol.batches import BatchIds
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS
from pyspark_fenced_sink.protocol.state import (
    STATE_PROPERTY,
    CommitRecord,
    CommittedState,
    WriterState,
    decode_record,
    encode_record,
)

STATE = CommittedState(
    upper=1822,
    writers={
        "orders": WriterState(epoch=1500, run="run-b", query="q-1", batches=BatchIds(((0, 41),))),
        "billing": WriterState(epoch=0),
        "stream": WriterState(epoch=7, run="r", query=None, batches=BatchIds(((0, 0), (3, 9)), floor=0)),
        "old": WriterState(epoch=9, batches=BatchIds(((500, 510),), floor=500)),
    },
    expired_before=900,
    table_uuid="6f1c1a52-2a4e-4c49-9d55-5d1b7a3e2f10",
    root="s3://lake/wh/db/t/_fencedlake/6f1c1a52-2a4e-4c49-9d55-5d1b7a3e2f10",
)


def test_committed_state_round_trips() -> None:
    """decode(encode(s)) == s, including epoch 0, batch id 0, several intervals and a floor."""
    assert CommittedState.decode(STATE.encode()) == STATE


def test_committed_state_encoding_is_exact_and_omits_unknowns() -> None:
    """The property value is sorted compact JSON; a writer's None fields are left out."""
    state = CommittedState(
        upper=3, writers={"b": WriterState(2, run="r"), "a": WriterState(0)}, table_uuid="u", root="r"
    )
    assert state.encode() == (
        '{"expired_before":0,"root":"r","table":"u","upper":3,"v":2,'
        '"writers":{"a":{"batches":{"ids":[]},"epoch":0},"b":{"batches":{"ids":[]},"epoch":2,"run":"r"}}}'
    )


def test_absent_property_is_the_initial_state() -> None:
    """A table fencedlake never committed to has upper 0, no writers, nothing expired, no identity yet."""
    state = CommittedState.decode(None)
    assert state == CommittedState(upper=0, writers={}, expired_before=0, table_uuid=None, root=None)


def test_missing_optional_fields_take_defaults() -> None:
    """``expired_before``, ``writers``, a writer's ``batches`` may be absent."""
    assert CommittedState.decode('{"v":2,"upper":5}') == CommittedState(upper=5)
    assert CommittedState.decode('{"v":2,"upper":5,"writers":{"w":{"epoch":1}}}').writers == {"w": WriterState(1)}


CORRUPT_STATES = {
    "not-json": "{upper: 3",
    "json-list": "[]",
    "json-null": "null",
    "no-upper": '{"v":2,"writers":{}}',
    "bad-upper": '{"v":2,"upper":"many"}',
    "unknown-writer-field": '{"v":2,"upper":1,"writers":{"w":{"epoch":0,"colour":"red"}}}',
    "writer-without-epoch": '{"v":2,"upper":1,"writers":{"w":{"run":"r"}}}',
    "writers-not-a-map": '{"v":2,"upper":1,"writers":[1]}',
    "batches-not-an-object": '{"v":2,"upper":1,"writers":{"w":{"epoch":0,"batches":[1,2]}}}',
    "batch-intervals-overlap": '{"v":2,"upper":1,"writers":{"w":{"epoch":0,"batches":{"ids":[[0,5],[3,9]]}}}}',
    "batch-interval-reversed": '{"v":2,"upper":1,"writers":{"w":{"epoch":0,"batches":{"ids":[[5,1]]}}}}',
}


@pytest.mark.parametrize("text", CORRUPT_STATES.values(), ids=CORRUPT_STATES.keys())
def test_corrupt_state_raises_corrupt_control_data(text: str) -> None:
    """A property value that is not a state is CorruptControlDataError naming the table and property."""
    with pytest.raises(CorruptControlDataError, match=rf"db\.events: property {STATE_PROPERTY} is not a valid") as e:
        CommittedState.decode(text, "db.events")
    assert e.value.retryable is False


@pytest.mark.parametrize("version", [None, 1, 4])
def test_state_of_another_version_says_upgrade(version: int | None) -> None:
    """A state written by another format version is refused with an upgrade hint, not misread."""
    body: dict[str, object] = {"upper": 1}
    if version is not None:
        body["v"] = version
    with pytest.raises(CorruptControlDataError, match=f"format version {version!r}.*upgrade fencedlake"):
        CommittedState.decode(json.dumps(body), "db.events")


# ---------------------------------------------------------------------------------------------- commit records

RECORD = CommitRecord(
    first=40,
    outcomes=(("a" * 32, "A"), ("b" * 32, "D"), ("c" * 32, "F"), ("d" * 32, "B")),
    metrics={"lat": 12, "att": 2, "conf": 1, "grp": 4, "apl": 1, "help": 0},
)


def test_commit_record_summary_keys_and_values_are_exact() -> None:
    """A record becomes exactly three summary properties: the range, token prefixes with codes, metrics."""
    assert encode_record(RECORD) == {
        "fencedlake.seqs": "40-43",
        "fencedlake.outcomes": f"{'a' * 12}:A,{'b' * 12}:D,{'c' * 12}:F,{'d' * 12}:B",
        "fencedlake.commit": "lat=12,att=2,conf=1,grp=4,apl=1,help=0",
    }


def test_commit_record_round_trips_with_token_prefixes_and_string_metrics() -> None:
    """decode(encode(r)) keeps the range and codes, tokens cut to TOKEN_CHARS, metrics as strings."""
    decoded = decode_record(encode_record(RECORD))
    assert decoded == CommitRecord(
        first=40,
        outcomes=tuple((t[:TOKEN_CHARS], c) for t, c in RECORD.outcomes),
        metrics={k: str(v) for k, v in RECORD.metrics.items()},
    )
    assert decoded.last == 43


def test_summary_carries_no_full_token_and_nothing_but_the_record() -> None:
    """Owner tokens are never stored whole in a snapshot summary (only the 12-character prefix)."""
    token = "f00dfeedcafe" + "5ec2e7" * 5
    summary = encode_record(CommitRecord(first=0, outcomes=((token, "A"),)))
    assert sorted(summary) == ["fencedlake.commit", "fencedlake.outcomes", "fencedlake.seqs"]
    assert all(token not in v for v in summary.values())
    assert summary["fencedlake.outcomes"] == "f00dfeedcafe:A"
    assert summary["fencedlake.commit"] == ""


def test_find_answers_only_inside_the_range() -> None:
    """find(seq) gives the (token prefix, code) at seq, None outside [first, last]."""
    record = decode_record(encode_record(RECORD))
    assert record is not None
    assert record.find(40) == ("a" * 12, "A")
    assert record.find(43) == ("d" * 12, "B")
    assert record.find(39) is None
    assert record.find(44) is None


@pytest.mark.parametrize(
    "summary",
    [{}, {"fencedlake.seqs": ""}, {"added-records": "10", "total-records": "10"}],
    ids=["empty", "empty-seqs", "other-engine"],
)
def test_summary_without_a_record_is_none(summary: dict[str, str]) -> None:
    """Snapshots of other engines (or fencedlake-less ones) carry no record."""
    assert decode_record(summary) is None


@pytest.mark.parametrize(
    "summary",
    [
        {"fencedlake.seqs": "3-5", "fencedlake.outcomes": "aaaaaaaaaaaa:A,bbbbbbbbbbbb:A"},
        {"fencedlake.seqs": "x-y", "fencedlake.outcomes": "aaaaaaaaaaaa:A"},
        {"fencedlake.seqs": "3", "fencedlake.outcomes": "aaaaaaaaaaaa:A"},
        {"fencedlake.seqs": "3-3", "fencedlake.outcomes": "aaaaaaaaaaaa:A", "fencedlake.commit": "lat"},
    ],
    ids=["count-mismatch", "not-numbers", "no-range", "bad-metrics"],
)
def test_malformed_record_raises_corrupt_control_data(summary: dict[str, str]) -> None:
    """A fencedlake record that does not parse is CorruptControlDataError, never a wrong outcome."""
    with pytest.raises(CorruptControlDataError, match="malformed fencedlake commit record"):
        decode_record(summary)
