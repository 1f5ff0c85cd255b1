"""An erase waits only for the settlements of cut-off writes of its own tenant and target's owners.

Found by review. An erase waited for every settlement the store had running
(and every cleanup task), so one other tenant's write cut off in a network
black hole made each erase of any tenant wait its whole bound and be
refused: under steady multi-tenant traffic, erasure kept failing. A
settlement's tokens (and every key its scripts touch) are its tenant's, so
another tenant's cannot write into what an erase removes: the erase no
longer waits for it. Nor, for a user's or session's erase, for a write of
another owner of the tenant (one its erasure fence does not refuse either).
Its own tenant's (owner's) still refuses it, as before.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
from net_proxy import BlackHoleProxy
from redis_servers import new_prefix

from agentium_harness import EraseTarget
from agentium_harness.plugin_api import (
    EmbeddingModel,
    EraseStatus,
    OpContext,
    SourceOwner,
    SourceVector,
    Vector,
    count_items,
)
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.errors import RedisRecallTimeoutError
from agentium_recall_redis.writes import Settlements, Writer

pytestmark = pytest.mark.anyio

KEPT = SourceOwner("acme", "ana", "s1")


@pytest.fixture
def request_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop running on a thread of its own, as another request's; stopped and closed afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)

    async def unwind() -> None:
        for task in asyncio.all_tasks(loop) - {asyncio.current_task()}:
            task.cancel()
        await asyncio.sleep(0.1)

    loop.run_until_complete(unwind())  # stopped: run here, its leftovers cancelled
    loop.close()


def _stuck_settlement(
    store: RedisRecallStore,
    proxy: BlackHoleProxy,
    loop: asyncio.AbstractEventLoop,
    cut_off: SourceOwner,
    *,
    vector: bool = False,
) -> None:
    """On ``loop`` (which keeps running): index acme's document, then cut off a write of ``cut_off``.

    The write (a document's, or with ``vector`` the vector of a document of ``cut_off`` indexed
    first) goes into a black hole and is cancelled; its settlement keeps waiting on a connection
    held in the hole (up to ``settle_timeout_s``), while new connections flow again.
    """

    async def request() -> None:
        await store.index_document(KEPT, "kept", "apple", OpContext.with_timeout(10))
        if vector:
            ref = await store.index_document(cut_off, "late", "kiwi", OpContext.with_timeout(10))
            axis = Vector.normalized(EmbeddingModel("test-axes", 2), [1.0, 0.0])
        proxy.black_hole()
        late: Awaitable[object] = (
            store.index_vectors([SourceVector(ref, axis)], OpContext.with_timeout(10))
            if vector
            else store.index_document(cut_off, "late", "kiwi", OpContext.with_timeout(10))
        )
        write = asyncio.ensure_future(late)
        await asyncio.sleep(0.2)  # sent, its reply held in the black hole
        accepted = proxy.accepted
        write.cancel()  # its settlement goes on in this loop's background
        with pytest.raises(asyncio.CancelledError):
            await write
        # The settlement's connection is open, and held in the hole, before the hole is narrowed
        # to the connections open now: waited for, not a fixed pause a loaded machine may outlast.
        for _ in range(300):
            if proxy.accepted > accepted:
                break
            await asyncio.sleep(0.01)
        assert proxy.accepted > accepted, "the settlement opened no connection of its own"
        await asyncio.sleep(0.05)

    asyncio.run_coroutine_threadsafe(request(), loop).result(10)
    proxy.freeze_existing()  # the settlement's connection stays in the hole; the erase's flows


def _store(proxy: BlackHoleProxy) -> RedisRecallStore:
    # A settlement that stays stuck well past each test (its bound is when it would give up).
    return RedisRecallStore(RedisRecallConfig(url=proxy.url, key_prefix=new_prefix(), settle_timeout_s=5.0))


# Each was refused, after waiting until just before its deadline: another tenant's, or another
# user's, settlement was still being settled (a vector write's was started without its owners).
OTHERS = [
    pytest.param(SourceOwner("globex", "bo", "s9"), EraseTarget.tenant("acme"), False, id="tenant"),
    pytest.param(SourceOwner("acme", "cy", "s2"), EraseTarget.user("acme", "ana"), False, id="user"),
    pytest.param(SourceOwner("acme", "cy", "s2"), EraseTarget.user("acme", "ana"), True, id="user-vector"),
]
OWN = [
    pytest.param(SourceOwner("acme", "cy", "s2"), EraseTarget.tenant("acme"), False, id="tenant"),
    pytest.param(
        SourceOwner("acme", "ana", "s1", "proj"),
        EraseTarget.session("acme", "ana", "s1"),
        False,
        id="session",
    ),
    pytest.param(SourceOwner("acme", "ana", "s2"), EraseTarget.user("acme", "ana"), True, id="user-vector"),
]


@pytest.mark.parametrize(("cut_off", "target", "vector"), OTHERS)
async def test_another_owners_stuck_settlement_neither_delays_nor_refuses_an_erase(
    proxy: BlackHoleProxy,
    request_loop: asyncio.AbstractEventLoop,
    cut_off: SourceOwner,
    target: EraseTarget,
    vector: bool,
) -> None:
    store = _store(proxy)
    try:
        _stuck_settlement(store, proxy, request_loop, cut_off, vector=vector)
        began = time.monotonic()
        report = await store.erase(target, OpContext.with_timeout(2))
        assert time.monotonic() - began < 1.5  # under its wait's bound (1.6 s), loaded or not
        assert report.status is EraseStatus.COMPLETE
        assert report.counts == count_items(document=1)
    finally:
        proxy.heal()
        await store.aclose()


@pytest.mark.parametrize(("cut_off", "target", "vector"), OWN)
async def test_the_erased_owners_own_stuck_settlement_still_refuses_the_erase(
    proxy: BlackHoleProxy,
    request_loop: asyncio.AbstractEventLoop,
    cut_off: SourceOwner,
    target: EraseTarget,
    vector: bool,
) -> None:
    store = _store(proxy)
    try:
        _stuck_settlement(store, proxy, request_loop, cut_off, vector=vector)
        with pytest.raises(RedisRecallError) as refused:
            await store.erase(target, OpContext.with_timeout(0.6))
        text = str(refused.value)
        assert "still being settled" in text and "nothing was erased" in text, text
    finally:
        proxy.heal()
        await store.aclose()


async def test_a_cut_off_erases_own_late_call_refuses_erases_of_its_target_only(
    proxy: BlackHoleProxy, request_loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user's erase cut off by its deadline with its ERASE call in a black hole: that call's settlement
    # was started without owners, so every other user's erase of the tenant waited for it and was refused.
    store = _store(proxy)
    original, holed = Writer.write, []

    async def write(self_: Writer, *args: Any, **kwargs: Any) -> Any:
        if args[4] == "recall erase" and not holed:  # the erase's first ERASE call: into the hole
            holed.append(True)
            proxy.black_hole()
        return await original(self_, *args, **kwargs)

    monkeypatch.setattr(Writer, "write", write)

    async def cut_off_erase() -> None:
        await store.index_document(KEPT, "kept", "apple", OpContext.with_timeout(10))
        await store.index_document(
            SourceOwner("acme", "cy", "s2"), "theirs", "kiwi", OpContext.with_timeout(10)
        )
        accepted = proxy.accepted
        with pytest.raises(RedisRecallTimeoutError, match="outcome is unknown"):
            await store.erase(EraseTarget.user("acme", "ana"), OpContext.with_timeout(0.6))
        # New connections held in the hole: the erase's own settling, then the background settlement's
        # and (unless its time was up) its fence's lowering, both started before the erase raised.
        for _ in range(50):
            if proxy.accepted >= accepted + 3:
                break
            await asyncio.sleep(0.01)
        assert proxy.accepted >= accepted + 2, "the settlement opened no connection of its own"
        await asyncio.sleep(0.05)

    try:
        asyncio.run_coroutine_threadsafe(cut_off_erase(), request_loop).result(10)
        proxy.freeze_existing()
        began = time.monotonic()
        report = await store.erase(EraseTarget.user("acme", "cy"), OpContext.with_timeout(2))
        assert time.monotonic() - began < 1.5  # was refused at its wait's bound (1.6 s)
        assert report.status is EraseStatus.COMPLETE and report.counts == count_items(document=1)
        for own in (EraseTarget.user("acme", "ana"), EraseTarget.session("acme", "ana", "s1")):
            with pytest.raises(RedisRecallError, match="still being settled"):  # its own target: as before
                await store.erase(own, OpContext.with_timeout(0.3))
    finally:
        proxy.heal()
        await store.aclose()


async def test_a_wait_of_one_owner_prefix_counts_its_owners_and_unknown_ones_only() -> None:
    settlements = Settlements()
    bound = time.monotonic() + 5
    settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{a}", owners=frozenset({"cy/s1/~/~"}))
    settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{a}", owners=frozenset({"ana/s10/~/~"}))
    try:
        assert not await settlements.wait(0.05, scope="p:{a}", under="ana/s1/")  # s10 is not s1
        assert (await settlements.wait(0.05, scope="p:{a}", under="ana/")).settling == 1
        assert (await settlements.wait(0.0, scope="p:{a}")).settling == 2  # a tenant's erase: every owner
        settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{a}")  # owners unknown
        assert (await settlements.wait(0.05, scope="p:{a}", under="ana/s1/")).settling == 1
    finally:
        await settlements.drain(0.0)


async def test_an_erases_own_call_counts_for_erases_of_targets_nested_with_its_own_only() -> None:
    settlements = Settlements()
    bound = time.monotonic() + 5
    settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{a}", owners=frozenset({"ana/"}))
    try:
        assert not await settlements.wait(0.0, scope="p:{a}", under="cy/")  # another user's erase
        assert not await settlements.wait(0.0, scope="p:{a}", under="an/")  # a prefix of the name only
        for under in ("", "ana/", "ana/s1/", "ana/s1/~/~"):  # the tenant, the user, a session, its groups
            assert (await settlements.wait(0.0, scope="p:{a}", under=under)).settling == 1, under
    finally:
        await settlements.drain(0.0)


async def test_a_wait_of_one_tenant_counts_its_own_and_unscoped_work_only() -> None:
    settlements = Settlements()
    bound = time.monotonic() + 5
    settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{b}")
    settlements.start(asyncio.sleep(5), scope="p:{a}")  # cleanup of the erased tenant
    try:
        began = time.monotonic()
        assert not await settlements.wait(1.0, scope="p:{a}", cleanup=False)
        assert time.monotonic() - began < 0.5  # another tenant's settlement and cleanup: not waited for
        settlements.start(asyncio.sleep(5), settles_by=bound, scope="p:{a}")
        settlements.start(asyncio.sleep(5), settles_by=bound)  # no scope: every tenant's erase waits
        pending = await settlements.wait(0.05, scope="p:{a}", cleanup=False)
        assert (pending.settling, pending.stranded, pending.cleanup) == (2, 0, 0)
        everything = await settlements.wait(0.0)
        assert (everything.settling, everything.cleanup) == (3, 1)
        assert "cleanup" in everything.reason()
    finally:
        await settlements.drain(0.0)


async def test_a_settlement_dropped_with_its_closed_loop_counts_for_its_own_tenant_only() -> None:
    settlements = Settlements()
    bound = time.monotonic() + 5
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        settlements.start(asyncio.sleep(60), settles_by=bound, scope="p:{b}")

    def run() -> None:
        loop.run_until_complete(begin())
        loop.close()  # its settlement never ran to its end: dropped, its bound kept (stranded)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert not await settlements.wait(0.05, scope="p:{a}", cleanup=False)
    pending = await settlements.wait(0.05, scope="p:{b}", cleanup=False)
    assert (pending.stranded, pending.settling) == (1, 0)
