"""Where an extracted fact came from: the groups an extraction read, attached to each fact it proposes.

A session erasure removes the facts of its user whose provenance names the
session (docs/erasure.md). An extracted fact written with no provenance
would outlive the erasure of the session it was extracted from, so an
extraction names the groups it reads (``sources``) and every fact it
proposes carries them: a fact the extractor left without provenance gets
all of them; one the extractor cited itself keeps its own citation only if
each group it names is one of ``sources`` (a narrower citation is more
precise), and an extraction citing any other group — another session's, or
a seq or digest it was not given — is refused whole, nothing written: its
provenance would tie the fact to data it did not come from (and
``runtime.forget(..., erase_sources=True)`` erases the groups a fact cites).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import anyio
import attrs

from ..._errors import ContractViolationError, EncodingError, InvalidArgumentError
from ..._history import Message, MessageGroup
from ..._host_items import read_host_items
from ..._observe import spans as observe
from ..._observe.settings import Resolved
from ..._ports.memory import (
    MAX_PROVENANCE,
    PROVENANCE_READ,
    AckStatus,
    GroupRef,
    MemoryAck,
    MemoryFact,
    MemoryScope,
)
from ..extraction_fence import SKIPPED_SPAN, TurnReading, before_extractor
from ..history_checks import MAX_APPEND_MESSAGES
from .answers import check_work, checked_scope, within
from .erasure_reading import (
    ErasureReading,
    after_writes,
    after_writes_cancelled,
    checked_reading,
    fence_at_call,
    fence_from_reading,
)

if TYPE_CHECKING:
    from .extractor import MemoryExtractor
    from .manager import MemoryManager

__all__ = [
    "REJECTED_EVENT",
    "checked_sources",
    "note_rejected",
    "proposed_facts",
    "start_extraction",
    "turn_source",
]

_log = logging.getLogger("agentium.engine.memory")

#: The event of an extraction some of whose facts were rejected, on an ``agentium.memory.extraction`` span.
REJECTED_EVENT = "agentium.memory.extraction_rejected"


def checked_sources(sources: object) -> tuple[GroupRef, ...]:
    """``sources`` as 1 to :data:`MAX_PROVENANCE` distinct :class:`GroupRef`; else InvalidArgumentError."""
    if isinstance(sources, str | bytes) or not isinstance(sources, Iterable):
        raise InvalidArgumentError(
            "sources must be the GroupRefs of the groups the extraction reads, got "
            f"{type(sources).__name__}; nothing was started"
        )
    # Read bounded: an endless iterable is never read whole.
    refs = tuple(itertools.islice(sources, PROVENANCE_READ + 1))
    if not all(isinstance(ref, GroupRef) for ref in refs):
        raise InvalidArgumentError("sources must be GroupRefs; nothing was started")
    refs = tuple(dict.fromkeys(refs))
    if not refs:
        raise InvalidArgumentError(
            "sources is empty: an extraction names the groups it reads, so a session erasure finds the facts "
            "it writes; nothing was started"
        )
    if len(refs) > MAX_PROVENANCE:
        raise InvalidArgumentError(
            f"sources names more than {MAX_PROVENANCE} groups (MAX_PROVENANCE), more than one fact may cite; "
            "extract from fewer at a time; nothing was started"
        )
    return refs


def proposed_facts(
    proposed: object, scope: MemoryScope, sources: tuple[GroupRef, ...], most: int
) -> list[MemoryFact]:
    """The facts an extractor proposed, each citing its sources; ContractViolationError refuses them all.

    At most ``most`` facts, each a :class:`MemoryFact` within ``scope``
    (:func:`.answers.within`), citing only groups of ``sources`` (all of
    them when it cited none). Nothing is written by the caller when this raises.
    """
    if isinstance(proposed, str | bytes) or not isinstance(proposed, Iterable):
        raise ContractViolationError(
            f"the extractor returned {type(proposed).__name__}, not a sequence of MemoryFact; "
            "none was written"
        )
    # One past the bound is enough to refuse: an endless generator is never run to its end
    # (it would hold the event loop, and memory, without a bound).
    facts = list(itertools.islice(proposed, most + 1))
    if len(facts) > most:
        raise ContractViolationError(
            f"the extractor proposed more than max_extracted_facts ({most}) facts; none was written"
        )
    given = set(sources)
    kept: list[MemoryFact] = []
    for fact in facts:
        if not isinstance(fact, MemoryFact) or not within(scope, fact.scope):
            raise ContractViolationError(
                "the extractor proposed a fact outside its scope (another user, project or "
                "repository, or all of them where the scope names one); none was written"
            )
        if not all(ref in given for ref in fact.provenance):
            raise ContractViolationError(
                "the extractor cited a group it was not given (another session's, or another seq or digest "
                "than the extraction's sources); none was written"
            )
        kept.append(fact if fact.provenance else attrs.evolve(fact, provenance=sources))
    return kept


def note_rejected(acks: Sequence[MemoryAck], telemetry: Resolved, owner: object) -> None:
    """A WARNING and a span event when facts an extraction proposed were rejected: nobody else sees them.

    A host's ``remember_with_result`` hands its caller the ``rejected`` ack;
    an extraction is owned work that completes all the same, so without this
    the rejection was seen only as the write span's ``error.type``. It matters
    for erasure: a duplicate the store refuses at ``MAX_PROVENANCE`` or
    ``MAX_FACT_REVISIONS`` leaves the fact it duplicates citing none of the
    extraction's groups, so erasing their session does not remove it. Counts
    only: a reason may quote the fact. The event (:data:`REJECTED_EVENT`) is on
    a short span of its own from the manager's ``telemetry``, as a skipped
    extraction's is: a fact refused by the manager's own checks had no write
    span, and the span current in owned work is no span of the manager's.
    """
    rejected = sum(1 for ack in acks if ack.status is AckStatus.REJECTED)
    if rejected:
        _log.warning(
            "memory extraction: %d of the %d facts it proposed were rejected, not written (each is its "
            "create_memory span's error.type); a duplicate refused at MAX_PROVENANCE or MAX_FACT_REVISIONS "
            "leaves the fact it duplicates without this extraction's groups, so erasing their session "
            "does not remove it",
            rejected,
            len(acks),
        )
        counts = {"agentium.memory.rejected": rejected, "agentium.memory.proposed": len(acks)}
        with observe.using(telemetry, owner), observe.internal_span(SKIPPED_SPAN) as span:
            span.event(REJECTED_EVENT, counts)


def turn_source(session: str, seq: int, messages: Sequence[Message]) -> GroupRef | None:
    """The group an :class:`~.agent.Agent`'s turn is: ``session``, ``seq``, the digest of ``messages`` as one.

    The digest is :attr:`MessageGroup.digest` of ``MessageGroup(seq, messages)``
    (no retained record: the agent's conversation is not archived). ``None``
    when the messages have no canonical encoding (a lone surrogate), and so no digest.
    """
    try:
        return GroupRef(session, seq, MessageGroup(seq, tuple(messages)).digest)
    except EncodingError:
        return None


def start_extraction(
    manager: MemoryManager,
    scope: MemoryScope,
    messages: Sequence[Message],
    name: str,
    sources: Sequence[GroupRef],
    seen: TurnReading,
    reading: object = None,
) -> str | None:
    """:meth:`~.manager.MemoryManager.extract_in_background`, fenced from ``seen`` (the turn's reading).

    ``seen`` is what the manager's erasure fences saw as the turn started
    (:func:`..extraction_fence.turn_reading`, an Agent's), or ``None``; a
    host's ``reading`` (:class:`~.erasure_reading.ErasureReading`, checked
    here: one this manager did not take for ``scope`` and ``sources``'
    sessions is :class:`InvalidArgumentError`, nothing started) replaces
    it. Either is checked again just before the extractor is called
    (:func:`..extraction_fence.before_extractor`,
    :func:`.erasure_reading.fence_from_reading`), so an erasure covering the
    turn that began since skips it, nothing sent or written. The arguments
    are checked first, with or without an extractor: a call that is refused
    once one is configured is refused without one too (``None`` only for a
    valid call).
    """
    scope = checked_scope(scope)
    cited = checked_sources(sources)
    if isinstance(messages, str | bytes) or not isinstance(messages, Iterable):
        raise InvalidArgumentError(f"messages must be a sequence of Message, got {type(messages).__name__}")
    # Read once and bounded, as every host sequence is (``read_host_items``): an endless or lying
    # iterable must not hold the loop; a turn's messages are at most one group's.
    given = tuple(
        read_host_items(
            messages,
            MAX_APPEND_MESSAGES,
            too_many=f"messages: more than {MAX_APPEND_MESSAGES} (MAX_APPEND_MESSAGES); nothing was started",
            unreadable="messages could not be read",
            outcome="nothing was started",
        )
    )
    if not all(isinstance(m, Message) for m in given):
        raise InvalidArgumentError("messages must be a sequence of Message; nothing was started")
    check_work(name, "extraction", lambda: None)
    host = checked_reading(manager, reading, scope, cited)
    extractor = manager.extractor
    if extractor is None:
        return None  # nothing to start (checked above: no bad call passes for want of an extractor)
    fence = seen if host is None else host
    return manager.start_work(
        name, "extraction", lambda: _extract(manager, extractor, scope, given, cited, fence)
    )


async def _extract(
    manager: MemoryManager,
    extractor: MemoryExtractor,
    scope: MemoryScope,
    given: tuple[Message, ...],
    cited: tuple[GroupRef, ...],
    seen: TurnReading | ErasureReading,
) -> None:
    """The owned work of one extraction: the fence, the extractor's call, the checked writes."""
    from .manager import call_extractor, fences_of, telemetry_of  # here: the manager imports this module

    # Before anything is sent: the turn's text must not reach the extractor (whose model may keep
    # it) once an erasure covering it began; the write fence alone would only keep its facts out.
    host: ErasureReading | None = None  # a host's extraction: what its writes are checked against after
    if isinstance(seen, ErasureReading):
        await fence_from_reading(manager, telemetry_of(manager), seen, scope, cited)
        host = seen
    elif seen is None:  # a host's call without a reading (or an Agent's whose reading failed)
        host = await fence_at_call(manager, telemetry_of(manager), scope, cited)
    else:
        await before_extractor(fences_of(manager), telemetry_of(manager), manager, scope, cited, seen)
    proposed = await call_extractor(manager, extractor, scope, given)
    # Every fact checked (and given its sources) before the first is written.
    facts = proposed_facts(proposed, scope, cited, manager.limits.max_extracted_facts)
    acks: list[MemoryAck] = []
    stored: list[tuple[MemoryScope, str]] = []
    try:
        for fact in facts:
            acks.append(ack := await manager.remember_with_result(fact))
            if ack.status is AckStatus.STORED and ack.fact_id is not None:
                stored.append((fact.scope, ack.fact_id))
        if host is not None:
            # A groups erasure of its sources during the extractor's call takes none of its facts (the
            # write fence lets them stand): checked again, and its facts forgotten (:func:`after_writes`).
            await after_writes(manager, telemetry_of(manager), host, scope, cited, stored)
    except anyio.get_cancelled_exc_class():
        if host is not None:  # a drain's deadline cut it short: the facts stored are not left unchecked
            await after_writes_cancelled(manager, telemetry_of(manager), host, scope, cited, stored)
        raise
    note_rejected(acks, telemetry_of(manager), manager)
