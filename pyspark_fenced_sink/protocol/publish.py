"""Write-audit-publish: fast-forward main to a branch through the protocol (PROTOCOL.md §5.1; CLI).

``fencedlake publish TABLE BRANCH`` puts a ``publish`` entry into the WAL and
commits it like any write: the group commit applies it in WAL order, in a
commit of its own that moves main to the branch's tip (and adds an empty
snapshot on main carrying the commit record). Whether main may move is
decided at apply time (``protocol.replace.check_fast_forward``): if main
changed data since the branch forked, the entry is REFUSED and nothing moves.
"""

from __future__ import annotations

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.protocol.commit import commit_entry
from pyspark_fenced_sink.protocol.context import CommitContext, CommitResult
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, EntryKind, WalEntry, WriteMode
from pyspark_fenced_sink.protocol.fencing import new_token
from pyspark_fenced_sink.protocol.outcome import raise_for_outcome

__all__ = ["publish_branch", "publish_entry"]

#: The writer id recorded on publish entries.
PUBLISHER = "publish"


def publish_entry(branch: str) -> WalEntry:
    """The WAL entry that fast-forwards main to ``branch``.

    Raises:
        InvalidOptionsError: ``branch`` is main (nothing to publish from).
    """
    if branch in ("", MAIN_BRANCH):
        raise InvalidOptionsError(f"publish needs a branch other than {MAIN_BRANCH}, found {branch!r}")
    return WalEntry(kind=EntryKind.PUBLISH, token=new_token(), writer=PUBLISHER, mode=WriteMode.PUBLISH, branch=branch)


def publish_branch(ctx: CommitContext, branch: str) -> CommitResult:
    """Publish ``branch`` to main; returns once the entry is committed.

    Raises:
        WriteRejectedError: refused at apply time (the branch is missing, or main is not an ancestor).
        CommitOutcomeUnknownError: the entry is durable but its outcome is not known yet.
    """
    result = commit_entry(ctx, publish_entry(branch))
    raise_for_outcome(result, ctx.port.name)
    return result
