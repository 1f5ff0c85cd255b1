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
from collections.abc import Sequence
from typing import Any, Final

import anyio
import attrs
from redis.asyncio import Redis
from redis.exceptions import ResponseError

__all__ = ["Attempt", "Link", "Reply", "ServerReport", "as_text", "config_value"]

#: A reply as read with decoding off: bytes, an int, a list, a dict (RESP3 maps), None, or the error reply.
Reply = Any

#: A command: its name and arguments.
Command = Sequence[str | bytes | int | float]

#: Oldest server version the store accepts (``ZRANGE ... REV``/``BYSCORE`` arrived in 6.2).
MIN_VERSION: Final = (6, 2)


@attrs.define
class Attempt:
    """Records whether a round trip's commands may have reached the server (set just before sending)."""

    sent: bool = False


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
    """What the store learnt about its server when it connected: flavour, version and durability.

    ``appendonly`` is ``"yes"``, ``"no"`` or ``"unknown"`` (``CONFIG`` is
    disabled or not allowed for this user); ``appendfsync`` is ``"always"``,
    ``"everysec"``, ``"no"`` or ``"unknown"``.
    """

    flavour: str
    version: str
    appendonly: str
    appendfsync: str

    @property
    def durable(self) -> bool | None:
        """True when every acknowledged write is fsynced before the reply; ``None`` when unknown."""
        if self.appendonly == "unknown":
            return None
        return self.appendonly == "yes" and self.appendfsync == "always"

    def describe(self) -> str:
        """One line: the server and what its persistence promises for acknowledged writes."""
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


class Link:
    """Round trips to one server through a ``redis.asyncio.Redis`` client's connection pool.

    ``round_trips`` counts the round trips made (one per :meth:`call`), for
    tests and benchmarks. The link never closes the client: the store decides
    whether it owns it.
    """

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.round_trips = 0

    async def call(
        self, commands: Sequence[Command], *, deadline: float | None, attempt: Attempt | None = None
    ) -> list[Reply]:
        """Send ``commands`` in one write and return their replies, error replies included as values.

        ``deadline`` is on the :func:`time.monotonic` clock; past it the
        round trip is cancelled and :class:`TimeoutError` raised. Connection
        problems raise redis-py's ``ConnectionError`` / ``TimeoutError`` /
        ``AuthenticationError``; nothing is retried.
        """
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        with anyio.fail_after(timeout):
            return await self._roundtrip(commands, attempt)

    async def _roundtrip(self, commands: Sequence[Command], attempt: Attempt | None) -> list[Reply]:
        pool = self.client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        try:
            if attempt is not None:
                attempt.sent = True  # a partly sent write counts as sent: its outcome is unknown
            await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            replies: list[Reply] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response(disable_decoding=True))
                except ResponseError as exc:  # read whole: the stream stays in step
                    replies.append(exc)
        except BaseException:
            # The reply stream may be mid-frame: never hand this socket to anyone again.
            with anyio.CancelScope(shield=True):
                await conn.disconnect(nowait=True)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await pool.release(conn)
        self.round_trips += 1
        return replies
