"""The store's way to the server: pipelined round trips on pooled ``redis.asyncio`` connections.

:class:`Link` sends a list of commands in one write and reads their replies
(one round trip), on a connection taken from the client's pool and given
back afterwards. It never retries: a write that lost its reply is settled by
the store, never re-sent (see :mod:`agentium_recall_redis.scripts`).

Cancellation: if the caller is cancelled or its deadline passes while a
command is in flight, the connection is disconnected before it goes back to
the pool (shielded, so a level-triggered cancel scope cannot interrupt the
cleanup). Its reply stream is never reused half read, so the next command on
that pooled connection reconnects and cannot read a stale reply.

The module also parses what the server says about itself when the store
first connects (:class:`ServerReport`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import attrs

from agentium_harness.plugin_api import client_span, one_line

from .errors import RedisRecallError

if TYPE_CHECKING:
    # redis is imported where a client is made or its errors are told apart, not when the plugin
    # loads: listing plugins (``agentium plugins``) must not pay for it.
    from redis.asyncio import Redis

__all__ = ["CHECK_COMMANDS", "Attempt", "Link", "Reply", "ServerReport", "as_text", "config_value"]

#: A reply as read with decoding off: bytes, an int, a list, a dict (RESP3 maps), None, or the error reply.
Reply = Any

#: A command: its name and arguments.
Command = Sequence[str | bytes | int | float]

#: Oldest server version the store accepts (``ZRANGE ... REV``/``BYSCORE`` arrived in 6.2).
MIN_VERSION: Final = (6, 2)


@attrs.define
class Attempt:
    """Whether a round trip's commands may have reached the server (``sent``) and any reply came back."""

    sent: bool = False
    replied: bool = False


def as_text(value: object) -> str:
    """A reply value as text (UTF-8, undecodable bytes replaced); ``""`` for ``None``."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def config_value(reply: Reply, name: str) -> str | None:
    """The value in a ``CONFIG GET name`` reply (RESP2 list or RESP3 map), or ``None``."""
    if isinstance(reply, dict):
        for key, value in reply.items():
            if as_text(key) == name:
                return as_text(value)
        return None
    if isinstance(reply, list) and len(reply) >= 2 and as_text(reply[0]) == name:
        return as_text(reply[1])
    return None


@attrs.frozen(slots=True)
class ServerReport:
    """What the store learnt about its server: flavour, version, durability, and restarts it noticed.

    Read when the store first connects, and again on every connection that
    (re)connects and by ``health()``, so it follows a restart or a failover.
    ``appendonly`` is ``"yes"``, ``"no"`` or ``"unknown"`` (``CONFIG`` is
    disabled or not allowed for this user); ``appendfsync`` is ``"always"``,
    ``"everysec"``, ``"no"`` or ``"unknown"``. ``run_id`` is the server
    process's ``run_id`` (``""`` if ``INFO`` did not say); ``restarts``
    counts the times the store found a different ``run_id`` than before (a
    restart, or another server at the address).
    """

    flavour: str
    version: str
    appendonly: str
    appendfsync: str
    run_id: str = ""
    restarts: int = 0

    @property
    def durable(self) -> bool | None:
        """True when every acknowledged write is fsynced before the reply; ``None`` when unknown."""
        if self.appendonly == "unknown":
            return None
        return self.appendonly == "yes" and self.appendfsync == "always"

    def describe(self) -> str:
        """One line: the server and what its persistence promises for acknowledged writes.

        The server's own words in it (its version, a ``CONFIG GET`` answer)
        are escaped (``one_line``): the text is logged, and a hostile server
        must not be able to end the line or forge another.
        """
        text = self._persistence()
        if self.restarts:
            text += (
                f"; restarted {self.restarts} time(s) since the store first connected (without "
                "persistence, what was indexed before a restart is gone)"
            )
        return one_line(text)

    def _persistence(self) -> str:
        server = f"{self.flavour} {self.version}"
        if self.appendonly == "unknown":
            return f"{server}; durability unknown (CONFIG GET is not available to this client)"
        if self.appendonly != "yes":
            return (
                f"{server}; not durable (appendonly no): acknowledged writes since the last snapshot, "
                "if any, are lost when the server stops"
            )
        if self.appendfsync == "always":
            return (
                f"{server}; durable (appendonly yes, appendfsync always): every acknowledged write is on disk"
            )
        if self.appendfsync == "everysec":
            return (
                f"{server}; appendonly yes, appendfsync everysec: survives a server crash, but about the "
                "last second of acknowledged writes can be lost if the machine fails"
            )
        return (
            f"{server}; appendonly yes, appendfsync {self.appendfsync}: survives a server crash; the "
            "operating system decides when writes reach the disk"
        )


def parse_info(text: str) -> dict[str, str]:
    """``INFO`` output as a dict of its ``key:value`` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def version_tuple(version: str) -> tuple[int, ...]:
    """``"7.0.15"`` as ``(7, 0, 15)``; non-numeric parts end the tuple."""
    parts: list[int] = []
    for piece in version.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


#: What a connection re-reads about the server the first time the store uses it after it (re)connected.
CHECK_COMMANDS: Final[tuple[Command, ...]] = (
    ("INFO", "server"),
    ("CONFIG", "GET", "appendonly"),
    ("CONFIG", "GET", "appendfsync"),
)


