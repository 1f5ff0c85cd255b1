"""The store's writes: script calls fenced by a token each, pipelined, and settled when a reply is lost.

Each writing script call carries a fresh token key; the script records its
result under the token before it returns. A round trip that may have
reached the server but lost its reply (deadline, cancellation, a broken
connection) is never re-sent: the ``SETTLE`` script reads each token's
outcome and fences every call that has not run, so each call runs at most
once and the caller learns how many did (see
:mod:`agentium_recall_redis.scripts`).

Deadlines hold, settling included. A write with a deadline keeps part of
its remaining time to settle it (:func:`settle_window`: a quarter, but at
least half a second or, under a second left, half; never more than
``settle_timeout_s``) and spends the rest on the round trip itself, so a
definite answer (applied, or fenced) usually arrives by the deadline. A
settlement that cannot finish by then (a network black hole) reports the
outcome unknown and goes on in the background for up to
``settle_timeout_s``, so a copy still in flight is fenced as soon as the
server can be reached. A cancelled write returns at once: its settlement
runs in the background. :meth:`Settlements.drain` (called by the store's
``aclose()``) waits for those, at most ``settle_timeout_s``. A lost reply,
settled or not, is logged at WARNING and is a :data:`REPLY_LOST` span event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio
import attrs

from agentium_harness import OperationCancelledError
from agentium_harness.plugin_api import OpContext, before_cancel, current_span_event

from .errors import RedisRecallError, RedisRecallTimeoutError
from .link import Attempt, Command, Link, Reply, as_text
from .scripts import ABORT, BEGIN, COLLECT, COMMIT, INDEX, LEASE_MS, SETTLE, STAGE, TOKEN_TTL_MS, Script
from .server import Arg, ServerErrors
from .settlements import Settlements
from .sources import Source, chunk_calls, flat_terms

__all__ = [
    "CALLS_PER_TRIP",
    "MAX_COLLECT_CALLS",
    "REPLY_LOST",
    "SETTLE_FLOOR_S",
    "SETTLE_SHARE",
    "Call",
    "Settlements",
    "Writer",
    "Written",
    "settle_window",
]

#: Writes whose outcome had to be settled (WARNING); the same logger as the store's.
logger = logging.getLogger("agentium.plugins.recall_redis")

#: Writing script calls per round trip (each call blocks the server while it runs, so calls stay small;
#: pipelining them keeps bulk indexing fast).
CALLS_PER_TRIP: Final = 16

#: The share of a write's remaining time kept to settle it if its reply is lost (at most settle_timeout_s).
SETTLE_SHARE: Final = 0.25

#: The least time kept to settle a write (or half its remaining time, if less; at most settle_timeout_s):
#: a quarter of a 1 s write left 0.2 s for a new connection and a script, which a loaded machine
#: passed, so a lost reply ended "unknown" where it could have been settled. Writes with 2 s or more
#: left keep their quarter: this only moves time from sending to settling when little is left, and a
#: write whose reply was only slow still gets a definite answer (applied if it ran, else fenced).
SETTLE_FLOOR_S: Final = 0.5


def settle_window(remaining_s: float, settle_timeout_s: float) -> float:
    """How much of a write's ``remaining_s`` is kept to settle it should its reply be lost.

    :data:`SETTLE_SHARE` of it, but at least :data:`SETTLE_FLOOR_S` or
    half of it, whichever is less, and never more than ``settle_timeout_s``.
    The round trip gets the rest: at least half the time, three quarters from 2 s on.
    """
    floor = min(SETTLE_FLOOR_S, remaining_s / 2)
    return min(settle_timeout_s, max(SETTLE_SHARE * remaining_s, floor))


#: Span event of a write that lost its reply (next to its WARNING), on the span current in the call
#: (the engine's adapter-call span): ``agentium.settled``, ``agentium.calls`` and, once settled,
#: ``agentium.applied`` (how many of the calls had run; the rest are fenced). No content.
REPLY_LOST: Final = "agentium.recall.redis_write_reply_lost"


def _interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` stops the event loop itself (Ctrl-C, an exit) rather than cancelling one task."""
    return not isinstance(exc, Exception | asyncio.CancelledError)


#: A writing script call: the script and its arguments after the tenant prefix and the token's ttl.
Call = tuple[Script, Sequence[Arg]]

