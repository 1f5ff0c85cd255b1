"""The memory manager: the host's calls on durable memory, its owned work and its drain (R36, R39, R40).

Nothing becomes memory unless the host calls :meth:`MemoryManager.remember`
(or :meth:`~MemoryManager.remember_with_result`) or configures an extractor;
correction and forgetting are host calls too. Every write is checked before
the store sees it (:func:`~agentium_harness._ports.memory.rejection_reason`
plus the host's own ``accept`` rule), runs under a deadline, and is
broadcast through the ``agentium_memory_event`` hook; a hook that raises is
isolated and reported in the acknowledgment's ``notes``.

Extraction and final writes run as named owned work; :meth:`MemoryManager.drain`
covers them and any :class:`~agentium_harness._engine.memory.work.WorkSource` handed
over with :meth:`MemoryManager.track` (a runtime's summary updates).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Literal, TypeVar

from ..._errors import (
    AgentCloseError,
    AgentiumError,
    AgentLifecycleError,
    ExtractionConflictError,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryRejectedError,
    MemoryStoreError,
)
from ..._history import Message
from ..._observe import spans as observe
from ..._observe.settings import Resolved, Telemetry
from ..._ports._base import OpContext
from ..._ports.memory import (
    AckStatus,
    GroupRef,
    MemoryAck,
    MemoryCapabilities,
    MemoryEventKind,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    StoredFact,
    check_at,
    check_limit,
    rejection_reason,
)
from ..._scope import SessionKey, validate_id
from ..._text import error_text
from ..._validators import check_duration
from ..checks import check_adapter
from ..hooks import HookBroadcaster
from ..late_calls import FactScope, LateCalls
from ..lifecycle import Ticket, close_owned
from ..memory_fence import (
    ErasureFence,
    current_fences,
    fence_check,
    fence_confirm,
    late_take_back,
    write_span,
)
from ..unexpected import WriteProgress, typed_unexpected
from .answers import (
    MEMORY_WRITE,
    check_cap,
    check_owner_kind,
    check_work,
    checked_ack,
    checked_facts,
    checked_history,
    checked_listing,
    checked_scope,
)
from .events import announce_drained, announce_write
from .extraction import start_extraction
from .extractor import MemoryExtractor
from .holders import work_owner
from .limits import MemoryLimits, model_timeout
from .selection import (
    MemorySelection,
    RecentIds,
    SelectionRequest,
    candidate_bound,
    checked_selection,
    recent_and_relevant,
)
from .work import CANCEL_GRACE_S, DrainResult, WorkSource, WorkTracker, current_work_signal

__all__ = [
    "HistoryOwner",
    "MemoryExtractor",
    "MemoryLimits",
    "MemoryManager",
    "announce_drain",
    "call_extractor",
    "counted_listing",
    "fences_of",
    "forget_fact",
    "late_calls_of",
    "telemetry_of",
    "work_tracker",
]

T = TypeVar("T")

#: Who extracts memory from a session's history: the harness (canonical sessions) or an agent.
HistoryOwner = Literal["harness", "agent"]

#: The host's own admission rule for a fact: a reason to reject it, or ``None``.
AcceptRule = Callable[[MemoryFact], str | None]


class MemoryManager:
    """The host's handle on durable memory: remember, correct, forget, list, select, drain.

    ``store`` is borrowed unless ``owns_store`` is true (then :meth:`aclose`
    closes it). ``hooks`` broadcasts lifecycle events (the plugin registry);
    ``selection`` replaces the default :func:`recent_and_relevant`;
    ``extractor`` turns on extraction; ``accept`` adds the host's own rule.
    ``telemetry`` chooses where the spans of its calls go outside a runtime's
    operation (inside an operation of a runtime it was given to, its turn,
    ``forget`` or drain, they follow that runtime's; inside another runtime's,
    its own). Without it: the global OpenTelemetry providers under the
    default settings, inside another runtime's block or turn too. A runtime it
    is given to (``create_harness_runtime(memory=manager)``) never sets it, so
    a manager shared by tenants' runtimes records the host's own calls under
    no tenant's telemetry (:mod:`.limits`).
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        hooks: HookBroadcaster | None = None,
        selection: MemorySelection | None = None,
        extractor: MemoryExtractor | None = None,
        accept: AcceptRule | None = None,
        limits: MemoryLimits | None = None,
        owns_store: bool = False,
        telemetry: Telemetry | None = None,
    ) -> None:
        caps = check_adapter("memory", store)
        assert isinstance(caps, MemoryCapabilities)
        if limits is not None and not isinstance(limits, MemoryLimits):
            raise InvalidArgumentError(f"limits must be MemoryLimits, got {type(limits).__name__}")
        for name, value in (("selection", selection), ("accept", accept)):
            if value is not None and not callable(value):
                raise InvalidArgumentError(f"{name} must be callable, got {type(value).__name__}")
        if not isinstance(owns_store, bool):
            # By type, not truthiness: owns_store="no" had the manager close a store it borrows.
            raise InvalidArgumentError(f"owns_store must be a bool, got {type(owns_store).__name__}")
        if hooks is not None and not callable(getattr(hooks, "broadcast", None)):
            raise InvalidArgumentError(
                f"hooks must have a broadcast() (a plugin registry), got {type(hooks).__name__}"
            )
        if extractor is not None and not callable(getattr(extractor, "extract", None)):
            raise InvalidArgumentError(
                f"extractor must have an async extract(), got {type(extractor).__name__}"
            )
        self.store = store
        self.capabilities = caps
        self.limits = limits or MemoryLimits()
        self.selection: MemorySelection = selection or recent_and_relevant
        self.extractor = extractor
        self._accept = accept
        self._hooks = hooks
        self._owns_store = owns_store
        self._work = WorkTracker()
        self._forgotten = RecentIds()  # bounded: older forgotten facts rely on the store's tombstone
        self._claims: dict[SessionKey, tuple[HistoryOwner, int]] = {}  # owner and how many claims
        self._claims_lock = threading.Lock()
        self._closed = False
        #: Added by each runtime (or Agent, CLI) with its session store (:mod:`..memory_fence`): all read
        #: around each write, whoever makes it (one memory store: any of them may be erasing its facts).
        self._erasure_fences: tuple[ErasureFence, ...] = ()
        self._late = LateCalls()  # its writes abandoned past their deadline, maybe running: erasures wait
        if telemetry is not None and not isinstance(telemetry, Telemetry):
            raise InvalidArgumentError(f"telemetry must be a Telemetry, got {type(telemetry).__name__}")
        # The host's only: no runtime given the manager changes it (.limits).
        self._telemetry = telemetry.resolve() if telemetry is not None else None

    # -- state ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran; every later call raises :class:`AgentLifecycleError`."""
        return self._closed

    @property
    def forgotten_ids(self) -> frozenset[str]:
        """The last fact ids forgotten through this manager: never injected, whatever a selection returns.

        At most the last 10,000 forgets (a long-lived manager does not grow with each); an older
        forgotten fact is kept out by the store's tombstone, as every fact not ``current`` is.
        """
        return frozenset(self._forgotten)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise AgentLifecycleError(f"{what} refused: the memory manager is closed; nothing was written")

    async def _call(
        self,
        operation: str,
        work: Callable[[OpContext], Awaitable[T]],
        timeout_s: float | None = None,
        writes: FactScope | None = None,
        on_late: Callable[[T], Awaitable[None]] | None = None,
    ) -> T:
        # Spans: search_memory of select/history (a write, forget or list: write_span). ``timeout_s``:
        # not the store's deadline (an extractor's model's). ``writes``: where it may add a fact;
        # abandoned, in ``late`` till it ends (erasures wait). In owned work, a drain's cancel sets
        # the signal too (threads see it).
        with observe.using(self._telemetry, self):
            try:
                ticket = Ticket(None, operation, self.limits.op_timeout_s, parent=current_work_signal())
                ticket.late = self._late if writes is not None else None
                return await ticket.call(
                    operation, work, timeout_s=timeout_s, late_scope=writes, on_late=on_late
                )
            except AgentiumError:
                raise
            except Exception as exc:
                if operation == "memory extract":
                    raise  # the extractor's own failure: its work item reports it as it is
                # A store's foreign exception (ValueError, OSError ...) reaches the host typed.
                raise MemoryStoreError(
                    f"{operation} failed: {error_text(exc)}; the store did not acknowledge it"
                ) from exc

    async def _event(self, kind: MemoryEventKind, ack: MemoryAck, scope: MemoryScope | None) -> MemoryAck:
        timeout = self.limits.drain_timeout_s
        return await announce_write(self._hooks, kind, ack, scope, timeout, self._telemetry)

    def _reject_reason(self, fact: object) -> str | None:
        if not isinstance(fact, MemoryFact):
            raise InvalidArgumentError(
                f"expected a MemoryFact, got {type(fact).__name__}; nothing was written"
            )
        reason = rejection_reason(fact, self.limits.max_fact_bytes)
        if reason is None and self._accept is not None:
            reason = self._accept(fact)
            if reason is not None and not isinstance(reason, str):
                raise InvalidArgumentError("the accept rule must return a reason string or None")
        return reason

    # -- writes -----------------------------------------------------------------------------

    async def remember_with_result(self, fact: MemoryFact) -> MemoryAck:
        """Store ``fact`` and return the acknowledgment: stored, duplicate, or rejected with the reason (R39).

        A rejected fact writes nothing and broadcasts nothing.
        """
        self._check_open("remember")
        progress = WriteProgress()
        with typed_unexpected("memory remember", progress, MEMORY_WRITE):
            reason = self._reject_reason(fact)
            if reason is not None:
                return MemoryAck(AckStatus.REJECTED, reason=reason)
            with write_span(self._telemetry, self, "memory remember") as w:
                seen = await fence_check(current_fences(self), fact.scope, fact.provenance)
                progress.saving()
                try:
                    raw = await self._call(
                        "memory remember",
                        lambda ctx: self.store.remember(fact, ctx),
                        writes=FactScope(fact.scope, fact.provenance),
                        on_late=late_take_back(seen, self, fact.scope, "memory remember"),
                    )
                except MemoryRejectedError as exc:
                    # The store refused it: a failed write on its span (the type only, never the reason).
                    w.fail(observe.error_type(exc), exc)
                    return MemoryAck(AckStatus.REJECTED, reason=exc.reason)
                ack = await fence_confirm(seen, self, fact.scope, checked_ack(raw, "memory remember"), w)
                progress.committed()  # acknowledged and kept (the fence took back none it refused)
                return await self._event(
                    MemoryEventKind.REMEMBERED, ack, fact.scope
                )  # a hook's failure: on w
        raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises

    async def remember(self, fact: MemoryFact) -> MemoryAck:
        """Like :meth:`remember_with_result`, but a rejection raises :class:`MemoryRejectedError`."""
        if (ack := await self.remember_with_result(fact)).status is AckStatus.REJECTED:
            raise MemoryRejectedError(ack.reason)
        return ack

    async def correct(self, scope: MemoryScope, fact_id: str, replacement: MemoryFact) -> MemoryAck:
        """Write ``replacement`` as the next revision of ``fact_id``, keeping the history.

        Raises :class:`MemoryRejectedError` for a replacement the checks
        refuse, :class:`MemoryFactNotFoundError` for a missing or foreign id
        (the same error either way) and :class:`MemoryFactForgottenError` for
        a forgotten fact; nothing changes in any of these cases. With a store
        declaring ``history``, the fact's revisions are read first and must be
        owned by ``scope`` (:class:`ContractViolationError` if the store
        returns another tenant's: its own check is wrong); a fact they show
        holding :data:`MAX_FACT_REVISIONS` revisions is refused with
        :class:`MemoryRejectedError` whatever the store would do.
        """
        self._check_open("correct")
        progress = WriteProgress()
        with typed_unexpected("memory correct", progress, MEMORY_WRITE):
            scope = checked_scope(scope)
            fact_id = validate_id(fact_id, "fact id")
            reason = self._reject_reason(replacement)
            if reason is not None:
                raise MemoryRejectedError(reason)
            if not scope.owns(replacement.scope):
                raise InvalidArgumentError("a correction stays with its tenant and user; nothing was written")
            revisions = await self._check_owner(scope, fact_id, "memory correct")
            check_cap(revisions, replacement)
            with write_span(self._telemetry, self, "memory correct") as w:
                seen = await fence_check(current_fences(self), replacement.scope, replacement.provenance)
                progress.saving()
                raw = await self._call(
                    "memory correct",
                    lambda ctx: self.store.correct(scope, fact_id, replacement, ctx),
                    writes=FactScope(replacement.scope, replacement.provenance),
                    on_late=late_take_back(seen, self, scope, "memory correct", fact_id),
                )
                ack = await fence_confirm(seen, self, scope, checked_ack(raw, "memory correct", fact_id), w)
                progress.committed()
                return await self._event(MemoryEventKind.CORRECTED, ack, replacement.scope)
        raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises

    async def forget(self, scope: MemoryScope, fact_id: str) -> MemoryAck:
        """Tombstone ``fact_id`` and remove its content; it is never injected again.

        Raises :class:`MemoryFactNotFoundError` for a missing or foreign id (one message
        for both); nothing changes then. The owner is re-checked first as for :meth:`correct`.
        """
        self._check_open("forget")
        return await forget_fact(self, scope, fact_id)

    async def _check_owner(self, scope: MemoryScope, fact_id: str, operation: str) -> tuple[StoredFact, ...]:
        """Before a change, the fact's revisions must be ``fact_id``'s, owned by ``scope`` (defence in depth).

        Like recall's owner check on every candidate: a store whose own check
        is wrong (keys joined from ids, so tenant ``a`` + user ``b/c`` is
        tenant ``a/b`` + user ``c``) must not let one tenant change another's
        fact. Needs ``history``; a store without it is trusted on its own
        check. A missing or foreign id is refused by the store's ``history``
        (``MemoryFactNotFoundError``); revisions of another tenant or user, or
        of another id, are a :class:`ContractViolationError`, and nothing is changed.
        Returns the revisions read (none without ``history``).
        """
        if not self.capabilities.history:
            return ()
        raw = await self._call(
            f"{operation} owner check", lambda ctx: self.store.history(scope, fact_id, ctx)
        )
        return checked_history(raw, scope, fact_id, f"{operation} owner check")

    # -- reads ------------------------------------------------------------------------------

    async def list(self, scope: MemoryScope, limit: int = 50) -> tuple[StoredFact, ...]:
        """Up to ``limit`` current facts of ``scope``'s tenant and user, newest first (expired ones too).

        Whatever the store returns, each once, none forgotten through this manager (WARNING for the rest).
        """
        return (await self._listed(scope, limit))[0]

    async def _listed(self, scope: MemoryScope, limit: int) -> tuple[tuple[StoredFact, ...], int]:
        """:meth:`list`, and how many facts the store answered (``runtime.forget``: was it full?)."""
        self._check_open("list")
        scope, _ = checked_scope(scope), check_limit(limit)
        # Around the check: its drops are events.
        with write_span(self._telemetry, self, "memory list") as span:
            raw = await self._call("memory list", lambda ctx: self.store.list_facts(scope, limit, ctx))
            span.result(raw)
            facts = checked_facts(raw, scope, limit, "memory list")
            return checked_listing(facts, self._forgotten, "memory list"), len(facts)

    async def history(self, scope: MemoryScope, fact_id: str) -> tuple[StoredFact, ...]:
        """Every revision of ``fact_id``, oldest first (a forgotten fact's content reads empty).

        Revisions of another fact (or another tenant or user) from the store are a
        :class:`ContractViolationError`: ``runtime.forget`` erases what they cite.
        """
        self._check_open("history")
        scope = checked_scope(scope)
        fact_id = validate_id(fact_id, "fact id")
        raw = await self._call("memory history", lambda ctx: self.store.history(scope, fact_id, ctx))
        return checked_history(raw, scope, fact_id, "memory history")

    async def select(
        self, scope: MemoryScope, query: str, *, limit: int | None = None, at: datetime | None = None
    ) -> tuple[tuple[StoredFact, ...], tuple[tuple[str, str], ...]]:
        """The facts to inject for ``query`` in ``scope`` through the selection, checked; and those dropped.

        Bounded by ``limit`` (default ``limits.max_injected_facts``). Only
        current facts valid at ``at`` (default now) that ``scope`` sees are
        kept; every other fact examined is listed with why. Facts are examined in rank order,
        at most :func:`~.selection.candidate_bound` of ``limit``, until ``limit`` are kept.
        ``at`` must be ``None`` or a timezone-aware datetime
        (:class:`InvalidArgumentError` otherwise).
        """
        self._check_open("select")
        scope = checked_scope(scope)
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, got {type(query).__name__}")
        bound = check_limit(limit if limit is not None else self.limits.max_injected_facts)
        checked = check_at(at)  # ``at=0`` is not "now": only None is
        when = checked if checked is not None else datetime.now(UTC)
        selection = self.selection
        candidates = candidate_bound(bound)  # refused facts leave their places to the next ones
        raw = await self._call(
            "memory select",
            lambda ctx: selection(SelectionRequest(self.store, scope, query, bound, when, ctx, candidates)),
        )
        kept, dropped = checked_selection(raw, scope, bound, when, self._forgotten, candidates=candidates)
        return tuple(kept), tuple(dropped)

    # -- history ownership (R37) ------------------------------------------------------------

    def claim_history(self, key: SessionKey, owner: HistoryOwner) -> None:
        """Record a claim of ``owner`` on session ``key``'s extraction; a claim of the other owner raises.

        The harness claims a session whose canonical history it owns; an
        agent with extraction claims its own. Both for one session would
        extract twice, so that is :class:`ExtractionConflictError`. Claims of
        the same owner are counted: each is released by its own
        :meth:`release_history`, and the session is free once all are.
        """
        check_owner_kind(owner)
        if not isinstance(key, SessionKey):
            raise InvalidArgumentError(f"key must be a SessionKey, got {type(key).__name__}")
        with self._claims_lock:  # check and claim together: agents may be built on several threads
            held = self._claims.get(key)
            if held is not None and held[0] != owner:
                raise ExtractionConflictError(
                    f"session {key.session!r} of {key.tenant}/{key.user}: the harness owns its canonical "
                    "history and an agent also extracts memory from it; turn off the agent's extraction (or "
                    "use a separate session) so memory is not extracted twice"
                )
            self._claims[key] = (owner, 1 if held is None else held[1] + 1)

    def release_history(self, key: SessionKey, owner: HistoryOwner) -> bool:
        """Release one claim of ``owner`` on ``key``; True if there was one.

        Only a claim of ``owner`` is released: an agent that never claimed the
        session, closing, leaves the harness's claim in place.
        """
        check_owner_kind(owner)
        with self._claims_lock:
            held = self._claims.get(key)
            if held is None or held[0] != owner:
                return False
            if held[1] <= 1:
                del self._claims[key]
            else:
                self._claims[key] = (owner, held[1] - 1)
            return True

    # -- owned work -------------------------------------------------------------------------

    def start_work(self, name: str, kind: str, work: Callable[[], Awaitable[object]]) -> str:
        """Run ``work`` as named owned work (``kind``: ``extraction``, ``final-write``…) until drained."""
        self._check_open("owned work")
        check_work(name, kind, work)
        return self._work.start(name, kind, work, work_owner(self))  # a runtime's operation's: its work

    def track(self, source: WorkSource) -> None:
        """Cover another component's background work in every drain (``OwnedWorkSource(work)``)."""
        self._work.track(source)

    def running(self) -> tuple[str, ...]:
        """Names of the owned and tracked work running now."""
        return self._work.running()

    def extract_in_background(
        self, scope: MemoryScope, messages: Sequence[Message], name: str, *, sources: Sequence[GroupRef]
    ) -> str | None:
        """Start extraction of ``messages`` as owned work named ``name``; ``None`` without an extractor.

        ``sources`` are the groups ``messages`` are (1 to ``MAX_PROVENANCE``
        :class:`GroupRef`, else :class:`InvalidArgumentError` and nothing
        starts): each fact the extractor proposes cites them (its own
        citation is kept if it names only groups of ``sources``), so erasing
        their session removes it. Each fact is checked and written like a host's
        ``remember``; a rejected one is skipped (it never becomes memory; a
        WARNING on ``agentium.engine.memory`` says how many); the
        work fails, writing none, if the extractor raises, proposes more than
        ``max_extracted_facts``, a fact outside ``scope`` (another user, or a
        project or repository other than ``scope``'s when it names one), or
        one citing a group not in ``sources`` (:mod:`.extraction`).
        The extractor's call runs under the model deadline
        (:func:`.limits.model_timeout`: ``MemoryLimits.model_timeout_s``, else
        the runtime's whose operation starts it, else ``op_timeout_s``); the writes under ``op_timeout_s``.
        Just before it, the erasures under way in every session store fencing
        the manager are read: one covering ``scope``'s user or tenant, or a
        session ``sources`` names, skips the extraction (the work fails with
        ``ErasureInProgressError``; nothing is sent or written:
        :mod:`..extraction_fence`).
        """
        return start_extraction(self, scope, messages, name, sources, None)

    async def drain(self, timeout_s: float | None = None, *, grace_s: float | None = None) -> DrainResult:
        """Wait for all owned and tracked work, cancel what outlasts ``timeout_s``; say what happened (R40).

        Work started while the drain waits is waited for too. Cancelled work
        gets ``grace_s`` (default 2 s) to stop. Broadcasts a ``drained`` event.
        Raises :class:`MemoryDrainError` carrying the :class:`DrainResult` when
        any item failed or was cancelled.
        """
        timeout = self.limits.drain_timeout_s if timeout_s is None else timeout_s
        with observe.using(self._telemetry, self):
            result = await self._work.drain(timeout, CANCEL_GRACE_S if grace_s is None else grace_s)
        result = await self._announce_drain(result, self.limits.drain_timeout_s)
        if not result.ok:
            raise MemoryDrainError(f"memory drain: {result.describe()}", result)
        return result

    async def _announce_drain(self, result: DrainResult, timeout_s: float) -> DrainResult:
        """Broadcast the ``drained`` event (bounded by ``timeout_s``); hook failures go in ``notes``."""
        with observe.using(self._telemetry, self):
            return await announce_drained(self._hooks, result, timeout_s, self._telemetry)

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Refuse further calls and close the store if owned (bounded). Call :meth:`drain` first.

        ``timeout_s`` follows the one duration rule (finite, above 0): else
        :class:`InvalidArgumentError`, and the manager stays open. A failing
        close of an owned store raises; calling again retries it.
        """
        check_duration(timeout_s, "timeout_s")
        self._closed = True
        if not self._owns_store:
            return
        # Its own operation: the store's close records under its telemetry, whatever block it is called in.
        with observe.using(self._telemetry, self):
            [(_, problem)] = await close_owned([self.store], timeout_s)
        if problem is not None:
            raise AgentCloseError([problem])
        self._owns_store = False


def telemetry_of(manager: MemoryManager) -> Resolved:
    """The telemetry settings ``manager`` was given, or the defaults (global providers, no content)."""
    return manager._telemetry if manager._telemetry is not None else Telemetry().resolve()


def fences_of(manager: MemoryManager) -> tuple[ErasureFence, ...]:
    """``manager``'s erasure fences, one per storage fencing it now (an extraction reads them)."""
    return current_fences(manager)


