"""A host's erasure reading: what the erasure ledgers said as its turn started, for its own extraction.

A host running its own agent loop reads its history (or memory) as its turn
starts and, after the turn, hands the turn's messages to
:meth:`~.manager.MemoryManager.extract_in_background`. An erasure covering
them — of their session, user or tenant, or of the very groups the
extraction reads (retention, ``forget(erase_sources=True)``) — may begin
*and finish* in between, in any process sharing the session store: the
extraction then found nothing under way and handed the extractor (whose
model may keep it) text already erased, and could write facts derived
from it again. ``run()`` and an ``Agent`` are fenced from their own start
(:mod:`..turn_fence`, :mod:`..extraction_fence`); a host is fenced the same
way through a reading it takes as its turn starts
(:meth:`~.manager.MemoryManager.erasure_reading`) and passes as
``extract_in_background(..., reading=)``:

- the reading keeps, per session store fencing the manager, the tenant's
  pending ledger revision and the covering erasures then under way
  (:meth:`..erasure_fence.ErasureFence.look`, for the reading's user and sessions);
- just before the extractor call (:func:`fence_from_reading`), an erasure
  under way at the reading, under way now, or finished having joined the
  ledger since the reading (its join record; only read when the ledger's
  revision moved) that covers the fact the extraction would write
  (:meth:`EraseTarget.covers_fact`) *or* one of the groups it reads
  (:meth:`EraseTarget.covers_group` of each of its ``sources``) skips it:
  nothing sent or written, its owned work fails with
  :class:`~agentium_harness._errors.ErasureInProgressError` (a drain reports
  it), a WARNING and the ``agentium.memory.extraction_skipped`` span event,
  as an ``Agent``'s skipped extraction is reported (:mod:`..extraction_fence`);
- after its writes (:func:`after_writes`; without a reading, from what
  :func:`fence_at_call` read), the same read again: an erasure of some of
  its groups that began during the extractor call takes none of its facts
  through the write fence, so the extraction forgets those it stored and
  fails the same way (also when a drain's cancel cut the writes short:
  :func:`after_writes_cancelled`, shielded and bounded). A read again that
  fails (or runs past that bound) leaves its facts standing, unconfirmed: a
  WARNING and the span event ``agentium.memory.extraction_unchecked``
  (``error.type`` only) on the same short span as a skipped extraction's.

A reading is opaque and bound to the manager that took it and to its
tenant, user and sessions: one of another manager, one made or copied by
hand or altered since, another tenant's or user's, or one not taken for a session the
extraction's sources name is refused with
:class:`~agentium_harness._errors.InvalidArgumentError` before anything
starts (:func:`checked_reading`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
import attrs

from ..._errors import AgentiumError, ErasureInProgressError, InvalidArgumentError
from ..._errors_memory import MemoryFactNotFoundError
from ..._observe import spans as observe
from ..._observe.settings import Resolved
from ..._ports.erasure import EraseTarget, ErasureRecord
from ..._ports.memory import MAX_PROVENANCE, GroupRef, MemoryScope
from ..._ports.sessions import SessionStore
from ..._scope import validate_id
from ..bounded import LATE_CLEANUP_S, bounded
from ..erasure_fence import FenceCheck, utc_now
from ..extraction_fence import SKIPPED_SPAN, refused, skipped
from ..lifecycle import Ticket
from ..memory_fence import covering, current_fences
from .answers import checked_scope
from .sources_write import SourcesWrite, left_to_forget, sources_refusal
from .work import outside_owned_work
from .writes import forget_fact

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = [
    "ErasureReading",
    "after_writes",
    "after_writes_cancelled",
    "checked_reading",
    "fence_at_call",
    "fence_from_reading",
    "take_reading",
]

_log = logging.getLogger("agentium.engine.memory")

#: The event of a host's extraction whose facts were written but not checked again (they stand unconfirmed).
UNCHECKED_EVENT = "agentium.memory.extraction_unchecked"


def _unchecked(telemetry: Resolved, owner: object, exc: BaseException) -> None:
    """:data:`UNCHECKED_EVENT` on a span of its own, as a skipped extraction's: the error's type only."""
    with observe.using(telemetry, owner), observe.internal_span(SKIPPED_SPAN) as span:
        span.event(UNCHECKED_EVENT, {"error.type": observe.error_type(exc)})


@attrs.frozen(slots=True, eq=False, repr=False)
class ErasureReading:
    """What the erasure ledgers said as a host's turn started: pass it to ``extract_in_background``.

    Taken by :meth:`MemoryManager.erasure_reading` for a tenant and user
    (``scope``) and the ``sessions`` whose groups the turn's extraction
    will read; opaque otherwise. Only the manager that took it accepts it,
    for its own tenant and user and those sessions (one made or copied by
    hand, or altered since, is refused); it may serve several extractions of the turn. It
    holds no message content.
    """

    scope: MemoryScope
    sessions: tuple[str, ...]
    _checks: tuple[FenceCheck, ...]
    _pending: tuple[ErasureRecord, ...]
    _at: datetime

    def __repr__(self) -> str:
        scope = self.scope
        return f"ErasureReading(tenant={scope.tenant!r}, user={scope.user!r}, sessions={self.sessions!r})"


#: The readings each manager took (identity, never equality: a copy is not one), held weakly both ways,
#: with what each held when taken: a frozen class is no seal (``object.__setattr__`` rewrites a slot).
#: One registry for every thread (a BlockingRuntime's loop, hosts' worker threads, several event
#: loops): only read and written under ``_TAKEN_LOCK``, so no access relies on one dict operation
#: being atomic (a free-threaded build, or a later iteration over it, would not be safe without it).
#: A dead reading's entry is removed by the mapping's own weakref callback, which never takes the
#: lock. Re-entrant: a collection run inside a locked access (an allocation) may run finalizers in
#: that thread, and one that took or checked a reading must not deadlock on its own thread's lock.
_TAKEN: weakref.WeakKeyDictionary[ErasureReading, tuple[weakref.ref[MemoryManager], tuple[object, ...]]] = (
    weakref.WeakKeyDictionary()
)
_TAKEN_LOCK = threading.RLock()


def _held(reading: ErasureReading) -> tuple[object, ...]:
    return reading.scope, reading.sessions, reading._checks, reading._pending, reading._at


def _target_owns(target: EraseTarget, scope: MemoryScope, sessions: Iterable[str]) -> bool:
    """Whether ``target`` is of ``scope``'s tenant, its user (or all) and one of ``sessions`` (or all)."""
    if target.tenant_id != scope.tenant or (target.user_id is not None and target.user_id != scope.user):
        return False
    return target.session_id is None or target.session_id in set(sessions)


