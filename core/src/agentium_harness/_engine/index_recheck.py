"""After indexing archived groups for recall: take back those an erasure removed meanwhile.

An erasure fences a session in every process sharing the session store, but
only calls that load the session after its record was written see the
fence: a commit in another process that loaded the session just before can
still index the groups it archived after the erasure's recall step (and
after its verification), leaving erased text in the recall index of a
tombstone that says ``complete``. So the indexing side checks, after its
write, that each group it indexed is still in the archive with the same
digest. An erasure erases the recall index before the archive, and verifies
every store after both: either this read still finds a group (and the
erasure's verification, which comes later, finds the index entry), or the
group is gone and its entry is erased here.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._history import MessageGroup
from .._ports._base import capabilities_of
from .._ports.archive import HistoryArchive
from .._ports.erasure import EraseTarget, SeqRange
from .._ports.recall import RecallStore
from .._scope import SessionKey
from .._text import error_text
from .adapter_lists import adapter_method, bounded_list, read_on
from .lifecycle import Ticket
from .results import Diagnostic, Severity

__all__ = ["drop_erased_meanwhile"]


def _ranges(seqs: Sequence[int]) -> list[SeqRange]:
    """``seqs`` (ascending, distinct) as the fewest contiguous ranges."""
    ranges: list[SeqRange] = []
    for seq in seqs:
        if ranges and ranges[-1].stop == seq:
            ranges[-1] = SeqRange(ranges[-1].start, seq + 1)
        else:
            ranges.append(SeqRange(seq, seq + 1))
    return ranges


async def drop_erased_meanwhile(
    store: RecallStore,
    archive: HistoryArchive | None,
    ticket: Ticket,
    key: SessionKey,
    groups: Sequence[MessageGroup],
) -> list[Diagnostic]:
    """Erase from ``store`` the just indexed ``groups`` the archive no longer holds as indexed.

    Nothing to do (and nothing read) without ``groups`` or when the archive
    cannot be read back by seq (no ``bounded_reads``). A failure is a
    warning diagnostic: the commit stands.
    """
    if archive is None or not groups or not getattr(capabilities_of(archive), "bounded_reads", False):
        return []
    seqs = sorted({g.seq for g in groups})
    first, span = seqs[0], seqs[-1] - seqs[0] + 1
    try:
        who = adapter_method("archive", archive, "read_groups")
        # Read to one past the span at most; an answer over it, or not a sequence of groups, is
        # refused (the warning below) before anything is erased on its word. A shorter answer is
        # read on (an archive may bound a call's bytes): the groups past it were not erased. Every
        # page within the one call's deadline: an archive answering a group a read cannot multiply it.
        raw = await ticket.call(
            "archive read",
            lambda ctx: read_on(lambda at, n: archive.read_groups(key, at, n, ctx), first, span, who),
        )
        page = bounded_list(raw, span, who, "groups", MessageGroup)
        held = {g.seq: g.digest for g in page if type(g.seq) is int}
        gone = sorted({g.seq for g in groups if held.get(g.seq) != g.digest})
        if not gone:
            return []
        target = EraseTarget.groups_of(key, _ranges(gone))
        await ticket.call("recall erase", lambda ctx: store.erase(target, ctx))
    except Exception as exc:
        return [
            Diagnostic(
                "recall_index_erased_meanwhile",
                f"could not check that the groups just indexed for recall were not erased meanwhile "
                f"({error_text(exc)}); if an erasure of this session ran at the same time, run it again",
                Severity.WARNING,
            )
        ]
    return [
        Diagnostic(
            "recall_index_erased_meanwhile",
            f"archived groups {gone} were erased while they were being indexed for recall (an erasure "
            "in another process); their index entries were erased too",
            Severity.WARNING,
        )
    ]
