"""What one commit call has done so far, and how it ends (PROTOCOL.md §3-§6, §10; driver).

:class:`Progress` counts a ``commit_entry`` (or ``recover``) call's catalog
attempts, conflicts, unknown outcomes, commits, waits and helps; :func:`finish`
turns it into the :class:`~pyspark_fenced_sink.protocol.context.CommitResult`
and logs the one line per write (PROTOCOL.md §10). :func:`reload` re-reads the
table through catalog outages until the deadline (§4).
"""

from __future__ import annotations

import logging

from pyspark_fenced_sink.errors import CommitOutcomeUnknownError, FencedLakeError
from pyspark_fenced_sink.protocol.context import CommitContext, CommitResult
from pyspark_fenced_sink.protocol.entry import TOKEN_CHARS
from pyspark_fenced_sink.protocol.reconcile import Outcome
from pyspark_fenced_sink.protocol.state import CommitRecord
from pyspark_fenced_sink.protocol.view import TableView
from pyspark_fenced_sink.protocol.waiting import Role, WaitCause, Waiting

__all__ = ["PROGRESS_EVERY_S", "Progress", "backoff", "finish", "reload", "unknown_error"]

logger = logging.getLogger("pyspark_fenced_sink.protocol.commit")

#: A commit that waits (helping peers, behind a missing position, riding out a catalog outage) logs a line
#: at INFO this often.
PROGRESS_EVERY_S = 5.0


class Progress:
    """What one ``commit_entry`` call has done so far (the counters of its :class:`CommitResult`)."""

    def __init__(self, t0: float) -> None:
        self.t0 = self.noted = t0
        self.attempts = self.conflicts = self.unknowns = self.catalog_commits = self.for_peers = self.group = 0
        #: Commits sent whose outcome was unknown: (record, entries of peers it applied, its group size).
        self.unsure: list[tuple[CommitRecord, int, int]] = []
        #: How this writer waited for and came to its commits (None: ``recover``).
        self.waiting: Waiting | None = None

    def landed_unsure(self, record: CommitRecord) -> bool:
        """Count ``record`` as this writer's commit if it is one sent with an unknown outcome."""
        for sent, for_peers, group in self.unsure:
            if as_read(sent) == as_read(record):
                self.catalog_commits += 1
                self.for_peers += for_peers
                self.group = group
                return True
        return False

    def saw(self, cause: WaitCause) -> None:
        """Note that the write waited for ``cause`` (kept in its wait log, if it has one)."""
        if self.waiting is not None:
            self.waiting.log.note(cause)

    def note(self, ctx: CommitContext, what: str) -> None:
        """Log a progress line at INFO if the commit has been waiting for another PROGRESS_EVERY_S."""
        now = ctx.now()
        if now - self.noted < PROGRESS_EVERY_S:
            return
        self.noted = now
        logger.info(
            "fencedlake: commit on %s still %s after %.0fs (catalog attempts %d, conflicts absorbed %d, "
            "unknown outcomes %d)",
            ctx.port.name,
            what,
            now - self.t0,
            self.attempts,
            self.conflicts,
            self.unknowns,
        )


def as_read(record: CommitRecord) -> tuple[int, tuple[tuple[str, str], ...], dict[str, str]]:
    """A record as read back from a snapshot summary (token prefixes, metric values as text)."""
    outcomes = tuple((token[:TOKEN_CHARS], code) for token, code in record.outcomes)
    return record.first, outcomes, {k: str(v) for k, v in record.metrics.items()}


def reload(ctx: CommitContext, progress: Progress) -> TableView:
    """Re-read the committed version, riding out a catalog outage (e.g. a database restart) until the deadline."""
    failures = 0
    while True:
        try:
            return ctx.load()
        except FencedLakeError:
            raise
        except Exception as e:  # the catalog's database/transport errors: retry until the deadline
            failures += 1
            progress.saw(WaitCause.CATALOG)
            if ctx.now() > progress.t0 + ctx.max_wait_s:
                raise
            progress.note(ctx, f"re-reading the table through a catalog outage ({type(e).__name__})")
            ctx.sleep(backoff(ctx, failures))


def unknown_error(ctx: CommitContext, seq: int, why: str) -> CommitOutcomeUnknownError:
    """The outcome-unknown error of WAL entry ``seq``: ``why`` continues "table T: WAL seq S ..."."""
    return CommitOutcomeUnknownError(f"table {ctx.port.name}: WAL seq {seq} {why}", table=ctx.port.name, seq=seq)


def backoff(ctx: CommitContext, n: int) -> float:
    """Exponential backoff with full jitter."""
    return ctx.rng.uniform(0, min(ctx.backoff_cap_s, ctx.backoff_base_s * 2 ** min(n, 16)))


def finish(
    ctx: CommitContext, progress: Progress, seq: int | None, outcome: Outcome, detail: str, *, by_peer: bool
) -> CommitResult:
    """The result of the call ``progress`` describes, logged as the write's one INFO line."""
    p = progress
    waiting = p.waiting
    result = CommitResult(
        seq,
        outcome,
        detail,
        (ctx.now() - p.t0) * 1000,
        attempts=p.attempts,
        conflicts=p.conflicts,
        unknowns=p.unknowns,
        catalog_commits=p.catalog_commits,
        group=p.group,
        for_peers=p.for_peers,
        by_peer=by_peer,
        waits=waiting.log.polls if waiting is not None else 0,
        helper=waiting is not None and waiting.role is Role.HELPER and p.catalog_commits > 0,
        waited_for=waiting.log.cause.value if waiting is not None and waiting.log.cause is not None else None,
    )
    logger.info("fencedlake commit table=%s %s", ctx.port.name, result.summary())
    return result
