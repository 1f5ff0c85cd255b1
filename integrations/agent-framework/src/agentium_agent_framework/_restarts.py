"""How often, and how paced, a load starts again when another writer changed the view between its pages.

A load of several pages (:meth:`AgentiumHistoryProvider.get_messages
<agentium_agent_framework.AgentiumHistoryProvider.get_messages>`) checks
that each page joins the one before; a retraction, a reset or an erasure
landing between two pages makes it start again. Such a change is another
writer committing, so the session is live, not stuck: a fixed count of
attempts, made back to back, failed a load beside a busy writer while that
writer's writes went through. Kept apart from the provider (``_provider``),
which reads and writes history; the OpenAI Agents SDK integration paces its
reads the same way (the two distributions share no code).
"""

from __future__ import annotations

import random
import time
from typing import Final

import anyio

__all__ = ["READ_RESTARTS", "Restarts"]

#: Attempts a read makes at least, whatever its time allows; past that, until ``busy_timeout_s``.
READ_RESTARTS: Final = 3


class Restarts:
    """The attempts of a read that another writer can make stale before the call is done with it.

    ``async for _ in Restarts(timeout_s)``: one pass per attempt. At least
    :data:`READ_RESTARTS` attempts are made, then more until ``timeout_s``
    (the provider's ``busy_timeout_s``) is spent, each after a jittered
    back-off (the second at once) so that writers colliding in step stop
    colliding. ``made`` counts the attempts begun.
    """

    def __init__(self, timeout_s: float) -> None:
        """Start counting; the attempts past :data:`READ_RESTARTS` end ``timeout_s`` seconds from now."""
        self._deadline = time.monotonic() + timeout_s
        self._delay = 0.0
        self.made = 0

    def __aiter__(self) -> Restarts:
        """The attempts themselves."""
        return self

    async def __anext__(self) -> int:
        """Begin the next attempt (after its back-off): its number, from 1; none left ends the loop."""
        if self.made:
            if self.made >= READ_RESTARTS and time.monotonic() + self._delay > self._deadline:
                raise StopAsyncIteration
            if self._delay:
                await anyio.sleep(self._delay * (0.5 + random.random()))
            self._delay = min(max(self._delay * 2, 0.002), 0.1)
        self.made += 1
        return self.made
