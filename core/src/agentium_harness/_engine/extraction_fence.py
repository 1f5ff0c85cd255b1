"""The erasure fence before a memory extraction's extractor call: no turn erased since reaches it.

An extraction hands a turn's messages to the host's extractor, which may
call a model with them; it runs as owned work, after the turn. An erasure of
the turn's session (a session its ``sources`` name), its user or its tenant
may begin in between, in any process sharing the session store, and may even
finish before the extractor is called. The write fence (:mod:`.memory_fence`)
keeps the facts out, but the extractor would still be handed the erased text.

So the same reads and reasoning as before each model call of a run
(:mod:`.turn_fence`), here through the manager's own fences (every session
store fencing it: :func:`.memory_fence.fence_memory`), for the fact the
extraction would write (:meth:`EraseTarget.covers_fact` of its scope and
sources), from a reading taken as the turn started (:func:`turn_reading`,
an :class:`~.memory.agent.Agent`'s, before it loads its history and calls
its model: an erasure that begins and even finishes during the model call
is caught):

- the tenant's pending erasures are read again (the built-in SQLite store
  answers from what it knows unchanged, no read, when nothing was committed
  to the file since: :meth:`.erasure_fence.ErasureFence.check`): a covering
  one under way skips the extraction;
- only when the ledger's revision moved since the reading, the finished
  erasures covering the fact are read: one that joined the ledger after the
  reading skips it too (by its join record, as the write fence judges).

A host running its own turn takes its reading itself, as its turn starts
(``manager.erasure_reading``, :mod:`.memory.erasure_reading`: the same
reads, judged by the extraction's sources, groups erasures included).
With an Agent's reading of no fence (the manager had none as the turn
started), the pending erasures are read just before the call: one covering
the fact under way skips it. A host's call without a reading reads them
too, its sources' groups included (:func:`.memory.erasure_reading.fence_at_call`).

A skipped extraction sends nothing and writes nothing: its owned work fails
(a drain reports it, naming the erasure), with a WARNING on
``agentium.engine.memory`` and the span event
``agentium.memory.extraction_skipped`` (reason ``erasure``; no ids, no
content) on a short ``agentium.memory.extraction`` span of the manager's
telemetry, as a turn an Agent cannot extract from is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from .._errors import AgentiumError, ErasureInProgressError
from .._observe import spans as observe
from .._observe.settings import Resolved
from .._ports.memory import GroupRef, MemoryScope
from .erasure_fence import ErasureFence
from .memory_fence import FenceChecks, covering, fence_check

if TYPE_CHECKING:
    from .memory.manager import MemoryManager

__all__ = [
    "SKIPPED_EVENT",
    "SKIPPED_SPAN",
    "TurnReading",
    "before_extractor",
    "refused",
    "skipped",
    "turn_reading",
]

_log = logging.getLogger("agentium.engine.memory")

#: The span of an extraction skipped (under its manager's telemetry), and its event.
SKIPPED_SPAN = "agentium.memory.extraction"
SKIPPED_EVENT = "agentium.memory.extraction_skipped"

#: What the fences saw as the turn started: the checks to compare with, or the refusal of an erasure
#: covering the fact already under way then; ``None``: no reading (the pending ledger is read at the call).
TurnReading = FenceChecks | ErasureInProgressError | None


def skipped(telemetry: Resolved, owner: object, reason: str) -> None:
    """The event of an extraction skipped for ``reason``, on a span of its own from ``telemetry``.

    A span of its own: the turn's spans have ended, and "the span current"
    would be the host's, through the global provider, whatever the
    manager's telemetry says. No ids, no content.
    """
    with observe.using(telemetry, owner), observe.internal_span(SKIPPED_SPAN) as span:
        span.event(SKIPPED_EVENT, {"agentium.memory.reason": reason})


async def turn_reading(
    fences: Sequence[ErasureFence], scope: MemoryScope, sources: Sequence[GroupRef]
) -> TurnReading:
    """What every fence sees now, for the fact an extraction of ``sources`` would write.

    Taken as the turn starts, before its model call. A covering
    erasure under way is returned as its refusal (the extraction will be
    skipped); a store that cannot be read gives no reading (``None``: the
    pending ledger is read again just before the extractor call).
    """
    try:
        return await fence_check(fences, scope, sources)
    except ErasureInProgressError as exc:
        return exc
    except AgentiumError:
        return None


async def before_extractor(
    fences: Sequence[ErasureFence],
    telemetry: Resolved,
    owner: MemoryManager,
    scope: MemoryScope,
    sources: Sequence[GroupRef],
    seen: TurnReading,
) -> None:
    """Raise :class:`ErasureInProgressError` if an erasure covering the fact began since ``seen``.

    Reported (WARNING, span event) before it raises; the caller then calls
    no extractor and writes nothing. A store that cannot be read raises its
    typed error as it is (nothing is sent either).
    """
    outcome = "the extraction was skipped before its extractor call: nothing was sent or written"
    refusal: ErasureInProgressError | None = None
    try:
        if isinstance(seen, ErasureInProgressError):
            # Not raised here: its traceback would hold this frame, which holds it (a cycle).
            refusal = ErasureInProgressError(f"{seen}; {outcome}", seen.erasure_id)
        elif not seen:  # no reading, or one of no fence: nothing to compare a fence gained since with
            await fence_check(fences, scope, sources)
            return
        else:
            found = await covering(seen, owner)  # and any store given to the manager since
            if found is not None:
                refusal = found[0].write.refusal(found[1], outcome)
    except ErasureInProgressError as exc:
        refusal = ErasureInProgressError(f"{exc}; {outcome}", exc.erasure_id)
    if refusal is not None:
        try:
            refused(telemetry, owner, refusal)
        finally:
            del refusal  # the refusal's traceback holds this frame: it must not hold the refusal


def refused(
    telemetry: Resolved,
    owner: object,
    refusal: ErasureInProgressError,
    *,
    taken_back: bool = False,
    written: int = 0,
) -> NoReturn:
    """Report an extraction skipped for ``refusal`` (WARNING, span event: no content) and raise it.

    ``taken_back``: it was not skipped but undone, its ``written`` facts forgotten after its writes (a
    host's extraction whose groups were erased during its extractor call: :mod:`.memory.erasure_reading`),
    but those in ``refusal.fact_ids``, which could not be (counted in the WARNING, never named).
    """
    if taken_back:
        left = len(refusal.fact_ids)
        _log.warning(
            "memory extraction taken back: an erasure of the groups it read began during it (erasure %s); %s",
            refusal.erasure_id,
            f"{left} of the {written} fact(s) it wrote could not be forgotten (its error's fact_ids)"
            if left
            else "the facts it wrote were forgotten",
            extra={"agentium_operation": "memory extract"},
        )
    else:
        _log.warning(
            "memory extraction skipped: an erasure covering the turn's user, session or groups began after "
            "the turn (erasure %s); nothing was sent to the extractor or written",
            refusal.erasure_id,
            extra={"agentium_operation": "memory extract"},
        )
    skipped(telemetry, owner, "erasure")
    try:
        raise refusal
    finally:
        # Its traceback holds this frame: holding it here too was a reference cycle, freed only by
        # the collector with everything the frames held (fence checks, sources, the work item).
        del refusal
