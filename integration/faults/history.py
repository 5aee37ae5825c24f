"""The history checker: what the writers recorded against what the table holds (Jepsen-style).

Every app prints one JSON record per attempt of a write (:func:`attempt`): the logical write
it belongs to (``op``: unique per app), the ids it carries, when it started and ended, and its
outcome or error -- the error's class, module, whether user code saw a typed fencedlake error
and, for ``CommitOutcomeUnknownError``, the WAL seq. :func:`check` then states, after the
table was recovered (the "next commit"):

* every write reported committed (APPLIED or DUPLICATE) is in the table exactly once;
* every write whose attempts all raised a plain error is absent;
* every ``CommitOutcomeUnknownError`` names a seq whose outcome the table records, and the
  write's rows are there exactly once iff some attempt succeeded or that outcome is APPLIED;
* no id is in the table that no write carried, none twice;
* every stream (``kind`` ``stream``) ends with one applied micro-batch per input;
* no attempt took longer than ``bound_s`` (``commit.max-wait-ms`` plus the stated bound);
* no raw exception reached user code: every error is one of fencedlake's kinds (``ServiceError``,
  ``StoreError``, ``CommitOutcomeUnknownError``, ...), never botocore's, psycopg2's, pyarrow's or an
  HTTP client's own.

Upserts are checked per key by :func:`check_upserts`.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Verdict", "attempt", "check", "check_upserts"]


def attempt(op: str, ids: tuple[int, int], t0: float, fn: Callable[[], Any], **fields: Any) -> dict[str, Any]:
    """Run one attempt of write ``op`` (ids ``start, count``) and return its history record; never raises.

    ``fn`` returns the write's outcome name (``APPLIED``/``DUPLICATE``) or raises what the user would see.
    """
    from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, fencedlake_error

    start = time.monotonic()
    record: dict[str, Any] = {"op": op, "start": ids[0], "count": ids[1], "t": round(start - t0, 2), **fields}
    try:
        record.update(ok=True, outcome=str(fn()))
    except Exception as e:
        typed = fencedlake_error(e)
        record.update(
            ok=False,
            error=type(typed or e).__name__,
            typed=typed is not None,
            module=type(e).__module__,
            message=str(typed or e)[:300].replace("\n", " "),
            unknown=isinstance(typed, CommitOutcomeUnknownError),
            seq=getattr(typed, "seq", None),
            where=[f"{Path(f.filename).stem}.{f.name}:{f.lineno}" for f in traceback.extract_tb(e.__traceback__)][-4:],
        )
    record["seconds"] = round(time.monotonic() - start, 2)
    return record


@dataclass
class Verdict:
    """What :func:`check` found: ``violations`` (empty: the history is exact) and counts for the report."""

    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def fail(self, message: str) -> None:
        self.violations.append(message)


def _raw(record: Mapping[str, Any]) -> bool:
    """True if user code saw an error that is not one of fencedlake's kinds (a client library's own, pyarrow's,
    pyiceberg's, ...): ``fencedlake_error`` found none in what was raised."""
    return not record.get("ok") and not record.get("typed")


