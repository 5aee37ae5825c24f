"""The WAL: entry codec, key layout, put-if-absent append (PROTOCOL.md step 3, §2.1; invariants I6, I7)."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import replace

import pytest

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, CorruptControlDataError, StoreError
from pyspark_fenced_sink.protocol.entry import (
    FORMAT_VERSION,
    EntryKind,
    WalEntry,
    WriteMode,
    decode_entry,
    encode_entry,
)
from pyspark_fenced_sink.protocol.layout import seq_of, wal_key
from pyspark_fenced_sink.protocol.wal import Wal, holes
from pyspark_fenced_sink.store.base import CountingStore
from pyspark_fenced_sink.store.local import LocalStore
from pyspark_fenced_sink.store.memory import MemoryStore


def _no_sleep(_: float) -> None:
    return None


def _entry(token: str, writer: str = "w", **kwargs: object) -> WalEntry:
    return WalEntry(kind=EntryKind.DATA, token=token, writer=writer, created_ms=1, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- codec

ENTRIES = {
    "data-full": WalEntry(
        kind=EntryKind.DATA,
        token="0123456789abcdef0123456789abcdef",
        writer="orders",
        epoch=7,
        run="run-1",
        query="query-1",
        batch=12,
        strict=True,
        mode="overwrite",
        files=({"p": "s3://b/t/data/w-orders~7~3~12~0-0-ab.parquet", "s": 0, "n": 10},),
        opened=3,
        created_ms=1_700_000_000_000,
        rows=10,
        spec_id=2,
    ),
    "data-zeros": WalEntry(kind=EntryKind.DATA, token="t0", writer="w", epoch=0, batch=0, spec_id=0, created_ms=0),
    "registration": WalEntry(
        kind=EntryKind.FENCE, token="t1", writer="w", run="r", query="q", strict=True, created_ms=3
    ),
    "data-anonymous": WalEntry(kind=EntryKind.DATA, token="t2", writer="anon-1", ephemeral=True, opened=5),
    "fence": WalEntry(kind=EntryKind.FENCE, token="t3", writer="orders", run="operator-fence"),
    "expire": WalEntry(kind=EntryKind.EXPIRE, token="t4", writer="gc", expire_before=0),
    "skip": WalEntry(kind=EntryKind.SKIP, token="t5", writer="operator", reason="object lost in bucket migration"),
    "dynamic-on-a-branch": WalEntry(
        kind=EntryKind.DATA,
        token="t6",
        writer="w",
        mode=WriteMode.DYNAMIC,
        files=({"p": "f.parquet", "s": 1, "pt": ["AQID", None]}, {"p": "g.parquet", "s": 1, "pt": [None, None]}),
        partitions=(("AQID", None), (None, None)),
        spec_id=1,
        branch="audit",
        properties=(("job", "nightly-42"), ("owner", "etl")),
    ),
    "replace-where": WalEntry(
        kind=EntryKind.DATA, token="t7", writer="w", mode=WriteMode.REPLACE_WHERE, row_filter="region = 'eu'"
    ),
    "publish": WalEntry(kind=EntryKind.PUBLISH, token="t8", writer="publish", mode=WriteMode.PUBLISH, branch="audit"),
}


@pytest.mark.parametrize(
    ("name", "version"),
    [("data-full", 2), ("fence", 2), ("dynamic-on-a-branch", 3), ("replace-where", 3), ("publish", 3)],
)
def test_entries_use_format_3_only_when_they_need_it(name: str, version: int) -> None:
    """Plain appends, overwrites and barriers stay format 2 (older readers keep working); new modes are 3."""
    assert json.loads(encode_entry(ENTRIES[name]))["v"] == version


@pytest.mark.parametrize(
    "field",
    [
        {"branch": "b"},
        {"props": {"k": "v"}},
        {"mode": "dynamic"},
        {"mode": "filter", "filter": "x = 1"},
        {"mode": "dynamic", "parts": [["a"]], "files": [{"p": "f.parquet", "s": 0, "pt": ["a"]}]},
    ],
)
def test_a_branch_or_new_mode_never_hides_in_a_format_2_entry(field: dict[str, object]) -> None:
    """Any version-3 field makes the encoding version 3, so a version-2 reader refuses it instead of misreading."""
    entry = decode_entry(json.dumps({"v": 3, "kind": "data", "token": "t", "writer": "w", **field}).encode())
    assert json.loads(encode_entry(entry))["v"] == 3


def test_entries_written_by_the_previous_release_still_decode() -> None:
    """A format-2 entry as the previous release wrote it reads back as an append to main with no new fields."""
    raw = b'{"created_ms":1,"files":[{"p":"x.parquet","s":0}],"kind":"data","rows":3,"token":"t","v":2,"writer":"w"}'
    entry = decode_entry(raw)
    assert (entry.mode, entry.target, entry.partitions, entry.row_filter, entry.properties) == (
        WriteMode.APPEND,
        "main",
        (),
        None,
        (),
    )
    assert entry.files == ({"p": "x.parquet", "s": 0},)


@pytest.mark.parametrize(("field", "value"), [("parts", "a"), ("parts", [[1]]), ("props", ["k"]), ("props", {"k": 1})])
def test_malformed_version_3_fields_are_corrupt(field: str, value: object) -> None:
    """A partition set or snapshot properties of the wrong shape is CorruptControlDataError, never misread."""
    raw = json.dumps({"v": 3, "kind": "data", "token": "t", "writer": "w", field: value}).encode()
    with pytest.raises(CorruptControlDataError, match=field):
        decode_entry(raw, "k")


def test_main_as_a_branch_name_is_main() -> None:
    """``branch="main"`` is the default branch (stored as none; format 2)."""
    entry = WalEntry(kind=EntryKind.DATA, token="t", writer="w", branch="main")
    assert (entry.branch, entry.target, json.loads(encode_entry(entry))["v"]) == (None, "main", 2)


@pytest.mark.parametrize("entry", ENTRIES.values(), ids=ENTRIES.keys())
def test_every_entry_kind_round_trips(entry: WalEntry) -> None:
    """decode(encode(e)) == e for every kind, including zero-valued epoch/batch/spec/expiry fields."""
    assert decode_entry(encode_entry(entry)) == entry


def test_encoding_is_compact_versioned_json_without_defaults() -> None:
    """The encoding is sorted compact JSON with ``v``; default-valued optional fields are left out."""
    raw = encode_entry(WalEntry(kind=EntryKind.FENCE, token="tok", writer="w", created_ms=5))
    assert raw == b'{"created_ms":5,"kind":"fence","token":"tok","v":2,"writer":"w"}'
    assert FORMAT_VERSION == 5  # entries that use nothing of version 3 stay readable by version-2 fencedlake


CORRUPT = {
    "not-json": b"{not json",
    "not-utf8": b"\xff\xfe\x00",
    "json-list": b"[1, 2]",
    "json-null": b"null",
    "no-kind": b'{"v":1,"token":"t","writer":"w"}',
    "no-token": b'{"v":1,"kind":"data","writer":"w"}',
    "bad-kind": b'{"v":1,"kind":"delete","token":"t","writer":"w"}',
    "bad-mode": b'{"v":1,"kind":"data","token":"t","writer":"w","mode":"merge"}',
    "bad-epoch": b'{"v":1,"kind":"data","token":"t","writer":"w","epoch":"seven"}',
    "bad-files": b'{"v":1,"kind":"data","token":"t","writer":"w","files":5}',
    "files-a-string": b'{"v":1,"kind":"data","token":"t","writer":"w","files":"abc"}',
    "files-not-objects": b'{"v":1,"kind":"data","token":"t","writer":"w","files":[{"p":"a"},5]}',
    "files-an-object": b'{"v":1,"kind":"data","token":"t","writer":"w","files":{"p":"a"}}',
    "empty": b"",
}


@pytest.mark.parametrize("raw", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_entry_raises_corrupt_control_data_naming_the_key(raw: bytes) -> None:
    """Anything that is not a valid entry is CorruptControlDataError naming the object (not retryable)."""
    with pytest.raises(CorruptControlDataError, match=r"WAL object tbl/wal/00000000000000000004\.json") as err:
        decode_entry(raw, "tbl/wal/00000000000000000004.json")
    assert err.value.retryable is False


@pytest.mark.parametrize("version", [None, 0, 1, 6])
def test_other_format_version_says_upgrade(version: int | None) -> None:
    """An entry of another (or no) format version is corrupt for this reader, and the message says upgrade."""
    body = {"kind": "data", "token": "t", "writer": "w"}
    if version is not None:
        body["v"] = version  # type: ignore[assignment]
    with pytest.raises(CorruptControlDataError, match=f"format version {version!r}.*upgrade fencedlake"):
        decode_entry(json.dumps(body).encode(), "k")


# ---------------------------------------------------------------------------------------------- key layout


def test_wal_key_is_zero_padded_to_twenty_digits() -> None:
    """Position 0 and the largest 20-digit position have fixed-width keys."""
    assert wal_key(0) == "wal/00000000000000000000.json"
    assert wal_key(1822) == "wal/00000000000000001822.json"
    assert wal_key(10**20 - 1) == "wal/99999999999999999999.json"


def test_wal_key_order_is_numeric_order() -> None:
    """Sorting keys as strings (what LIST does) sorts positions numerically."""
    seqs = [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 123456789, 10**19]
    shuffled = seqs[:]
    random.Random(7).shuffle(shuffled)
    assert [seq_of(k) for k in sorted(wal_key(s) for s in shuffled)] == seqs


def test_wal_key_rejects_negative_positions() -> None:
    """A negative position has no key."""
    with pytest.raises(ValueError, match="got -1"):
        wal_key(-1)


@pytest.mark.parametrize(
    ("key", "seq"),
    [
        ("wal/00000000000000000042.json", 42),
        ("root/_fencedlake/u/wal/00000000000000000042.json", 42),
        ("00000000000000000042.json", None),  # not under wal/
        ("checkpoints/00000000000000000042.json", None),
        ("wal/0000000000000000042.json", None),  # 19 digits
        ("wal/00000000000000000042.json.tmp", None),
        ("wal/.00000000000000000042.json.1f2e.tmp", None),
        ("wal/0000000000000000004x.json", None),
        ("wal/00000000000000000042.txt", None),
        ("runs/w/r.json", None),
    ],
)
def test_seq_of_parses_only_wal_keys(key: str, seq: int | None) -> None:
    """seq_of inverts wal_key and ignores temporary files and other objects."""
    assert seq_of(key) == seq


# ---------------------------------------------------------------------------------------------- scan / read


def test_scan_lists_positions_from_a_start() -> None:
    """scan(start) returns the present positions >= start, sorted, ignoring foreign objects."""
    store = MemoryStore()
    for seq in (0, 1, 2, 5, 9):
        store.put_if_absent(wal_key(seq), b"{}")
    store.put_if_absent("wal/notes.txt", b"x")
    wal = Wal(store)
    assert wal.scan(0) == [0, 1, 2, 5, 9]
    assert wal.scan(2) == [2, 5, 9]
    assert wal.scan(3) == [5, 9]
    assert wal.scan(10) == []


def test_scan_is_one_list_request() -> None:
    """scan costs exactly one LIST and no GET."""
    counting = CountingStore(MemoryStore())
    Wal(counting).scan(4)
    assert dict(counting.counts) == {"LIST": 1}


def test_read_returns_the_entry_or_none_and_names_a_corrupt_key() -> None:
    """read(seq) decodes the object at wal_key(seq); a corrupt one names the label and key."""
    store = MemoryStore()
    entry = _entry("tok")
    store.put_if_absent(wal_key(0), encode_entry(entry))
    store.put_if_absent(wal_key(1), b"garbage")
    wal = Wal(store, label="db.events")
    assert wal.read(0) == entry
    assert wal.read(2) is None
    with pytest.raises(CorruptControlDataError, match=r"db\.events/wal/00000000000000000001\.json"):
        wal.read(1)


# ---------------------------------------------------------------------------------------------- append


def test_append_to_an_empty_wal_takes_the_start_position_with_one_put() -> None:
    """An uncontended append costs one LIST and one conditional PUT, at position ``start``."""
    counting = CountingStore(MemoryStore())
    seq = Wal(counting, sleep=_no_sleep).append(_entry("a"), start=3)
    assert seq == 3
    assert dict(counting.counts) == {"LIST": 1, "PUT_IF_ABSENT": 1}


def test_append_goes_after_the_tail_it_sees() -> None:
    """With positions up to 4 present, the next append lands at 5."""
    store = MemoryStore()
    wal = Wal(store, sleep=_no_sleep)
    assert [wal.append(_entry(f"t{i}"), start=0) for i in range(5)] == [0, 1, 2, 3, 4]
    assert wal.append(_entry("t5"), start=2) == 5
    assert [decode_entry(store.objects[wal_key(s)]).token for s in range(6)] == ["t0", "t1", "t2", "t3", "t4", "t5"]


@pytest.mark.parametrize("seed", range(6))
def test_append_that_loses_its_position_jumps_on_without_listing_again(seed: int) -> None:
    """A peer takes the position between our LIST and our PUT: we read its token and try one of the next
    positions without a second LIST; a position we jump over is declared a hole by our entry's floor."""
    inner = MemoryStore()
    store = CountingStore(inner)
    peer = Wal(inner, sleep=_no_sleep)
    raced: list[str] = []

    def before_put(key: str) -> None:
        if not raced:
            raced.append(key)
            peer.append(_entry("peer"), start=0)  # lands at 0 while we are about to put 0
        return None

    inner.before_put = before_put
    claimed = Wal(store, sleep=_no_sleep, rng=random.Random(seed)).claim(_entry("mine"), start=0)
    assert raced == [wal_key(0)]
    assert claimed.seq in (1, 2) and claimed.ahead == (0,)
    assert (store.counts["LIST"], store.counts["PUT_IF_ABSENT"], store.counts["GET"]) == (1, 2, 1)
    on_store = {seq_of(k): decode_entry(v) for k, v in inner.objects.items()}
    assert {s: e.token for s, e in on_store.items()} == {0: "peer", claimed.seq: "mine"}
    assert claimed.entry.floor == 0 == on_store[claimed.seq].floor  # the first position it could have taken
    assert holes(on_store, 0) == frozenset(range(1, claimed.seq))


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_racing_appenders_take_distinct_positions_and_declare_every_hole(backend: str, tmp_path: object) -> None:
    """Four threads append 25 entries each at once: every entry once, and every empty position below the
    tail is a hole an entry above declares (none is a gap, which would wait for an operator)."""
    inner = MemoryStore() if backend == "memory" else LocalStore(str(tmp_path))
    if isinstance(inner, MemoryStore):
        inner.before_op = lambda kind, key: time.sleep(0)  # yield the GIL between requests: more interleavings
    store = CountingStore(inner)
    barrier = threading.Barrier(4)
    positions: dict[str, int] = {}
    errors: list[BaseException] = []

    def appender(name: str) -> None:
        wal = Wal(store, sleep=_no_sleep)
        barrier.wait()
        try:
            for i in range(25):
                token = f"{name}-{i:02d}"
                positions[token] = wal.append(_entry(token, writer=name), start=0)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(f"w{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.counts["GET"] > 0, "no append ever lost a position: the race was not exercised"
    wal = Wal(store)
    present = wal.scan(0)
    assert len(present) == 100
    entries = {s: e for s, e in zip(present, wal.read_many(present), strict=True) if e is not None}
    assert {e.token: s for s, e in entries.items()} == positions
    assert holes(entries, 0) == frozenset(range(present[-1] + 1)) - set(present)
    for name in ("w0", "w1", "w2", "w3"):
        own = [positions[f"{name}-{i:02d}"] for i in range(25)]
        assert own == sorted(own), f"{name}'s appends are not in its own order: {own}"


def test_append_resolves_its_own_lost_after_put_to_its_own_seq() -> None:
    """The put lands but its response is lost: the retry reads its own token back; no duplicate entry."""
    store = MemoryStore()
    faults = ["lost-after"]
    store.before_put = lambda key: faults.pop() if faults else None
    entry = _entry("mine")
    seq = Wal(store, sleep=_no_sleep).append(entry, start=0)
    assert seq == 0
    assert store.objects == {wal_key(0): encode_entry(entry)}


def test_append_retries_a_lost_before_put_on_the_same_position() -> None:
    """The put never reached the store: retried on the same key, created there."""
    store = MemoryStore()
    puts: list[str] = []
    faults = ["lost-before", "lost-before"]

    def before_put(key: str) -> str | None:
        puts.append(key)
        return faults.pop() if faults else None

    store.before_put = before_put
    assert Wal(store, sleep=_no_sleep).append(_entry("mine"), start=0) == 0
    assert puts == [wal_key(0)] * 3
    assert list(store.objects) == [wal_key(0)]


def test_append_that_cannot_confirm_an_ambiguous_put_is_outcome_unknown() -> None:
    """Every attempt ambiguous: CommitOutcomeUnknownError carrying the position (never a guess)."""
    store = MemoryStore()
    store.before_put = lambda key: "lost-before"
    wal = Wal(store, label="db.events", sleep=_no_sleep)
    with pytest.raises(CommitOutcomeUnknownError, match=r"db\.events/wal/00000000000000000002\.json") as err:
        wal.append(_entry("mine"), start=2)
    assert err.value.seq == 2
    assert isinstance(err.value.__cause__, StoreError)


def test_append_definite_store_failure_is_a_store_error_not_unknown() -> None:
    """Puts that definitely failed leave nothing durable: StoreError (retryable), not outcome unknown."""

    class Refusing(MemoryStore):
        def put_if_absent(self, key: str, data: bytes) -> bool:
            raise StoreError("403 AccessDenied", ambiguous=False)

    with pytest.raises(StoreError) as err:
        Wal(Refusing(), sleep=_no_sleep).append(_entry("mine"), start=0)
    assert not isinstance(err.value, CommitOutcomeUnknownError)
    assert err.value.ambiguous is False


def test_append_after_a_peer_token_never_overwrites() -> None:
    """A position holding another entry keeps it; the entry with a different token goes to the next one."""
    store = MemoryStore()
    first = _entry("first")
    store.put_if_absent(wal_key(0), encode_entry(first))
    seq = Wal(store, sleep=_no_sleep).append(replace(first, token="second"), start=0)
    assert seq == 1
    assert decode_entry(store.objects[wal_key(0)]).token == "first"
    assert decode_entry(store.objects[wal_key(1)]).token == "second"


# ---------------------------------------------------------------------------- truncation, checkpoints, skips


def _filled(count: int) -> Wal:
    wal = Wal(MemoryStore(), sleep=_no_sleep)
    for s in range(count):
        wal.append(_entry(f"t{s}"), start=s)
    return wal


@pytest.mark.parametrize(("upper", "kept"), [(0, 0), (1, 0), (2, 1), (7, 6)])
def test_truncation_keeps_the_object_below_the_upper(upper: int, kept: int) -> None:
    """Positions below ``upper - 1`` are deleted; ``upper - 1`` and everything pending stay."""
    wal = _filled(10)
    assert wal.truncatable(upper) == kept
    assert wal.truncate(upper) == kept
    assert wal.scan(0) == list(range(kept, 10))


def test_a_stale_writer_cannot_put_into_a_truncated_position() -> None:
    """After truncation at upper 7, an append from a long-stale upper (2) lands after the tail, never below 7."""
    wal = _filled(7)
    wal.truncate(7)
    assert wal.append(_entry("late"), start=2) == 7
    fence_seq = wal.append(WalEntry(kind=EntryKind.FENCE, token="f", writer="w"), start=0)
    assert fence_seq == 8


def test_checkpoints_keep_the_newest_state_at_or_below_an_upper() -> None:
    """latest_checkpoint returns the newest checkpoint not above the asked upper; an existing one is kept."""
    wal = Wal(MemoryStore())
    assert wal.latest_checkpoint(100) is None
    wal.put_checkpoint(5, "state-5")
    wal.put_checkpoint(9, "state-9")
    wal.put_checkpoint(9, "other")  # put-if-absent: the first one stays
    assert wal.latest_checkpoint(100) == (9, "state-9")
    assert wal.latest_checkpoint(8) == (5, "state-5")
    assert wal.latest_checkpoint(4) is None
    assert wal.scan(0) == []  # checkpoints are not WAL positions


def test_put_skip_takes_exactly_a_free_position() -> None:
    """A skip entry lands at the asked position only if it is free; it never overwrites an entry."""
    wal = _filled(2)
    skip = WalEntry(kind=EntryKind.SKIP, token="k", writer="operator", reason="lost")
    assert wal.put_skip(1, skip) is False
    assert wal.read(1).token == "t1"  # type: ignore[union-attr]
    assert wal.put_skip(5, skip) is True
    assert wal.read(5) == skip
    assert (wal.occupied(5), wal.occupied(4)) == (True, False)


def test_run_registry_records_the_first_epoch_of_a_run() -> None:
    """A run's registration holds the epoch it registered with; a second registration keeps the first."""
    wal = Wal(MemoryStore())
    assert wal.run_epoch("w", "run-1") is None
    assert wal.register_run("w", "run-1", 4) == 4
    assert wal.register_run("w", "run-1", 9) == 4
    assert wal.run_epoch("w", "run-1") == 4
    assert wal.run_epoch("w", "run-2") is None


def test_corrupt_entry_message_names_the_way_out() -> None:
    """The error for a damaged entry says to move it aside and skip its position."""
    with pytest.raises(CorruptControlDataError, match=r"fencedlake skip TABLE 4 --reason"):
        decode_entry(b"{broken", "root/wal/00000000000000000004.json")


# ---------------------------------------------------------------------------------------------- kept entries


@pytest.fixture
def kept() -> object:
    from pyspark_fenced_sink.protocol import wal as wal_module

    wal_module.KEPT.clear()
    yield wal_module.KEPT
    wal_module.KEPT.clear()


def test_a_process_reads_a_position_once_per_control_root(kept: object) -> None:
    """Two Wal objects of one control root (two writes of one process): one GET; another root reads its own."""
    store = CountingStore(MemoryStore())
    Wal(store).append(_entry("a" * 32), 0)
    first, second = Wal(store, keep="mem://t/_fencedlake/u1"), Wal(store, keep="mem://t/_fencedlake/u1")
    assert first.read(0) == second.read(0) == _entry("a" * 32)
    assert store.counts["GET"] == 1
    other = Wal(store, keep="mem://t/_fencedlake/u2")  # the table dropped and created again: a new uuid, a new root
    assert other.read(0) == _entry("a" * 32) and store.counts["GET"] == 2
    plain = Wal(store)  # no root: read each time (the model and the tests that damage objects)
    plain.read(0)
    plain.read(0)
    assert store.counts["GET"] == 4


def test_an_empty_position_and_a_damaged_object_are_never_kept(kept: object) -> None:
    store = CountingStore(MemoryStore())
    wal = Wal(store, keep="root")
    assert wal.read(0) is None
    Wal(store).append(_entry("b" * 32), 0)
    assert wal.read(0) == _entry("b" * 32), "an empty position read earlier is read again"
    store.inner.put_if_absent(wal_key(1), b"{not json")
    for _ in range(2):
        with pytest.raises(CorruptControlDataError):
            wal.read(1)
    assert store.counts["GET"] == 4


def test_the_writer_keeps_the_entry_it_put_so_peers_of_its_process_need_not_read_it(kept: object) -> None:
    store = CountingStore(MemoryStore())
    seq = Wal(store, keep="root").append(_entry("c" * 32, floor=None), 0)
    peer = Wal(store, keep="root")
    assert peer.read_present([seq]) == {seq: decode_entry(store.inner.get(wal_key(seq)))}
    assert store.counts["GET"] == 0, "the peer read nothing: the writer kept what it put"


def test_a_lost_race_keeps_the_peer_entry_it_read(kept: object) -> None:
    """A put answered "exists" reads the object to learn whose it is (I7); that read is the last of the position."""
    store = CountingStore(MemoryStore())
    theirs = _entry("e" * 32, floor=None)
    store.inner.objects[wal_key(0)] = encode_entry(theirs)
    wal = Wal(store, keep="root")
    assert wal.put_skip(0, _entry("f" * 32, floor=None)) is False  # the race for position 0, lost
    gets = store.counts["GET"]
    assert gets == 1 and wal.read(0) == theirs
    assert store.counts["GET"] == gets, "the entry read to resolve the race was kept"
    store.inner.objects[wal_key(1)] = b"{damaged"
    assert wal.put_skip(1, _entry("g" * 32, floor=None)) is False
    with pytest.raises(CorruptControlDataError):
        wal.read(1)  # a damaged object is never kept: each read raises again


def test_kept_entries_stay_within_their_byte_budget(kept: object) -> None:
    from pyspark_fenced_sink.protocol.wal import KeptEntries

    small = KeptEntries(budget=16 * 200)
    entry = _entry("d" * 32)
    for seq in range(40):
        small.keep("root", seq, entry, 100)
    assert len(small) == 32 and small.get("root", 0) is None and small.get("root", 39) is entry
    small.keep("root", 99, entry, 16 * 200)  # larger than a sixteenth of the budget: not kept
    assert small.get("root", 99) is None and len(small) == 32
