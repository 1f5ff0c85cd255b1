"""One erase call's erasure fence (``FENCE``, :mod:`.erase_scripts`): raised, kept up, lowered.

The fence ends by itself :data:`FENCE_MS` after its last raise, by the
server's clock (``TIME`` in the script, so clients' clocks never compare),
so a call that crashed leaves its owners' writes refused no longer than
that. A call that runs longer keeps it up: :meth:`FenceHold.renew` runs
between its round trips (each page of its scan and sweep, each ``ERASE``
batch, each ``COLLECT``) and raises it again once :data:`RENEW_S` have
passed on this process's monotonic clock since the last raise, long before
the server's end. Before, a call raised it twice (at its start and before
its sweep): one spending over 10 minutes after either left the owners'
writes unfenced for the rest of the call.

The holders hash (``<tenant>:efh``, one field per erase call of the tenant
running now or crashed within :data:`FENCE_MS`) is read whole by ``FENCE``
only up to :data:`HOLDERS_CAP` holders. A call that finds it at the cap (a
new holder) or past it first drops ended holders, reading at most about
twice the cap of them per call (none from a page of more than four times the
cap, which only a small-encoded hash written outside the store makes: each
``HDEL`` walks it): a cap reached by crashed calls' holders frees itself
(before, an operator had to remove them). Still at the cap, a new
holder is refused (``RedisRecallError`` saying whether every holder was read:
all running, or erase again to drop more; nothing erased), and a call
lowering its fence drops its own holder and leaves the fence to end by itself
(a WARNING and the span event :data:`FENCE_LEFT_UP`): never shorter than it
should hold, only longer.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

from agentium_harness.plugin_api import OpContext, current_span_event

from .erase_scripts import FENCE, FENCE_HOLDERS_CAPPED, FENCE_REFUSED
from .errors import RedisRecallError
from .link import Reply
from .lua import Script

if TYPE_CHECKING:
    from .server import Arg

__all__ = ["FENCE_LEFT_UP", "FENCE_MS", "HOLDERS_CAP", "RENEW_S", "FenceHold"]

logger = logging.getLogger("agentium.plugins.recall_redis")

#: How long an erasure fence holds (ms, server time) after its last raise unless lowered.
FENCE_MS: Final = 600_000
#: Seconds (this process's monotonic clock) after which a running call raises its fence again: a quarter
#: of its life, so a round trip up to three quarters of it long still finds the fence up.
RENEW_S: Final = FENCE_MS / 1000 / 4
#: The most holders ``FENCE`` reads (``HGETALL`` of ``<tenant>:efh``, in the script). A holder is one erase
#: call of the tenant running now, or one that crashed less than :data:`FENCE_MS` ago (dropped by the next
#: raise or lower): 1,000 is far more erase calls of one tenant at once than a host runs; a hash past it was
#: written outside the store.
HOLDERS_CAP: Final = 1000
#: How ``FENCE``'s drop of ended holders read the hash (its reply's last element): every holder, about
#: twice the cap of them (it stopped), or none, a page of more than :data:`_PAGE_MOST` holders coming back
#: (a small-encoded hash, whole in one page, written outside the store): each ``HDEL`` walks such a
#: hash, so dropping its holders one by one would hold the server for seconds.
_READ_SOME: Final = 0
_READ_ALL: Final = 1
_PAGE_TOO_LARGE: Final = 2
_PAGE_MOST: Final = 4 * HOLDERS_CAP
#: The span event of a lower that found the holders hash past :data:`HOLDERS_CAP` (attribute
#: ``agentium.holders``: the holders left once its own went): the fence was left to end by itself.
FENCE_LEFT_UP: Final = "agentium.recall.erase_fence_left_up"
#: The clock :meth:`FenceHold.renew` reads (a module global, so tests can stand in for elapsed time).
_clock: Callable[[], float] = time.monotonic

ScriptCall = Callable[[Script, Sequence[str], Sequence["Arg"], OpContext, str], Awaitable[Reply]]


class FenceHold:
    """One erase call's fence over an owner-key prefix, held under a fresh random call id.

    Another call's fence of the same owners is another holder: lowering this one never lowers it.
    """

    def __init__(self, script: ScriptCall, prefix: str, owner_prefix: str) -> None:
        self._script = script
        self._keys = [f"{prefix}:ef", f"{prefix}:efh"]
        self._owner_prefix = owner_prefix
        self._call = secrets.token_hex(16)
        self._raised_at: float | None = None

    async def hold(self, ctx: OpContext) -> None:
        """Raise the fence (or raise it again): it holds :data:`FENCE_MS` from the server's now."""
        started = _clock()  # before the round trip: the server's end is at least FENCE_MS past this
        await self._send(FENCE_MS, ctx)
        self._raised_at = started

    async def renew(self, ctx: OpContext) -> None:
        """Raise the fence again when :data:`RENEW_S` have passed since its last raise (else nothing)."""
        if self._raised_at is not None and _clock() - self._raised_at >= RENEW_S:
            await self.hold(ctx)

    async def lower(self, ctx: OpContext) -> None:
        """Drop this call's holder: the fence stays up while another call of the same owners holds it."""
        self._raised_at = None
        await self._send(0, ctx)

    async def _send(self, hold_ms: int, ctx: OpContext) -> None:
        args: list[Arg] = [self._owner_prefix, hold_ms, self._call, HOLDERS_CAP]
        reply = await self._script(FENCE, self._keys, args, ctx, "recall erase")
        if reply == 1:
            return
        outcome, holders, dropped, read = _capped(reply)
        # A refused raise again (its own holder gone) comes after the call erased what it did: before, the
        # refusal said nothing was erased then too.
        done = "nothing was erased"
        if self._raised_at is not None:
            done = (
                "this call's own holder had ended by the server's clock (the call outlasted its fence, or "
                "the clock moved), so raising it again was refused: the call stopped, and the sources it "
                "erased before stay erased, the rest not"
            )
        if outcome == FENCE_REFUSED:
            if read == _READ_ALL:
                raise RedisRecallError(
                    "recall erase: the tenant's erasure-fence holders hash (<tenant>:efh) holds "
                    f"{holders} running holders, the store's cap is {HOLDERS_CAP} ({dropped} ended ones "
                    "were dropped): it holds one per erase call of the tenant running now, so that many "
                    f"erasures run at once or it was written outside the store; {done}. Erase again once "
                    "some end (each ends at most 10 minutes after its last raise)"
                )
            if read == _PAGE_TOO_LARGE:
                raise RedisRecallError(
                    "recall erase: the tenant's erasure-fence holders hash (<tenant>:efh) holds "
                    f"{holders} holders, the store's cap is {HOLDERS_CAP}, and comes back whole in one "
                    f"HSCAN page of more than {_PAGE_MOST} (a small-encoded hash: the server's "
                    "hash-max-listpack-entries is set above that), which the store never writes, so it was "
                    "written outside the store; its ended holders were not dropped (one by one, that would "
                    f"hold the server for seconds); {done}. Remove the holders whose value (a server time "
                    "in ms) has passed, then erase again"
                )
            raise RedisRecallError(
                "recall erase: the tenant's erasure-fence holders hash (<tenant>:efh) holds "
                f"{holders} holders, the store's cap is {HOLDERS_CAP}: this call dropped {dropped} ended "
                f"ones and reads at most about {2 * HOLDERS_CAP} per call, so it was written outside the "
                f"store; {done}: erase again to drop more"
            )
        # The holders left (this call's own dropped) and what the call's drop of ended ones read: before,
        # the count included the holder the call had just dropped, and the text said the hash was not
        # read, though the drop had read it (all of it, when every one was read).
        seen = {
            _READ_ALL: "every one read, each still running",
            _PAGE_TOO_LARGE: f"none read: it comes back whole in one HSCAN page of more than {_PAGE_MOST}",
        }.get(read, f"about {2 * HOLDERS_CAP} of them read")
        logger.warning(
            "redis recall store: an erase call's fence was left to end by itself (within %d s): the "
            "tenant's erasure-fence holders hash holds %d other holders, past the store's cap of %d "
            "(%s; %d ended ones dropped); writes of the erased owners stay refused until then",
            FENCE_MS // 1000,
            holders,
            HOLDERS_CAP,
            seen,
            dropped,
        )
        current_span_event(FENCE_LEFT_UP, {"agentium.holders": holders})


def _capped(reply: Reply) -> tuple[int, int, int, int]:
    """``FENCE``'s {outcome, holders, ended ones dropped, how they were read} reply at the cap.

    How: :data:`_READ_ALL`, :data:`_READ_SOME` (stopped at about twice the cap) or :data:`_PAGE_TOO_LARGE`.

    ``RedisRecallError`` for anything else.
    """
    if (
        isinstance(reply, list)
        and len(reply) == 4
        and reply[0] in (FENCE_REFUSED, FENCE_HOLDERS_CAPPED)
        and all(isinstance(part, int) for part in reply[1:])
        and reply[3] in (_READ_SOME, _READ_ALL, _PAGE_TOO_LARGE)
    ):
        return int(reply[0]), int(reply[1]), int(reply[2]), int(reply[3])
    raise RedisRecallError(
        "recall erase: the erasure fence's script answered in a form it never sends (the server or its "
        "scripts were changed)"
    )
