"""The store's writes: script calls fenced by a token each, pipelined, and settled when a reply is lost.

Each writing script call carries a fresh token key; the script records its
result under the token before it returns. A round trip that may have
reached the server but lost its reply (deadline, cancellation, a broken
connection) is never re-sent: the ``SETTLE`` script reads each token's
outcome and fences every call that has not run, so each call runs at most
once and the caller learns how many did (see
:mod:`agentium_recall_redis.scripts`).

Deadlines hold, settling included. A write with a deadline spends at most
three quarters of its remaining time (and never more than all but
``settle_timeout_s``) on the round trip itself and keeps the rest to settle
it, so a definite answer (applied, or fenced) usually arrives by the
deadline. A settlement that cannot finish by then (a network black hole)
reports the outcome unknown and goes on in the background for up to
``settle_timeout_s``, so a copy still in flight is fenced as soon as the
server can be reached. A cancelled write returns at once: its settlement
runs in the background. :meth:`Settlements.drain` (called by the store's
``aclose()``) waits for those, at most ``settle_timeout_s``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Final

import anyio
import attrs
from redis.exceptions import NoScriptError, RedisError, ResponseError

from agentium_harness import OperationCancelledError
from agentium_harness.plugin_api import OpContext

from .errors import RedisRecallError, RedisRecallTimeoutError
from .link import Attempt, Command, Link, Reply, as_text
from .scripts import INDEX, SETTLE, TOKEN_TTL_MS, Script
from .server import Arg, ServerErrors

__all__ = ["CALLS_PER_TRIP", "SETTLE_SHARE", "Settlements", "Writer"]

#: Writing script calls per round trip (each call blocks the server while it runs, so calls stay small;
#: pipelining them keeps bulk indexing fast).
CALLS_PER_TRIP: Final = 16

#: The share of a write's remaining time kept to settle it if its reply is lost (at most settle_timeout_s).
SETTLE_SHARE: Final = 0.25


class Settlements:
    """Settlements that go on after their write returned (cancelled, or unsettled by its deadline).

    Each is an asyncio task bounded by its own deadline; :meth:`drain`
    waits for the ones still running, at most ``within_s`` seconds, and
    cancels the rest.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, settle: Coroutine[Any, Any, Any]) -> None:
        """Run ``settle`` in the background (a task of the running loop), tracked until it ends."""
        task = asyncio.get_running_loop().create_task(settle)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, within_s: float) -> None:
        """Wait at most ``within_s`` seconds for the running settlements; cancel what is left."""
        tasks = set(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=within_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)


