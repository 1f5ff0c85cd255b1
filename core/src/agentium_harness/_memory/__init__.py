"""The memory lifecycle: the memory manager, its owned work and drain, and the ``Agent`` (R36–R42).

- :mod:`.manager`: :class:`MemoryManager` (remember, correct, forget, list,
  select, extraction, drain) and :class:`MemoryLimits`;
- :mod:`.selection`: the host-replaceable injection selection and the checks on it;
- :mod:`.work`: owned background work, :class:`DrainResult`, and the
  :class:`WorkSource` through which a runtime's work is drained too;
- :mod:`.agent`: :class:`Agent` and its lifecycle.
"""

from __future__ import annotations

from .agent import Agent, AgentReply, AgentState
from .manager import MemoryExtractor, MemoryLimits, MemoryManager
from .selection import MemorySelection, SelectionRequest, checked_selection, recent_and_relevant
from .work import DrainItem, DrainResult, DrainStatus, OwnedWorkSource, WorkSource, WorkTracker

__all__ = [
    "Agent",
    "AgentReply",
    "AgentState",
    "DrainItem",
    "DrainResult",
    "DrainStatus",
    "MemoryExtractor",
    "MemoryLimits",
    "MemoryManager",
    "MemorySelection",
    "OwnedWorkSource",
    "SelectionRequest",
    "WorkSource",
    "WorkTracker",
    "checked_selection",
    "recent_and_relevant",
]
