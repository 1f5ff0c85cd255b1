"""An erase refused for unfinished background work says which; a stopped loop does not block it for good.

Found by an adversarial review. Before it erases, the store waits for its
background work (``Settlements.wait``) and refuses while any is left. The
refusal always said "a write cut off earlier is still being settled", also
when what was left was cleanup (a staging given up, garbage collected); and
then cleanup stopped being waited for at all (it writes no words, and the
erase gives up stagings and collects garbage itself: waiting for it refused
erasure under steady traffic). A settlement whose event loop had stopped
(not closed: a host that ran a request's loop and kept it) could never
finish, so every later erase waited its whole bound and was refused, for
good, saying it was still being settled. Now such a settlement counts as
unsettled only until its bound (``settle_timeout_s`` after its write was cut
off, when a running one gives up too): an erase waiting past it goes ahead,
and one whose deadline ends its wait first is refused, saying why.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from net_proxy import BlackHoleProxy
from redis_servers import ServerProcess, new_prefix

from agentium_harness import EraseTarget
from agentium_harness.plugin_api import EraseStatus, OpContext, SourceOwner, count_items
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.settlements import Pending

pytestmark = pytest.mark.anyio

TARGET = EraseTarget.session("acme", "ana", "s1")


async def test_an_erase_does_not_wait_for_background_cleanup(server: ServerProcess) -> None:
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), settle_timeout_s=2.0))
    try:
        owner = SourceOwner("acme", "ana", "s1")
        await store.index_document(owner, "kept", "apple", OpContext.with_timeout(10))
        # Background cleanup (not a write's settlement; of no tenant in particular) still running when the
        # erase looks. It was waited for and refused the erase (first saying "still being settled", then
        # "cleanup"): cleanup writes no words, and the erase gives up stagings and collects garbage itself.
        release = asyncio.Event()
        store._writer.settlements.start(release.wait())
        began = time.monotonic()
        report = await store.erase(TARGET, OpContext.with_timeout(10))
        assert time.monotonic() - began < 1.0  # not its wait's bound (settle_timeout_s, 2 s)
        assert report.status is EraseStatus.COMPLETE and report.counts == count_items(document=1)
    finally:
        release.set()  # the close waits for cleanup: let it end
        await store.aclose()


async def test_a_refusal_for_cleanup_says_cleanup_not_settling() -> None:
    # What Settlements.wait reports for cleanup (an erase no longer waits for it, aclose does).
    text = Pending(cleanup=1).reason()
    assert "cleanup" in text
    assert "still being settled" not in text  # was the only reason it ever gave


async def test_a_refusal_for_a_stranded_settlement_does_not_say_the_risk_ends_at_its_bound() -> None:
    text = Pending(stranded=1).reason()
    # It said "(until settle_timeout_s after the write was cut off)", as if the write could not land
    # later: only the erase's counting of it ends then.
    assert "waited for until settle_timeout_s" in text and "may land even later" in text, text


def _cut_off_in_a_loop_that_stops(
    store: RedisRecallStore, proxy: BlackHoleProxy
) -> asyncio.AbstractEventLoop:
    """In a loop of another thread, cut off a write in the black hole; the loop then stops, not closed."""
    loop = asyncio.new_event_loop()

    async def request() -> None:
        await store.health(OpContext.with_timeout(10))
        proxy.black_hole()
        write = asyncio.ensure_future(
            store.index_document(SourceOwner("acme", "ana", "s1"), "late", "kiwi", OpContext.with_timeout(10))
        )
        await asyncio.sleep(0.2)  # sent, its reply held in the black hole
        write.cancel()  # its settlement goes on in this loop's background
        with pytest.raises(asyncio.CancelledError):
            await write

    thread = threading.Thread(target=loop.run_until_complete, args=(request(),), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    return loop


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Run the stopped loop's leftovers out (cancelled) and close it, on a thread of its own."""

    def close() -> None:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.close()

    thread = threading.Thread(target=close)
    thread.start()
    thread.join(10)


async def test_a_settlement_on_a_stopped_loop_refuses_an_erase_saying_so_until_its_bound(
    proxy: BlackHoleProxy,
) -> None:
    settle_s = 0.9
    store = RedisRecallStore(
        RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=settle_s)
    )
    loop = _cut_off_in_a_loop_that_stops(store, proxy)
    cut_off = time.monotonic()
    try:
        proxy.heal()
        await store.health(OpContext.with_timeout(10))  # this loop's own connection is fine
        # An erase whose deadline ends its wait before the settlement's bound (a longer wait outlasts
        # the bound, and the erase goes ahead, as when a running settlement gave up by then).
        with pytest.raises(RedisRecallError) as refused:
            await store.erase(TARGET, OpContext.with_timeout(0.3))
        text = str(refused.value)
        assert "event loop" in text and "stopped or closed" in text, text
        assert "still being settled" not in text
        await asyncio.sleep(max(0.0, cut_off + settle_s - time.monotonic()) + 0.05)
        report = await store.erase(TARGET, OpContext.with_timeout(10))  # was refused for good
        assert report.status is EraseStatus.COMPLETE
    finally:
        proxy.heal()
        _finish(loop)
        await store.aclose()
