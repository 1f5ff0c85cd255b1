"""After the groups-archived step: catch the recall index up with archived groups it lacks, bounded.

A recall store that was down when a commit archived groups (the index
step failed and said so), or whose server restarted without persistence,
lacks archived groups that nothing would otherwise index again until an
operator runs ``agentium recall rebuild``. So after each successful
``index_groups`` the engine asks the store which seqs below the first one
it just indexed have no indexed group
(:meth:`~agentium_harness._ports.recall.RecallStore.unindexed_groups`; a
store that cannot tell answers ``None``), reads up to
:data:`CATCH_UP_GROUPS` of them from the archive in one bounded read, and
indexes those that prove they are this session's
(:func:`.group_identity.split_foreign`). Each commit that archives does a
little more, and a diagnostic says what was caught up, what was refused and
whether more is left.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Final

from .._errors import ContractViolationError
from .._history import MessageGroup
from .._ports._base import capabilities_of
from .._ports.archive import ArchiveReceipt, HistoryArchive
from .._ports.erasure import SeqRange
from .._ports.recall import RecallStore
from .._scope import SessionKey
from .._text import error_text
from .._validators import exact_int
from .adapter_lists import adapter_method, bounded_list, listed, read_on
from .group_identity import split_foreign
from .index_recheck import drop_erased_meanwhile
from .lifecycle import Ticket
from .results import Diagnostic, Severity

__all__ = ["CATCH_UP_GROUPS", "CATCH_UP_SPAN", "catch_up_index", "leading_erased_end"]

#: Most archived groups one commit indexes for the recall index to catch up.
CATCH_UP_GROUPS: Final = 16
#: Most seqs one catch-up reads from the archive (missing groups may lie between indexed ones).
CATCH_UP_SPAN: Final = 64


def _seqs(seqs: Sequence[int]) -> str:
    """``0-3, 7`` for ``[0, 1, 2, 3, 7]``."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def leading_erased_end(erased: Sequence[SeqRange]) -> int:
    """Where a session's groups begin after erasures: the end of the erased ranges that start at seq 0."""
    start = 0
    for span in sorted(erased):
        if span.start > start:
            break
        start = max(start, span.stop)
    return start


def _takes_start_seq(store: RecallStore) -> bool:
    """True if the store's ``unindexed_groups`` takes ``start_seq`` (stores written before it did not)."""
    try:
        parameters = inspect.signature(type(store).unindexed_groups).parameters
    except (TypeError, ValueError):
        return False
    return "start_seq" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _checked(missing: object, end_seq: int, who: str = "recall store unindexed_groups") -> list[int] | None:
    """The store's answer if it keeps its contract (ascending distinct seqs below ``end_seq``), else None."""
    if missing is None:
        return []
    try:
        # Read to one past the bound at most, never by the answer's own length (it may lie).
        given = listed(missing, CATCH_UP_GROUPS, who, "seqs")
    except ContractViolationError:
        return None
    if len(given) > CATCH_UP_GROUPS:
        return None
    # Each read as the int it holds: a subclass's own comparisons could pass any bound here,
    # and its ``__eq__``/``__hash__`` then pick other groups than the seq it holds.
    exact = [s if type(s) is int else exact_int(s) for s in given]
    seqs = [s for s in exact if s is not None]
    if len(seqs) != len(exact):
        return None
    if not all(0 <= s < end_seq for s in seqs):
        return None
    if seqs != sorted(set(seqs)):
        return None
    return seqs


