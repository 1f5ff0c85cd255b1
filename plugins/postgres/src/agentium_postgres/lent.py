"""A connection the host lent: one call at a time, on one event loop, after any COMMIT left unconfirmed.

Every adapter lent one ``psycopg.AsyncConnection`` (and ``migrate(connection=...)``)
takes its turn on it through :func:`lent_turn`:

- **One loop.** The connection serves the event loop of its first call until
  that loop is closed. A call from another loop meanwhile is refused with the
  adapter's error before anything is sent: two loops (two threads) interleaved
  their statements on one socket, and an ``anyio.Lock`` of one loop does not
  order the tasks of another.
- **One call at a time**, whichever adapter makes it (one lock per connection).
- **A COMMIT cut off by its deadline is finished, not abandoned.** Cancelling
  psycopg while it waits for a COMMIT's answer makes it close the connection
  (the host's, which the adapters cannot reopen), so every later call failed.
  On a lent connection the COMMIT runs in a task of its own
  (:func:`commit_lent`): the call stops waiting at its deadline and reports the
  outcome unknown, the task reads the server's answer (logged), and the next
  turn waits for it, within that call's own deadline, before sending anything.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.to_thread
import attrs
import psycopg

from agentium_harness.plugin_api import before_cancel

from .calls import SETTLE_S, require_idle, running_loop
from .errors import PostgresError

__all__ = ["LentCommitUnconfirmed", "commit_lent", "lent_settled", "lent_turn"]

logger = logging.getLogger("agentium.plugins.postgres")

#: How long the task finishing a cut-off COMMIT waits for the server at most (psycopg then gives up
#: on the connection, as it does for a cancelled command whose answer never comes).
_LATE_COMMIT_S: Final = SETTLE_S


@attrs.define(slots=True, eq=False)
class _Lent:
    """One lent connection's turn-taking: its loop, its lock, the COMMIT still being finished."""

    loop: asyncio.AbstractEventLoop
    lock: anyio.Lock
    pending: asyncio.Task[None] | None = None


#: One record per lent connection, whichever adapters it was lent to (the README lends one to all four).
#: A lock per adapter let the archive's call and the session store's run at once on it: their
#: transactions interleaved in one pipeline, and the connection broke ("the connection is closed").
_LENT: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], _Lent] = weakref.WeakKeyDictionary()
#: Calls from several threads (each with its loop) look the record up at once.
_GUARD: Final = threading.Lock()


class LentCommitUnconfirmed(Exception):
    """A lent connection's COMMIT was not confirmed in time; a task goes on reading its answer."""


def _record(
    conn: psycopg.AsyncConnection[Any], name: str, operation: str, family: type[PostgresError]
) -> _Lent:
    """``conn``'s record on the running loop; the adapter's error when another loop still has it."""
    loop = asyncio.get_running_loop()
    with _GUARD:
        record = _LENT.get(conn)
        if record is None or record.loop.is_closed():
            # A closed loop's calls are gone: the connection passes on (asyncio.run after asyncio.run).
            record = _LENT[conn] = _Lent(loop, anyio.Lock())
        elif record.loop is not loop:
            raise family(
                f"{name}: {operation} refused: the lent connection is used by another event loop (that "
                "of its first call, still open); a connection serves one loop, so nothing was sent or "
                "written. Lend each loop a connection of its own, or a pool per loop"
            )
        return record


@contextlib.asynccontextmanager
async def lent_turn(
    conn: psycopg.AsyncConnection[Any],
    name: str,
    operation: str,
    family: type[PostgresError],
    wait_s: float | None,
) -> AsyncIterator[None]:
    """Hold ``conn`` for one call: on its loop, alone, after an earlier unconfirmed COMMIT, idle.

    ``wait_s`` (the call's time left when it came here) bounds the wait for such a COMMIT, which ends
    a margin before the deadline it sets (``plugin_api.before_cancel``; ``None``:
    its own bound), whatever time the call spent waiting for its turn first. Raises ``family``
    with nothing sent when the connection belongs to another loop, is still finishing that
    COMMIT, or is not idle (see :func:`~agentium_postgres.calls.require_idle`).
    """
    record = _record(conn, name, operation, family)
    # The deadline, not the time left: a call queued behind another (itself waiting for its COMMIT's
    # answer) has less left once its turn comes, and a wait counted from the start ran past the
    # deadline, where the engine cancels the call (a bare timeout, not the refusal below).
    until = None if wait_s is None else anyio.current_time() + wait_s
    async with record.lock:
        late = record.pending
        if late is not None:
            if not late.done():
                bound = _LATE_COMMIT_S if until is None else before_cancel(until - anyio.current_time())
                with anyio.move_on_after(bound):
                    await asyncio.wait({late})  # waits without cancelling it
            if not late.done():
                raise family(
                    f"{name}: {operation} refused: the lent connection is still waiting for the answer "
                    "to an earlier call's COMMIT (reported as of unknown outcome); nothing was sent or "
                    "written. Try again once the server answers"
                )
            record.pending = None
        require_idle(conn, name, operation, family)
        yield


