"""The memory manager's state and its bounded calls: what every one of its operations stands on.

:class:`MemoryManagerBase` checks the manager's arguments and holds its state
(store, limits, selection, extractor, owned work, forgotten ids, claims,
erasure fences, late calls, telemetry); :meth:`~MemoryManagerBase._call`
runs one store or extractor call on a ticket under its deadline, a store's
foreign exception typed. The host's operations are built on it in
:mod:`.writes` (remember, correct, forget) and :mod:`.manager` (reads,
claims, owned work, drain); docs/api.md documents them all with
:class:`~.manager.MemoryManager`. The functions here hand the engine what
it reads of a manager (its telemetry, fences, late calls, owned work).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeVar

from ..._errors import AgentiumError, AgentLifecycleError, InvalidArgumentError
from ..._errors_memory import MemoryStoreError
from ..._history import Message
from ..._observe import spans as observe
from ..._observe.settings import Resolved, Telemetry
from ..._ports._base import OpContext
from ..._ports.memory import (
    MemoryAck,
    MemoryCapabilities,
    MemoryEventKind,
    MemoryFact,
    MemoryScope,
    MemoryStore,
    rejection_reason,
)
from ..._scope import SessionKey
from ..._text import error_text
from ..checks import check_adapter
from ..hooks import HookBroadcaster
from ..late_calls import FactScope, LateCalls
from ..lifecycle import Ticket
from ..memory_fence import ErasureFence, current_fences
from .events import announce_write
from .extractor import MemoryExtractor
from .limits import MemoryLimits, model_timeout
from .selection import MemorySelection, RecentIds, recent_and_relevant
from .work import WorkTracker, current_work_signal

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = [
    "AcceptRule",
    "HistoryOwner",
    "MemoryManagerBase",
    "call_extractor",
    "fences_of",
    "late_calls_of",
    "telemetry_of",
    "work_tracker",
]

T = TypeVar("T")

#: Who extracts memory from a session's history: the harness (canonical sessions) or an agent.
HistoryOwner = Literal["harness", "agent"]

#: The host's own admission rule for a fact: a reason to reject it, or ``None``.
AcceptRule = Callable[[MemoryFact], str | None]


class MemoryManagerBase:
    """The state of a :class:`~.manager.MemoryManager` and its bounded calls (its first part).

    ``MemoryManager``'s docstring says what each argument is; this part checks them.
    """

    #: docs/api.md documents these members with :class:`~.manager.MemoryManager` (testing._api_docs).
    __agentium_documented_mixin__ = True

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