async def catch_up_index(
    store: RecallStore,
    archive: HistoryArchive,
    ticket: Ticket,
    key: SessionKey,
    end_seq: int,
    erased: Sequence[SeqRange] = (),
) -> list[Diagnostic]:
    """Index up to :data:`CATCH_UP_GROUPS` archived groups below ``end_seq`` the recall index lacks.

    Called after ``index_groups`` succeeded for groups from ``end_seq`` on.
    Every failure is a diagnostic, never an error: the commit stands, and
    the next archiving commit tries again. Groups an erasure removed
    (``erased``, the session's erased ranges) are not missing: the store is
    asked from the end of the leading erased range on (``start_seq``;
    retention erases the oldest groups, so the lowest gaps it reports are
    groups lost, not erased), and erased seqs it still lists are passed
    over. (A store whose ``unindexed_groups`` takes no ``start_seq`` lists
    the lowest missing seqs first, so behind a long erased range the
    catch-up finds nothing more; ``agentium recall rebuild`` does.)
    """
    if type(store).unindexed_groups is RecallStore.unindexed_groups or end_seq <= 0:
        return []  # the store cannot tell what it lacks (the port's default)
    start = leading_erased_end(erased)
    if start >= end_seq:
        return []
    try:
        if start > 0 and _takes_start_seq(store):
            answer = await ticket.call(
                "recall index",
                lambda ctx: store.unindexed_groups(key, end_seq, CATCH_UP_GROUPS, ctx, start_seq=start),
            )
        else:
            answer = await ticket.call(
                "recall index", lambda ctx: store.unindexed_groups(key, end_seq, CATCH_UP_GROUPS, ctx)
            )
    except Exception as exc:
        why = error_text(exc)
        return [_failed(f"the recall store could not say which groups it lacks ({why})")]
    who = adapter_method("recall store", store, "unindexed_groups")
    missing = _checked(answer, end_seq, who)
    if missing is not None:
        missing = [seq for seq in missing if not any(seq in span for span in erased)]
    if missing is None:
        # The answer's type only: its own repr is adapter code, and could raise or never end.
        return [
            Diagnostic(
                "contract_violation",
                f"{who} returned a {type(answer).__name__} that breaks its contract: it must be "
                f"at most {CATCH_UP_GROUPS} ascending distinct seqs below {end_seq}; nothing was caught up",
                Severity.WARNING,
            )
        ]
    if not missing:
        return []
    caps = capabilities_of(archive)
    if not getattr(caps, "bounded_reads", False):
        return [
            Diagnostic(
                "recall_index_behind",
                f"the recall index lacks archived groups {_seqs(missing)} of this session, and the archive "
                "cannot be read back (no bounded_reads); run `agentium recall rebuild`",
                Severity.WARNING,
            )
        ]
    first = missing[0]
    span = min(missing[-1] - first + 1, CATCH_UP_SPAN)
    wanted = {s for s in missing if s < first + span}
    refused: list[int] = []
    try:
        who = adapter_method("archive", archive, "read_groups")
        # Read to one past the span at most (an answer that never ends cannot hold the commit), and
        # an answer over it is refused whole (a ContractViolationError, reported below): nothing indexed.
        # A shorter answer is read on (an archive may bound a call's bytes), not taken for missing groups:
        # every page within the one call's deadline, which an archive answering a group a read
        # cannot multiply (the catch-up holds the turn that archived).
        raw = await ticket.call(
            "archive read",
            lambda ctx: read_on(lambda at, n: archive.read_groups(key, at, n, ctx), first, span, who),
        )
        page = bounded_list(raw, span, who, "groups", MessageGroup)
        # ``type(g.seq) is int``: a group's validator keeps its seq exact; one set past it is refused.
        groups = [g for g in page if type(g.seq) is int and g.seq in wanted]
        groups = groups[:CATCH_UP_GROUPS]
        # Only a group that proves it is this session's is indexed into its recall scope: the store
        # refuses another session's retained scope but not a group with none, so an archive answering
        # with another session's group stripped of its record would have recall show it to the model.
        # No receipt is consulted: the engine commits every group with a retained record.
        groups, refused = split_foreign(key, groups)
        if groups:
            # The archive checked each group against its stored digest when it read it (its contract).
            receipts = [ArchiveReceipt(g.seq, g.digest, "catch-up") for g in groups]
            await ticket.call("recall index", lambda ctx: store.index_groups(key, groups, receipts, ctx))
    except Exception as exc:
        why = error_text(exc)
        return [_failed(f"archived groups {_seqs(sorted(wanted))} could not be indexed ({why})")]
    # Read from the archive, then indexed: an erasure in another process may have come between.
    notes: list[Diagnostic] = await drop_erased_meanwhile(store, archive, ticket, key, groups)
    if groups:
        notes.append(
            Diagnostic(
                "recall_index_caught_up",
                f"indexed {len(groups)} archived group(s) the recall index lacked (seqs "
                f"{_seqs([g.seq for g in groups])})",
            )
        )
    if refused:
        # Not marked indexed: the store lists the seqs again, so each archiving commit reads and
        # refuses them again (one bounded read, like any catch-up) and says so, until the archive
        # answers with this session's groups or an operator sees to it. The good groups listed with
        # them are indexed meanwhile; were the whole answer refused groups, the catch-up stops there
        # (never skipping past seqs it could not check) and `agentium recall rebuild` goes on past them.
        notes.append(
            Diagnostic(
                "recall_index_behind",
                f"the archive returned groups {_seqs(refused)} that cannot be shown to be this session's "
                "(their retained record is missing or names another); they were not indexed for recall. "
                "Check the archive, "
                "then run `agentium recall rebuild`",
                Severity.WARNING,
            )
        )
    absent = sorted(wanted - {g.seq for g in groups} - set(refused))
    if absent:
        notes.append(
            Diagnostic(
                "recall_index_behind",
                f"the recall index lacks archived groups {_seqs(absent)}, which the archive did not return; "
                "run `agentium recall rebuild`",
                Severity.WARNING,
            )
        )
    elif len(missing) >= CATCH_UP_GROUPS or len(wanted) < len(missing):
        notes.append(
            Diagnostic(
                "recall_index_behind",
                f"the recall index may lack more archived groups of this session; each archiving commit "
                f"indexes up to {CATCH_UP_GROUPS} more, or run `agentium recall rebuild`",
                Severity.WARNING,
            )
        )
    return notes


def _failed(why: str) -> Diagnostic:
    return Diagnostic(
        "recall_catch_up_failed",
        f"catching the recall index up failed: {why}; the next archiving commit tries again, or run "
        "`agentium recall rebuild`",
        Severity.WARNING,
    )
