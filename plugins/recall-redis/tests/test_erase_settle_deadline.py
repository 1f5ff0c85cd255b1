"""An erase that waits for a cut-off write's settlement is refused by the store, not timed out.

Before it erases, the store waits for the writes it cut off earlier to be
settled in the background (their copies could still land). That wait ended
at the call's deadline, the instant the engine cancels the call: which of
the two the host was told (the store's "still being settled ... erase again
once the server answers", or a bare timeout) depended on the order of two
timers due at once. It now ends a margin before the deadline, as a write's
own settling does.
"""

from __future__ import annotations

import anyio
import pytest
from net_proxy import BlackHoleProxy
from redis_servers import new_prefix

from agentium_harness import EraseTarget
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness.plugin_api import OpContext, SourceOwner
from agentium_recall_redis import (
    RedisRecallConfig,
    RedisRecallError,
    RedisRecallStore,
    RedisRecallTimeoutError,
)

pytestmark = pytest.mark.anyio


async def test_an_erase_waiting_for_a_cut_off_write_is_refused_by_the_store_within_its_deadline(
    proxy: BlackHoleProxy,
) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=5.0))
    target = EraseTarget.session("acme", "ana", "s1")
    try:
        with anyio.fail_after(30):
            await store.health(OpContext.with_timeout(10))  # open: the erase below needs no round trip
            proxy.black_hole()
            try:
                with pytest.raises(RedisRecallTimeoutError, match="settling goes on in the background"):
                    await store.index_document(
                        SourceOwner("acme", "ana", "s1"), "late", "kiwi text", OpContext.with_timeout(0.5)
                    )
                for _ in range(5):  # each a race of two timers before: one round rarely showed it
                    with pytest.raises(RedisRecallError, match="still being settled"):
                        await Ticket(None, "test", 30.0).call(
                            "recall erase", lambda ctx: store.erase(target, ctx), timeout_s=0.1
                        )
            finally:
                proxy.heal()
    finally:
        await store.aclose()
