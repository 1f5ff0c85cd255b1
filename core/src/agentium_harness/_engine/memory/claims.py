"""The harness's claims on the sessions it runs: one per session, bounded, released on close (R37).

A harness run claims its session's history for the harness
(:meth:`~.manager.MemoryManager.claim_history`), so an agent extracting
memory from the same session is refused. The runtime holds each session's
claim once, however many runs it makes, and releases it:

- when the runtime closes (:meth:`HarnessClaims.release_all`);
- when it holds more than ``limit`` claims: the session run least recently
  is released first (its next run claims it again).

Whichever releases, "one owner of extraction per session" stays true: a
session released is claimed again by its next harness run, which is refused
(:class:`~agentium_harness._errors.ExtractionConflictError`) if an extracting
agent claimed it meanwhile.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from ..._scope import SessionKey
from .manager import MemoryManager

__all__ = ["MAX_HARNESS_CLAIMS", "HarnessClaims"]

#: Most session claims one runtime holds at once (least recently run released first).
MAX_HARNESS_CLAIMS: Final = 10_000


class HarnessClaims:
    """The ``harness`` history claims one runtime holds, each once, at most ``limit`` of them."""

    def __init__(self, limit: int = MAX_HARNESS_CLAIMS) -> None:
        self._limit = limit
        self._held: OrderedDict[SessionKey, MemoryManager] = OrderedDict()
        # Runs on several threads' loops share one runtime: claim-and-record is one step.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def claim(self, manager: MemoryManager, key: SessionKey) -> None:
        """Claim ``key`` for the harness on ``manager`` (once); raises ``ExtractionConflictError``."""
        with self._lock:
            if self._held.get(key) is manager:
                self._held.move_to_end(key)
                return
            manager.claim_history(key, "harness")
            previous = self._held.pop(key, None)
            if previous is not None:  # another manager earlier (a runtime's manager never changes)
                previous.release_history(key, "harness")
            self._held[key] = manager
            while len(self._held) > self._limit:
                oldest, holder = self._held.popitem(last=False)
                holder.release_history(oldest, "harness")

    def release_all(self) -> None:
        """Release every claim held (the runtime closed: it runs none of these sessions any more)."""
        with self._lock:
            held, self._held = self._held, OrderedDict()
        for key, manager in held.items():
            manager.release_history(key, "harness")
