"""The runtimes a memory manager was given to: whose operation a call is in, and who drains what.

A host may build one :class:`~.manager.MemoryManager` and give it to several
runtimes (one per tenant). Nothing here belongs to the *first* runtime given
it: each runtime is remembered (weakly: a runtime the host dropped is
forgotten with it), and

- a manager call made inside a runtime's operation (its turn, ``forget``,
  drain or close, or a ``runtime_span`` block of its: the context variable
  :data:`~agentium_harness._observe.state.ACTIVE`, set and reset around each
  operation in its own task) is *that* runtime's: its model deadline applies
  (:func:`~.limits.model_timeout`), and the owned work it starts is that
  runtime's work (:func:`operation_runtime`);
- a runtime's close or drain covers only its own work (its background
  summary updates, and the work started through the manager in its
  operations) while another runtime given the manager is still open; the
  last one open (or the host's ``manager.drain()``) covers the rest too
  (:func:`drain_scope`), as a single runtime's close always did. An
  :class:`~.agent.Agent`'s extractions are its own work likewise
  (:func:`starting_as`): its ``close()`` drains only them while a runtime
  given the manager is open.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..._observe.state import ACTIVE
from ..lifecycle import LifecycleState

if TYPE_CHECKING:
    from ..runtime import HarnessRuntime
    from .manager import MemoryManager
    from .work import AllBut, DrainResult

__all__ = [
    "adopt_runtime",
    "agreed_model_timeout",
    "closing_scope",
    "drain_owned",
    "drain_scope",
    "open_runtimes",
    "operation_runtime",
    "starting_as",
    "work_owner",
]

_adopting = threading.Lock()  # runtimes may be built on several threads around one manager
# Each manager's runtimes, both held weakly: neither is kept alive by being given the other.
_HOLDERS: weakref.WeakKeyDictionary[MemoryManager, weakref.WeakSet[HarnessRuntime]] = (
    weakref.WeakKeyDictionary()
)


# Who starts owned work in this block (an Agent starting its extraction), when not an operation's runtime.
_STARTER: contextvars.ContextVar[object] = contextvars.ContextVar("agentium_work_starter", default=None)


def _held(manager: MemoryManager) -> list[HarnessRuntime]:
    with _adopting:
        return list(_HOLDERS.get(manager, ()))


def adopt_runtime(manager: MemoryManager, runtime: HarnessRuntime) -> None:
    """Remember that ``runtime`` was given ``manager`` (never its telemetry: :mod:`.limits`)."""
    with _adopting:
        _HOLDERS.setdefault(manager, weakref.WeakSet()).add(runtime)


def operation_runtime(manager: MemoryManager) -> HarnessRuntime | None:
    """The runtime given ``manager`` whose operation is under way in this context, or ``None``."""
    active = ACTIVE.get()
    held = active.owner if active is not None else None
    if held is None or getattr(held, "memory", None) is not manager:
        return None
    return next((r for r in _held(manager) if r is held), None)


@contextlib.contextmanager
def starting_as(owner: object) -> Iterator[None]:
    """Owned work the manager starts in this block is ``owner``'s (an ``Agent``'s extraction)."""
    token = _STARTER.set(owner)
    try:
        yield
    finally:
        _STARTER.reset(token)


def work_owner(manager: MemoryManager) -> object:
    """Whose an owned item started now is: :func:`starting_as`'s owner, else the operation's runtime."""
    starter = _STARTER.get()
    return starter if starter is not None else operation_runtime(manager)


def open_runtimes(manager: MemoryManager, but: object = None) -> bool:
    """Whether a runtime given ``manager`` (other than ``but``) is still open."""
    return any(r is not but and r.state is LifecycleState.OPEN for r in _held(manager))


async def drain_owned(manager: MemoryManager, owner: object, timeout_s: float) -> DrainResult:
    """Drain ``owner``'s work on ``manager`` only, and broadcast the ``drained`` event (never raises it)."""
    from .manager import announce_drain, work_tracker  # the manager imports this module
    from .work import CANCEL_GRACE_S

    own = await work_tracker(manager).drain(timeout_s, CANCEL_GRACE_S, owner)
    return await announce_drain(manager, own, manager.limits.drain_timeout_s)


def agreed_model_timeout(manager: MemoryManager) -> float | None:
    """The ``model_timeout_s`` every runtime given ``manager`` sets, when they agree; else ``None``.

    Outside any runtime's operation (a host's own call, an ``Agent`` on
    ``runtime.memory``) no runtime's deadline is the call's when runtimes of
    different deadlines share the manager: none of them is picked.
    """
    deadlines = {r.limits.model_timeout_s for r in _held(manager)}
    return deadlines.pop() if len(deadlines) == 1 else None


def closing_scope(manager: MemoryManager, but: object = None) -> AllBut | None:
    """All of ``manager``'s work but that of the runtimes (other than ``but``) closing now; ``None``: all.

    A runtime whose close is under way drains its own work itself, with its
    own settle: another drain of the rest must not wait for it, cancel it at
    its own (maybe shorter) timeout, or take its reports.
    """
    from .work import AllBut  # the manager imports this module, and work the manager's parts

    closing = tuple(
        r for r in _held(manager) if r is not but and getattr(r.parts, "close_attempt", None) is not None
    )
    return AllBut(closing) if closing else None


def drain_scope(manager: MemoryManager, runtime: HarnessRuntime) -> object:
    """Whose work ``runtime``'s close or drain covers: its own (``runtime``), or the rest too.

    The rest too when no other runtime given ``manager`` is still open:
    ``runtime`` is then the last one using the manager's work that no runtime
    started (a host's extraction, an ``Agent``'s) or whose runtime is gone or
    closed; never a runtime's whose close is under way at the same time
    (:func:`closing_scope`: ``None`` when there is none, all of it).
    """
    return runtime if open_runtimes(manager, but=runtime) else closing_scope(manager, but=runtime)
