"""The adapters' way to the server: one transaction per call, on a pooled (owned or lent) connection.

:class:`PgLink` runs a call's statements in one transaction that first sets
two transaction-local settings: ``statement_timeout`` (the smaller of the
configured ceiling and what is left of the call's deadline) and
``agentium.tenant`` (the verified scope's tenant segment, which the
row-level security policies compare every row with).

**Owned versus lent.** Built from config, an adapter creates its own
``psycopg_pool.AsyncConnectionPool`` on its first call and closes it in
``aclose()``. A host may lend an ``AsyncConnectionPool`` (``pool=``) or a
single ``AsyncConnection`` (``connection=``); those are never closed. A lent
connection serves one call at a time, of any adapter, on one event loop, when
idle; a COMMIT cut off on it is finished before its next call (:mod:`.lent`).

**Deadlines and cancellation.** The server cancels a statement past
``statement_timeout``, which ends a margin before the call's deadline
(``calls.statement_timeout_ms``), and one begun later than the transaction
(it counts from each statement's start) on the client's cancel request sent at
that margin (``calls.ServerStop``): the transaction is rolled back on a
connection still in sync, which is kept. The client also runs the call under an
anyio cancel scope ending shortly after the deadline; psycopg answers a
cancellation (that one, or the engine's) by sending the server a cancel
request. The transaction is rolled back (shielded; on a pooled connection in a
task that may outlast the call, ``calls.settle_in_time``) and a pooled
connection that saw its statement interrupted is closed rather than reused.
A write's ``COMMIT`` is shielded: it commits whole or the server rolls it
back. Its answer is awaited until a margin before the deadline
(``calls.commit_wait``): a commit the connection lost, or one not confirmed by then, is
reported as :class:`~agentium_postgres.errors.PostgresUnavailableError`
(outcome unknown, nothing acknowledged), never as a cancellation that
committed nothing. A read's ``COMMIT`` is cut off like any statement.

**First use.** Before its first transaction a link checks, once, that the
schema exists at the version this release understands and that the role has
the privileges the adapter needs, and reads whether the role bypasses
row-level security, under the same statement timeout as a call.
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, LiteralString, TypeVar

import anyio
import psycopg
import psycopg.errors
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from agentium_harness import AgentiumError
from agentium_harness.plugin_api import (
    CloseOnce,
    OpContext,
    OperationCancelledError,
    PerLoop,
    before_cancel,
)

from .args import checked_ctx, checked_lending
from .calls import (
    CLIENT_SLACK_S,
    SETTLE_S,
    Outcome,
    ServerStop,
    StaleConnection,
    abandon_pipeline,
    check_if_idle,
    commit_cut_off,
    commit_wait,
    deadline_stop,
    discard,
    read_unconfirmed,
    require_asyncio,
    settle_in_time,
    settle_manual,
    settle_tracked,
    settle_transaction,
    statement_timeout_ms,
    stopped_by_close,
    unknown_commit,
)
from .closing import close_within, stop_running
from .config import PostgresConfig
from .errors import PostgresError, PostgresUnavailableError
from .first_use import ServerFacts, check_schema
from .lent import LentCommitUnconfirmed, commit_lent, lent_turn
from .loop_pools import LoopPool, discard_pool, recording_connection_class
from .pool_return import give_back
from .schema import TENANT_SETTING
from .translate import translate_error

__all__ = ["Conn", "PgLink", "ServerFacts", "require_asyncio"]

#: Every transaction reads times in UTC: in the session's own zone a time at a validity bound
#: (0001-01-01 UTC west of it, 9999-12-31 late UTC east of it) comes back BC or in year 10000,
#: which psycopg cannot load, and every read of such a fact failed.
_UTC: Final[LiteralString] = "set_config('TimeZone', 'UTC', true)"

#: Commits whose outcome stayed unknown, discarded connections (WARNING); never statements or rows.
logger = logging.getLogger("agentium.plugins.postgres")

T = TypeVar("T")

#: The connection type the adapters use (rows are tuples).
Conn = psycopg.AsyncConnection[Any]


class PgLink:
    """An adapter's connections: an owned pool, a lent pool or a lent connection, with the first-use check.

    ``family`` is the adapter's error class for causes no narrower class
    covers; ``needs`` lists the tables whose privileges the adapter checks on
    first use.
    """

    def __init__(
        self,
        config: PostgresConfig,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Conn | None = None,
        family: type[PostgresError],
        name: str,
        needs: tuple[str, ...],
    ) -> None:
        checked_lending(config, pool, connection)  # for every adapter, before anything is kept
        self._config = config
        self._lent_pool = pool
        self._lent_connection = connection
        # The owned pool of each event loop: a pool's connections and its worker tasks belong to
        # the loop that opened it, and one adapter serves threads that each run their own loop
        # (and successive asyncio.run calls). A loop's pool is dropped once that loop finished.
        self._owned: PerLoop[LoopPool] = PerLoop(LoopPool, discard=discard_pool)
        self._family = family
        self._name = name
        self._needs = needs
        self._facts: ServerFacts | None = None
        # One per loop (an anyio lock belongs to its loop); the first-use check is idempotent.
        self._ready_locks: PerLoop[anyio.Lock] = PerLoop(anyio.Lock)
        # aclose() from any task, thread or loop: one closes, the others wait (a little past its
        # bound, close_timeout_s); all hear its outcome.
        self._closing = CloseOnce(name, wait_s=config.close_timeout_s + 1.0, logger=logger)
        # Each call in flight: its cancel scope, the loop it runs on and how far it got. aclose()
        # cancels them, so a call with no deadline on a frozen server does not wait forever.
        self._running: dict[anyio.CancelScope, tuple[asyncio.AbstractEventLoop, Outcome]] = {}
        # The rollbacks of failed transactions running in tasks of their own, and the returns of
        # connections to their pool (after such a rollback, or at once): aclose() waits for both.
        self._settling: set[asyncio.Task[None]] = set()
        self._returning: set[asyncio.Task[None]] = set()
        # The owned pool's last failure to connect (None once a connection succeeded).
        self._last_connect_error: BaseException | None = None
        # Set after a connection failure: the next call connects directly first.
        self._suspect = False
        # When each pooled connection was last used (anyio clock), for the idle check.
        self._last_used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()

    # -- properties -----------------------------------------------------------------------------

    @property
    def config(self) -> PostgresConfig:
        """The options the link was built with."""
        return self._config

    @property
    def name(self) -> str:
        """The adapter's name in messages (``postgres archive``, ...)."""
        return self._name

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran."""
        return self._closing.claimed

    @property
    def lent(self) -> bool:
        """True when the host lent the pool or connection (it is then never closed here)."""
        return self._lent_pool is not None or self._lent_connection is not None

    @property
    def facts(self) -> ServerFacts | None:
        """What the first-use check learnt, or ``None`` before the first call."""
        return self._facts

    def shares_database_with(self, other: PgLink) -> bool:
        """True when both links reach the same database and schema (one transaction can write both)."""
        if self._closing.claimed or other._closing.claimed:
            return False
        if self._lent_connection is not None or other._lent_connection is not None:
            return (
                self._lent_connection is other._lent_connection
                and self._config.schema == other._config.schema
            )
        if self._lent_pool is not None or other._lent_pool is not None:  # configs name no lent pool
            return self._lent_pool is other._lent_pool and self._config.schema == other._config.schema
        try:
            return self._config.identity() == other._config.identity()
        except (ValueError, TypeError):  # options whose identity cannot be read (set past the validator)
            return False

    # -- running a call -------------------------------------------------------------------------

    async def run(
        self,
        ctx: OpContext,
        operation: str,
        tenant_key: str | None,
        work: Callable[[Conn], Awaitable[T]],
        *,
        write: bool = True,
    ) -> T:
        """Run ``work(conn)`` in one transaction for tenant ``tenant_key`` under ``ctx``'s deadline.

        ``tenant_key`` is the tenant's key segment (``None``: no tenant, no tenant row is visible).
        ``write=False`` says the work only reads: its statements and COMMIT may then travel in one
        round trip. A write's statements are all executed (and cancellable) before its COMMIT is
        sent, shielded, and waited for until a margin before the deadline: past it the outcome is
        unknown to the call (:class:`~agentium_postgres.errors.PostgresUnavailableError`). Raises
        the plugin's typed errors; :class:`~agentium_harness.plugin_api.OperationCancelledError`
        when the context was cancelled or its deadline passed before any COMMIT was sent (nothing
        committed).
        """
        checked_ctx(ctx, operation).raise_if_expired(operation)
        require_asyncio(operation)
        if self._closing.claimed:
            raise self._family(f"{self._name}: {operation} refused: the adapter is closed")
        left = ctx.time_left()
        client_deadline = math.inf if left is None else anyio.current_time() + left + CLIENT_SLACK_S
        outcome = Outcome()
        with anyio.CancelScope(deadline=client_deadline) as scope:
            self._running[scope] = (asyncio.get_running_loop(), outcome)
            try:
                return await self._run(ctx, operation, tenant_key, work, write, outcome)
            except anyio.get_cancelled_exc_class():
                raise
            except AgentiumError:
                raise
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                if outcome.stopped_by_close:  # the pool was closed under it: say so, not "unavailable"
                    raise self._family(stopped_by_close(self._name, operation)) from None
                if outcome.deadline_bound and isinstance(exc, psycopg.errors.QueryCanceled):
                    raise deadline_stop(self._name, operation) from None
                error = self.translate(exc, operation, ctx)
                # A pool that was busy until the deadline is not broken: closing it would fail
                # every other call waiting on it, whatever their deadlines.
                if isinstance(error, PostgresUnavailableError) and not isinstance(exc, PoolTimeout):
                    await self._reset_pool()
                raise error from None
            finally:
                self._running.pop(scope, None)
                if outcome.ended is not None and not outcome.ended.done():  # an aclose() waits for it
                    outcome.ended.set_result(None)
        # Only reached when the scope was cancelled: by its deadline, or by aclose().
        assert scope.cancelled_caught
        if outcome.committed:
            # The transaction committed, and the deadline cut the call off afterwards (returning
            # its connection to the pool): the result is true, "nothing was committed" would not be.
            return outcome.result  # type: ignore[no-any-return]
        if outcome.commit_sent:
            why = "the adapter was closed" if outcome.stopped_by_close else "its deadline passed"
            raise unknown_commit(self._name, operation, f"{why} before the server confirmed it")
        if outcome.stopped_by_close:
            raise self._family(stopped_by_close(self._name, operation))
        raise OperationCancelledError(
            f"{self._name}: {operation} did not finish by its deadline; its transaction was rolled back "
            "and nothing was committed",
            "deadline passed",
        )

    async def _run(
        self,
        ctx: OpContext,
        operation: str,
        tenant_key: str | None,
        work: Callable[[Conn], Awaitable[T]],
        write: bool,
        outcome: Outcome,
    ) -> T:
        if self._lent_connection is not None:
            async with lent_turn(self._lent_connection, self._name, operation, self._family, ctx.time_left()):
                return await self._transaction(
                    self._lent_connection, ctx, operation, tenant_key, work, False, write, outcome
                )
        if self._lent_pool is None and (
            self._facts is None or self._suspect or self._last_connect_error is not None
        ):
            # The first call checks on a connection of its own, before the pool exists: a refused
            # password or a missing schema is reported at once, not after the pool's retries. So
            # does the first call after the pool failed to connect: while the server is down calls
            # fail at once, and once it is back the pool is replaced by a fresh one instead of
            # waiting out the old one's growing reconnection backoff.
            await self._check_directly(ctx, operation, outcome)
            self._suspect = False
            if self._last_connect_error is not None:
                self._last_connect_error = None
                await self._reset_pool()
        pool = await self._pool()
        left = ctx.time_left()
        # A wait for a connection ends short of the deadline (plugin_api.before_cancel): the pool's
        # "none became available in time", not the engine's cancellation at the same instant.
        timeout = self._config.statement_timeout_s if left is None else max(0.001, before_cancel(left))
        try:
            for attempt in (1, 2):
                try:
                    conn = await pool.getconn(timeout=timeout)
                    try:
                        return await self._transaction(
                            conn, ctx, operation, tenant_key, work, True, write, outcome
                        )
                    finally:
                        await give_back(pool, conn, outcome, self._returning)
                except StaleConnection as stale:
                    if attempt == 2:
                        raise stale.error from None
            raise AssertionError("unreachable")  # pragma: no cover
        except PoolTimeout:
            failure = self._last_connect_error
            if failure is not None:  # the pool could not connect: say why, as a first call would
                raise self.translate(failure, operation, ctx) from None
            raise

    async def _reset_pool(self) -> None:
        """Drop the owned pool after a connection failure: the next call reconnects at once.

        A pool whose connections broke (a restarted server, a dropped
        network) would otherwise retry in the background with a growing
        backoff, and the next calls would wait for it.
        """
        slot = self._owned.get()
        pool, slot.pool = slot.pool, None
        # Until a direct connection succeeds again, calls check first and fail at once.
        self._suspect = True
        if pool is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_S):
                await pool.close(timeout=1.0)

    def _connected(self, error: BaseException | None) -> None:
        """Record whether the owned pool's last connection attempt failed (for pool timeouts)."""
        self._last_connect_error = error

    async def _check_directly(self, ctx: OpContext, operation: str, outcome: Outcome) -> None:
        left = ctx.time_left()
        budget = self._config.connect_timeout_s if left is None else min(self._config.connect_timeout_s, left)
        conn = await psycopg.AsyncConnection.connect(
            self._config.conninfo(), autocommit=True, connect_timeout=max(2, math.ceil(budget))
        )
        try:
            if self._facts is None:
                await self._first_use(conn, ctx, operation, outcome)
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def _pool(self) -> AsyncConnectionPool[Any]:
        if self._lent_pool is not None:
            return self._lent_pool
        slot = self._owned.get()  # checked after: a close claims before it collects, so a slot made
        if self._closing.claimed:  # past its collect is refused here (its pool leaked, never closed)
            raise self._family(f"{self._name}: refused: the adapter is closed")
        if slot.pool is None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self._config.conninfo(),
                min_size=self._config.min_pool_size,
                max_size=self._config.max_pool_size,
                kwargs={
                    "autocommit": True,
                    "connect_timeout": max(1, math.ceil(self._config.connect_timeout_s)),
                },
                open=False,
                name=self._name,
                # No check query when a connection is taken (it would cost a round trip per call):
                # a connection found broken by a call's first statement is replaced and the call
                # retried once on another (see _run), since nothing of it reached the server.
                connection_class=recording_connection_class(self._connected),
            )
            await pool.open(wait=False)
            slot.pool = pool
        return slot.pool

    async def _transaction(
        self,
        conn: Conn,
        ctx: OpContext,
        operation: str,
        tenant_key: str | None,
        work: Callable[[Conn], Awaitable[T]],
        pooled: bool,
        write: bool,
        outcome: Outcome,
    ) -> T:
        await ServerStop.wait_cleared(conn, ctx, self._name, operation)  # an earlier call's request
        if self._facts is None:
            await self._first_use(conn, ctx, operation, outcome)
        timeout_ms = statement_timeout_ms(ctx, self._config.statement_timeout_s, outcome)
        if not conn.autocommit:
            # A lent connection outside autocommit: psycopg's own transaction handling.
            return await self._managed_transaction(
                conn, ctx, operation, tenant_key, work, timeout_ms, pooled, write, outcome
            )
        if pooled:
            await check_if_idle(conn, self._last_used)
        # Pipeline mode: BEGIN, the two settings and the work's statements travel together up to
        # the work's first read. A write's statements are then all executed (cancellable: a cut-off
        # statement aborts the transaction) before COMMIT is sent, shielded: two round trips for
        # a joint commit. A read's COMMIT travels with whatever it left unread: one round trip,
        # cancellable like any statement (a read commits nothing, so cutting it off loses nothing).
        pipeline = conn.pipeline()
        batch = await pipeline.__aenter__()
        # A statement begun late is stopped too.
        stop = ServerStop(conn, ctx, outcome, self._name, operation, cancel_s=self._config.cancel_timeout_s)
        try:
            await conn.execute("BEGIN")
            await conn.execute(
                "SELECT set_config('statement_timeout', %s, true), set_config(%s, %s, true), " + _UTC,
                (str(timeout_ms), TENANT_SETTING, tenant_key or ""),
            )
            result = await work(conn)
            if write:
                await batch.sync()
                await stop.disarm(commit=True)
            ctx.raise_if_expired(operation)
            if not write:
                await conn.execute("COMMIT")
                await pipeline.__aexit__(None, None, None)
                await stop.disarm()
                return result
        except BaseException as exc:
            failed = exc  # for the rollback, begun only once disarmed (whatever cancelled the call)

            async def roll_back() -> None:
                await settle_in_time(conn, pipeline, failed, pooled, ctx, self._settling, outcome)

            await stop.around(roll_back)
            raise
        # The work is done: commit it whole, even if the caller is cancelled meanwhile; but wait
        # for the server's answer no longer than the deadline allows (a stalled server must not
        # hold the call): past it the outcome is unknown, and said so.
        failure: BaseException | None = None
        outcome.commit_sent = True
        if not pooled:  # the host's connection: a COMMIT cut off here left it closed (see .lent)

            async def finish() -> None:
                try:
                    await conn.execute("COMMIT")
                    await pipeline.__aexit__(None, None, None)
                except BaseException as exc:
                    await abandon_pipeline(pipeline, exc)
                    await settle_manual(conn, exc, pooled)
                    raise

            await self._commit_lent(conn, finish, ctx, operation, write)
            outcome.committed, outcome.result = True, result
            return result
        with anyio.CancelScope(shield=True), anyio.move_on_after(commit_wait(ctx)) as settle:
            try:
                await conn.execute("COMMIT")
                await pipeline.__aexit__(None, None, None)
            except BaseException as exc:  # a statement the work queued failed, or the COMMIT did
                failure = exc
        if commit_cut_off(settle, failure):
            await discard(conn, pooled)
            raise unknown_commit(self._name, operation, "the server did not confirm it in time")
        if failure is not None:  # rolled back as any failed call is: known to aclose(), within the deadline
            await settle_in_time(conn, pipeline, failure, pooled, ctx, self._settling, outcome)
            raise failure
        outcome.committed, outcome.result = True, result
        return result

    async def _commit_lent(
        self, conn: Conn, finish: Callable[[], Awaitable[Any]], ctx: OpContext, operation: str, write: bool
    ) -> None:
        """Commit on the lent connection, waiting until a margin before the deadline at most."""
        try:
            await commit_lent(conn, finish, commit_wait(ctx), operation)
        except LentCommitUnconfirmed:
            if not write:
                raise read_unconfirmed(self._name, operation, lent=True) from None
            raise unknown_commit(
                self._name,
                operation,
                "the server did not confirm it in time (the next call on this connection waits for "
                "its answer first)",
            ) from None

    async def _managed_transaction(
        self,
        conn: Conn,
        ctx: OpContext,
        operation: str,
        tenant_key: str | None,
        work: Callable[[Conn], Awaitable[T]],
        timeout_ms: int,
        pooled: bool,
        write: bool,
        outcome: Outcome,
    ) -> T:
        tx = conn.transaction()
        await tx.__aenter__()
        stop = ServerStop(conn, ctx, outcome, self._name, operation, cancel_s=self._config.cancel_timeout_s)
        try:
            await conn.execute(
                "SELECT set_config('statement_timeout', %s, true), set_config(%s, %s, true), " + _UTC,
                (str(timeout_ms), TENANT_SETTING, tenant_key or ""),
            )
            result = await work(conn)
            await stop.disarm(commit=True)
            ctx.raise_if_expired(operation)
        except BaseException as exc:
            failed = exc  # for the rollback, begun only once disarmed (whatever cancelled the call)
            await stop.around(
                lambda: settle_tracked(conn, settle_transaction(conn, tx, failed, pooled), self._settling)
            )
            raise
        outcome.commit_sent = write
        if not pooled:
            await self._commit_lent(conn, lambda: tx.__aexit__(None, None, None), ctx, operation, write)
            outcome.committed, outcome.result = write, result
            return result
        with anyio.CancelScope(shield=True), anyio.move_on_after(commit_wait(ctx)) as settle:
            await tx.__aexit__(None, None, None)
        if settle.cancelled_caught:
            await discard(conn, pooled)
            if not write:
                raise read_unconfirmed(self._name, operation, lent=False)
            raise unknown_commit(self._name, operation, "the server did not confirm it in time")
        outcome.committed, outcome.result = write, result
        return result

    # -- first use ------------------------------------------------------------------------------

    async def _first_use(self, conn: Conn, ctx: OpContext, operation: str, outcome: Outcome) -> None:
        """Check the schema version and the privileges once; learn whether the role bypasses RLS."""
        async with self._ready_locks.get():
            if self._facts is not None:
                return
            # Its statements under the same ceiling as a call's: schema_meta may be locked.
            timeout_ms = statement_timeout_ms(ctx, self._config.statement_timeout_s, outcome)
            self._facts = await check_schema(conn, self._name, self._config, self._needs, timeout_ms)

    # -- errors ---------------------------------------------------------------------------------

    def translate(self, exc: BaseException, operation: str, ctx: OpContext) -> Exception:
        """The plugin's typed error for a driver or pool failure (never echoing a password)."""
        return translate_error(exc, f"{self._name}: {operation}", ctx, self._config, self._family)

    # -- closing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop the calls in flight, then close the pools this link created; never a lent pool or connection.

        Idempotent, and bounded whatever the server does: a later call (any
        task, thread or loop) waits for the first's close to end, within that
        bound, and every caller hears the same outcome (``plugin_api.CloseOnce``):
        the first's error is raised to later callers too. The close goes on if the
        first caller is cancelled; natively (asyncio ``Task.cancel()``), what did not
        close is then logged as a WARNING and raised to the next caller. Calls made afterwards
        are refused at once. A call still running is cancelled (on its own
        event loop): it raises the adapter's error class saying the adapter
        was closed and nothing was committed, or, when its COMMIT was already
        sent, :class:`~agentium_postgres.errors.PostgresUnavailableError`
        (outcome unknown); one of this loop is waited for to its end (and so
        its rollback, which may begin only then), within the bound. Without
        this, a call with no deadline on a stalled server kept waiting after
        ``aclose`` returned. A pool of a loop that has finished is dropped
        (its connections and workers went with the loop). A COMMIT still
        being finished on a lent connection (see :mod:`.lent`) is waited for,
        so the host may then close the connection.
        All of it runs side by side within the config's ``close_timeout_s``
        (:func:`~agentium_postgres.closing.close_within`): raises the adapter's
        error class (to every caller), and logs a WARNING, when a pool did not
        close by then, or that COMMIT or a failed call's rollback is still
        unanswered (the rollback is given up and its connection closed).
        """
        await self._closing.run(self._begin_close)

    def _begin_close(self) -> Awaitable[None]:
        """Cancel the calls in flight now (in the first ``aclose()`` caller), then close the pools."""
        return self._close_all(stop_running(self._running))

    async def _close_all(self, calls: list[asyncio.Future[None]]) -> None:
        """Close the pools, wait for the calls stopped, rollbacks and a lent COMMIT in one bound."""
        problems = await close_within(
            self._name,
            self._config.close_timeout_s,
            self._owned,
            calls,
            self._settling,
            self._returning,
            self._lent_connection,
        )
        if problems:
            raise self._family(f"{self._name}: closing: " + "; ".join(problems))