class Link:
    """Round trips to one server through a ``redis.asyncio.Redis`` client's connection pool.

    ``round_trips`` counts the round trips made (one per :meth:`call`), for
    tests and benchmarks. The link never closes the client: the store decides
    whether it owns it.

    Reconnections: a pooled connection the server has closed (a restart, a
    failover) is reconnected before anything is sent on it, so a restart
    does not fail the next call (a read that still meets one, because the
    event loop has not seen it close yet, is sent again once). Once ``on_check`` is set, the first round
    trip on every connection after it (re)connected also carries
    :data:`CHECK_COMMANDS` (in the same round trip), and ``on_check``
    receives their replies: a restarted server is noticed on the next call,
    with its persistence as it is now.
    """

    def __init__(self, client: Redis, *, owned: bool = False) -> None:
        self.client = client
        #: The store created ``client`` (it is not a host's): once closed, its connections are dropped
        #: again after every later round trip (a write's settlement), so none outlives ``aclose()``.
        self.owned = owned
        self.round_trips = 0
        self.on_check: Callable[[list[Reply]], None] | None = None
        #: Set by the store's ``aclose()``: a read cut off by the close is not sent again (a new
        #: connection of the closed client would answer after the close and then stay open).
        self.closed = False
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    async def call(
        self,
        commands: Sequence[Command],
        *,
        deadline: float | None,
        attempt: Attempt | None = None,
        checked: bool = False,
    ) -> list[Reply]:
        """Send ``commands`` in one write and return their replies, error replies included as values.

        ``deadline`` is on the :func:`time.monotonic` clock; past it the
        round trip is cancelled and :class:`TimeoutError` raised. Connection
        problems raise redis-py's ``ConnectionError`` / ``TimeoutError`` /
        ``AuthenticationError``. A write (``attempt`` given) is never sent
        twice; a read whose connection broke before any reply is sent once
        more on a new connection (reads change nothing). ``checked`` says that
        ``commands`` read what :data:`CHECK_COMMANDS` would (the open).
        """
        try:
            return await self._call(commands, deadline, attempt, checked)
        finally:
            if self.closed and self.owned:
                # A round trip after the close (a cut-off write's settlement, which must still fence it)
                # opened a connection of the closed client: drop it rather than leave it open for good.
                with anyio.CancelScope(shield=True):
                    await self.client.connection_pool.disconnect()

    async def _call(
        self, commands: Sequence[Command], deadline: float | None, attempt: Attempt | None, checked: bool
    ) -> list[Reply]:
        from redis.exceptions import ConnectionError as RedisConnectionError

        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        with anyio.fail_after(timeout):
            if attempt is not None:  # a write: sent once, whatever happens
                return await self._roundtrip(commands, attempt, checked)
            progress = Attempt()
            try:
                return await self._roundtrip(commands, progress, checked)
            except RedisConnectionError:
                if self.closed:
                    raise RedisRecallError(
                        "redis recall store: the store was closed while this read was in flight; nothing "
                        "was returned"
                    ) from None
                if progress.replied:
                    raise
                # A read whose pooled connection the server had closed (a restart the event loop has not
                # noticed yet) is sent once more, on a new connection: reading twice changes nothing.
                return await self._roundtrip(commands, Attempt(), checked)

    def _reconnected(self, conn: Any) -> None:
        """redis-py's connect callback: a connection that (re)connected is checked again on its next use."""
        self._checked.discard(conn)

    async def _roundtrip(
        self, commands: Sequence[Command], attempt: Attempt | None, checked: bool
    ) -> list[Reply]:
        # One client span per round trip: the store pipelines below redis-py's instrumented layer,
        # so RedisInstrumentor never sees these. Command names only: keys and arguments may be content.
        names = sorted({_name(c) for c in commands})
        operation = names[0] if len(names) == 1 else "PIPELINE"
        attributes = {
            "db.system.name": "redis",
            "db.operation.name": operation,
            "db.operation.batch.size": len(commands),
            "agentium.redis.commands": ",".join(names),
        }
        with client_span(f"redis {operation}", attributes):
            return await self._roundtrip_once(commands, attempt, checked)

    async def _roundtrip_once(
        self, commands: Sequence[Command], attempt: Attempt | None, checked: bool
    ) -> list[Reply]:
        from redis.exceptions import ResponseError

        pool = self.client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        try:
            await self._fresh(conn)
            check = self.on_check is not None and not checked and conn not in self._checked
            sent = [*CHECK_COMMANDS, *commands] if check else commands
            if attempt is not None:
                attempt.sent = True  # a partly sent write counts as sent: its outcome is unknown
            await conn.send_packed_command(conn.pack_commands(sent), check_health=False)
            replies: list[Reply] = []
            for _ in sent:
                try:
                    replies.append(await conn.read_response(disable_decoding=True))
                except ResponseError as exc:  # read whole: the stream stays in step
                    replies.append(exc)
                if attempt is not None:
                    attempt.replied = True
        except BaseException:
            # The reply stream may be mid-frame: never hand this socket to anyone again.
            with anyio.CancelScope(shield=True):
                await conn.disconnect(nowait=True)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await pool.release(conn)
        self.round_trips += 1
        if check or checked:
            self._checked.add(conn)
        if check:
            head, replies = replies[: len(CHECK_COMMANDS)], replies[len(CHECK_COMMANDS) :]
            assert self.on_check is not None
            self.on_check(head)
        return replies

    async def _fresh(self, conn: Any) -> None:
        """Make sure ``conn`` is live: reconnect it if the server closed it (or it holds stray data)."""
        from redis.exceptions import ConnectionError as RedisConnectionError

        if conn not in self._seen:
            self._seen.add(conn)
            conn.register_connect_callback(self._reconnected)
        try:
            stale = await conn.can_read()  # EOF (the server closed it) or unread bytes: not usable as is
        except (RedisConnectionError, OSError):
            stale = True
        if stale:
            await conn.disconnect()
            await conn.connect()


def _name(command: Command) -> str:
    """A command's name (``EVALSHA``, ``HGET`` …): all a span may say about it."""
    head = command[0] if command else "?"
    text = head.decode("ascii", "replace") if isinstance(head, bytes) else str(head)
    return text.upper()
