"""Late calls: adapter writes the engine walked away from past their deadline, which may still land.

A call blocked where cancellation cannot reach it (a client call in a worker
thread) is abandoned at its deadline (:mod:`.bounded`), but the write in it
may still land, at any time after. An erasure must not say ``complete`` while
such a write of its scope may still land after its verification (it would
leave data of an erased scope behind a tombstone), so every abandoned call is
noted here with what it may write into — a session, the host documents of an
owner, or a memory fact — and an erasure waits for the ones of its target
before it erases anything (docs/erasure.md, step 3). One still running at
the erasure's bound keeps the erasure pending, saying so.

Why wait rather than fence the write where it lands: the engine cannot reach
into a call it walked away from (that is what abandoned means), and a store
call that lands has no engine code after it to check anything. What the
engine does know is which of its calls are still running; the erasure's
record already fences every new call of the scope, so once the old ones have
ended, nothing of the scope can be written behind the erasure in this process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import anyio
import attrs

from .._ports.erasure import EraseTarget
from .._ports.memory import GroupRef, MemoryScope
from .._ports.recall import SourceOwner
from .._scope import SessionKey
from .loops import ThreadSafeEvent

__all__ = ["FactScope", "LateCalls", "LateScope", "covers", "wait_late"]

# Overdue trailing work kept to be re-checked (see LateCalls.trail); more is only counted.
_MAX_OVERDUE = 64


@attrs.frozen(slots=True)
class FactScope:
    """Where a memory write may land: a fact of ``scope`` citing ``provenance``."""

    scope: MemoryScope
    provenance: tuple[GroupRef, ...] = ()


#: What a late call may write into: a session, the host documents of an owner
#: (``index_document``), or a memory fact (``remember``, ``correct``).
LateScope = SessionKey | SourceOwner | FactScope


def covers(target: EraseTarget, key: LateScope) -> bool:
    """True if an erasure of ``target`` touches session ``key`` (any of its groups), owner or fact ``key``."""
    if isinstance(key, SourceOwner):
        return target.covers_owner(key)
    if isinstance(key, FactScope):
        return target.covers_fact(key.scope, key.provenance)
    return bool(target.covers_session(key) or target.session_key == key)


def _describe(key: LateScope, operation: str) -> str:
    if isinstance(key, SessionKey):
        return f"{operation} of session {key.key()}"
    if isinstance(key, FactScope):
        return f"{operation} of a memory fact of user {key.scope.user!r}"
    return f"{operation} of a document"


class LateCalls:
    """Adapter calls the engine walked away from that may still be running, by what they write into.

    A call abandoned past its deadline (or when its operation was cancelled)
    keeps running in its worker thread, and a write in it may still land.
    Erasure waits for those of its scope before it removes anything, so a
    late write can never bring an erased group (document, fact) back (docs/erasure.md).

    Apart from them, *trailing* work: engine tasks an operation left running
    when it returned, each within its own bound (a recall session's close its
    caller's deadline left no time for). They write nothing, so erasure does
    not wait for them; the runtime's ``aclose()`` does (:meth:`wait_trailing`,
    each no longer than its own bound), so none outlives it, nor runs on past the
    close of the adapter it uses, while its loop runs.
    """

    __slots__ = ("_calls", "_left", "_lock", "_overdue", "_trailing")

    def __init__(self) -> None:
        # Calls are abandoned on several loops' threads: the list changes under a lock.
        self._lock = threading.Lock()
        self._calls: list[tuple[LateScope, str, ThreadSafeEvent]] = []
        self._trailing: list[tuple[ThreadSafeEvent, float]] = []  # with its bound, time.monotonic()
        # Trailing work past its own bound, unended at the time: the newest _MAX_OVERDUE kept (a
        # blocked loop's may still end, and is then no longer counted), the rest only counted in _left.
        self._overdue: list[ThreadSafeEvent] = []
        self._left = 0

    def add(self, key: LateScope, operation: str, finished: ThreadSafeEvent) -> None:
        """Note an abandoned call of ``key``; ``finished`` is set when it ends (awaitable from any loop)."""
        with self._lock:
            self._calls = [c for c in self._calls if not c[2].is_set()]
            self._calls.append((key, operation, finished))

    def trail(self, finished: ThreadSafeEvent, bound_s: float) -> None:
        """Note trailing work (see the class) that ends within ``bound_s`` from now; ``finished`` is set then.

        Past that bound it will not end at all (its loop ended, or is blocked): no one waits longer.
        """
        now = time.monotonic()  # the clock every loop and thread shares (trio's is offset)
        with self._lock:
            # Pruned as it grows: a long-lived runtime under deadline pressure adds one per cut round.
            # Work past its own bound is not waited for again; all of it kept, the list grew without
            # limit. The newest overdue is kept to be re-checked (it ends late when its loop was
            # blocked: counted for good, the close WARNING named work that had ended); past the cap
            # it is only counted, as left running.
            overdue = [done for done in self._overdue if not done.is_set()]
            kept: list[tuple[ThreadSafeEvent, float]] = []
            for done, until in self._trailing:
                if done.is_set():
                    continue
                if until > now:
                    kept.append((done, until))
                else:
                    overdue.append(done)
            if len(overdue) > _MAX_OVERDUE:
                self._left += len(overdue) - _MAX_OVERDUE
                overdue = overdue[-_MAX_OVERDUE:]
            self._overdue = overdue
            self._trailing = kept
            self._trailing.append((finished, now + bound_s))

    async def wait_trailing(self, timeout_s: float) -> int:
        """Wait for the trailing work to end, each no longer than its own bound, all up to ``timeout_s``.

        Returns how much is still running (counting the work :meth:`trail` dropped past its bound).
        So the wait is the trailing work's own bound at most (a recall close's 0.1 s and grace),
        never ``timeout_s`` for work that cannot end.
        """
        with self._lock:
            trailing = list(self._trailing)
        with anyio.move_on_after(timeout_s, shield=True):
            for done, until in trailing:
                with anyio.move_on_after(until - time.monotonic()):
                    await done.wait()
        with self._lock:
            left = self._left + sum(not done.is_set() for done in self._overdue)
        return left + sum(not done.is_set() for done, _ in trailing)

    def _snapshot(self) -> list[tuple[LateScope, str, ThreadSafeEvent]]:
        with self._lock:
            return list(self._calls)

    def running(self, covers: Callable[[LateScope], bool]) -> list[str]:
        """The abandoned calls of scopes ``covers`` accepts that have not ended, described."""
        return [_describe(key, op) for key, op, done in self._snapshot() if covers(key) and not done.is_set()]

    async def wait(self, covers: Callable[[LateScope], bool], timeout_s: float) -> list[str]:
        """Wait up to ``timeout_s`` for those calls to end; describe the ones still running."""
        with anyio.move_on_after(timeout_s):
            for key, _, done in self._snapshot():
                if covers(key):
                    await done.wait()
        return self.running(covers)


async def wait_late(
    calls: Iterable[LateCalls], covers: Callable[[LateScope], bool], timeout_s: float
) -> list[str]:
    """:meth:`LateCalls.wait` over several lists (the runtime's, its memory manager's), one bound for all."""
    lists = list(calls)
    until = anyio.current_time() + timeout_s
    for late in lists:
        await late.wait(covers, max(0.0, until - anyio.current_time()))
    # Asked again at the end: a call of the first list may have ended while the others were waited for.
    return [text for late in lists for text in late.running(covers)]
