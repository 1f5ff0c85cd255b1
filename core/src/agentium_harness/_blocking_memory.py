"""The runtime's memory manager, blocking: :class:`BlockingMemory` (``BlockingRuntime.memory``, docs/sync.md).

A synchronous host remembers, corrects, forgets and lists a user's facts
from its request threads as an async host does through
``HarnessRuntime.memory``. Each method is the blocking twin of the
:class:`MemoryManager` coroutine of its name, run on the facade's loop: the
same arguments, checked there, so bad input raises the same typed error
(``InvalidArgumentError``, ``MemoryRejectedError`` ...) and writes nothing.
The manager's lifecycle (``drain``, ``aclose``) stays with the runtime that
holds it: ``BlockingRuntime.drain`` and ``close`` cover it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ._blocking_history import twin_of
from ._engine.memory.manager import MemoryManager
from ._ports.memory import MemoryAck, MemoryFact, MemoryScope, StoredFact

__all__ = ["BlockingCall", "BlockingMemory"]

T = TypeVar("T")


class BlockingCall(Protocol):
    """How :class:`BlockingMemory` runs a coroutine on the facade's loop (``BlockingRuntime``'s own)."""

    def __call__(self, operation: str, func: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """Run ``await func(*args, **kwargs)`` on the loop; refuse the loop thread naming ``operation``."""
        ...


class BlockingMemory:
    """The runtime's :class:`MemoryManager` for synchronous code: every method blocks until it answers.

    Not built by hosts: ``BlockingRuntime.memory`` is one when the runtime
    has memory (``[memory]``), ``None`` otherwise, as ``HarnessRuntime.memory``.
    Any number of threads may call it at once; like every ``BlockingRuntime``
    method, a call from the runtime's own loop thread (a tool handler)
    raises :class:`BlockingCallInLoopError` and does nothing, and a call after
    the runtime's close raises :class:`RuntimeClosedError`.
    """

    def __init__(self, manager: MemoryManager, call: BlockingCall) -> None:
        self._manager = manager
        self._call = call

    @property
    def manager(self) -> MemoryManager:
        """The wrapped memory manager (its coroutines run on the runtime's loop: use these methods)."""
        return self._manager

    @property
    def closed(self) -> bool:
        """:attr:`MemoryManager.closed`: true once the manager was closed (every later call is refused)."""
        return self._manager.closed

    @property
    def forgotten_ids(self) -> frozenset[str]:
        """:attr:`MemoryManager.forgotten_ids`: the last fact ids forgotten through this manager (bounded)."""
        return self._manager.forgotten_ids

    @twin_of(MemoryManager.remember_with_result)
    def remember_with_result(self, fact: MemoryFact) -> MemoryAck:
        """:meth:`MemoryManager.remember_with_result`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.remember_with_result", self._manager.remember_with_result, fact)

    @twin_of(MemoryManager.remember)
    def remember(self, fact: MemoryFact) -> MemoryAck:
        """:meth:`MemoryManager.remember`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.remember", self._manager.remember, fact)

    @twin_of(MemoryManager.correct)
    def correct(self, scope: MemoryScope, fact_id: str, replacement: MemoryFact) -> MemoryAck:
        """:meth:`MemoryManager.correct`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.correct", self._manager.correct, scope, fact_id, replacement)

    @twin_of(MemoryManager.forget)
    def forget(self, scope: MemoryScope, fact_id: str) -> MemoryAck:
        """:meth:`MemoryManager.forget`, blocking (same arguments, result and typed errors).

        To forget a fact and find (or erase) the groups it came from, use
        ``BlockingRuntime.forget``.
        """
        return self._call("memory.forget", self._manager.forget, scope, fact_id)

    @twin_of(MemoryManager.list)
    def list(self, scope: MemoryScope, limit: int = 50) -> tuple[StoredFact, ...]:
        """:meth:`MemoryManager.list`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.list", self._manager.list, scope, limit)

    @twin_of(MemoryManager.history)
    def history(self, scope: MemoryScope, fact_id: str) -> tuple[StoredFact, ...]:
        """:meth:`MemoryManager.history`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.history", self._manager.history, scope, fact_id)

    @twin_of(MemoryManager.select)
    def select(
        self, scope: MemoryScope, query: str, *, limit: int | None = None, at: datetime | None = None
    ) -> tuple[tuple[StoredFact, ...], tuple[tuple[str, str], ...]]:
        """:meth:`MemoryManager.select`, blocking (same arguments, result and typed errors)."""
        return self._call("memory.select", self._manager.select, scope, query, limit=limit, at=at)
