"""How often, and how paced, a load or a save starts again when another writer changed the session.

A load of several pages (:meth:`AgentiumHistoryProvider.get_messages
<agentium_agent_framework.AgentiumHistoryProvider.get_messages>`) checks
that each page joins the one before; a retraction, a reset or an erasure
landing between two pages makes it start again. A save
(:meth:`save_messages <agentium_agent_framework.AgentiumHistoryProvider.save_messages>`)
appends only at the revision it read the tail at, and reads again when
another write landed in between. Such a change is another writer
committing, so the session is live, not stuck: a fixed count of attempts,
made back to back, failed a load or a save beside busy writers (several
threads saving to one session, each losing in step) while their writes
went through. Kept apart from the provider (``_provider``),
which reads and writes history; the OpenAI Agents SDK integration paces its
reads the same way (the two distributions share no code).
"""

from __future__ import annotations

import random
import time
from typing import Final, TypeVar

import anyio

from agentium_harness import AgentiumError, CommitState

__all__ = ["READ_RESTARTS", "SAVE_RESTARTS", "Restarts", "not_committed"]

E = TypeVar("E", bound=AgentiumError)

#: Attempts a read makes at least, whatever its time allows; past that, until ``busy_timeout_s``.
READ_RESTARTS: Final = 3
#: Attempts a save makes at least (reads of the tail and appends at their revision); then as a read.
SAVE_RESTARTS: Final = 5


class Restarts:
    """The attempts of a read or a save that another writer can make stale before the call is done with it.

    ``async for _ in Restarts(timeout_s)``: one pass per attempt. At least
    ``at_least`` (:data:`READ_RESTARTS` unless given) attempts are made, then more until ``timeout_s``
    (the provider's ``busy_timeout_s``) is spent, each after a jittered
    back-off (the second at once) so that writers colliding in step stop
    colliding. ``made`` counts the attempts begun (less those :meth:`uncount` took back).
    """

    def __init__(self, timeout_s: float, at_least: int = READ_RESTARTS) -> None:
        """Start counting; the attempts past ``at_least`` end ``timeout_s`` seconds from now."""
        self._deadline = time.monotonic() + timeout_s
        self._at_least = at_least
        self._delay = 0.0
        self.made = 0

    def __aiter__(self) -> Restarts:
        """The attempts themselves."""
        return self

    async def __anext__(self) -> int:
        """Begin the next attempt (after its back-off): its number, from 1; none left ends the loop."""
        if self.made:
            if self.made >= self._at_least and time.monotonic() + self._delay > self._deadline:
                raise StopAsyncIteration
            if self._delay:
                await anyio.sleep(self._delay * (0.5 + random.random()))
            self._delay = min(max(self._delay * 2, 0.002), 0.1)
        self.made += 1
        return self.made

    def uncount(self) -> None:
        """The attempt begun lost no race (a refusal left the session as it was): it is not counted.

        Such an attempt is paced and bounded by its caller (within the same
        ``timeout_s``), so it spends none of the ``at_least`` attempts.
        """
        self.made -= 1


def not_committed(error: E) -> E:
    """``error``, raised by a save's read of the tail (before any write), saying it committed nothing.

    A read's errors carry no ``commit_state`` (a read commits nothing); ``save_messages`` writes,
    and a host branching on ``commit_state`` must find what it wrote: nothing. One already
    saying so is left as it is.
    """
    if error.commit_state is None:
        error.commit_state = CommitState.NOT_COMMITTED
    return error
