"""Admission and lifecycle: the one door every operation on a session goes through.

Runs, ``close_session``, legacy migration and reconciliation are all admitted
here. Admission is atomic across threads and event loops (check-and-insert
under a thread lock): one operation per session at a time, whichever loop
asks, nothing at all once the runtime is closing. Each admitted operation gets a :class:`Ticket`, which
holds the operation's cancel scope and its cancel signal, so ``aclose()`` can
stop any of them, and which makes every adapter call under its deadline
(:meth:`Ticket.call`, through :func:`~.bounded.bounded`: a call blocked where
cancellation cannot reach it is abandoned at its deadline, not waited for).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import anyio
import attrs

from .._errors import (
    AgentiumError,
    ErasureInProgressError,
    InvalidArgumentError,
    OperationCancelledError,
    OperationTimeoutError,
    RuntimeClosedError,
    SessionBusyError,
)
from .._observe import spans as observe
from .._ports import CancelSignal, OpContext
from .._ports.erasure import EraseTarget
from .._scope import SessionKey
from .._text import error_text
from .bounded import ABANDON_GRACE_S, Overrun, bounded
from .inline_call import bounded_inline
from .late_calls import LateCalls, LateScope, covers
from .loops import LoopHandle, ThreadSafeEvent, cancel_scope, current_library
from .results import Diagnostic, Severity
from .store_errors import store_error

__all__ = [
    "check_closable",
    "close_owned",
    "covers",
    "overlaps",
    "Admission",
    "Admitted",
    "LateCalls",
    "LateScope",
    "LifecycleState",
    "Ticket",
]

T = TypeVar("T")
R = TypeVar("R")

_log = logging.getLogger("agentium.engine.admission")


class LifecycleState(enum.StrEnum):
    """Whether the runtime admits runs."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Ticket:
    """One admitted operation on one session.

    ``signal`` is the operation's cancel signal; every adapter call gets a child
    of it, so cancelling the ticket (shutdown) reaches calls already running in
    worker threads. ``done`` is set when the operation has left admission; any
    event loop may wait for it. ``loop`` is the loop the operation runs on
    (``None`` when made outside one): :meth:`cancel` from another thread
    reaches the operation's cancel scope through it. ``abandoned`` describes
    each call the operation had to walk away from.
    ``hook_timeout_s`` bounds each lifecycle-hook broadcast the operation makes
    (the runtime's ``close_timeout_s``; ``op_timeout_s`` when not given).
    ``parent``: a signal the operation's is cancelled with (owned memory work's, set by a drain).
    """

    __slots__ = (
        "abandoned",
        "cancel_scope",
        "done",
        "fence_seen",
        "hook_timeout_s",
        "key",
        "kind",
        "late",
        "loop",
        "op_timeout_s",
        "signal",
    )

    def __init__(
        self,
        key: SessionKey | None,
        kind: str,
        op_timeout_s: float,
        hook_timeout_s: float | None = None,
        parent: CancelSignal | None = None,
    ) -> None:
        self.key = key
        self.kind = kind
        self.op_timeout_s = op_timeout_s
        self.hook_timeout_s = op_timeout_s if hook_timeout_s is None else hook_timeout_s
        self.signal = CancelSignal(parent=parent)
        self.loop = loop = LoopHandle.current_or_none()
        self.cancel_scope = anyio.CancelScope() if loop is None else cancel_scope(loop.library)
        self.done = ThreadSafeEvent()
        self.abandoned: list[str] = []
        #: Where abandoned calls of this operation are noted (set by whoever admits it).
        self.late: LateCalls | None = None
        #: The revision of the tenant's pending-erasure ledger its fenced session load saw (``None``
        #: inside: no ledger yet); ``None`` when no fenced load ran. Read again before a commit
        #: archives (:mod:`.commit_fence`).
        self.fence_seen: tuple[int | None] | None = None

    def orphaned(self) -> bool:
        """True when the operation's event loop was closed with it still admitted: it can never finish."""
        return self.loop is not None and not self.done.is_set() and self.loop.finished

    def cancel(self, reason: str) -> None:
        """Cancel the operation from any thread: its signal first (threads see it), then its cancel scope.

        The scope is cancelled on the operation's own loop (a cancel scope
        belongs to it); a loop that has ended has nothing left to cancel.
        """
        self.signal.cancel(reason)
        if self.loop is None:
            self.cancel_scope.cancel()
        else:
            self.loop.run_soon(self.cancel_scope.cancel)

    def context(
        self,
        timeout_s: float | None = None,
        *,
        remaining_bytes: int | None = None,
        remaining_tokens: int | None = None,
    ) -> OpContext:
        """A fresh :class:`OpContext` for one adapter call, child of this operation's signal."""
        return OpContext.with_timeout(
            self.op_timeout_s if timeout_s is None else timeout_s,
            parent=self.signal,
            remaining_bytes=remaining_bytes,
            remaining_tokens=remaining_tokens,
        )

    async def call(
        self,
        operation: str,
        work: Callable[[OpContext], Awaitable[T]],
        *,
        timeout_s: float | None = None,
        remaining_bytes: int | None = None,
        remaining_tokens: int | None = None,
        on_late: Callable[[T], Awaitable[None]] | None = None,
        traced: bool = True,
        late_scope: LateScope | None = None,
        hops_only: tuple[object, str] | None = None,
        store: bool = True,
    ) -> T:
        """Run one adapter call under its deadline (R10, R12) and walk away from it past the deadline.

        The engine enforces the deadline itself rather than trusting the adapter
        to honour ``ctx.deadline``: the call runs in its own task
        (:func:`~.bounded.bounded`); at the deadline the context's signal is set
        and the call cancelled. A call that times out raises
        :class:`OperationTimeoutError`; one that did not even stop after its
        cancellation (blocked in a worker thread) is abandoned: the error says
        so (``abandoned``), the ticket records it, and its late result is
        discarded — released through ``on_late`` first when it holds something
        (a late-opened recall session is closed). ``traced=False``: ``work``
        opens its own spans (several adapter calls under one deadline).
        ``late_scope``: what an abandoned call may still write into when the
        operation has no session (a host document's owner, a memory fact): erasure waits for it too.
        ``hops_only``: ``(adapter, method)`` when ``work`` awaits nothing but that method; if the
        adapter's own class (not a subclass) lists it in ``_agentium_hops_only`` (it awaits
        nothing but its thread hops), the call runs in this task on asyncio
        (:func:`~.inline_call.bounded_inline`), under the same deadline and grace.
        A typed error the call raises is raised as a fresh copy (:func:`~.store_errors.store_error`):
        the store's object is never marked, and the copy is committed by its class, never its text.
        ``store=False``: a model's call (a provider, verifier, summarizer, embedder), whose error is
        raised as it came and committed as it is said.
        """
        timeout = self.op_timeout_s if timeout_s is None else timeout_s
        # What ``self.context(timeout, ...)`` makes, without the extra call (six adapter calls a turn).
        ctx = OpContext.with_timeout(
            timeout, parent=self.signal, remaining_bytes=remaining_bytes, remaining_tokens=remaining_tokens
        )
        late, key = self.late, self.key if late_scope is None else late_scope
        # Partials rather than closures: calling one adds no Python frame (every adapter call).
        on_abandon = None if late is None or key is None else partial(late.add, key, operation)
        # The call's span is current while it runs, so an instrumented client's spans nest under it.
        with observe.adapter_call(operation) if traced else observe.NULL as span:
            try:
                if hops_only is not None and on_late is None and _hops_only(*hops_only):
                    value = await bounded_inline(
                        partial(work, ctx),
                        timeout,
                        on_deadline=partial(ctx.signal.cancel, "deadline passed"),
                        on_abandon=on_abandon,
                    )
                else:
                    value = await bounded(
                        partial(work, ctx),
                        timeout,
                        on_deadline=partial(ctx.signal.cancel, "deadline passed"),
                        on_late=on_late,
                        on_abandon=on_abandon,
                    )
            except Overrun as over:
                if over.abandoned:
                    self.abandoned.append(abandonment(operation, timeout))
                    span.set("agentium.call.abandoned", True)
                raise _timeout(operation, timeout, abandoned=over.abandoned) from None
            except AgentiumError as exc:
                if (
                    isinstance(exc, OperationCancelledError)
                    and ctx.signal.cancelled
                    and ctx.signal.reason == "deadline passed"
                ):
                    raise _timeout(operation, timeout) from None
                if not store:
                    raise
                # A store's words and object, not the engine's: a fresh copy, committed by its class.
                raise store_error(exc, operation) from exc
            span.result(value)
            return value

    def abandonment_diagnostics(self) -> list[Diagnostic]:
        """One ``call_abandoned`` warning per call this operation walked away from."""
        return [Diagnostic("call_abandoned", text, Severity.WARNING) for text in self.abandoned]

    def report(self, result: R) -> R:
        """``result`` (a frozen record with ``diagnostics``) with this operation's abandonments added."""
        if not self.abandoned:
            return result
        notes: tuple[Diagnostic, ...] = getattr(result, "diagnostics")  # noqa: B009 - any report record
        return attrs.evolve(result, diagnostics=(*notes, *self.abandonment_diagnostics()))  # type: ignore[misc]


