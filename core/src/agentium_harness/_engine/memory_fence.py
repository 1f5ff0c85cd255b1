"""The erasure fence for memory writes: no fact is kept in a scope an erasure takes.

Runs, appends and reads read the tenant's pending erasures before they load
a session (:mod:`.load`); a fenced memory manager does the same around each
``remember`` and ``correct``, in every process sharing the session store,
through the shared :class:`~.erasure_fence.ErasureFence` (its docstring says
why the two reads suffice). A manager given to several runtimes on separate
session stores (:func:`fence_memory`) reads every one of them around every
write, whoever makes it: its memory store is one, so an erasure recorded in
any of those stores scrubs the facts any of them would write. A runtime's
store fences it while that runtime is open (:func:`unfence_memory`). A fact an erasure covers
(:meth:`EraseTarget.covers_fact`: its user or tenant, or a session its
provenance names), or derived from a group a ``forget(..., erase_sources=True)``
takes (one its provenance cites: :func:`.memory.sources_write.covers_cited`; retention
keeps derived facts, so it takes no such write), is refused with
:class:`~agentium_harness._errors.ErasureInProgressError`:

- **before the write** (:func:`fence_check`), when such an erasure is
  pending: nothing is written;
- **after the write** (:func:`fence_confirm`), when such an erasure began
  after that first read (pending now, or finished having joined the
  ledger since): the manager forgets the fact it just wrote (content
  removed, as :meth:`forget` does) and refuses: the fact was not kept;
- **when a write abandoned past its deadline lands** (:func:`late_take_back`):
  the second read it never ran, and the same forget. An erasure in the
  runtime holding the manager waits for such a write (:mod:`.late_calls`);
  this covers one by another runtime or process, best effort.

A cancellation after the store answered — a drain or ``aclose()`` cancelling
the owned work the write is part of, or the host cancelling the call — does
not leave the fact unchecked: the second read and the forget are done again,
shielded from it, within :data:`~.bounded.LATE_CLEANUP_S` (the bound of the
late take-back), before the cancellation goes on (:func:`fence_confirm`).
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
import attrs

from .._errors import AgentiumError, ContractViolationError, ErasureInProgressError, OperationTimeoutError
from .._errors_memory import MemoryFactNotFoundError
from .._observe import spans as observe
from .._observe.settings import Resolved
from .._ports.erasure import EraseTarget, ErasureKind, ErasureRecord, ErasureState
from .._ports.memory import AckStatus, GroupRef, MemoryAck, MemoryScope
from .._ports.sessions import SessionStore
from .bounded import LATE_CLEANUP_S, bounded
from .erasure_fence import ErasureFence, FenceCheck, utc_now
from .lifecycle import Ticket
from .memory.answers import checked_ack
from .memory.sources_write import cited_refusal, covers_cited, fact_named, finished_cited, left_to_forget
from .memory.work import outside_owned_work

if TYPE_CHECKING:
    from .memory.manager import MemoryManager

__all__ = [
    "ErasureFence",
    "FenceCheck",
    "FenceChecks",
    "covering",
    "current_fences",
    "fence_check",
    "fence_confirm",
    "fence_memory",
    "late_take_back",
    "unfence_memory",
    "write_span",
]

_log = logging.getLogger("agentium.engine.memory")
#: Held while a store is added to a manager's fences (:func:`fence_memory`).
_fencing = threading.Lock()


@contextmanager
def write_span(
    telemetry: Resolved | None, owner: object, operation: str
) -> Iterator[observe.Span | observe.NullSpan]:
    """The ``create_memory`` / ``update_memory`` span of a write, around its fence as well as its store call.

    Open before the fence's first read and closed after its second (and any
    take-back) and the hooks' broadcast, so what the fence or a hook's failure
    finds has a span to land on even for a host calling the manager outside a
    turn; the store call inside opens no span of its own
    (:data:`.spans.CALLER_TRACED`), so the operation is one span. A forget's
    ``delete_memory`` and a listing's ``search_memory`` (around the engine's
    check of it) are opened the same way. An error leaving the block fails
    the span with its type; a store call abandoned past its deadline sets
    ``agentium.call.abandoned`` on it, as ``Ticket.call`` does on the span
    of an adapter call it opens.
    """
    name = observe.MEMORY_OPERATIONS[operation]
    # The manager's own (``None``: its runtime's operation's, or the global providers).
    with observe.using(telemetry, owner):
        with observe.operation(name, name, **{"agentium.operation": operation}) as span:
            try:
                yield span
            except OperationTimeoutError as exc:
                # The store call opens no span (caller-traced): its abandonment is said on this one, as
                # ``Ticket.call`` says it on an adapter call's. Only the store call's own: an owner check
                # or a fence read abandoned has its own span, and the take-back's forget its own write span.
                if exc.abandoned and exc.operation == operation:
                    span.set("agentium.call.abandoned", True)
                raise


def _event(name: str, when: str, exc: BaseException | None = None) -> None:
    """A degraded outcome of the fence as an event on the span current (the write's): no ids, no content."""
    attributes = {"agentium.memory.write": when}
    if exc is not None:
        attributes["error.type"] = observe.error_type(exc)
    observe.current_span_event(name, attributes)


def _refusal(scope: MemoryScope, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
    where = f"({record.target.describe()}, erasure {record.erasure_id})"
    if record.state is ErasureState.COMPLETE:
        said = f"the memory of user {scope.user!r} was erased while the fact was written {where}"
    else:
        said = (
            f"the memory of user {scope.user!r} is being erased {where}; the fact is refused until "
            "the erasure completes (agentium erase --resume)"
        )
    return ErasureInProgressError(f"{said}; {outcome}", record.erasure_id)


@attrs.frozen(slots=True)
class _FactWrite:
    """A memory fact of ``scope`` with ``provenance``, as the fence sees it (:class:`.FencedWrite`)."""

    scope: MemoryScope
    provenance: tuple[GroupRef, ...]

    @property
    def tenant(self) -> str:
        return self.scope.tenant

    @property
    def scopes(self) -> tuple[str, str | None, tuple[str, ...]]:
        return self.scope.tenant, self.scope.user, tuple(sorted({ref.session for ref in self.provenance}))

    #: Read by :meth:`.ErasureFence.covering_since`: with provenance, a groups erasure may take it.
    @property
    def cites_groups(self) -> bool:
        return bool(self.provenance)

    def covers(self, target: EraseTarget) -> bool:
        # A groups erasure of a group it cites too: the fact would be derived from text erased meanwhile.
        return covers_cited(target, self.scope, self.provenance)

    def covers_record(self, record: ErasureRecord) -> bool:
        # Only a forget's groups erasure (erasure_fence._counts says why): retention keeps derived facts.
        if record.kind is ErasureKind.FORGET:
            return covers_cited(record.target, self.scope, self.provenance)
        return record.target.covers_fact(self.scope, self.provenance)

    async def finished(self, ticket: Ticket, store: SessionStore) -> Sequence[ErasureRecord]:
        return await finished_cited(ticket, store, self.scope, self.provenance)

    def refusal(self, record: ErasureRecord, outcome: str) -> ErasureInProgressError:
        if record.target.covers_fact(self.scope, self.provenance):
            return _refusal(self.scope, record, outcome)
        return cited_refusal(record, outcome)


def fence_memory(
    manager: MemoryManager,
    store: SessionStore,
    timeout_s: float,
    *,
    clock: Callable[[], datetime] = utc_now,
    holder: object = None,
) -> None:
    """Fence ``manager``'s writes with the erasures recorded in ``store`` too (each storage once).

    Used by the runtime and an :class:`~.memory.agent.Agent` given a session
    store (``holder``: the runtime, the agent), and ``agentium memory
    remember|correct`` (no holder): the session store is where erasures are
    recorded, so a manager without one cannot be fenced. Each fence fences
    every one of the manager's writes: a host's own call and a runtime's
    alike, since an erasure recorded in any of them scrubs the manager's one
    memory store, and which store records the erasures of a tenant and user
    the manager cannot know.

    A holder's store fences the manager while the holder is open, and after
    its close while work of its own still runs (:func:`unfence_memory`); a
    holder dropped unclosed is forgotten with it. So the fences of a
    long-lived manager are bounded by the runtimes and Agents alive on it,
    whatever store they use. A store given without a holder (the CLI, one
    call per process) fences the manager for its lifetime. Stores reading one
    storage (:func:`_storage`: one object, or the built-in SQLite session
    stores on one database file) are read as one fence: the first given
    still fencing (its ``timeout_s`` and ``clock``), then the next.
    ``clock`` is :attr:`.ErasureFence.clock` (this process's; a test skews it).
    """
    fence = ErasureFence(store, timeout_s, clock=clock)
    with _fencing:  # runtimes may be built on several threads around one manager
        given = _GIVEN.setdefault(manager, [])
        if holder is None:
            if any(g.holder is None and _storage(g.fence.store) == _storage(store) for g in given):
                return  # the CLI per call on one store: nothing more to read
            given.append(_Given(None, fence))
        elif not any(g.holder is not None and g.holder() is holder for g in given):
            given.append(_Given(weakref.ref(holder), fence))
        _refence(manager, given)


def unfence_memory(manager: MemoryManager, holder: object, busy: Callable[[], bool] | None = None) -> None:
    """Withdraw ``holder``'s fence from ``manager`` (a runtime or Agent closing), unless it is the last one.

    Its operations and owned work are over, and its store may be closed
    (``owned=``): a fence that cannot be read would refuse every later write
    through the manager. ``busy`` (given when its close left work running: a
    drain past its bound, an operation that did not stop) says whether work
    of ``holder``'s still runs: while it does, that work may still write, so
    the fence stays (failing closed if the store was closed), and it goes at
    the first fence read after the work ended (:func:`current_fences`). An
    erasure recorded only in a storage no open runtime (nor ``Agent``) reads
    anymore is then no longer checked by the manager (docs/erasure.md). With
    no other fence left, the manager keeps its fences (fail closed, as a
    manager used by one runtime always did) until a runtime or ``Agent``
    gives it another store.
    """
    with _fencing:
        given = _GIVEN.get(manager)
        if given is not None:
            for entry in given:
                if entry.holder is not None and entry.holder() is holder:
                    entry.busy = busy or _idle
            _refence(manager, given)


def current_fences(manager: MemoryManager) -> tuple[ErasureFence, ...]:
    """``manager``'s fences now: those of closed holders whose left-over work ended are withdrawn first.

    A set lookup unless such a holder exists (:func:`unfence_memory` with ``busy``).
    """
    if manager in _RETIRING:
        with _fencing:
            given = _GIVEN.get(manager)
            if given is not None:
                _refence(manager, given)
    return manager._erasure_fences


def _idle() -> bool:
    return False


@attrs.define(slots=True)
class _Given:
    """A store given to fence a manager: by ``holder`` (held weakly; ``None``: for the manager's lifetime).

    ``busy`` is set at the holder's close: whether work of its own still runs
    (held strongly, so the holder's work keeps the fence even if the holder is dropped).
    """

    holder: weakref.ref[object] | None
    fence: ErasureFence
    busy: Callable[[], bool] | None = None

    def live(self) -> bool:
        if self.busy is not None:
            return self.busy()
        return self.holder is None or self.holder() is not None


#: What each manager was given to fence it. Not an attribute of the manager: :mod:`.memory.holders`
#: does the same.
_GIVEN: weakref.WeakKeyDictionary[MemoryManager, list[_Given]] = weakref.WeakKeyDictionary()
#: The managers holding a fence of a closed holder whose work still ran when last looked at.
_RETIRING: weakref.WeakSet[MemoryManager] = weakref.WeakSet()


def _refence(manager: MemoryManager, given: list[_Given]) -> None:
    """Set ``manager``'s fences from ``given`` (under :data:`_fencing`): one per storage, first given first.

    Holders gone (a runtime dropped unclosed), or closed with no work of
    theirs running anymore, are forgotten. With nothing left, the fences stay
    as they were: the last one keeps failing closed.
    """
    given[:] = [g for g in given if g.live()]
    if any(g.busy is not None for g in given):
        _RETIRING.add(manager)
    else:
        _RETIRING.discard(manager)
    fences: list[ErasureFence] = []
    storages: list[object] = []
    for entry in given:
        storage = _storage(entry.fence.store)
        if storage not in storages:
            storages.append(storage)
            fences.append(entry.fence)
    if fences:
        manager._erasure_fences = tuple(fences)


def _storage(store: SessionStore) -> object:
    """What ``store`` reads: its database file for the built-in SQLite session store, else the object.

    Only that exact class (its public ``path``): a subclass may read elsewhere,
    and no other store says what it reads. Looked up among the loaded modules:
    a process that never imported the SQLite adapter has none of its stores.
    """
    sqlite = sys.modules.get("agentium_harness.adapters.sqlite")
    if sqlite is not None and type(store) is getattr(sqlite, "SQLiteSessionStore", None):
        return ("sqlite", getattr(store, "path", None))
    return ("object", id(store))  # the fences hold the stores they compare: no id reused meanwhile


#: What a write's first reads saw: one :class:`FenceCheck` per store fencing it (none: unfenced).
FenceChecks = tuple[FenceCheck, ...]


async def fence_check(
    fences: Sequence[ErasureFence], scope: MemoryScope, provenance: Sequence[GroupRef]
) -> FenceChecks:
    """:meth:`ErasureFence.check` of the fact by each fence, in turn; ``()`` for a manager without one.

    A covering erasure pending in any store refuses the write, and so does
    a store that cannot be read (typed, nothing written): the erasures it
    records may cover the fact.
    """
    write = _FactWrite(scope, tuple(provenance))
    return tuple([await fence.check(write) for fence in fences])


async def covering(seen: FenceChecks, manager: MemoryManager) -> tuple[FenceCheck, ErasureRecord] | None:
    """:meth:`ErasureFence.covering_since` of each check: the first covering erasure found, with its check.

    After a write (:func:`fence_confirm`), and before an extraction's
    extractor call (:mod:`.extraction_fence`, from the turn's reading).

    Every store is read even if one fails: a covering erasure in another is
    still acted on. With none found, the first failure is raised (the write
    was not checked again against that store), unless its fence was
    withdrawn meanwhile (:func:`unfence_memory`) and another fence still
    reads the same storage (read as one gained since). A fence ``manager`` gained
    after the first reads (a runtime built while the write was under way, or
    another store on a storage whose first store closed) is read too
    (:meth:`ErasureFence.covering_after`): its erasure may have scrubbed
    memory before the write landed.
    """
    failures: list[tuple[FenceCheck, Exception]] = []
    for check in seen:
        try:
            record = await check.fence.covering_since(check)
        except Exception as exc:
            failures.append((check, exc))
            continue
        if record is not None:
            return check, record
    # Taken after those reads: a fence gained or withdrawn while they waited counts as such.
    current = current_fences(manager)
    # A fence withdrawn meanwhile (its runtime closed, its store perhaps with it) is forgiven only
    # when another fence still reads its storage (read below). Otherwise an erasure recorded only
    # there, one its runtime made while this write was under way say, was not checked again: a
    # failure like any other, said (unconfirmed) or acted on (an extraction not started).
    failed = next((exc for check, exc in failures if not _read_elsewhere(check.fence, current)), None)
    # One runtime: no store added meanwhile, nothing more read.
    for fence in current:
        if any(fence is check.fence for check in seen):
            continue
        try:
            record = await fence.covering_after(seen[0].write, min(check.at for check in seen))
        except Exception as exc:
            failed = failed or exc
            continue
        if record is not None:
            return FenceCheck(fence, seen[0].write, None, seen[0].at), record
    if failed is not None:
        raise failed
    return None


def _read_elsewhere(fence: ErasureFence, current: Sequence[ErasureFence]) -> bool:
    """Whether ``fence`` was withdrawn and another of ``current`` reads its storage (:func:`_storage`)."""
    if any(fence is other for other in current):
        return False
    storage = _storage(fence.store)
    return any(_storage(other.store) == storage for other in current)


async def fence_confirm(
    seen: FenceChecks,
    manager: MemoryManager,
    owner: MemoryScope,
    ack: MemoryAck,
    span: observe.Span | observe.NullSpan = observe.NULL,
) -> MemoryAck:
    """After the store acknowledged ``ack``: take the fact back and refuse if an erasure took its scope.

    ``owner`` is the scope the write was made under (the manager's
    ``forget`` is asked with it: its hooks see the fact forgotten). If a
    second read fails (and no other store's shows a covering erasure), the
    write stands and the ack's notes say it was not checked again (a WARNING too).

    A cancellation from the store's answer on (a drain cancelling the owned
    work, ``aclose()``, the host) is not let strand a fact an erasure took:
    the check and the forget run again, shielded from it and bounded, and
    the cancellation goes on (:func:`_take_back_cancelled`). ``span`` (the
    write's, :func:`write_span`) is told the acknowledgment.
    """
    span.result(ack)
    if not seen or ack.fact_id is None:
        return ack
    try:
        return await _confirm(seen, manager, owner, ack, ack.fact_id)
    except anyio.get_cancelled_exc_class():
        if ack.status is AckStatus.STORED:
            await _take_back_cancelled(seen, manager, owner, ack.fact_id)
        raise


async def _confirm(
    seen: FenceChecks, manager: MemoryManager, owner: MemoryScope, ack: MemoryAck, fact_id: str
) -> MemoryAck:
    try:
        found = await covering(seen, manager)
    except Exception as exc:  # the write stands: said in the ack, never a bare error after a commit
        _log.warning("memory write not confirmed against erasures: %s", observe.error_type(exc))
        _event("agentium.memory.unconfirmed", "answered", exc)
        note = f"the write was not checked again against erasures under way ({observe.error_type(exc)})"
        return attrs.evolve(ack, notes=(*ack.notes, note))
    if found is None:
        return ack
    write, record, named = found[0].write, found[1], fact_named(fact_id)
    from .memory.manager import forget_fact  # here: the manager module imports this one

    if ack.status is not AckStatus.STORED:
        # ``duplicate``: this write stored nothing. The fact it names is an older one, whose
        # provenance may well be outside the erasure (duplicates are told by text, not sources).
        raise write.refusal(
            record, f"the store answered {ack.status.value} ({named}, left as it was): nothing was written"
        )
    try:
        # The manager's own forget (also once closed): the content goes and the fact is never injected again.
        # Not under an owned item's signal: a drain's cancel reaches it as a cancellation, which
        # fence_confirm answers by taking the fact back shielded (a refused call would strand it).
        with outside_owned_work():
            await forget_fact(manager, owner, fact_id)
    except MemoryFactNotFoundError:
        pass  # the erasure removed it already
    except AgentiumError as exc:
        _log.warning("a fact written during an erasure could not be taken back: %s", observe.error_type(exc))
        _event("agentium.memory.take_back_failed", "answered", exc)
        failed = f"{named} was written meanwhile and taking it back failed ({observe.error_type(exc)})"
        outcome = f"{failed}: forget it (agentium memory forget; its id is the error's fact_ids)"
        raise left_to_forget(write.refusal(record, outcome), [fact_id]) from exc
    _event("agentium.memory.taken_back", "answered")  # the caller is told too: the refusal below
    # forget takes every revision: a correction's (or a duplicate's next revision) takes the older ones too.
    older = f", nor were its {n} earlier revision(s)" if (n := (ack.revision or 1) - 1) else ""
    raise write.refusal(record, f"{named}, written meanwhile, was forgotten: it was not kept{older}")


async def _take_back_cancelled(
    seen: FenceChecks, manager: MemoryManager, owner: MemoryScope, fact_id: str
) -> None:
    """After a cancellation that cut :func:`_confirm` short: check again and forget, shielded and bounded.

    The write was acknowledged ``stored``; whether the cancelled check or
    forget got anywhere is unknown, so both run again (a forget is
    idempotent), within :data:`LATE_CLEANUP_S`, outside the owned item's
    cancel signal. Nobody is left to tell but the log: a WARNING on
    ``agentium.engine.memory`` says the fact was taken back, or could not be.
    """
    with anyio.CancelScope(shield=True):
        try:
            taken = await bounded(lambda: _forget_if_erased(seen, manager, owner, fact_id), LATE_CLEANUP_S)
        except MemoryFactNotFoundError:
            taken = True  # the erasure removed it already
        except Exception as exc:
            _log.warning(
                "a fact written during an erasure, its write then cancelled, could not be taken back: %s",
                observe.error_type(exc),
            )
            _event("agentium.memory.take_back_failed", "cancelled", exc)
            return
    if taken:
        _log.warning("a fact written during an erasure, its write then cancelled, was taken back")
        _event("agentium.memory.taken_back", "cancelled")


def late_take_back(
    seen: FenceChecks,
    manager: MemoryManager,
    owner: MemoryScope,
    operation: str,
    asked: str | None = None,
) -> Callable[[object], Awaitable[None]] | None:
    """What runs when a write the manager walked away from lands after all: the check it never ran.

    ``None`` for a manager without a fence. A covering erasure pending, or
    finished having joined since the first read, makes the manager forget
    the fact (a WARNING on ``agentium.engine.memory``; nobody is left to tell otherwise),
    and so does a ``forget``'s erasure of a group it cites (:func:`.memory.sources_write.covers_cited`),
    even if it was closed meanwhile. Only a ``stored`` acknowledgment of the
    write asked for (``operation``; for a correction the fact ``asked``,
    as :func:`.memory.answers.checked_ack` reads it on time) is acted on: any
    other answer names no fact this write stored, and nothing is forgotten.
    """
    if not seen:
        return None

    async def take_back(raw: object) -> None:
        # The write's span ended when the call was abandoned: the late check has one of its own.
        late = observe.internal_span("agentium.memory.late_take_back", {"agentium.operation": operation})
        # In a copy of the abandoned call's context: the telemetry it recorded under still holds.
        with late:
            await _take_back_late(seen, manager, owner, raw, operation, asked, late)

    return take_back


async def _take_back_late(
    seen: FenceChecks,
    manager: MemoryManager,
    owner: MemoryScope,
    raw: object,
    operation: str,
    asked: str | None,
    span: observe.Span | observe.NullSpan,
) -> None:
    """The late check of :func:`late_take_back` under its ``span``, failed when the answer or the forget is.

    Nobody is left to raise to, so a refused answer or a failed take-back
    ends ``span`` ERROR (``error.type``: the class of what failed, no
    message unless content is captured) besides its event and WARNING, as
    ``agentium.document.late_take_back`` ends when its delete raises. A
    take-back cut short by the release's bound is said the same way
    (``error.type`` ``cancelled``) before the cancellation goes on.
    """
    try:
        ack = checked_ack(raw, operation, asked)
    except ContractViolationError as exc:
        _log.warning("%s landed past its deadline with an answer that is no acknowledgment of it", operation)
        _event("agentium.memory.late_answer_refused", "late", exc)
        span.fail(observe.error_type(exc), exc)
        return
    if ack.status is not AckStatus.STORED or ack.fact_id is None:
        return
    try:
        # This runs in a copy of the abandoned call's context: in owned work a drain abandoned,
        # its calls' parent signal is the item's, cancelled by that drain; the forget is not its.
        taken = await _forget_if_erased(seen, manager, owner, ack.fact_id)
    except MemoryFactNotFoundError:
        return  # the erasure removed it already
    except anyio.get_cancelled_exc_class() as exc:
        # Cut short: the release of a late result is bounded (``LATE_CLEANUP_S``), and a loop ending
        # cancels it too. Said here, before the span ends ``cancelled``: the release drops it silently.
        _log.warning("a fact written past its deadline could not be taken back: cut short")
        _event("agentium.memory.take_back_failed", "late", exc)
        raise
    except AgentiumError as exc:
        _log.warning("a fact written past its deadline could not be taken back: %s", observe.error_type(exc))
        _event("agentium.memory.take_back_failed", "late", exc)
        span.fail(observe.error_type(exc), exc)
        return
    if taken:
        _log.warning("a fact written past its deadline during an erasure was taken back")
        _event("agentium.memory.taken_back", "late")


async def _forget_if_erased(
    seen: FenceChecks, manager: MemoryManager, owner: MemoryScope, fact_id: str
) -> bool:
    """Forget ``fact_id`` if a covering erasure is pending or joined since ``seen``; say if one was.

    The manager's own forget (also once closed), outside any owned item's
    cancel signal: the take-backs that call this outlive the item whose
    context they run in. ``MemoryFactNotFoundError`` (the erasure removed it
    already) is left to the caller.
    """
    from .memory.manager import forget_fact  # here: the manager module imports this one

    if await covering(seen, manager) is None:
        return False
    with outside_owned_work():
        await forget_fact(manager, owner, fact_id)
    return True
