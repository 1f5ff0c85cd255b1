"""The steps of :class:`~._session.AgentiumSession`'s calls that are not the session's own state.

How often a read made stale is made again (:class:`Restarts`), the checks of a
call's arguments, and the commit state of an error raised before a write.
"""

from __future__ import annotations

import operator
import random
import time
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import anyio

from agentium_harness import MAX_APPEND_MESSAGES, AgentiumError, CommitState, InvalidArgumentError
from agentium_harness.plugin_api import read_host_items

__all__ = ["READ_RESTARTS", "Restarts", "check_limit", "listed", "not_committed"]

E = TypeVar("E", bound=AgentiumError)

#: How many reads ``get_items`` makes at least when the view changed (or was erased) between two of its
#: pages (and ``pop_item``/``clear_session`` when it changed between their read and their write); past
#: that, it reads again until ``busy_timeout_s`` is spent (see :class:`Restarts`).
READ_RESTARTS: Final = 3


class Restarts:
    """The attempts of a read that another writer can make stale before the call is done with it.

    ``async for _ in Restarts(timeout_s)``: one pass per attempt. A lost race
    means another writer committed meanwhile, so the session is live, not
    stuck: a fixed count of attempts made a caller popping beside another
    thread fail while that thread's pops went through. At least
    ``READ_RESTARTS`` attempts are made, then more until ``timeout_s`` (the
    session's ``busy_timeout_s``) is spent, each after a jittered back-off
    (the second at once) so that writers colliding in step stop colliding.
    ``made`` counts the attempts begun.
    """

    def __init__(self, timeout_s: float) -> None:
        self._deadline = time.monotonic() + timeout_s
        self._delay = 0.0
        self.made = 0

    def __aiter__(self) -> Restarts:
        return self

    async def __anext__(self) -> int:
        if self.made:
            if self.made >= READ_RESTARTS and time.monotonic() + self._delay > self._deadline:
                raise StopAsyncIteration
            if self._delay:
                await anyio.sleep(self._delay * (0.5 + random.random()))
            self._delay = min(max(self._delay * 2, 0.002), 0.1)
        self.made += 1
        return self.made


def check_limit(limit: object, what: str) -> int | None:
    """A ``get_items`` limit as a plain int (or ``None``); one that is not an int is refused.

    A float reached ``read_history`` as a page size it refuses in its own words, a str raised a
    bare ``TypeError`` comparing it with 0, and ``True`` read one item. An int subclass is taken
    as its value (``operator.index`` runs none of its methods): its own comparisons never run.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgumentError(
            f"{what} must be an int or None, got {type(limit).__name__}; nothing was read"
        )
    return operator.index(limit)


def not_committed(error: E) -> E:
    """``error``, raised before ``pop_item``'s retraction or ``clear_session``'s reset, saying so.

    A read's errors carry no ``commit_state`` (a read commits nothing); these calls write, and
    the errors of their write (the retraction's, the reset's) say what it committed: so do
    those of the read before it, and the give-up (``not_committed``), unless one says already.
    """
    if error.commit_state is None:
        error.commit_state = CommitState.NOT_COMMITTED
    return error


def listed(items: Sequence[Any]) -> list[Any]:
    """The items of an ``add_items`` call, read once; what iterating them raises is a typed error.

    A sequence of the host's own type runs its own code when iterated
    (:func:`~agentium_harness.plugin_api.read_host_items`): whatever that raises
    reaches the host as ``InvalidArgumentError``, and a sequence that never ends
    is cut off past ``MAX_APPEND_MESSAGES`` (``append`` takes no more).
    """
    return read_host_items(
        items,
        MAX_APPEND_MESSAGES,
        too_many=f"add_items takes at most {MAX_APPEND_MESSAGES} items in one call; nothing was written",
        unreadable="add_items could not iterate its items",
    )
