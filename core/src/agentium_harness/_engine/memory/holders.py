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
  (:func:`drain_scope`), as a single runtime's close always did.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from ..._observe.state import ACTIVE
from ..lifecycle import LifecycleState

if TYPE_CHECKING:
    from ..runtime import HarnessRuntime
    from .manager import MemoryManager

__all__ = ["adopt_runtime", "agreed_model_timeout", "drain_scope", "operation_runtime"]

_adopting = threading.Lock()  # runtimes may be built on several threads around one manager
# Each manager's runtimes, both held weakly: neither is kept alive by being given the other.
_HOLDERS: weakref.WeakKeyDictionary[MemoryManager, weakref.WeakSet[HarnessRuntime]] = (
    weakref.WeakKeyDictionary()
)


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


def agreed_model_timeout(manager: MemoryManager) -> float | None:
    """The ``model_timeout_s`` every runtime given ``manager`` sets, when they agree; else ``None``.

    Outside any runtime's operation (a host's own call, an ``Agent`` on
    ``runtime.memory``) no runtime's deadline is the call's when runtimes of
    different deadlines share the manager: none of them is picked.
    """
    deadlines = {r.limits.model_timeout_s for r in _held(manager)}
    return deadlines.pop() if len(deadlines) == 1 else None


def drain_scope(manager: MemoryManager, runtime: HarnessRuntime) -> HarnessRuntime | None:
    """Whose work ``runtime``'s close or drain covers: its own (``runtime``), or all of it (``None``).

    All when no other runtime given ``manager`` is still open: ``runtime`` is
    then the last one using the manager's work that no runtime started (a
    host's extraction, an ``Agent``'s). Two runtimes closing at once both
    cover all of it, as before (one drain waits for what the other cancels).
    """
    others = [r for r in _held(manager) if r is not runtime and r.state is LifecycleState.OPEN]
    return runtime if others else None
