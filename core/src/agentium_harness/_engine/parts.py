"""The runtime's working parts that its stage modules share.

:class:`~.runtime.HarnessRuntime` is the orchestrator; the stage modules it
delegates to (closing, commit, erasure, history, retention, forgetting) need
more of it than a host does: the admission of operations, the background
summary work, the hooks, the adapters it owns. They reach them through
``runtime.parts`` (one :class:`RuntimeParts`), never through the runtime's
private attributes, so what the stages may touch is written down here.
Hosts have no use for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._errors import RuntimeCloseError
from .._observe.settings import Resolved
from .hooks import HookBroadcaster
from .lifecycle import Admission
from .loops import ThreadSafeEvent
from .memory.manager import MemoryManager
from .memory.work import WorkTracker
from .owned_work import OwnedWork

if TYPE_CHECKING:
    from .summary import GroupReader

__all__ = ["CloseAttempt", "RuntimeParts"]


class CloseAttempt:
    """One ``aclose()`` in progress; concurrent calls, from any loop, wait for it and share its outcome."""

    __slots__ = ("done", "error", "finished")

    def __init__(self) -> None:
        self.done = ThreadSafeEvent()
        self.finished = False
        self.error: RuntimeCloseError | None = None


@attrs.define(slots=True, eq=False)
class RuntimeParts:
    """What a runtime's stage modules use besides its public attributes."""

    #: Admission of every operation, the lifecycle state, the calls abandoned past their deadline.
    admission: Admission
    #: The background summary updates, one per session at most.
    work: OwnedWork
    #: Drains all owned work: the memory manager (the summary updates tracked in it) or a tracker of its own.
    drainer: MemoryManager | WorkTracker
    #: The host's lifecycle hooks, or ``None``.
    hooks: HookBroadcaster | None
    #: Adapters the runtime built and closes on ``aclose``; those that failed to close stay for a retry.
    owned: list[object]
    #: Whether ``aclose`` closes the memory manager too (it built it from config).
    owns_memory_manager: bool
    #: Reads archived groups for the summary update, or ``None`` without a summarizer.
    summary_reader: GroupReader | None
    #: The resolved telemetry settings (docs/observability.md), resolved once.
    telemetry: Resolved
    #: The ``aclose()`` in progress, if any.
    close_attempt: CloseAttempt | None = None
