"""``forget`` that reaches recall: a forgotten fact's sources are found, reported, and erased on request.

A memory fact remembers the message groups it came from (its provenance).
Forgetting the fact removes its text from memory, but the groups it came
from still hold that text: in the archive and the recall index (a later
recall in the session could surface it), in the session's resident history,
in a task summary citing them. ``runtime.forget`` therefore:

1. reads the fact's provenance over all its revisions (before forgetting
   removes it), then forgets the fact through the memory manager. A history
   that may be truncated (a fact written before ``MAX_FACT_REVISIONS``, or a
   store ignoring it) is refused with :class:`MemoryRejectedError` before
   anything changes: forgetting would clear sources the read could not see;
2. looks up each source group and says where its text still is
   (:class:`SourceHolder`): archived, resident, cited by the summary, or
   already gone;
3. with ``erase_sources=True`` (an operator erasure: reason and attestation
   required), erases the archived ones from the archive and the recall
   index as a groups erasure (a tombstone per session), and empties a task
   summary that cited them (its text may state the fact). A resident group
   cannot be erased without erasing its session: it is reported as still
   holding the text.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .._errors import InvalidArgumentError, MemoryRejectedError
from .._ports.erasure import EraseLevel, EraseTarget, ErasureKind, SeqRange
from .._ports.memory import MAX_LOOKUP_LIMIT, FactStatus, GroupRef, MemoryAck, MemoryScope
from .._scope import SessionKey, validate_id
from .erased_groups import merge_ranges
from .erasure import ErasureResult, OperatorAttestation, check_request
from .load import load_session

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["ForgetResult", "SourceHolder", "SourcePlace", "SourceState", "forget_fact"]

_log = logging.getLogger("agentium.engine.forget")


class SourcePlace(enum.StrEnum):
    """Where a forgotten fact's source group keeps its text."""

    #: In the archive, and in the recall index that follows it: recall in its session can surface it.
    ARCHIVED = "archived"
    #: In the session's resident history: in every request of that session until it is archived.
    RESIDENT = "resident"
    #: Cited by the session's task summary, whose text may state the fact.
    SUMMARY = "summary"
    #: Not stored any more: erased earlier, or its session does not exist.
    GONE = "gone"


class SourceState(enum.StrEnum):
    """Whether the text is still there after the call."""

    HOLDS_TEXT = "holds_text"
    ERASED = "erased"


@attrs.frozen(slots=True)
class SourceHolder:
    """One place a forgotten fact's source group (``session``, ``seq``) keeps its text, and its state now."""

    session: SessionKey
    seq: int
    place: SourcePlace = attrs.field(converter=SourcePlace)
    state: SourceState = attrs.field(converter=SourceState)