@attrs.frozen(slots=True)
class _TurnWrite:
    """What a reading fences (:class:`..erasure_fence.FencedWrite`): any erasure that may take the turn.

    The groups the extraction will cite are not known yet: every erasure of
    the user's tenant, the user or one of ``sessions`` (of some of their
    groups too) counts; the extraction judges them by its own sources.
    """

    scope: MemoryScope
    sessions: tuple[str, ...]

    @property
    def tenant(self) -> str:
        return self.scope.tenant

    @property
    def scopes(self) -> tuple[str, str | None, tuple[str, ...]]:
        return self.scope.tenant, self.scope.user, tuple(sorted(self.sessions))

    def covers(self, target: EraseTarget) -> bool:
        return _target_owns(target, self.scope, self.sessions)

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        return ()  # never read: a reading's checks are rebuilt on the extraction's sources first

    def refusal(self, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
        return sources_refusal(record, outcome)


def _checked_sessions(sessions: object) -> tuple[str, ...]:
    if isinstance(sessions, str | bytes) or not isinstance(sessions, Iterable):
        raise InvalidArgumentError(
            f"sessions must be a sequence of session ids, got {type(sessions).__name__}; nothing was read"
        )
    given = tuple(itertools.islice(sessions, MAX_PROVENANCE + 1))  # bounded: never an endless iterable
    if not given or len(given) > MAX_PROVENANCE:
        raise InvalidArgumentError(
            f"sessions must name 1 to {MAX_PROVENANCE} sessions (those the extraction's sources will name); "
            "nothing was read"
        )
    return tuple(dict.fromkeys(validate_id(s, "session id") for s in given))


async def take_reading(manager: MemoryManager, scope: object, sessions: object) -> ErasureReading:
    """:meth:`~.manager.MemoryManager.erasure_reading`: every fence's ledger and covering erasures now.

    A store that cannot be read raises its typed error (no reading is taken).
    """
    checked, named = checked_scope(scope), _checked_sessions(sessions)
    write = _TurnWrite(checked, named)
    checks: list[FenceCheck] = []
    pending: dict[str, ErasureRecord] = {}
    for fence in current_fences(manager):
        check, under_way = await fence.look(write)
        checks.append(check)
        pending.update((r.erasure_id, r) for r in under_way)
    at = min((c.at for c in checks), default=None) or utc_now()
    reading = ErasureReading(checked, named, tuple(checks), tuple(pending.values()), at)
    taken = (weakref.ref(manager), _held(reading))
    with _TAKEN_LOCK:
        _TAKEN[reading] = taken
    return reading


def checked_reading(
    manager: MemoryManager, reading: object, scope: MemoryScope, sources: Sequence[GroupRef]
) -> ErasureReading | None:
    """``reading`` if ``manager`` took it for ``scope``'s tenant and user and every session of ``sources``.

    ``None`` stays ``None`` (no reading). Else :class:`InvalidArgumentError`; the caller starts nothing.
    """
    if reading is None:
        return None
    if not isinstance(reading, ErasureReading):
        raise InvalidArgumentError(
            f"reading must be an ErasureReading (manager.erasure_reading), got {type(reading).__name__}; "
            "nothing was started"
        )
    with _TAKEN_LOCK:
        taken = _TAKEN.get(reading)
    if taken is None or taken[0]() is not manager:
        raise InvalidArgumentError(
            "the erasure reading was not taken by this memory manager (another manager's, or one made or "
            "copied by hand); nothing was started"
        )
    if any(now is not then for now, then in zip(_held(reading), taken[1], strict=True)):
        raise InvalidArgumentError(
            "the erasure reading was altered after it was taken (a field rewritten); nothing was started"
        )
    if (reading.scope.tenant, reading.scope.user) != (scope.tenant, scope.user):
        raise InvalidArgumentError(
            "the erasure reading was taken for another tenant or user than the extraction's scope; "
            "nothing was started"
        )
    missing = sorted({ref.session for ref in sources} - set(reading.sessions))
    if missing:
        raise InvalidArgumentError(
            f"the extraction's sources name {len(missing)} session(s) the erasure reading was not taken for; "
            "nothing was started"
        )
    return reading


async def _found_since(
    manager: MemoryManager, reading: ErasureReading, write: SourcesWrite
) -> ErasureRecord | None:
    """A covering erasure under way at ``reading`` or now, or finished and joined since it; else ``None``."""
    found: ErasureRecord | None = next((r for r in reading._pending if write.covers(r.target)), None)
    if found is None and reading._checks:
        rebuilt = tuple(FenceCheck(c.fence, write, c.revision, c.at) for c in reading._checks)
        hit = await covering(rebuilt, manager)
        found = hit[1] if hit is not None else None
    elif found is None:
        for fence in current_fences(manager):
            found = await fence.covering_after(write, reading._at)
            if found is not None:
                break
    return found


async def fence_from_reading(
    manager: MemoryManager,
    telemetry: Resolved,
    reading: ErasureReading,
    scope: MemoryScope,
    sources: Sequence[GroupRef],
) -> None:
    """Just before the extractor call: raise if an erasure covering the extraction began since ``reading``.

    Covering: its fact, or a group of ``sources``. Under way at the reading
    or now, or finished having joined the ledger since (each fence of the
    reading, and any gained since: :func:`..memory_fence.covering`); a
    reading of no fence is judged at the call, the finished ones by the
    clocks (:meth:`..erasure_fence.ErasureFence.covering_after`). Reported
    and raised by :func:`..extraction_fence.refused`; a store that cannot be
    read raises its typed error as it is (nothing is sent either).
    """
    write = SourcesWrite(scope, tuple(sources))
    outcome = "the extraction was skipped before its extractor call: nothing was sent or written"
    found = await _found_since(manager, reading, write)
    if found is not None:
        refused(telemetry, manager, write.refusal(found, outcome))


async def fence_at_call(
    manager: MemoryManager, telemetry: Resolved, scope: MemoryScope, sources: Sequence[GroupRef]
) -> ErasureReading:
    """A host's extraction without a reading: an erasure under way now covering it skips it.

    Covering as with a reading: its fact, or a group of ``sources`` (a
    groups erasure under way, retention's or a forget's, was not looked at).
    One that began and finished before is not seen: that takes a reading.
    Returns what it read (never handed to the host), for :func:`after_writes`.
    """
    write = SourcesWrite(scope, tuple(sources))
    outcome = "the extraction was skipped before its extractor call: nothing was sent or written"
    checks: list[FenceCheck] = []
    for fence in current_fences(manager):
        check, under_way = await fence.look(write)
        if under_way:
            refused(telemetry, manager, write.refusal(under_way[0], outcome))
        checks.append(check)
    at = min((c.at for c in checks), default=None) or utc_now()
    sessions = tuple(sorted({ref.session for ref in sources}))
    return ErasureReading(scope, sessions, tuple(checks), (), at)


async def after_writes(
    manager: MemoryManager,
    telemetry: Resolved,
    reading: ErasureReading,
    scope: MemoryScope,
    sources: Sequence[GroupRef],
    written: Sequence[tuple[MemoryScope, str]],
) -> None:
    """After a host's extraction wrote ``written`` (owner, fact id): forget them if its text was erased since.

    The extractor may run for a model call's time: an erasure of some of
    the groups ``sources`` names (``forget(..., erase_sources=True)``,
    retention) may begin and finish meanwhile. Such an erasure takes no
    fact (:meth:`EraseTarget.covers_fact`), so the write fence let the facts
    derived from the erased text stand — a forgotten fact written again,
    citing the group erased with it. So ``reading`` is read again, as before
    the extractor call (:func:`_found_since`): a covering erasure found
    forgets every fact the extraction stored and refuses it (its owned work
    fails with :class:`ErasureInProgressError`; WARNING, span event). An
    erasure that begins after this read finds the facts in place, as it finds
    any fact written before it. A read that fails leaves them standing, said
    in a WARNING and :data:`UNCHECKED_EVENT` (as a write the fence could not read again: unconfirmed).
    """
    if not written:
        return  # nothing of it to take back (a duplicate's fact is an older one: left as it is)
    write = SourcesWrite(scope, tuple(sources))
    found, failed = await _take_back(manager, telemetry, reading, write, written)
    if found is None:
        return
    if failed:
        # Fact ids are content (hosts log this text): named only with capture, always in ``fact_ids``.
        named = ", ".join(f"{i} ({kind})" for i, kind in failed) if telemetry.capture_content else ""
        errors = ", ".join(dict.fromkeys(kind for _, kind in failed))
        outcome = (
            f"its facts were written meanwhile and forgetting {len(failed)} of them failed: "
            f"{named or errors}; forget them (agentium memory forget; their ids are the error's fact_ids)"
        )
    else:
        outcome = f"the {len(written)} fact(s) it wrote meanwhile were forgotten: none was kept"
    left = [i for i, _ in failed]
    # Built in the call, not held here: a raised error's traceback holds this frame (a reference cycle).
    refused(
        telemetry,
        manager,
        left_to_forget(write.refusal(found, outcome), left),
        taken_back=True,
        written=len(written),
    )


async def after_writes_cancelled(
    manager: MemoryManager,
    telemetry: Resolved,
    reading: ErasureReading,
    scope: MemoryScope,
    sources: Sequence[GroupRef],
    written: Sequence[tuple[MemoryScope, str]],
) -> None:
    """:func:`after_writes` for writes a cancellation cut short (a drain's deadline): shielded, bounded.

    Facts were stored; whether the check after them got anywhere is not
    known, so it runs again (a forget is idempotent), within
    :data:`..bounded.LATE_CLEANUP_S`, shielded from the cancellation, which
    then goes on. Nobody is left to tell but the log and the spans: a WARNING and a span event
    (:data:`UNCHECKED_EVENT` when it could not check, a taken-back extraction's otherwise).
    """
    if not written:
        return
    write = SourcesWrite(scope, tuple(sources))
    with anyio.CancelScope(shield=True):
        try:
            found, failed = await bounded(
                lambda: _take_back(manager, telemetry, reading, write, written), LATE_CLEANUP_S
            )
        except Exception as exc:
            _log.warning(
                "memory extraction cancelled after its writes: its facts could not be checked again against "
                "erasures of its sources (%s)",
                observe.error_type(exc),
                extra={"agentium_operation": "memory extract"},
            )
            _unchecked(telemetry, manager, exc)
            return
    if found is not None:
        _log.warning(
            "memory extraction taken back after its writes were cancelled: an erasure of the groups it read "
            "began during it (erasure %s); %d of its %d facts could not be forgotten",
            found.erasure_id,
            len(failed),
            len(written),
            extra={"agentium_operation": "memory extract"},
        )
        skipped(telemetry, manager, "erasure")  # as after_writes' refusal: no ids, no content


async def _take_back(
    manager: MemoryManager,
    telemetry: Resolved,
    reading: ErasureReading,
    write: SourcesWrite,
    written: Sequence[tuple[MemoryScope, str]],
) -> tuple[ErasureRecord | None, list[tuple[str, str]]]:
    """The covering erasure found since ``reading`` (``None``: none, or not read), ``written`` forgotten.

    Also the facts it could not forget (id, error type).
    """
    try:
        found = await _found_since(manager, reading, write)
    except AgentiumError as exc:
        _log.warning(
            "memory extraction: its facts were not checked again against erasures of its sources (%s)",
            observe.error_type(exc),
            extra={"agentium_operation": "memory extract"},
        )
        _unchecked(telemetry, manager, exc)
        return None, []
    failed: list[tuple[str, str]] = []
    if found is None:
        return None, failed
    for owner, fact_id in written:
        try:
            with outside_owned_work():  # a drain's cancel of the item must not strand the fact
                await forget_fact(manager, owner, fact_id)
        except MemoryFactNotFoundError:
            pass  # the erasure removed it already
        except AgentiumError as exc:
            failed.append((fact_id, observe.error_type(exc)))
    return found, failed
