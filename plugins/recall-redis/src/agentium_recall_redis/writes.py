"""The store's writes: script calls fenced by a token each, pipelined, and settled when a reply is lost.

Each writing script call carries a fresh token key; the script records its
result under the token before it returns. A round trip that may have
reached the server but lost its reply (deadline, cancellation, a broken
connection) is never re-sent: the ``SETTLE`` script reads each token's
outcome and fences every call that has not run, so each call runs at most
once and the caller learns how many did (see
:mod:`agentium_recall_redis.scripts`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Final

import anyio
import attrs
from redis.exceptions import NoScriptError, RedisError, ResponseError

from agentium_harness import OperationCancelledError
from agentium_harness.plugin_api import OpContext

from .errors import RedisRecallError, RedisRecallTimeoutError
from .link import Attempt, Command, Link, Reply, as_text
from .scripts import INDEX, SETTLE, TOKEN_TTL_MS, Script
from .server import Arg, ServerErrors

__all__ = ["CALLS_PER_TRIP", "Writer"]

#: Writing script calls per round trip (each call blocks the server while it runs, so calls stay small;
#: pipelining them keeps bulk indexing fast).
CALLS_PER_TRIP: Final = 16


@attrs.frozen
class Writer:
    """Runs the store's writing scripts on a link, mapping errors with ``errors``.

    ``settle_timeout_s`` bounds settling a round trip that lost its reply.
    """

    errors: ServerErrors
    settle_timeout_s: float

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
        try:
            return await link.call(commands, deadline=ctx.deadline, attempt=attempt)
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
            outcome = await self._settle(link, tokens)
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise  # cancelled: the write is settled (applied once, or fenced); the caller is gone
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
                    "could not be reached to settle it; its outcome is unknown: validate the source, or "
                    "index it again (indexing is idempotent)",
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

    async def _settle(self, link: Link, tokens: Sequence[str]) -> list[str] | None:
        """Each token's outcome (``done:...`` or ``fenced``), fencing what has not run; ``None``: unreachable.

        Shielded from cancellation and bounded by ``settle_timeout_s``.
        """
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.settle_timeout_s):
            try:
                args: tuple[Arg, ...] = (len(tokens), *tokens, TOKEN_TTL_MS)
                [reply] = await link.call([("EVALSHA", SETTLE.sha, *args)], deadline=None)
                if isinstance(reply, NoScriptError):
                    [reply] = await link.call([("EVAL", SETTLE.source, *args)], deadline=None)
                if isinstance(reply, list):
                    return [as_text(v) for v in reply]
            except (RedisError, OSError, TimeoutError):
                return None
        return None