async def call_extractor(
    manager: MemoryManager, extractor: MemoryExtractor, scope: MemoryScope, given: tuple[Message, ...]
) -> object:
    """``extractor.extract(scope, given)`` as ``manager``'s bounded call: what it proposed, unchecked."""
    # An extractor is host code that may well call a model: a model deadline, not the store's
    # (read when the work runs, so a runtime given the manager later counts too).
    timeout_s = model_timeout(manager, manager.limits.op_timeout_s)
    return await manager._call("memory extract", lambda ctx: extractor.extract(scope, given, ctx), timeout_s)


def late_calls_of(manager: MemoryManager) -> LateCalls:
    """``manager``'s remember and correct calls abandoned past their deadline (an erasure waits for them)."""
    return manager._late


def work_tracker(manager: MemoryManager) -> WorkTracker:
    """The tracker of ``manager``'s owned work: a runtime's shutdown drains it without raising."""
    return manager._work


async def announce_drain(manager: MemoryManager, result: DrainResult, timeout_s: float) -> DrainResult:
    """Tell ``manager``'s hooks how a drain ended (bounded by ``timeout_s``), as its own drain does."""
    return await manager._announce_drain(result, timeout_s)


async def counted_listing(m: MemoryManager, scope: MemoryScope, n: int) -> tuple[Sequence[StoredFact], int]:
    """``m.list(scope, n)``, and how many facts the store answered (was its answer full?)."""
    return await m._listed(scope, n)


async def forget_fact(manager: MemoryManager, scope: MemoryScope, fact_id: str) -> MemoryAck:
    """``manager.forget``, also once closed: the fence takes back a write that lands after the close."""
    m, progress = manager, WriteProgress()
    with typed_unexpected("memory forget", progress, MEMORY_WRITE):
        scope = checked_scope(scope)
        fact_id = validate_id(fact_id, "fact id")
        with write_span(m._telemetry, m, "memory forget") as w:  # its owner check, store call and hooks
            await m._check_owner(scope, fact_id, "memory forget")
            progress.saving()
            raw = await m._call("memory forget", lambda ctx: m.store.forget(scope, fact_id, ctx))
            # The store ran the forget: whatever its acknowledgment says, never inject the fact again.
            m._forgotten.add(fact_id)
            ack = checked_ack(raw, "memory forget", fact_id)
            w.result(ack)
            progress.committed()
            return await m._event(MemoryEventKind.FORGOTTEN, ack, scope)  # a hook's failure: on w
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises
