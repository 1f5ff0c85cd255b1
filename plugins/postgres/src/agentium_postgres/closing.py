"""``PgLink.aclose()``'s work once the calls in flight were cancelled: every part under one deadline.

What is left of a link when it closes: the calls it cancelled (on its loop:
:func:`stop_running`), which may begin a rollback only as they end, the
rollbacks of failed transactions still running in tasks of their own
(``calls.settle_in_time``, ``calls.settle_tracked``: after their call, or
inside it), the returns of their connections to their pool
(``pool_return.give_back``), the owned pools (one per event loop) and a COMMIT
still being finished on a lent connection
(:mod:`.lent`). Each was waited for in turn, up to ``SETTLE_S`` (10 s) each:
30 s with a stalled server, past the runtime's own close bound (5 s), which
then gave up on the adapter. They now run side by side under one deadline,
the config's ``close_timeout_s``; what is unfinished then is said (a WARNING,
and the error ``aclose()`` raises), never reported closed. Split from
:mod:`.link` to keep each module readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

import anyio
import psycopg

from agentium_harness.plugin_api import PerLoop

from .calls import Outcome, running_loop
from .lent import lent_settled
from .loop_pools import LoopPool, close_pool

__all__ = ["close_within", "stop_running"]

logger = logging.getLogger("agentium.plugins.postgres")

#: The end of the bound kept for giving up what is unfinished (a quarter of a shorter bound).
_GIVE_UP_S: Final = 0.25
#: How often a rollback given up is cancelled again until it ended (see :func:`_give_up`).
_RECANCEL_S: Final = 0.01


def stop_running(
    running: dict[anyio.CancelScope, tuple[asyncio.AbstractEventLoop, Outcome]],
) -> list[asyncio.Future[None]]:
    """Cancel every call in flight, each on its own event loop; the ends of those on this loop.

    ``aclose()`` may run on another loop (or under trio): a call of another loop is cancelled
    there and not waited for. One of this loop is: cancelled, it may still end a while later (its
    COMMIT shielded, psycopg's cancelling of a statement) and begin its rollback only then, which
    a close that looked for rollbacks once, at once, never knew of (it returned "closed").
    """
    here = running_loop()
    ends: list[asyncio.Future[None]] = []
    for scope, (loop, outcome) in list(running.items()):
        outcome.stopped_by_close = True
        if loop is here:
            outcome.ended = loop.create_future()  # set by the call's run() as it ends
            ends.append(outcome.ended)
            scope.cancel()
        else:
            with contextlib.suppress(RuntimeError):  # that loop is closed: its call is gone
                loop.call_soon_threadsafe(scope.cancel)
    return ends


def _ours(tasks: set[asyncio.Task[None]], here: asyncio.AbstractEventLoop | None) -> list[asyncio.Task[None]]:
    """The tasks of ``tasks`` still running on this loop (list() first: another thread may change the set)."""
    return [t for t in list(tasks) if t.get_loop() is here and not t.done()]


async def _wait_for(
    here: asyncio.AbstractEventLoop | None, calls: list[asyncio.Future[None]], *sets: set[asyncio.Task[None]]
) -> None:
    """Wait until ``calls`` ended and no task of ``sets`` runs on this loop (looked again as each ends)."""
    while running := [t for tasks in sets for t in _ours(tasks, here)] + [c for c in calls if not c.done()]:
        await asyncio.wait(running)


async def _give_up(tasks: list[asyncio.Task[None]], until: float) -> bool:
    """Cancel ``tasks`` (natively) until each ended or ``until`` passed; True if all ended.

    Natively, since their rollbacks are shielded from anyio's cancellation. psycopg answers a first
    cancellation by asking the server to cancel and waiting for it (5 s), a second by closing the
    connection: so each is cancelled again until it ended.
    """
    while left := [t for t in tasks if not t.done()]:
        if anyio.current_time() >= until:
            return False
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=_RECANCEL_S)
    return True


async def close_within(
    name: str,
    close_s: float,
    owned: PerLoop[LoopPool],
    calls: list[asyncio.Future[None]],
    settling: set[asyncio.Task[None]],
    returning: set[asyncio.Task[None]],
    lent: psycopg.AsyncConnection[Any] | None,
) -> list[str]:
    """Close the owned pools, wait for ``calls``, rollbacks, returns, a lent COMMIT, all within ``close_s``.

    ``calls`` are the ends of the calls the close cancelled on this loop (:func:`stop_running`):
    a rollback one begins as it ends is waited for too (once looked for at once only, it was
    missed). One still running at the deadline is named.

    Shielded from the caller's cancellation. Returns the problems (empty when all closed): a pool
    that did not close, a rollback still unanswered a moment before the deadline (given up: its
    task is cancelled and its connection closed, so the server rolls the transaction back), a
    return or a lent connection's COMMIT still unfinished at the deadline (left running). What
    did not close is logged as a WARNING (its kind, or a pool's count, only).
    """
    here = running_loop()
    deadline = anyio.current_time() + close_s
    cut = deadline - min(_GIVE_UP_S, close_s / 4)
    problems: list[str] = []
    cut_off: list[str] = []

    async def pools() -> None:
        bound = cut - anyio.current_time()
        problems.extend(await owned.aclose(lambda slot: close_pool(slot, bound / 2), bound))

    async def lent_commit() -> None:
        if lent is not None and not await lent_settled(lent, cut - anyio.current_time()):
            cut_off.append("the lent connection still waits for a COMMIT's answer; do not close it yet")

    async def rollbacks() -> None:
        with anyio.move_on_after(cut - anyio.current_time()):
            await _wait_for(here, calls, settling, returning)

    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pools)
            tg.start_soon(lent_commit)
            tg.start_soon(rollbacks)
        if stuck := _ours(settling, here):
            ended = await _give_up(stuck, deadline)
            cut_off.append(
                f"a failed call's rollback was still unanswered after {close_s}s: it was given up and its "
                "connection closed (the server rolls the transaction back)"
                if ended
                else f"a failed call's rollback was still unanswered after {close_s}s and could not be "
                "stopped; its connection closes when it ends"
            )
        with anyio.move_on_after(deadline - anyio.current_time()):
            await _wait_for(here, calls, returning)
        if any(not c.done() for c in calls):
            cut_off.append(
                f"a call it stopped was still running after {close_s}s (waiting for the server); it ends "
                "at its own bound"
            )
        if _ours(returning, here):
            cut_off.append(
                f"a connection was still waiting to go back to its pool after {close_s}s (behind a cancel "
                "request on its way); it goes back when that ends, or is closed with its pool"
            )
    # The pools' problems by count only: their text may quote a server's message.
    said = cut_off + ([f"{len(problems)} pool(s) did not close"] if problems else [])
    if said:
        logger.warning(
            "%s: closing: not all closed within close_timeout_s (%ss): %s",
            name,
            close_s,
            "; ".join(said),
            extra={"agentium_operation": "aclose"},
        )
    return problems + cut_off