async def commit_lent(
    conn: psycopg.AsyncConnection[Any], finish: Callable[[], Awaitable[None]], wait_s: float, operation: str
) -> None:
    """Run ``finish()`` (the COMMIT and its clean-up) in a task of its own; wait ``wait_s`` at most.

    Shielded from the caller's cancellation. Raises what ``finish`` raised, or
    :class:`LentCommitUnconfirmed` when it is still running (or gave up on the server after
    ``_LATE_COMMIT_S``): a running task goes on reading the
    answer (the connection stays usable), logs what the server decided, and the next
    :func:`lent_turn` waits for it. Called inside :func:`lent_turn` only.
    """

    async def bounded() -> None:
        with anyio.move_on_after(_LATE_COMMIT_S) as bound:
            await finish()
        if bound.cancelled_caught:
            # Still unknown, never "committed", and never a TimeoutError: the call that saw it
            # (the task may give up before its call stops waiting) said "nothing was written".
            raise LentCommitUnconfirmed

    record = _LENT[conn]
    task = asyncio.get_running_loop().create_task(bounded())
    # Held from the start (asyncio keeps only a weak reference to a task), so that aclose() also
    # waits for a COMMIT whose call is still waiting for it.
    record.pending = task
    try:
        with anyio.CancelScope(shield=True), anyio.move_on_after(wait_s):
            await asyncio.wait({task})
    finally:
        if not task.done():
            task.add_done_callback(lambda t: _report_late(t, record, operation))
    if not task.done():
        raise LentCommitUnconfirmed
    if record.pending is task:
        record.pending = None
    task.result()


async def lent_settled(conn: psycopg.AsyncConnection[Any], wait_s: float) -> bool:
    """Wait (shielded, ``wait_s`` at most) for a COMMIT still being finished on ``conn``; False if unfinished.

    Called by ``aclose()``: the task finishing it waits on the connection's socket, and a host
    that closed the connection under it (as after ``aclose()`` it may) left that wait registered
    with the event loop, so the next connection given the same descriptor failed to connect.
    The task may run on another loop (that of the connection's calls), which is then asked to
    report its end.
    """
    with _GUARD:
        record = _LENT.get(conn)
    if record is None or record.loop.is_closed():  # a closed loop's tasks are gone
        return True
    task = record.pending
    if task is None or task.done():
        return True
    if record.loop is running_loop():
        with anyio.CancelScope(shield=True), anyio.move_on_after(wait_s):
            await asyncio.wait({task})
        return task.done()
    # Another loop's task (aclose may run on any loop, or under trio): its loop reports the end.
    try:
        ended = asyncio.run_coroutine_threadsafe(asyncio.wait({task}), record.loop)
    except RuntimeError:  # that loop was closed meanwhile: its tasks are gone
        return True
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(concurrent.futures.wait, [ended], wait_s)
    ended.cancel()
    return task.done() or record.loop.is_closed()


def _report_late(task: asyncio.Task[None], record: _Lent, operation: str) -> None:
    """Log what became of a COMMIT whose call reported its outcome unknown (never a statement)."""
    if record.pending is task:  # the connection is free again (and the task no longer kept)
        record.pending = None
    error = None if task.cancelled() else task.exception()
    if error is None and not task.cancelled():
        decided = "was confirmed later: it committed"
    elif isinstance(error, psycopg.Error) and error.sqlstate is not None:  # the server's own answer
        decided = f"was answered later: it failed and was rolled back ({type(error).__name__})"
    else:  # no answer, or the connection was lost: the server alone knows
        decided = "stayed unconfirmed (no answer; the connection may be closed)"
    logger.warning(
        "%s: a COMMIT reported as of unknown outcome %s",
        operation,
        decided,
        extra={"agentium_operation": operation},
    )
