"""Ctrl-C under ``asyncio.run`` while a cut-off write settles: the WARNINGs say what happened.

Found by an adversarial review. A write whose caller is cancelled logs that
its outcome is unknown and "settling goes on in the background". Ctrl-C
under ``asyncio.run`` cancels the main task (so the write), then tears the
loop down, cancelling the settlement too: that WARNING was untrue and
nothing said otherwise. Now the first WARNING says settling goes on while
the event loop runs, and the settlement, once cancelled, says so.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest
from net_proxy import BlackHoleProxy
from redis_servers import new_prefix

from agentium_harness.plugin_api import OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore


def test_ctrl_c_during_a_cut_off_write_says_its_settlement_was_cancelled(
    proxy: BlackHoleProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # asyncio.run turns SIGINT into a cancellation of its main task only on the main thread, as pytest runs.
    store = RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=5.0))

    async def request() -> None:
        await store.health(OpContext.with_timeout(10))
        proxy.black_hole()
        # Ctrl-C once the write is sent and waits for its reply in the black hole.
        asyncio.get_running_loop().call_later(0.2, signal.raise_signal, signal.SIGINT)
        await store.index_document(
            SourceOwner("acme", "ana", "s1"), "late", "kiwi", OpContext.with_timeout(10)
        )

    try:
        with caplog.at_level(logging.WARNING, "agentium.plugins.recall_redis"):
            with pytest.raises(KeyboardInterrupt):
                asyncio.run(request())
    finally:
        proxy.heal()
        asyncio.run(store.aclose())
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.plugins.recall_redis"]
    assert any("could not be settled before the call was cancelled" in m for m in said), said
    assert not any(m.endswith("(settling goes on in the background)") for m in said), said
    assert any("settlement of a cut-off write was cancelled before it finished" in m for m in said), said
