"""What one call through :class:`~agentium_postgres.link.PgLink` carries besides its work.

How far its transaction got (:class:`Outcome`), how long its COMMIT is waited
for, how a failed transaction is rolled back and its connection discarded, the
asyncio check every call makes first, and the wording of a call that
``aclose()`` stopped. Split from :mod:`.link` to keep each module readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

import anyio
import attrs
import psycopg
import psycopg.errors
import sniffio

from agentium_harness.plugin_api import OpContext, OperationCancelledError, before_cancel

from .errors import PostgresAsyncioRequiredError, PostgresError, PostgresUnavailableError

__all__ = [
    "CLIENT_SLACK_S",
    "SETTLE_S",
    "Outcome",
    "ServerStop",
    "StaleConnection",
    "abandon_pipeline",
    "check_if_idle",
    "commit_cut_off",
    "commit_wait",
    "deadline_stop",
    "discard",
    "read_unconfirmed",
    "require_asyncio",
    "require_idle",
    "running_loop",
    "settle_transaction",
    "settle_in_time",
    "settle_tracked",
    "settle_manual",
    "statement_timeout_ms",
    "stopped_by_close",
    "unknown_commit",
]

#: Commits whose outcome stayed unknown (WARNING); never statements or rows.
logger = logging.getLogger("agentium.plugins.postgres")

#: How long past the call's deadline the client waits before cancelling it itself: the server's
#: statement_timeout (set a margin before the deadline) normally fires first and leaves the
#: connection usable.
CLIENT_SLACK_S: Final = 0.25
#: How long a shielded COMMIT or ROLLBACK may take before the connection is given up.
SETTLE_S: Final = 10.0
#: A pooled connection idle longer than this is checked (one round trip) before a call uses it.
_IDLE_CHECK_S: Final = 1.0


def require_asyncio(operation: str) -> None:
    """Refuse ``operation`` unless it runs under asyncio (psycopg's async API needs it)."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = "none"
    if library != "asyncio":
        raise PostgresAsyncioRequiredError(
            f"{operation} refused: agentium-postgres runs under asyncio only (psycopg's async API), "
            f"this call came from {library}; run the host under asyncio"
        )


#: A lent connection's states in which a call of its own cannot begin a transaction of its own.
_BUSY: Final = frozenset(
    {
        psycopg.pq.TransactionStatus.ACTIVE,
        psycopg.pq.TransactionStatus.INTRANS,
        psycopg.pq.TransactionStatus.INERROR,
    }
)


def require_idle(
    conn: psycopg.AsyncConnection[Any], name: str, operation: str, family: type[PostgresError]
) -> None:
    """Refuse ``operation`` on a lent connection the host left inside a transaction (or running a command).

    psycopg nests a transaction begun there as a savepoint: the call's "COMMIT" only released it,
    the call reported its write committed, and the host's rollback (or closing the connection)
    then dropped it. On an autocommit connection after the host's own ``BEGIN``, the call's COMMIT
    committed the host's pending work and its ROLLBACK undid it. Nothing is sent; a closed or
    broken connection (status unknown) fails as before, on its first statement.
    """
    status = conn.info.transaction_status
    if status in _BUSY:
        raise family(
            f"{name}: {operation} refused: the lent connection is not idle ({status.name}: inside a "
            "transaction, or running a command, that this call did not begin), so the call could not "
            "commit on its own; nothing was sent or written. Commit or roll back the host's "
            "transaction first, or lend an idle connection"
        )


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` (outside one, or under trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # aclose under trio: every call ran on some asyncio loop
        return None


def stopped_by_close(name: str, operation: str) -> str:
    """The message of a call that ``aclose()`` cancelled before its COMMIT was sent."""
    return (
        f"{name}: {operation} stopped: the adapter was closed while it ran; its transaction was "
        "rolled back and nothing was committed"
    )


@attrs.define(slots=True, eq=False)
class Outcome:
    """How far one call's transaction got: whether its COMMIT was sent, and whether it was confirmed.

    :meth:`PgLink.run` reads it when its deadline or ``aclose()`` cut the call off, so that a
    write whose COMMIT was sent is never reported as "nothing committed".
    """

    commit_sent: bool = False
    committed: bool = False
    result: Any = None
    #: aclose() cancelled the call (rather than its deadline).
    stopped_by_close: bool = False
    #: Set by :meth:`PgLink.run` when the call ended, for an ``aclose()`` on its loop waiting for it.
    ended: asyncio.Future[None] | None = None
    #: The rollback of its failed transaction, still running (on a pooled connection) when the call
    #: had to end: the connection goes back to its pool once it ends (:func:`settle_in_time`).
    settling: asyncio.Task[None] | None = None
    #: Its statement_timeout was set short of its deadline (not the configured ceiling): a
    #: statement the server cancels was stopped for the deadline (:func:`statement_timeout_ms`).
    deadline_bound: bool = False


def statement_timeout_ms(ctx: OpContext, ceiling_s: float, outcome: Outcome) -> int:
    """``statement_timeout`` (ms) for ``ctx``: the configured ceiling, or a margin short of its deadline.

    The margin is ``plugin_api.before_cancel``'s. A statement timed to the deadline itself (as before)
    was still running when the engine cancelled the call there: psycopg's own cancelling of it was
    interrupted by that cancellation and closed the connection (a lent one too, which every later
    call then found closed), or the rollback after the server's cancel ran into, or past, the
    engine's grace (the call reported abandoned). Stopped by the server first, the statement's
    transaction is rolled back on a connection still in sync, and the call ends with its own
    error (:func:`deadline_stop`). Notes in ``outcome`` whether the deadline set it.
    """
    left = ctx.time_left()
    timeout_ms = max(
        1, math.ceil(1000 * (ceiling_s if left is None else min(ceiling_s, before_cancel(left))))
    )
    outcome.deadline_bound = timeout_ms < math.ceil(1000 * ceiling_s)
    return timeout_ms


def deadline_stop(name: str, operation: str) -> OperationCancelledError:
    """The error of a call whose statement the server stopped a margin short of the call's deadline."""
    return OperationCancelledError(
        f"{name}: {operation} did not finish in time: its statement was still running just before its "
        "deadline and the server stopped it; its transaction was rolled back and nothing was committed",
        "deadline passed",
    )


def commit_cut_off(settle: anyio.CancelScope, failure: BaseException | None) -> bool:
    """Whether the wait for a COMMIT's answer (``settle``, bounded by :func:`commit_wait`) was cut off.

    The wait catches every exception to clean up after it, its own bound's cancellation too, and
    ``cancelled_caught`` is then false: the cancellation was raised on as if the caller's, and
    escaped the call bare (seen once the wait ended before the call's own scope, which had caught
    it at the same instant before).
    """
    return settle.cancelled_caught or (
        settle.cancel_called and isinstance(failure, anyio.get_cancelled_exc_class())
    )


def commit_wait(ctx: OpContext) -> float:
    """How long to wait for a COMMIT's answer: until a margin before the deadline, at most ``SETTLE_S``.

    Not past the deadline: the engine cancels the call there and abandons it 0.1 s later, so a wait
    until the deadline and a slack (as before) ended after the engine gave up on the call, which it
    reported as hung while the "outcome unknown" (error and WARNING) came later or, on a loaded
    machine, in time: which one depended on load. See ``plugin_api.before_cancel``.
    """
    left = ctx.time_left()
    return SETTLE_S if left is None else min(SETTLE_S, before_cancel(left))


T = TypeVar("T")

#: The cancel requests and fences of :class:`ServerStop` still running (asyncio keeps tasks weakly).
_CANCELLING: set[asyncio.Task[Any]] = set()


def _kept(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``work`` in a task of its own, referenced from :data:`_CANCELLING` until it ends."""
    task = asyncio.get_running_loop().create_task(work)
    _CANCELLING.add(task)
    task.add_done_callback(_CANCELLING.discard)
    return task


def _handled(task: asyncio.Task[bool]) -> bool:
    """Whether the cancel request ``task`` sent ended for good: the server had it, or it was never sent."""
    return task.done() and not task.cancelled() and task.result()


class ServerStop:
    """A cancel request sent to the server a margin before the call's deadline, for a statement begun late.

    ``statement_timeout`` is set once per transaction and counts from each statement's start: a
    statement begun after earlier ones took their time (or blocked on a lock after a slow one)
    would run past the deadline, and the engine's cancellation came first (psycopg then closed the
    connection, a lent one too). At ``plugin_api.before_cancel`` of what was left when armed, the
    statement still running is cancelled by the server (``QueryCanceled``, as by its own timeout;
    the call is noted deadline-bound). :meth:`disarm` before anything else is sent on the
    connection (COMMIT, ROLLBACK, a later call): a request on its way is waited for, so it cannot
    stop those (the server ignores one arriving between statements).

    The request's own wait is bounded by ``cancel_s`` (the config's ``cancel_timeout_s``): one the
    server has not confirmed by then (its listener black-holed) may still arrive, so the
    connection is closed rather than fenced for longer (it held the next statement, the host's
    on a lent connection, up to ``SETTLE_S``, 10 s).
    """

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        ctx: OpContext,
        outcome: Outcome,
        name: str,
        operation: str,
        *,
        cancel_s: float,
    ) -> None:
        self._conn, self._ctx, self._outcome = conn, ctx, outcome
        self._what = (name, operation)  # for deadline_stop
        self._cancel_s = cancel_s
        self._task: asyncio.Task[bool] | None = None
        left = ctx.time_left()
        loop = asyncio.get_running_loop()
        self._timer = None if left is None else loop.call_later(before_cancel(left), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._outcome.deadline_bound = True
        self._task = _kept(self._cancel())  # referenced until it ends, even once disarm() stopped waiting

    async def _cancel(self) -> bool:
        """Send the request; False when it was not confirmed within ``cancel_s`` (it may still arrive)."""
        with anyio.move_on_after(self._cancel_s):  # libpq < 17: cancel_safe ignores its timeout
            try:
                await self._conn.cancel_safe(timeout=self._cancel_s)
            except psycopg.errors.CancellationTimeout:
                return False
            except Exception:  # a request that failed stopped nothing; the engine will
                return True
            return True
        return False

    async def disarm(self, *, fence: bool = True, commit: bool = False) -> None:
        """No request from now on; one on its way is waited for (shielded, until :func:`commit_wait`).

        One still on its way then fences the connection (unless ``fence`` is false: see
        :meth:`around`): its lock, which psycopg takes for every statement, is held until the
        request has been handled, so the next statement on it, the host's on a lent connection or
        another call's on a pooled one, is sent only once the request can no longer stop it.
        Letting the connection go at once (as before), a request reaching the server late (a slow
        network to its listener) cancelled that statement. With ``commit`` (before the call's
        COMMIT) such a request stops the call instead (:func:`deadline_stop`, nothing committed:
        its rollback follows, then the fence): the COMMIT would wait behind it past the deadline.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is None or _handled(task):
            return
        with anyio.CancelScope(shield=True):
            if not task.done():
                with anyio.move_on_after(commit_wait(self._ctx)):
                    await asyncio.wait({task})
            if commit and not _handled(task):  # on its way, or unconfirmed: it may stop the COMMIT
                raise deadline_stop(*self._what)
            if fence:
                await self._fence()

    async def around(self, settle: Callable[[], Awaitable[None]]) -> None:
        """:meth:`disarm`, run ``settle()`` (the call's rollback), then fence the connection: as one unit.

        The rollback is not held behind the request (a lent connection's is waited for inline: a
        slow request held the call past the engine's grace), nor is one on a connection psycopg
        closed when the call was cancelled (the rollback fails at once there).

        The unit runs in a task of its own that the call waits for to its end (:func:`_wait_out`):
        a native ``Task.cancel()`` landing while :meth:`disarm` waited for a request on its way
        (anyio's shield does not stop asyncio's) ended the call there, its rollback never begun
        (a coroutine never awaited), the lent connection left in its failed transaction. The
        cancellation is now raised once the rollback ended; ``settle`` is called only after disarm.
        """

        async def unit() -> None:
            await self.disarm(fence=False)
            try:
                await settle()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._fence()

        task = asyncio.get_running_loop().create_task(unit())
        if await _wait_out(task):
            raise asyncio.CancelledError
        task.result()

    @staticmethod
    async def wait_cleared(
        conn: psycopg.AsyncConnection[Any], ctx: OpContext, name: str, operation: str
    ) -> None:
        """Before a call sends anything: wait for a fence on ``conn`` until a margin before the deadline.

        An earlier call's request still on its way holds the connection's lock (up to ``SETTLE_S``):
        waited for in the call's first statement (or its pipeline's start), the call ran into its
        deadline (the engine's cancellation, or the client's slack past it) instead of ending with
        its own error a margin before it. Past that margin it ends here, nothing sent.
        """
        if not conn.lock.locked():
            return
        left = ctx.time_left()
        with anyio.move_on_after(math.inf if left is None else before_cancel(left)) as waited:
            async with conn.lock:
                pass
        if waited.cancelled_caught:
            raise OperationCancelledError(
                f"{name}: {operation} did not finish in time: its connection was still busy just before its "
                "deadline (an earlier call's cancel request on its way to the server holds it); nothing "
                "was sent or committed",
                "deadline passed",
            )

    async def _fence(self) -> None:
        task, self._task = self._task, None
        lock = self._conn.lock
        if task is None or _handled(task) or self._conn.closed:
            return
        # The statements ended: taken at once (no yield when free), before anything else. Behind a
        # pooled rollback still running, queued: its connection's next user queues behind this
        # (the lock is first come, first served).
        held = False
        if not lock.locked():
            held = await lock.acquire()
        _kept(self._hold(task, held))

    async def _hold(self, task: asyncio.Task[bool], held: bool) -> None:
        """Hold the connection's lock until ``task`` ended; close the connection if it was not confirmed."""
        lock = self._conn.lock
        if not held:
            await lock.acquire()
        try:
            await asyncio.wait({task})
            if not _handled(task) and not self._conn.closed:
                # It may still reach the server and stop whatever runs then: no later statement is
                # sent on this connection (psycopg does the same when its own cancelling fails).
                self._conn.pgconn.finish()
                logger.warning(
                    "%s: a cancel request was not confirmed within %ss; its connection was closed so "
                    "that it cannot stop a later statement",
                    self._what[1],
                    self._cancel_s,
                    extra={"agentium_operation": self._what[1]},
                )
        finally:
            lock.release()


class StaleConnection(Exception):
    """A pooled connection failed before any of the call's work reached the server."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


async def abandon_pipeline(pipeline: Any, exc: BaseException) -> None:
    """Leave pipeline mode after a failure (shielded); its own errors add nothing to ``exc``."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_S):
        with contextlib.suppress(Exception):
            await pipeline.__aexit__(type(exc), exc, exc.__traceback__)


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` may have left the connection out of step with the server.

    Not a statement the server cancelled itself (``QueryCanceled``, its statement_timeout): the
    server answered, and the rollback that follows tells. Discarding it instead (as before) cost
    the next call a new connection inside its own deadline.
    """
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return False
    return isinstance(exc, anyio.get_cancelled_exc_class() | psycopg.OperationalError)


async def settle_manual(conn: psycopg.AsyncConnection[Any], exc: BaseException, pooled: bool) -> None:
    """ROLLBACK after a failure (shielded); discard a pooled connection a statement was cut off on."""
    interrupted = _interrupted(exc)
    with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_S):
        try:
            if not conn.broken:
                await conn.execute("ROLLBACK")
        except Exception:  # a broken connection cannot roll back; the server does
            interrupted = True
    if interrupted or conn.broken:
        await discard(conn, pooled)


async def _wait_out(task: asyncio.Task[None]) -> bool:
    """Wait for ``task`` to its end, whatever cancels the waiting task; whether asyncio's ``cancel()`` did.

    Shielded from anyio's cancellation (a deadline, ``aclose()``); a native one (a host's
    ``Task.cancel()``, ``wait_for``) is noted and the wait goes on: the caller raises it once
    ``task`` ended, so the call never ends with ``task``'s work still running or never begun.
    """
    cancelled = False
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                cancelled = True
    return cancelled


def _settling(
    conn: psycopg.AsyncConnection[Any], work: Coroutine[Any, Any, None], pending: set[asyncio.Task[None]]
) -> asyncio.Task[None]:
    """``work`` (a failed call's rollback) in a task kept in ``pending`` until it ends.

    ``aclose()`` waits for the tasks of ``pending`` and gives up on one still unanswered at its
    bound by cancelling it (natively): the connection is then closed (the server rolls the
    transaction back), never used or returned as is.
    """

    async def settle() -> None:
        try:
            await work
        except asyncio.CancelledError:  # aclose() gave up on it: the connection is out of step
            conn.pgconn.finish()
            raise

    task = asyncio.get_running_loop().create_task(settle())
    pending.add(task)
    task.add_done_callback(pending.discard)
    return task


async def settle_tracked(
    conn: psycopg.AsyncConnection[Any], work: Coroutine[Any, Any, None], pending: set[asyncio.Task[None]]
) -> None:
    """Run ``work`` (a failed call's rollback) to its end inside the call, known to ``aclose()``.

    Run inside the call itself (a lent connection's, or a call with no deadline), it was unknown to
    ``aclose()``, which returned at once, "closed", with its ROLLBACK still unanswered (on the
    host's connection, which the host may then close under it). It now runs in a task of
    ``pending`` (see :func:`_settling`) that the call waits for to its end (``work`` is bounded
    itself), shielded: a native cancellation of the call is raised once it ended, so that the
    call never ends, and the connection's next call never begins, with its rollback still running.
    """
    if await _wait_out(_settling(conn, work, pending)):
        raise asyncio.CancelledError


async def settle_in_time(
    conn: psycopg.AsyncConnection[Any],
    pipeline: Any,
    exc: BaseException,
    pooled: bool,
    ctx: OpContext,
    pending: set[asyncio.Task[None]],
    outcome: Outcome,
) -> None:
    """Leave the pipeline and roll back after a failure; ``outcome.settling``: the task doing it.

    The rollback is a round trip, shielded, of up to ``SETTLE_S``: a server stalled then held
    the call past the engine's grace, which reported it abandoned ("blocked in a worker
    thread?") instead of the call's own error. On a pooled connection with a deadline it runs
    in a task of its own, waited for until a margin before the deadline
    (``plugin_api.before_cancel``; at once for a call already past it); a task still running
    then is in ``outcome.settling``, and the connection must go back to its pool only once it
    ended. Set before the wait: a native ``Task.cancel()`` there (anyio's shield does not stop it)
    ended the call with it unset, and the connection went back to its pool under its rollback.
    A lent connection (the host's) is settled to its end inside the call as before (its next call
    would meet it), as is a call with no deadline (:func:`settle_tracked`).
    The task is kept in ``pending`` from the start, not only once the call ended: ``aclose()``
    waits for those, and one still waited for inside its call (a stalled network) was not.
    """

    async def settle() -> None:
        await abandon_pipeline(pipeline, exc)
        await settle_manual(conn, exc, pooled)

    left = ctx.time_left()
    if not pooled or left is None:
        await settle_tracked(conn, settle(), pending)
        return

    outcome.settling = _settling(conn, settle(), pending)
    with anyio.CancelScope(shield=True), anyio.move_on_after(before_cancel(left)):
        await asyncio.wait({outcome.settling})


async def settle_transaction(
    conn: psycopg.AsyncConnection[Any], tx: Any, exc: BaseException, pooled: bool
) -> None:
    """Roll back after a failure (shielded); discard a pooled connection a statement was cut off on."""
    interrupted = _interrupted(exc)
    with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_S):
        try:
            await tx.__aexit__(type(exc), exc, exc.__traceback__)
        except Exception:  # a broken connection cannot roll back; the server does
            interrupted = True
    if interrupted:
        await discard(conn, pooled)


async def discard(conn: psycopg.AsyncConnection[Any], pooled: bool) -> None:
    """Close a pooled connection so the pool replaces it (a lent single connection is never closed)."""
    if not pooled:
        return
    with anyio.CancelScope(shield=True):
        # Closing a broken connection may fail; it is gone either way.
        with contextlib.suppress(Exception):
            await conn.close()


def read_unconfirmed(name: str, operation: str, *, lent: bool) -> OperationCancelledError:
    """The error of a read whose COMMIT (the end of its read-only transaction) was not confirmed in time.

    Raised a margin before the deadline (:func:`commit_wait`), not past it ("did not finish by its
    deadline", as before, was not so), and for a transaction that wrote nothing: nothing is
    unknown, only the read's result is not returned.
    """
    after = " (the next call on this connection waits for that answer first)" if lent else ""
    return OperationCancelledError(
        f"{name}: {operation} did not finish in time: the server had not confirmed the end of its "
        f"read-only transaction just before its deadline{after}, so its result is not returned; it only "
        "read: nothing was written",
        "deadline passed",
    )


def unknown_commit(name: str, operation: str, why: str) -> PostgresUnavailableError:
    """The error of a write whose COMMIT was sent but not confirmed (logged: its outcome is unknown)."""
    logger.warning(
        "%s: COMMIT sent but not confirmed (%s); outcome unknown",
        operation,
        why,
        extra={"agentium_operation": operation},
    )
    return PostgresUnavailableError(
        f"{name}: {operation}: COMMIT was sent but {why}; the outcome is unknown to this call "
        "(the server commits it whole or not at all) and nothing is acknowledged"
    )


async def check_if_idle(
    conn: psycopg.AsyncConnection[Any], last_used: weakref.WeakKeyDictionary[Any, float]
) -> None:
    """Check a pooled connection that sat idle (one round trip); a broken one is replaced.

    A server restart breaks idle connections silently; checking only those
    idle for a while keeps busy calls free of the extra round trip. ``last_used``
    (when each connection was last used, anyio clock) is updated.
    """
    now = anyio.current_time()
    last = last_used.get(conn)
    last_used[conn] = now
    if last is not None and now - last < _IDLE_CHECK_S:
        return
    try:
        await conn.execute("")
    except psycopg.OperationalError as exc:
        await discard(conn, True)
        raise StaleConnection(exc) from exc