@attrs.frozen
class Writer:
    """Runs the store's writing scripts on a link, mapping errors with ``errors``.

    ``settle_timeout_s`` bounds settling a round trip that lost its reply;
    settlements that outlive their write run in ``settlements``.
    """

    errors: ServerErrors
    settle_timeout_s: float
    settlements: Settlements = attrs.field(factory=Settlements)

    async def write(
        self,
        link: Link,
        prefix: str,
        calls: Sequence[Sequence[Arg]],
        ctx: OpContext,
        operation: str,
        *,
        script: Script = INDEX,
    ) -> list[str]:
        """Run writing script calls (each with a fresh token), up to 16 per round trip; their results.

        A round trip that may have reached the server but lost its reply
        (deadline, cancellation, a broken connection) is settled, never
        re-sent: see :meth:`_settle`.
        """
        results: list[str] = []
        for start in range(0, len(calls), CALLS_PER_TRIP):
            batch = calls[start : start + CALLS_PER_TRIP]
            tokens = [f"{prefix}:w:{secrets.token_hex(16)}" for _ in batch]
            keys = [[f"{prefix}:ids", token] for token in tokens]
            args = [[prefix, TOKEN_TTL_MS, *call] for call in batch]
            commands: list[Command] = [
                ("EVALSHA", script.sha, 2, *k, *a) for k, a in zip(keys, args, strict=True)
            ]
            replies = await self._send_write(link, commands, tokens, ctx, operation, done=len(results))
            # NOSCRIPT means the script never ran: sending it again with its body is safe.
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                retry: list[Command] = [("EVAL", script.source, 2, *keys[i], *args[i]) for i in again]
                for i, reply in zip(
                    again,
                    await self._send_write(
                        link, retry, [tokens[i] for i in again], ctx, operation, done=len(results)
                    ),
                    strict=True,
                ):
                    replies[i] = reply
            for reply in replies:
                results.append(self._write_result(reply, operation))
        return results

    def _write_result(self, reply: Reply, operation: str) -> str:
        if isinstance(reply, ResponseError):
            self.errors.refused(reply, operation)
        if isinstance(reply, str):  # settled: the token's value
            return reply.removeprefix("done:")
        status, value = as_text(reply[0]), as_text(reply[1])
        if status == "ok":
            return value
        if value.startswith("done:"):
            return value.removeprefix("done:")
        raise RedisRecallError(f"{operation}: the write was fenced before it ran; nothing was written")

    async def _send_write(
        self,
        link: Link,
        commands: list[Command],
        tokens: list[str],
        ctx: OpContext,
        operation: str,
        *,
        done: int,
    ) -> list[Reply]:
        ctx.raise_if_expired(operation)
        attempt = Attempt()
        deadline = ctx.deadline
        if deadline is not None:  # keep part of the time to settle the write if its reply is lost
            remaining = max(0.0, deadline - time.monotonic())
            send_by: float | None = deadline - min(self.settle_timeout_s, SETTLE_SHARE * remaining)
        else:
            send_by = None
        try:
            return await link.call(commands, deadline=send_by, attempt=attempt)
        except BaseException as exc:
            if not attempt.sent:
                if isinstance(exc, TimeoutError):
                    raise OperationCancelledError(
                        f"{operation} refused: its deadline passed before anything was sent; "
                        "nothing was written",
                        "deadline passed",
                    ) from None
                if isinstance(exc, RedisError | OSError):
                    self.errors.fail(exc, operation)
                raise
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                # The caller is gone and must not wait: settle (apply once, or fence) in the background.
                self._settle_later(link, tokens)
                raise
            now = time.monotonic()
            settle_by = (
                now + self.settle_timeout_s
                if deadline is None
                else min(deadline, now + self.settle_timeout_s)
            )
            try:
                outcome = await self._settle(link, tokens, settle_by)
            except anyio.get_cancelled_exc_class():
                self._settle_later(link, tokens)
                raise
            if outcome is None:  # not settled by the deadline: fence it as soon as the server answers
                self._settle_later(link, tokens)
            if outcome is not None and all(v.startswith("done:") for v in outcome):
                return list(outcome)  # it ran, exactly once: report it as the success it was
            why = (
                "its deadline passed"
                if isinstance(exc, TimeoutError)
                else self.errors.scrub(f"{type(exc).__name__}: {exc}")
            )
            if outcome is None:
                raise RedisRecallTimeoutError(
                    f"{operation}: the write lost its reply ({why}) and the server at {self.errors.where} "
                    "could not be reached to settle it by its deadline; its outcome is unknown (settling "
                    f"goes on in the background for up to settle_timeout_s, {self.settle_timeout_s} s): "
                    "validate the source, or index it again (indexing is idempotent)",
                    None,
                ) from None
            applied = sum(v.startswith("done:") for v in outcome)
            earlier = f"; {done} earlier chunk(s) of this call were written" if done else ""
            raise RedisRecallTimeoutError(
                f"{operation}: the write lost its reply ({why}); settled by re-reading: {applied} of "
                f"{len(outcome)} script call(s) had run, the rest are fenced and will never run{earlier}. "
                "Index again to complete it (indexing is idempotent)",
                False,
            ) from None

    def _settle_later(self, link: Link, tokens: Sequence[str]) -> None:
        self.settlements.start(self._settle(link, tokens, time.monotonic() + self.settle_timeout_s))

    async def _settle(self, link: Link, tokens: Sequence[str], deadline: float) -> list[str] | None:
        """Each token's outcome (``done:...`` or ``fenced``), fencing what has not run; ``None``: unreachable.

        Bounded by ``deadline`` (on the :func:`time.monotonic` clock). Not
        shielded: a cancelled caller hands its settlement to the background
        instead of waiting for it.
        """
        args: tuple[Arg, ...] = (len(tokens), *tokens, TOKEN_TTL_MS)
        try:
            [reply] = await link.call([("EVALSHA", SETTLE.sha, *args)], deadline=deadline)
            if isinstance(reply, NoScriptError):
                [reply] = await link.call([("EVAL", SETTLE.source, *args)], deadline=deadline)
        except (RedisError, OSError, TimeoutError):
            return None
        if isinstance(reply, list):
            return [as_text(v) for v in reply]
        return None