def check(
    records: Iterable[Mapping[str, Any]],
    table_ids: list[int],
    outcome_at: Callable[[int], str | None],
    *,
    bound_s: float,
    spark_slack_s: float = 0.0,
    stream_batches: Mapping[str, tuple[int, list[int]]] | None = None,
    expected_extra: Iterable[int] = (),
) -> Verdict:
    """Check the history against the table (see the module docstring).

    Args:
        records: Every attempt record of every app (each with ``app`` and ``op``).
        table_ids: The table's ids with multiplicity.
        outcome_at: WAL seq -> the outcome code its commit record holds (``A`` applied), None if none.
        bound_s: The longest an attempt may take.
        spark_slack_s: Added to ``bound_s`` for a Spark application's writes (records with a ``kind``): Spark's own
            scheduling, Python worker start-up and task retries.
        stream_batches: stream writer id -> (inputs fed, batch ids applied for it, with repeats).
        expected_extra: Ids in the table that no write of the history carries (a seed row).
    """
    verdict = Verdict()
    by_op: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        by_op[(str(r["app"]), str(r["op"]))].append(r)
        verdict.counts["attempts"] += 1
        verdict.counts["ok" if r["ok"] else ("unknown" if r.get("unknown") else "error")] += 1
        bound = bound_s + (spark_slack_s if r.get("kind") else 0.0)
        if r["seconds"] > bound:
            verdict.fail(f"{r['app']}/{r['op']} took {r['seconds']} s, past the bound {bound:.0f} s")
        if _raw(r):
            verdict.fail(
                f"{r['app']}/{r['op']} raised a raw client error {r.get('module')}.{r.get('error')}: "
                f"{str(r.get('message'))[:160]}"
            )
    found = Counter(table_ids)
    expected: Counter[int] = Counter(expected_extra)
    for (app, op), attempts in sorted(by_op.items()):
        start, count = int(attempts[0]["start"]), int(attempts[0]["count"])
        ids = range(start, start + count)
        succeeded = [a for a in attempts if a["ok"]]
        unknown = [a for a in attempts if not a["ok"] and a.get("unknown")]
        for a in unknown:
            if a.get("seq") is None or outcome_at(int(a["seq"])) is None:
                verdict.fail(f"{app}/{op}: outcome unknown at seq {a.get('seq')} was not resolved by the next commit")
        applied = bool(succeeded) or any(a.get("seq") is not None and outcome_at(int(a["seq"])) == "A" for a in unknown)
        verdict.counts["writes"] += 1
        verdict.counts["writes_in_table" if applied else "writes_absent"] += 1
        if applied:
            expected.update(ids)
        present = [found[i] for i in ids]
        if applied and present != [1] * count:
            verdict.fail(
                f"{app}/{op} ({'reported committed' if succeeded else 'unknown, applied'}): ids {start}.. "
                f"found {Counter(present)} times, expected exactly once"
            )
        elif not applied and any(present):
            errors = sorted({str(a.get("error")) for a in attempts})
            verdict.fail(f"{app}/{op} raised {errors} (no unknown outcome applied) but its rows are in the table")
    extra = sorted((Counter(table_ids) - expected).elements())
    if extra:
        verdict.fail(f"{len(extra)} rows no write carried, or duplicated: {extra[:10]}")
    for writer, (inputs, batches) in (stream_batches or {}).items():
        repeated = [b for b, n in Counter(batches).items() if n > 1]
        if repeated or sorted(set(batches)) != list(range(inputs)):
            verdict.fail(f"stream {writer}: {inputs} inputs but batches applied {sorted(batches)}")
        verdict.counts["stream_batches"] += len(batches)
    return verdict


def check_upserts(
    records: Iterable[Mapping[str, Any]], rows: Mapping[int, list[int]], outcome_at: Callable[[int], str | None]
) -> Verdict:
    """Upserts: every key is in the table once, with the value of a write that may have landed.

    ``records`` carry ``keys`` (start, count) and ``value``; ``rows`` maps each key to the values the table
    holds for it. The value must be the greatest of the writes to that key that succeeded or may have
    applied, and at least that of the last write reported committed (upserts of one app are ordered).
    """
    verdict = Verdict()
    landed: dict[int, set[int]] = defaultdict(set)
    committed: dict[int, int] = {}
    for r in records:
        start, count = int(r["start"]), int(r["count"])
        value = int(r["value"])
        maybe = r["ok"] or (r.get("unknown") and r.get("seq") is not None and outcome_at(int(r["seq"])) == "A")
        for key in range(start, start + count):
            if maybe:
                landed[key].add(value)
            if r["ok"]:
                committed[key] = max(committed.get(key, value), value)
    for key, values in sorted(rows.items()):
        if len(values) != 1:
            verdict.fail(f"upsert key {key} is in the table {len(values)} times: {values}")
        elif key in landed and values[0] != max(landed[key]):
            verdict.fail(f"upsert key {key} holds {values[0]}, expected the newest landed value {max(landed[key])}")
    for key in committed:
        if key not in rows:
            verdict.fail(f"upsert key {key} was reported committed but is not in the table")
    verdict.counts["upsert_keys"] = len(rows)
    return verdict
