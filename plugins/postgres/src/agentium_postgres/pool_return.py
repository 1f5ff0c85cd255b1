"""A pooled connection's return to its pool once a call ended (split from :mod:`.calls`).

The return must survive the call's cancellation, anyio's (the deadline, the
runtime) and asyncio's own ``Task.cancel()`` (a host's, ``wait_for``'s) alike:
a connection never returned left a pool of one with none for any later call.
It runs in the call's task as far as it goes without waiting, which is all of
it in the common case (the pool's lock free, the connection idle): nothing can
interrupt a coroutine that does not yield. Only a return that must wait (for
the pool's lock, a reset, a close) goes on in a task of its own, which the
call awaits through ``asyncio.shield``, so a cancellation stops the call's
wait, not the return. A task for every return cost each pooled call a task
and a loop iteration (measured 15-30 us, several times that on a loaded
machine).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any

import anyio
import psycopg

from .calls import SETTLE_S, Outcome

__all__ = ["give_back"]


@types.coroutine
def _rest(work: Coroutine[Any, Any, None], first: Any) -> Generator[Any, Any, None]:
    """The rest of ``work``, begun by the caller and suspended on ``first``, in whichever task awaits this.

    What ``await`` does for a coroutine, from its first suspension on: ``first`` (the future it
    waits for) goes to the awaiting task, whose answers (a value, or an exception thrown in: a
    cancellation) go on to ``work``.
    """
    pending = first
    while True:
        try:
            sent = yield pending
        except GeneratorExit:
            work.close()
            raise
        except BaseException as exc:
            try:
                pending = work.throw(exc)
            except StopIteration:
                return
        else:
            try:
                pending = work.send(sent)
            except StopIteration:
                return


async def _finish(work: Coroutine[Any, Any, None], first: Any) -> None:
    """:func:`_rest` as a coroutine (what ``create_task`` takes)."""
    await _rest(work, first)


def _keep(task: asyncio.Task[None], returning: set[asyncio.Task[None]]) -> None:
    """Keep ``task`` referenced in ``returning`` until it ends (asyncio holds tasks weakly)."""
    returning.add(task)
    task.add_done_callback(returning.discard)


async def give_back(
    pool: Any, conn: psycopg.AsyncConnection[Any], outcome: Outcome, returning: set[asyncio.Task[None]]
) -> None:
    """Return ``conn`` to ``pool``: now, or once the rollback still running on it, and a fence, ended.

    A fence (:class:`~agentium_postgres.calls.ServerStop`: an earlier request still on its way
    holds the connection's lock) is waited for too: handed out at once, the connection's next user
    waited for it, a pool's own ``check`` of it first (outside the call's margin, and any bound of
    the pool's). ``returning`` keeps such a return's task referenced until it ends; ``aclose()``
    waits for them.

    A return made at once runs in the call's task up to its first wait, if any (see the module's
    docstring): then in a task of its own (kept in ``returning`` too) that the call awaits shielded.
    """
    settling, outcome.settling = outcome.settling, None
    if (settling is None or settling.done()) and not conn.lock.locked():
        work = pool.putconn(conn)
        try:
            first = work.send(None)
        except StopIteration:  # returned without waiting: nothing could interrupt it
            return
        now = asyncio.get_running_loop().create_task(_finish(work, first))
        _keep(now, returning)
        with anyio.CancelScope(shield=True):
            await asyncio.shield(now)
        return

    async def after() -> None:
        with anyio.CancelScope(shield=True):
            if settling is not None:
                await asyncio.wait({settling})
            with anyio.move_on_after(SETTLE_S):  # the fence is bounded itself; the pool closes it
                async with conn.lock:  # first come, first served: after a fence queued behind a rollback
                    pass
            await pool.putconn(conn)

    _keep(asyncio.get_running_loop().create_task(after()), returning)