def _hops_only(adapter: object, method: str) -> bool:
    """Whether ``adapter.method`` waits for nothing but thread hops, on asyncio (see ``Ticket.call``).

    Only the adapter's own class vouches (its ``__dict__``): a subclass may
    override the method, or the hop, with code that waits for anything.
    """
    listed = type(adapter).__dict__.get("_agentium_hops_only")
    return listed is not None and method in listed and current_library() == "asyncio"


def abandonment(operation: str, timeout_s: float) -> str:
    """How an abandoned call is reported (diagnostics, close failures)."""
    return (
        f"{operation} did not finish within {timeout_s}s and did not stop within {ABANDON_GRACE_S}s of "
        "its cancellation (blocked in a worker thread?); it was abandoned and its late result is discarded"
    )


def _timeout(operation: str, timeout: float, *, abandoned: bool = False) -> OperationTimeoutError:
    how = "abandoned (it did not stop when cancelled)" if abandoned else "cancelled"
    return OperationTimeoutError(
        f"{operation} did not finish within {timeout}s and was {how}", operation, timeout, abandoned=abandoned
    )


class Admission:
    """Admits operations per session and tracks them for shutdown.

    Every operation that changes a session — a run, ``close_session``, a
    migration, a reconciliation — enters through :meth:`admit`: one per
    session at a time. Read-only operations — ``verify()``,
    ``inspect_session()``, ``probe()`` — enter through :meth:`admit_shared`:
    they do not take the session's slot (an inspection may look at a session
    while a run holds it) but are tracked the same way, so shutdown waits for
    them and cancels them before it closes any adapter they use. Nothing else
    touches ``active`` or ``shared``. Operations may come from several threads,
    each with its own event loop: every change of ``active``, ``shared``,
    ``erasures`` and ``state`` happens under one thread lock.
    """

    def __init__(self, op_timeout_s: float, hook_timeout_s: float | None = None) -> None:
        self._op_timeout_s = op_timeout_s
        self._hook_timeout_s = hook_timeout_s
        self.state = LifecycleState.OPEN
        self.active: dict[SessionKey, Ticket] = {}
        self.shared: set[Ticket] = set()
        #: Erasures under way, each over every session its target covers (see :meth:`admit_erasure`).
        self.erasures: dict[Ticket, EraseTarget] = {}
        #: Abandoned calls of admitted operations that may still be running (erasure waits for them).
        self.late = LateCalls()
        self._lock = threading.Lock()

    def tickets(self) -> list[Ticket]:
        """Every admitted operation, exclusive, shared and erasures (orphans, whose loop closed, dropped)."""
        with self._lock:
            tickets = [*self.active.values(), *self.shared, *self.erasures]
        orphans = [t for t in tickets if t.orphaned()]
        for ticket in orphans:
            self._drop(ticket)
        return [t for t in tickets if t not in orphans]

    def _drop(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.key is not None and self.active.get(ticket.key) is ticket:
                del self.active[ticket.key]
            self.shared.discard(ticket)
            self.erasures.pop(ticket, None)
        ticket.done.set()

    def _drop_orphan_on(self, key: SessionKey) -> None:
        """Under the lock: forget the operation holding ``key`` if its loop was closed under it."""
        held = self.active.get(key)
        if held is not None and held.orphaned():
            # loop.close() cancels nothing: that operation can never finish.
            del self.active[key]
            held.done.set()

    def set_state(self, state: LifecycleState) -> None:
        """Move to ``state``, ordered with admissions (one admitted just before is in :meth:`tickets`)."""
        with self._lock:
            self.state = state

    def _new_ticket(self, key: SessionKey | None, kind: str, op_timeout_s: float | None = None) -> Ticket:
        timeout = self._op_timeout_s if op_timeout_s is None else op_timeout_s
        ticket = Ticket(key, kind, timeout, self._hook_timeout_s)
        ticket.late = self.late
        return ticket

    def erasing(self, key: SessionKey) -> EraseTarget | None:
        """The erasure under way whose target covers ``key``, if any."""
        if not self.erasures:  # the usual case: no generator over an empty snapshot
            return None
        # A snapshot (called with and without the lock; another thread may change the dict meanwhile).
        return next((t for t in tuple(self.erasures.values()) if covers(t, key)), None)

    def check_open(self) -> None:
        """Raise :class:`RuntimeClosedError` unless the runtime is open."""
        if self.state is not LifecycleState.OPEN:
            raise RuntimeClosedError(f"runtime is {self.state.value}; it admits no new operations")

    def admit(self, key: SessionKey, kind: str) -> Admitted:
        """Admit one operation on ``key`` for the duration of the ``async with`` block.

        Raises :class:`RuntimeClosedError` when closing or closed and
        :class:`SessionBusyError` when the session already has an operation.
        If shutdown cancels the operation, the block's cancellation surfaces
        as :class:`RuntimeClosedError` and nothing was committed.
        """
        return Admitted(self._enter, (key, kind), self._leave, kind, _CANCELLED)

    def _enter(self, key: SessionKey, kind: str) -> Ticket:
        ticket = self._new_ticket(key, kind)
        # Check and insert together: two loops asking at once for one session admit one.
        with observe.stage("admission", {"agentium.operation": kind}), self._lock:
            self._drop_orphan_on(key)
            if self.state is not LifecycleState.OPEN or key in self.active:
                busy_now = key in self.active
                _log.debug("%s refused: runtime %s, session busy: %s", kind, self.state.value, busy_now)
            self.check_open()
            if key in self.active:
                busy = self.active[key].kind
                raise SessionBusyError(
                    f"session {key.session!r} already has an admitted {busy}; "
                    "one operation per session at a time"
                )
            erasing = self.erasing(key)
            if erasing is not None:
                raise ErasureInProgressError(
                    f"the {kind} was refused: an erasure of {erasing.describe()} is under way; "
                    "nothing was done"
                )
            self.active[key] = ticket
        return ticket

    def _leave(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.key is not None and self.active.get(ticket.key) is ticket:
                del self.active[ticket.key]
        ticket.done.set()

    def admit_shared(self, key: SessionKey | None, kind: str, op_timeout_s: float | None = None) -> Admitted:
        """Admit one read-only operation: tracked for shutdown, but not exclusive on ``key``.

        Raises :class:`RuntimeClosedError` when closing or closed; a shutdown
        cancellation surfaces as :class:`RuntimeClosedError` too.
        """
        return Admitted(
            self._enter_shared, (key, kind, op_timeout_s), self._leave_shared, kind, _CANCELLED_SHARED
        )

    def _enter_shared(self, key: SessionKey | None, kind: str, op_timeout_s: float | None) -> Ticket:
        ticket = self._new_ticket(key, kind, op_timeout_s)
        with self._lock:
            self.check_open()
            self.shared.add(ticket)
        return ticket

    def _leave_shared(self, ticket: Ticket) -> None:
        with self._lock:
            self.shared.discard(ticket)
        ticket.done.set()

    @asynccontextmanager
    async def admit_erasure(self, target: EraseTarget, kind: str = "erasure") -> AsyncIterator[Ticket]:
        """Admit an erasure of ``target``: exclusive over every session it covers, for the block.

        Refused with :class:`SessionBusyError` while an operation on a
        covered session is admitted (let it finish, then erase), with
        :class:`ErasureInProgressError` while an overlapping erasure is under
        way, and with :class:`RuntimeClosedError` when closing. While it is
        admitted, :meth:`admit` refuses every covered session.
        """
        ticket = self._new_ticket(target.session_key, kind)
        with self._lock:
            self.check_open()
            for held in [k for k in self.active if covers(target, k)]:
                self._drop_orphan_on(held)
            busy = [k for k in self.active if covers(target, k)]
            if busy:
                raise SessionBusyError(
                    f"the {kind} of {target.describe()} was refused: session {busy[0].session!r} has an "
                    f"admitted {self.active[busy[0]].kind}; erase once it has finished. Nothing was erased"
                )
            if any(overlaps(t, target) for t in self.erasures.values()):
                raise ErasureInProgressError(
                    f"the {kind} of {target.describe()} was refused: an overlapping erasure is under way in "
                    "this runtime; nothing was erased"
                )
            self.erasures[ticket] = target
        try:
            with ticket.cancel_scope:
                yield ticket
            if ticket.cancel_scope.cancelled_caught:
                raise RuntimeClosedError(
                    f"the {kind} was cancelled because the runtime closed; its record stays pending "
                    "(resume it with agentium erase --resume)"
                )
        finally:
            with self._lock:
                self.erasures.pop(ticket, None)
            ticket.done.set()

    async def wait_settled(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every admitted operation to leave; True if all did."""
        with anyio.move_on_after(timeout_s):
            while tickets := self.tickets():
                await tickets[0].done.wait()
        return not self.tickets()

    async def cancel_all(self, reason: str, grace_s: float) -> list[Ticket]:
        """Cancel every admitted operation and wait up to ``grace_s`` for them; return those still stuck."""
        tickets = self.tickets()
        for ticket in tickets:
            ticket.cancel(reason)
        with anyio.move_on_after(grace_s):
            for ticket in tickets:
                await ticket.done.wait()
        return [t for t in tickets if not t.done.is_set()]


# What a shutdown's cancellation of an admitted operation says (see :class:`Admitted`).
_CANCELLED = "the {kind} was cancelled because the runtime closed; nothing was committed"
_CANCELLED_SHARED = "the {kind} was cancelled because the runtime closed"


class Admitted:
    """One admission, as an ``async with`` block (what :meth:`Admission.admit` returns).

    Entering admits the operation (``enter(*args)`` checks and registers its
    ticket, raising if refused) and enters the ticket's cancel scope; leaving
    exits the scope, turns a cancellation it caught (shutdown) into
    :class:`RuntimeClosedError` (``cancelled`` formatted with ``kind``) and
    always unregisters the ticket (``leave``). A class rather than an
    ``asynccontextmanager``: every history read and write is admitted, and the
    generator machinery was a measurable part of a short operation; the
    message is formatted only when it is raised.
    """

    __slots__ = ("_args", "_cancelled", "_enter", "_kind", "_leave", "_ticket")

    _ticket: Ticket

    def __init__(
        self,
        enter: Callable[..., Ticket],
        args: tuple[Any, ...],
        leave: Callable[[Ticket], None],
        kind: str,
        cancelled: str,
    ) -> None:
        self._enter = enter
        self._args = args
        self._leave = leave
        self._kind = kind
        self._cancelled = cancelled

    async def __aenter__(self) -> Ticket:
        ticket = self._enter(*self._args)
        try:
            ticket.cancel_scope.__enter__()
        except BaseException:
            self._leave(ticket)
            raise
        self._ticket = ticket
        return ticket

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        ticket = self._ticket  # set by __aenter__ (an unset slot raises AttributeError)
        try:
            swallowed = bool(ticket.cancel_scope.__exit__(typ, exc, tb))
            if ticket.cancel_scope.cancelled_caught:
                raise RuntimeClosedError(self._cancelled.format(kind=self._kind))
            return swallowed
        finally:
            self._leave(ticket)


def overlaps(one: EraseTarget, other: EraseTarget) -> bool:
    """True if two erasure targets can touch the same session."""
    if one.tenant_id != other.tenant_id:
        return False
    for mine, theirs in ((one.user_id, other.user_id), (one.session_id, other.session_id)):
        if mine is not None and theirs is not None and mine != theirs:
            return False
    return True


def check_closable(owned: Iterable[object]) -> list[object]:
    """``owned`` as a list, each item something :func:`close_owned` can close (a callable ``aclose``).

    Else :class:`InvalidArgumentError` naming the item: ``owned=[5]`` was kept and
    closed nothing, so the host's adapter was silently never closed.
    """
    items = list(owned)
    for i, item in enumerate(items):
        try:
            closer = getattr(item, "aclose", None)
        except Exception:  # a __getattr__ that raises something else: it cannot be closed either
            closer = None
        if not callable(closer):
            raise InvalidArgumentError(
                f"owned[{i}] is a {type(item).__name__}, which has no aclose() to close it with: "
                "owned lists adapters (or other resources with an async aclose()) to close"
            )
    return items


async def close_owned(owned: Sequence[object], each_s: float) -> list[tuple[object, str | None]]:
    """Close every owned adapter concurrently, each bounded; ``(adapter, problem or None)`` each.

    Each ``aclose`` runs through :func:`~.bounded.bounded`, so one blocked in a
    worker thread is abandoned at ``each_s`` (and reported) instead of holding shutdown.
    """
    results: list[tuple[object, str | None]] = []

    async def close_one(adapter: object) -> None:
        closer = getattr(adapter, "aclose", None)
        if closer is None:
            results.append((adapter, None))
            return
        name = type(adapter).__name__
        try:
            await bounded(closer, each_s)
        except Overrun as over:
            if over.abandoned:
                results.append((adapter, abandonment(f"closing {name}", each_s)))
            else:
                results.append((adapter, f"closing {name} did not finish within {each_s}s"))
        except Exception as exc:
            results.append((adapter, f"closing {name} failed: {error_text(exc)}"))
        else:
            results.append((adapter, None))

    async with anyio.create_task_group() as tg:
        for adapter in owned:
            tg.start_soon(close_one, adapter)
    return results
