"""Each event loop's owned pool, the release of a loop's pool left unclosed, and the pools' connection class.

A pool's connections and worker tasks belong to the event loop that opened
it; :class:`~agentium_postgres.link.PgLink` keeps one :class:`LoopPool` per
loop (the core's ``PerLoop``), closes each with :func:`close_pool` and hands
:func:`discard_pool` the slot of a loop that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

__all__ = ["LoopPool", "close_pool", "discard_pool", "recording_connection_class"]

#: How long closing a pool waits for its workers (maybe connecting to a stalled server).
_CLOSE_WAIT_S: Final = 1.0


@attrs.define(slots=True, eq=False)
class LoopPool:
    """One event loop's owned pool (``None`` before its first call there and after a reset)."""

    pool: AsyncConnectionPool[Any] | None = None


async def close_pool(slot: LoopPool, wait_s: float = _CLOSE_WAIT_S) -> None:
    """Close the slot's pool on its own (running) loop and empty the slot (workers: ``wait_s`` at most)."""
    pool, slot.pool = slot.pool, None
    if pool is not None:
        # Not shielded here: PerLoop.aclose shields the close from the caller's cancellation
        # and bounds it; a shield of its own kept that bound from cutting off a stuck close.
        # Its workers may be connecting to a stalled server: waited for briefly, then the
        # pool is closed anyway (a late connection is closed as it arrives).
        await pool.close(timeout=min(_CLOSE_WAIT_S, wait_s))


def discard_pool(slot: LoopPool) -> None:
    """Release, now and synchronously, the pool of a loop that finished without closing it.

    Its worker tasks (still pending if the loop was closed without cancelling
    them) and its connections can no longer be closed on their loop. Left to
    the garbage collector, their finalizers would run at any later moment, in
    whatever code allocates then, and report errors there. So the workers'
    coroutines are closed and the connections' sockets finished here, best
    effort (the pool's worker list is psycopg_pool's, read defensively).
    """
    pool, slot.pool = slot.pool, None
    if pool is None:
        return
    tasks = [getattr(pool, "_sched_runner", None), *getattr(pool, "_workers", ())]
    for task in tasks:
        if isinstance(task, asyncio.Task) and not task.done():
            task._log_destroy_pending = False  # type: ignore[attr-defined]  # its loop is gone
            with contextlib.suppress(Exception):  # closing it touches the closed loop
                task.get_coro().close()
    for conn in list(getattr(pool, "_pool", ())):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()


def recording_connection_class(
    record: Callable[[BaseException | None], None],
) -> type[psycopg.AsyncConnection[Any]]:
    """A connection class whose ``connect`` reports its outcome to ``record`` (``None``: connected).

    An owned pool's connections are of this class, so that a pool timeout can say why the pool
    could not connect.
    """

    class RecordingConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = await super().connect(*args, **kwargs)
            except Exception as exc:
                record(exc)
                raise
            record(None)
            return conn

    return RecordingConnection
