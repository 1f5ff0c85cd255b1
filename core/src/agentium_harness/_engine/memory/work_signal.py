"""The cancel signal of the owned memory work item whose task runs the current code.

Split from :mod:`.work` (the tracker): the manager's calls and the fence's
take-backs read or shed it without needing the tracker.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..._ports import CancelSignal

__all__ = ["bind_work_signal", "current_work_signal", "outside_owned_work"]

# The cancel signal of the owned item whose task runs the current code (set in its own task only).
_WORK_SIGNAL: contextvars.ContextVar[CancelSignal | None] = contextvars.ContextVar(
    "agentium_memory_work_signal", default=None
)


def bind_work_signal(signal: CancelSignal) -> None:
    """Make ``signal`` the owned item's signal in the current context (an item's own task, at its start)."""
    _WORK_SIGNAL.set(signal)


def current_work_signal() -> CancelSignal | None:
    """In an owned item's task: its cancel signal, set when a drain cancels it; ``None`` elsewhere.

    The memory manager parents each store or extractor call's ``ctx.signal``
    on it, so code blocked in a worker thread watching the signal (which a
    cancel scope cannot reach) learns of the cancellation and stops.
    """
    return _WORK_SIGNAL.get()


@contextlib.contextmanager
def outside_owned_work() -> Iterator[None]:
    """Calls made in this block get no owned item's cancel signal (:func:`current_work_signal`).

    For work that must outlive the item whose task (or a copy of its context)
    it runs in: the take-back of a write that landed after a drain cancelled
    its item (:func:`~.memory_fence.late_take_back`) would otherwise be made
    under that item's signal, cancelled before it starts.
    """
    token = _WORK_SIGNAL.set(None)
    try:
        yield
    finally:
        _WORK_SIGNAL.reset(token)