#: What a write's settlement that finished in the background hands on: each call's token value, or
#: ``None`` when the server could not be reached.
Later = Callable[[list[str] | None], Awaitable[None]]

#: Most ``COLLECT`` calls one background collection makes before it leaves the rest to later writes.
MAX_COLLECT_CALLS: Final = 1024


@attrs.frozen
class Written:
    """What a run of writing calls returned: each call's result, and the garbage still queued after it."""

    results: list[str]
    backlog: int


@attrs.frozen
class Writer:
    """Runs the store's writing scripts on a link, mapping errors with ``errors``.

    ``settle_timeout_s`` bounds settling a round trip that lost its reply;
    settlements that outlive their write, abandoned stagings and garbage
    collection run in ``settlements``. ``room`` is ``max_terms_per_call``:
    the most postings one call adds (and removes).
    """

    errors: ServerErrors
    settle_timeout_s: float
    room: int
    settlements: Settlements = attrs.field(factory=Settlements)
    _collecting: set[str] = attrs.field(factory=set)

    async def index(
        self, link: Link, prefix: str, sources: Sequence[Source], ctx: OpContext, operation: str
    ) -> int:
        """Index ``sources``; how many were new. Small ones go in ``INDEX`` batches, large ones staged.

        A source with at most ``room`` terms goes in a batch with others (at
        most ``room`` terms per call); a larger one is staged over several
        calls and published by one (:meth:`_staged`).
        """
        small = [s for s in sources if len(s.terms) <= self.room]
        fresh = 0
        if small:
            calls: list[Call] = [(INDEX, call) for call in chunk_calls(small, self.room)]
            owners = frozenset(s.okey for s in small)
            written = await self.write(link, prefix, calls, ctx, operation, owners=owners)
            fresh += sum(int(r) for r in written.results)
            self.collect_later(link, prefix, written.backlog)
        for source in sources:
            if len(source.terms) > self.room:
                fresh += await self._staged(link, prefix, source, ctx, operation)
        return fresh

    async def _staged(self, link: Link, prefix: str, source: Source, ctx: OpContext, operation: str) -> int:
        """Stage a source of more than ``room`` terms slice by slice, then publish it in one call.

        ``BEGIN`` (its own round trip: it names the staged row), then the
        ``STAGE`` calls and ``COMMIT`` pipelined. Readers see the old
        version until ``COMMIT`` and the new one after it. If anything
        fails before ``COMMIT`` ran, the staging is given up in the
        background (``ABORT``); its postings are collected as garbage.
        """
        room = self.room
        slices = [source.terms[i : i + room] for i in range(0, len(source.terms), room)]
        first = slices[0]
        begin: Call = (
            BEGIN,
            [LEASE_MS, source.sid, source.revision, source.okey, len(first), *flat_terms(first)],
        )

        async def begun(outcome: list[str] | None) -> None:
            # BEGIN lost its reply and was settled in the background: if it ran, give its staging up now
            # rather than when its lease runs out.
            value = outcome[0].removeprefix("done:") if outcome and outcome[0].startswith("done:") else ""
            if value and value != "same":
                await self._abort(link, prefix, value)

        owners = frozenset({source.okey})
        [member] = (
            await self.write(link, prefix, [begin], ctx, operation, settled_later=begun, owners=owners)
        ).results
        if member == "same":
            return 0
        commit: Call = (COMMIT, [room, member, len(source.terms), *source.row()])
        calls: list[Call] = [(STAGE, [member, len(s), *flat_terms(s)]) for s in slices[1:]]
        published = False
        try:
            written = await self.write(link, prefix, [*calls, commit], ctx, operation, owners=owners)
            outcome = written.results[-1]
            if outcome == "short":  # a slice retried after NOSCRIPT ran after the commit: commit again
                written = await self.write(link, prefix, [commit], ctx, operation, owners=owners)
                outcome = written.results[-1]
            published = outcome in {"0", "1"}
        finally:
            if not published:
                self.settlements.start(self._abort(link, prefix, member), scope=prefix)
        self.collect_later(link, prefix, written.backlog)
        if outcome == "gone":
            raise RedisRecallError(
                f"{operation}: the staging of a large source was given up, nothing was written: it took "
                f"longer than its lease ({LEASE_MS // 1000} s), or an erasure of its owner ran meanwhile. "
                "Index it again"
            )
        return int(outcome)

    async def _abort(self, link: Link, prefix: str, member: str) -> None:
        """Give up a staged row (idempotent) within ``settle_timeout_s``; a failure leaves it to its lease."""
        from redis.exceptions import NoScriptError, RedisError

        command: Command = ("EVALSHA", ABORT.sha, 1, f"{prefix}:pend", prefix, member)
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            [reply] = await link.call([command], deadline=time.monotonic() + self.settle_timeout_s)
            if isinstance(reply, NoScriptError):
                await link.call([("EVAL", ABORT.source, *command[2:])], deadline=time.monotonic() + 1.0)
            self.collect_later(link, prefix, 1)

    def collect_later(self, link: Link, prefix: str, backlog: int) -> None:
        """Collect a tenant's queued garbage in the background, one bounded call at a time."""
        if backlog > 0 and prefix not in self._collecting:
            self.settlements.start(self._collect(link, prefix), scope=prefix)

    async def _collect(self, link: Link, prefix: str) -> None:
        # Garbage has no row, so readers never see it; collecting it frees memory and keeps document
        # frequencies exact. Each call removes at most `room` postings; a failure leaves the rest to later
        # writes, which collect with the room they have left.
        from redis.exceptions import NoScriptError, RedisError

        # Claimed here, by the collection itself, not when it was started: one whose loop closed before
        # its first step never runs its `finally`, and the tenant's claim was then never released (no
        # background collection for it again). Two started before either ran: the second ends here.
        if prefix in self._collecting:
            return
        self._collecting.add(prefix)
        try:
            command: Command = ("EVALSHA", COLLECT.sha, 1, f"{prefix}:gc", prefix, self.room)
            for _ in range(MAX_COLLECT_CALLS):
                deadline = time.monotonic() + self.settle_timeout_s
                [reply] = await link.call([command], deadline=deadline)
                if isinstance(reply, NoScriptError):
                    [reply] = await link.call([("EVAL", COLLECT.source, *command[2:])], deadline=deadline)
                if not isinstance(reply, int) or reply <= 0:
                    return
        except (RedisError, OSError, TimeoutError):
            return
        finally:
            self._collecting.discard(prefix)

    async def write(
        self,
        link: Link,
        prefix: str,
        calls: Sequence[Call],
        ctx: OpContext,
        operation: str,
        *,
        settled_later: Later | None = None,
        owners: frozenset[str] | None = None,
    ) -> Written:
        """Run writing script calls (each with a fresh token), up to 16 per round trip, in order.

        A round trip that may have reached the server but lost its reply
        (deadline, cancellation, a broken connection) is settled, never
        re-sent: see :meth:`_send_write`. When its settlement finishes in
        the background, ``settled_later`` gets the round trip's outcome.
        ``owners``: the owner keys of every source the calls write, or
        owner-key prefixes (an erase's calls: its target), or ``None``, so an
        erase of other owners does not wait for the settlement
        (:class:`Settlements`).
        """
        from redis.exceptions import NoScriptError

        results: list[str] = []
        backlog = 0
        for start in range(0, len(calls), CALLS_PER_TRIP):
            batch = calls[start : start + CALLS_PER_TRIP]
            tokens = [f"{prefix}:w:{secrets.token_hex(16)}" for _ in batch]
            keys = [[f"{prefix}:ids", token] for token in tokens]
            args = [[prefix, TOKEN_TTL_MS, *call] for _, call in batch]
            commands: list[Command] = [
                ("EVALSHA", script.sha, 2, *k, *a)
                for (script, _), k, a in zip(batch, keys, args, strict=True)
            ]
            replies = await self._send_write(
                link,
                (prefix, owners),
                commands,
                tokens,
                ctx,
                operation,
                done=len(results),
                later=settled_later,
            )
            # NOSCRIPT means the script never ran: sending it again with its body is safe.
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                retry: list[Command] = [("EVAL", batch[i][0].source, 2, *keys[i], *args[i]) for i in again]
                for i, reply in zip(
                    again,
                    await self._send_write(
                        link,
                        (prefix, owners),
                        retry,
                        [tokens[i] for i in again],
                        ctx,
                        operation,
                        done=len(results),
                        later=settled_later,
                    ),
                    strict=True,
                ):
                    replies[i] = reply
            for reply in replies:
                result, more = self._write_result(reply, operation)
                results.append(result)
                # A call settled by re-reading its token did not say what garbage it left: look.
                backlog = more if more is not None else max(backlog, 1)
        return Written(results, backlog)

    def _write_result(self, reply: Reply, operation: str) -> tuple[str, int | None]:
        """A call's result, and the garbage backlog it reported (``None``: settled, so not reported)."""
        from redis.exceptions import ResponseError

        if isinstance(reply, ResponseError):
            self.errors.refused(reply, operation)
        if isinstance(reply, str):  # settled: the token's value
            return reply.removeprefix("done:"), None
        status, value = as_text(reply[0]), as_text(reply[1])
        if status == "ok":  # scripts that can leave garbage report the backlog third
            return value, int(reply[2]) if len(reply) > 2 and isinstance(reply[2], int) else 0
        if value.startswith("done:"):
            return value.removeprefix("done:"), None
        raise RedisRecallError(f"{operation}: the write was fenced before it ran; nothing was written")

    async def _send_write(
        self,
        link: Link,
        scope: tuple[str, frozenset[str] | None],
        commands: list[Command],
        tokens: list[str],
        ctx: OpContext,
        operation: str,
        *,
        done: int,
        later: Later | None = None,
    ) -> list[Reply]:
        from redis.exceptions import RedisError

        ctx.raise_if_expired(operation)
        attempt = Attempt()
        deadline = ctx.deadline
        if deadline is not None:  # keep part of the time to settle the write if its reply is lost
            remaining = max(0.0, deadline - time.monotonic())
            send_by: float | None = deadline - settle_window(remaining, self.settle_timeout_s)
        else:
            send_by = None
        try:
            return await link.call(commands, deadline=send_by, attempt=attempt)
        except BaseException as exc:
            if not attempt.sent:
                if isinstance(exc, TimeoutError):
                    raise self._not_sent(operation, deadline) from None
                if isinstance(exc, RedisError | OSError):
                    self.errors.fail(exc, operation)
                raise
            if isinstance(exc, anyio.get_cancelled_exc_class()) or not isinstance(exc, Exception):
                # The caller is gone and must not wait: settle (apply once, or fence) in the background.
                # An interrupt or an exit too: settled here, it was swallowed (the write's outcome
                # returned or raised instead), so Ctrl-C during a write was lost.
                self._settle_later(link, scope, tokens, later)
                self._unknown_at_cancel(operation, len(tokens), interrupted=_interrupt(exc))
                raise
            now = time.monotonic()
            settle_by = (
                now + self.settle_timeout_s
                if deadline is None
                else now + min(before_cancel(deadline - now), self.settle_timeout_s)
            )
            try:
                outcome = await self._settle(link, tokens, settle_by)
            except BaseException as stop:
                if isinstance(stop, Exception):  # not a cancellation, an interrupt or an exit
                    raise
                self._settle_later(link, scope, tokens, later)
                self._unknown_at_cancel(operation, len(tokens), interrupted=_interrupt(stop))
                raise
            if outcome is None:  # not settled by the deadline: fence it as soon as the server answers
                self._settle_later(link, scope, tokens, later)
            if outcome is not None and all(v.startswith("done:") for v in outcome):
                self._settled(operation, outcome)  # a lost reply all the same: said, as when fenced
                return list(outcome)  # it ran, exactly once: report it as the success it was
            why = (
                "its deadline passed"
                if isinstance(exc, TimeoutError)
                else self.errors.scrub(f"{type(exc).__name__}: {exc}")
            )
            if outcome is None:
                logger.warning(
                    "%s: the write lost its reply and could not be settled by its deadline; "
                    "its outcome is unknown (settling goes on in the background)",
                    operation,
                    extra={"agentium_operation": operation},
                )
                current_span_event(REPLY_LOST, {"agentium.settled": False, "agentium.calls": len(tokens)})
                raise RedisRecallTimeoutError(
                    f"{operation}: the write lost its reply ({why}) and the server at {self.errors.where} "
                    "could not be reached to settle it by its deadline; its outcome is unknown (settling "
                    f"goes on in the background for up to settle_timeout_s, {self.settle_timeout_s} s): "
                    "validate the source, or index it again (indexing is idempotent)",
                    None,
                ) from None
            applied = self._settled(operation, outcome)
            earlier = f"; {done} earlier chunk(s) of this call were written" if done else ""
            raise RedisRecallTimeoutError(
                f"{operation}: the write lost its reply ({why}); settled by re-reading: {applied} of "
                f"{len(outcome)} script call(s) had run, the rest are fenced and will never run{earlier}. "
                "Index again to complete it (indexing is idempotent)",
                False,
            ) from None

    def _not_sent(self, operation: str, deadline: float | None) -> OperationCancelledError:
        """A write not sent by the time it may send in: refused, nothing written (said as it is)."""
        left = None if deadline is None else deadline - time.monotonic()
        why = (
            "its deadline passed before anything was sent"
            if left is None or left <= 0
            # Refused up to half its time early (settle_window): "its deadline passed" was untrue.
            else f"it could not be sent in time to settle it should its reply be lost ({left:.2f} s of its "
            "time was left, kept for settling)"
        )
        return OperationCancelledError(f"{operation} refused: {why}; nothing was written", "deadline passed")

    def _settled(self, operation: str, outcome: Sequence[str]) -> int:
        """A lost reply settled by re-reading (applied or fenced): a WARNING and event; how many had run."""
        applied = sum(v.startswith("done:") for v in outcome)
        logger.warning(
            "%s: the write lost its reply; settled: %d of %d script call(s) had run, the rest are fenced",
            operation,
            applied,
            len(outcome),
            extra={"agentium_operation": operation, "agentium_applied": applied},
        )
        settled = {"agentium.settled": True, "agentium.applied": applied, "agentium.calls": len(outcome)}
        current_span_event(REPLY_LOST, settled)
        return applied

    def _unknown_at_cancel(self, operation: str, calls: int, *, interrupted: bool) -> None:
        """A sent write whose caller was cancelled (deadline, shutdown): unknown, so a WARNING and event.

        Its settlement goes on only while its event loop runs: an interrupt
        (Ctrl-C raised in the loop) stops the loop, and ``asyncio.run`` ending
        (as after Ctrl-C, which it turns into a cancellation) cancels it, so
        the WARNING does not promise it; :meth:`_settle_then` says if it was
        cancelled before it finished.
        """
        goes_on = (
            "an interrupt stops the event loop: settling goes on in the background only if the loop runs "
            "again"
            if interrupted
            else "settling goes on in the background while the event loop runs; a WARNING says so if it is "
            "cancelled first"
        )
        logger.warning(
            "%s: the write lost its reply and could not be settled before the call was cancelled; "
            "its outcome is unknown (%s)",
            operation,
            goes_on,
            extra={"agentium_operation": operation},
        )
        current_span_event(REPLY_LOST, {"agentium.settled": False, "agentium.calls": calls})

    def _settle_later(
        self, link: Link, scope: tuple[str, frozenset[str] | None], tokens: Sequence[str], later: Later | None
    ) -> None:
        # Scoped to the tenant the tokens (and the write's keys) are under, and the owners of the sources
        # it writes if known: only an erase of those waits for it.
        prefix, owners = scope
        settles_by = time.monotonic() + self.settle_timeout_s
        work = self._settle_then(link, tokens, later, settles_by)
        self.settlements.start(work, settles_by=settles_by, scope=prefix, owners=owners)

    async def _settle_then(
        self, link: Link, tokens: Sequence[str], later: Later | None, settles_by: float
    ) -> None:
        try:
            outcome = await self._settle(link, tokens, settles_by)
        except asyncio.CancelledError:
            # Its loop is shutting down (asyncio.run ending, as after Ctrl-C) or the store closed: the
            # WARNING given when the write returned said settling goes on; say that it did not.
            logger.warning(
                "recall: the background settlement of a cut-off write was cancelled before it finished (its "
                "event loop shut down, or the store closed); the write's outcome stays unknown",
            )
            raise
        if later is not None:
            await later(outcome)

    async def _settle(self, link: Link, tokens: Sequence[str], deadline: float) -> list[str] | None:
        """Each token's outcome (``done:...`` or ``fenced``), fencing what has not run; ``None``: unreachable.

        Bounded by ``deadline`` (on the :func:`time.monotonic` clock). Not
        shielded: a cancelled caller hands its settlement to the background
        instead of waiting for it.
        """
        from redis.exceptions import NoScriptError, RedisError

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