@attrs.frozen(slots=True)
class ForgetResult:
    """What ``runtime.forget`` did: the memory store's acknowledgment, the sources, the erasures.

    ``sources`` says, for every group the fact came from, where its text
    is and whether it is still there; ``erasures`` holds the groups
    erasures ``erase_sources=True`` ran (their records are tombstones).
    """

    ack: MemoryAck
    sources: tuple[SourceHolder, ...] = ()
    erasures: tuple[ErasureResult, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def still_held(self) -> tuple[SourceHolder, ...]:
        """The places that still hold a source's text (offer the host to erase them)."""
        return tuple(h for h in self.sources if h.state is SourceState.HOLDS_TEXT)


def _refs_by_session(refs: Sequence[GroupRef]) -> dict[str, list[int]]:
    by_session: dict[str, list[int]] = {}
    for ref in refs:
        seqs = by_session.setdefault(ref.session, [])
        if ref.seq not in seqs:
            seqs.append(ref.seq)
    return by_session


async def _provenance(
    runtime: HarnessRuntime, scope: MemoryScope, fact_id: str
) -> tuple[list[GroupRef], str]:
    """Every group the fact's revisions cite, and a note when the store cannot tell."""
    memory = runtime.memory
    assert memory is not None
    caps = memory.capabilities
    if caps.history:
        revisions = await memory.history(scope, fact_id)
        if len(revisions) >= MAX_LOOKUP_LIMIT and revisions[-1].status is not FactStatus.FORGOTTEN:
            # A fact within MAX_FACT_REVISIONS reads whole, tombstone included; this one was
            # written before the cap (or by a store ignoring it): later revisions may cite
            # sources this read cannot see, and forgetting would clear them for good.
            _log.warning("runtime.forget refused: the history of fact %s may be truncated", fact_id)
            raise MemoryRejectedError(
                f"the history of fact {fact_id!r} holds at least {len(revisions)} revisions, more than one "
                "read returns, so its sources cannot all be found; nothing was changed. Forget it with "
                "runtime.memory.forget and erase the sessions it came from"
            )
        return [ref for revision in revisions for ref in revision.fact.provenance], ""
    if caps.listing:
        current = [f for f in await memory.list(scope, 200) if f.fact_id == fact_id]
        return [ref for fact in current for ref in fact.fact.provenance], ""
    return [], "the memory store declares neither history nor listing: the fact's sources are unknown"


async def _places(
    runtime: HarnessRuntime, key: SessionKey, seqs: Sequence[int]
) -> tuple[list[SourceHolder], list[int]]:
    """Where each source group of session ``key`` is; and the archived seqs (what can be erased)."""
    async with runtime.parts.admission.admit_shared(key, "forget sources") as ticket:
        stored, snap = await load_session(
            ticket, runtime.session_store, key, None, attest_legacy=False, fence=False
        )
    holders: list[SourceHolder] = []
    archived: list[int] = []
    cited = {c.seq for c in snap.summary.summary.citations} if snap.summary is not None else set()
    summary_text = snap.summary is not None and bool(snap.summary.summary.text)
    for seq in seqs:
        if stored is None or any(seq in r for r in snap.erased or ()):
            holders.append(SourceHolder(key, seq, SourcePlace.GONE, SourceState.ERASED))
            continue
        if seq >= snap.next_seq:
            holders.append(SourceHolder(key, seq, SourcePlace.GONE, SourceState.ERASED))
            continue
        if seq >= snap.boundary:
            holders.append(SourceHolder(key, seq, SourcePlace.RESIDENT, SourceState.HOLDS_TEXT))
        else:
            holders.append(SourceHolder(key, seq, SourcePlace.ARCHIVED, SourceState.HOLDS_TEXT))
            archived.append(seq)
        if seq in cited and summary_text:
            holders.append(SourceHolder(key, seq, SourcePlace.SUMMARY, SourceState.HOLDS_TEXT))
    return holders, archived


async def forget_fact(
    runtime: HarnessRuntime,
    scope: object,
    fact_id: object,
    *,
    erase_sources: bool,
    reason: object,
    attestation: object,
) -> ForgetResult:
    """See :meth:`~.erasure_api.ErasureOperations.forget`."""
    from .erasure_api import run_erasure  # the API module imports this one

    memory = runtime.memory
    if memory is None:
        raise InvalidArgumentError("the runtime has no memory; configure [memory] to forget facts")
    if not isinstance(scope, MemoryScope):
        raise InvalidArgumentError(
            f"scope must be a MemoryScope, got {type(scope).__name__}; nothing was changed"
        )
    checked_id = validate_id(fact_id, "fact id")
    if not isinstance(erase_sources, bool):
        raise InvalidArgumentError(f"erase_sources must be a bool, got {type(erase_sources).__name__}")
    checked: tuple[str, OperatorAttestation] | None = None
    if erase_sources:
        # Everything an erasure needs is checked before the fact is forgotten.
        placeholder = EraseTarget.user(scope.tenant, scope.user)
        _, why, who = check_request(placeholder, reason, attestation)
        checked = (why, who)
    refs, note = await _provenance(runtime, scope, checked_id)
    ack = await memory.forget(scope, checked_id)
    notes = [note] if note else []
    holders: list[SourceHolder] = []
    erasures: list[ErasureResult] = []
    for session, seqs in _refs_by_session(refs).items():
        key = SessionKey(scope.tenant, scope.user, session)
        places, archived = await _places(runtime, key, seqs)
        if checked is not None and archived:
            ranges = merge_ranges([SeqRange(seq, seq + 1) for seq in archived])
            target = EraseTarget.groups_of(key, ranges)
            assert target.level is EraseLevel.GROUPS
            result = await run_erasure(runtime, target, checked[0], checked[1], ErasureKind.FORGET)
            erasures.append(result)
            gone = set(archived)
            places = [
                attrs.evolve(h, state=SourceState.ERASED)
                if h.place in (SourcePlace.ARCHIVED, SourcePlace.SUMMARY) and h.seq in gone
                else h
                for h in places
            ]
        holders.extend(places)
    if any(h.place is SourcePlace.RESIDENT for h in holders):
        notes.append(
            "a source group is still resident: it is in every request of its session until it is archived; "
            "erase the session, or forget again with erase_sources once it is archived"
        )
    return ForgetResult(ack, tuple(holders), tuple(erasures), tuple(notes))
