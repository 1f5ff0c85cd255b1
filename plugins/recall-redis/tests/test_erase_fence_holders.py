"""The erasure fence's holders hash (``<tenant>:efh``) is read whole only up to its cap.

``FENCE`` read the whole hash (``HGETALL``) on every raise and lower, however
many fields it held: an erase's work grew with a hash anyone could grow.
Now it is read only up to :data:`~agentium_recall_redis.erase_fence.HOLDERS_CAP`
holders (one per erase call of the tenant running, or crashed in the last
10 minutes). Past it, a new erase call is refused with nothing changed, and
a call that finds it past the cap as it ends drops its own holder and leaves
its fence to end by itself (a WARNING and a span event): longer, never shorter.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix
from test_erase_races import _raw

import agentium_recall_redis.erase as erase_module
from agentium_harness import Telemetry, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner, runtime_span
from agentium_harness.testing import SpanRecorder
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore
from agentium_recall_redis.erase_fence import FENCE_LEFT_UP, HOLDERS_CAP
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

ANA = SourceOwner("acme", "ana", "s1")
#: An end far in the future (ms since the epoch): a holder still running.
LATER = "99999999999999"


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _holders(count: int, okp: str, ends: str) -> dict[str, str]:
    return {f"{secrets.token_hex(16)} {okp}": ends for _ in range(count)}


async def test_many_holders_under_the_cap_are_all_handled(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """Ended holders are all dropped, and another running holder of the target keeps its fence up."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    await admin.hset(f"{tp}:efh", mapping=_holders(HOLDERS_CAP - 10, "zz/", "1"))  # ended in 1970
    seen: dict[str, Any] = {}
    original = erase_module.abort_stagings

    async def another_erase_of_ana_holds(*args: Any, **kwargs: Any) -> int:
        if not seen:
            [okp] = await admin.hkeys(f"{tp}:ef")
            seen["okp"] = okp.decode()
            other = f"{secrets.token_hex(16)} {seen['okp']}"
            await admin.hset(f"{tp}:efh", other, LATER)
            seen["other"] = other
        return await original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(erase_module, "abort_stagings", another_erase_of_ana_holds)
        with anyio.fail_after(30):
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert report.status is EraseStatus.COMPLETE
    # Every ended holder went; the other call's stayed, and so did its fence.
    assert await admin.hgetall(f"{tp}:efh") == {seen["other"].encode(): LATER.encode()}
    assert await admin.hgetall(f"{tp}:ef") == {seen["okp"].encode(): LATER.encode()}


async def test_a_new_erase_past_the_cap_is_refused_with_nothing_changed(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    await admin.hset(f"{tp}:efh", mapping=_holders(HOLDERS_CAP, "zz/", LATER))
    before = await _raw(admin, store.config.key_prefix)
    assert b":efh=" in before and b":rev=" in before
    with anyio.fail_after(30), pytest.raises(RedisRecallError, match="holders") as caught:
        await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert f"cap is {HOLDERS_CAP}" in str(caught.value) and "nothing was erased" in str(caught.value)
    assert await _raw(admin, store.config.key_prefix) == before


async def test_a_call_ending_past_the_cap_leaves_its_fence_up_and_says_so(
    store: RedisRecallStore, admin: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Holders added during the call pass the cap: its lower finds them running, keeps the fence."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    added = _holders(HOLDERS_CAP + 1, "zz/", LATER)
    seen: dict[str, bytes] = {}
    original = erase_module.abort_stagings

    async def holders_pass_the_cap(*args: Any, **kwargs: Any) -> int:
        if not seen:
            [(okp, ends)] = (await admin.hgetall(f"{tp}:ef")).items()
            seen[okp.decode()] = ends
            await admin.hset(f"{tp}:efh", mapping=added)
        return await original(*args, **kwargs)

    recorder = SpanRecorder()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["x"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=Telemetry(tracer_provider=recorder.provider),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(erase_module, "abort_stagings", holders_pass_the_cap)
        with anyio.fail_after(30), caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
            async with runtime:
                with runtime_span(runtime, "test.erase"):
                    report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert report.status is EraseStatus.COMPLETE
    # Its own holder went, the others stayed, and its fence was not lowered: it ends by itself.
    assert await admin.hgetall(f"{tp}:efh") == {k.encode(): v.encode() for k, v in added.items()}
    [(okp, ends)] = (await admin.hgetall(f"{tp}:ef")).items()
    assert okp.decode() in seen and int(ends) >= int(seen[okp.decode()])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The holders left once its own went (the added ones), every one read by its drop of ended ones:
    # before, the count took in its own dropped holder and the text said the hash was not read.
    [warning] = [m for m in warnings if "left to end by itself" in m]
    assert f"holds {HOLDERS_CAP + 1} other holders" in warning and "every one read" in warning
    assert "not read" not in warning
    events = [
        dict(e.attributes or {}) for s in recorder.finished for e in s.events if e.name == FENCE_LEFT_UP
    ]
    assert events == [{"agentium.holders": HOLDERS_CAP + 1}], events


async def test_a_cap_reached_only_by_ended_holders_frees_itself(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """Before: the cap's worth of crashed calls' holders, all ended, refused every erase of the tenant
    until an operator removed them. Now the raise that finds the hash at its cap drops ended holders
    first (a bounded walk), and the erase completes with none of them left."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    await admin.hset(f"{tp}:efh", mapping=_holders(HOLDERS_CAP, "zz/", "1"))  # all ended in 1970
    with anyio.fail_after(30):
        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
    assert await admin.hlen(f"{tp}:efh") == 0 and await admin.exists(f"{tp}:ef") == 0


async def test_running_holders_at_the_cap_still_refuse_and_only_ended_ones_go(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """Ended holders past the cap go; the cap's worth of running ones still refuse a new call, typed."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    running = _holders(HOLDERS_CAP, "zz/", LATER)
    await admin.hset(f"{tp}:efh", mapping=running | _holders(300, "zz/", "1"))
    before = await _raw(admin, store.config.key_prefix)
    with anyio.fail_after(30), pytest.raises(RedisRecallError, match="running holders") as caught:
        await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert f"cap is {HOLDERS_CAP}" in str(caught.value) and "nothing was erased" in str(caught.value)
    assert "300 ended" in str(caught.value)
    assert await admin.hgetall(f"{tp}:efh") == {k.encode(): v.encode() for k, v in running.items()}
    # Nothing else changed: the row and its words are there, and no fence was raised.
    after = await _raw(admin, store.config.key_prefix)
    assert [line for line in after.split(b"\n") if b":efh=" not in line] == [
        line for line in before.split(b"\n") if b":efh=" not in line
    ]
    assert b"kiwi" in after and await admin.exists(f"{tp}:ef") == 0


async def test_ended_holders_are_dropped_in_bounded_calls(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """Four caps' worth of ended holders (written outside the store): one call reads at most about
    two caps of them, refuses typed and says to erase again; the next frees the cap and completes."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    await admin.hset(f"{tp}:efh", mapping=_holders(4 * HOLDERS_CAP, "zz/", "1"))
    with anyio.fail_after(30), pytest.raises(RedisRecallError, match="erase again") as caught:
        await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert "nothing was erased" in str(caught.value)
    left = await admin.hlen(f"{tp}:efh")
    assert HOLDERS_CAP <= left < 4 * HOLDERS_CAP, left  # some dropped, not all read in one call
    with anyio.fail_after(30):
        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
    assert await admin.hlen(f"{tp}:efh") == 0


async def test_a_small_encoded_hash_past_the_cap_is_dropped_whole_in_its_one_page(
    make_server: Callable[..., ServerProcess],
) -> None:
    """``COUNT`` is a hint: a small-encoded hash (listpack) comes back whole in one ``HSCAN`` page.
    Every holder of that page is handled (none cut off at ``COUNT``) and counted as read: three caps of
    ended holders go in one call, which then completes. A page of more than four caps is not handled (each
    ``HDEL`` walks the listpack: one by one, tens of thousands held the server for seconds): the erase
    is refused, typed, saying why, with nothing changed."""
    big = make_server("--hash-max-ziplist-entries", "100000")
    admin = aioredis.Redis.from_url(big.url)
    store = RedisRecallStore(RedisRecallConfig(url=big.url, key_prefix=new_prefix()))
    try:
        tp = tenant_prefix(store.config.key_prefix, "acme")
        await store.index_document(ANA, "d", "kiwi text", _ctx())
        await admin.hset(f"{tp}:efh", mapping=_holders(3 * HOLDERS_CAP, "zz/", "1"))
        assert await admin.object("encoding", f"{tp}:efh") in (b"listpack", b"ziplist")
        with anyio.fail_after(30):
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert await admin.hlen(f"{tp}:efh") == 0
        # Past four caps in its one page: before, every holder was dropped, one HDEL each, in one script.
        await store.index_document(ANA, "e", "plum text", _ctx())
        await admin.hset(f"{tp}:efh", mapping=_holders(4 * HOLDERS_CAP + 1, "zz/", "1"))
        assert await admin.object("encoding", f"{tp}:efh") in (b"listpack", b"ziplist")
        before = await _raw(admin, store.config.key_prefix)
        with (
            anyio.fail_after(30),
            pytest.raises(RedisRecallError, match="hash-max-listpack-entries") as caught,
        ):
            await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert f"more than {4 * HOLDERS_CAP}" in str(caught.value) and "nothing was erased" in str(
            caught.value
        )
        assert await _raw(admin, store.config.key_prefix) == before  # no holder dropped, nothing erased
    finally:
        await store.aclose()
        await admin.aclose()


async def test_a_raise_again_refused_at_the_cap_says_what_the_call_erased_stays_erased(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """A running call whose own holder ended (the server's clock passed it: a call that outlasted its fence,
    or a clock moved) is a new holder when it raises again: at the cap, refused. That comes after its first
    pass erased rows; before, the refusal said nothing was erased."""
    tp = tenant_prefix(store.config.key_prefix, "acme")
    await store.index_document(ANA, "d", "kiwi text", _ctx())
    original = erase_module.erase_entries
    running = _holders(HOLDERS_CAP, "zz/", LATER)

    async def own_holder_ends_and_the_cap_fills(*args: Any, **kwargs: Any) -> Any:
        erased = await original(*args, **kwargs)
        # Its own holder gone as ended (a clock moved past it), the cap filled by other calls' holders.
        await admin.delete(f"{tp}:efh")
        await admin.hset(f"{tp}:efh", mapping=running)
        return erased

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(erase_module, "erase_entries", own_holder_ends_and_the_cap_fills)
        with anyio.fail_after(30), pytest.raises(RedisRecallError, match="running holders") as caught:
            await store.erase(EraseTarget.user("acme", "ana"), _ctx())
    assert b"kiwi" not in await _raw(admin, store.config.key_prefix)  # the first pass erased the row
    assert "nothing was erased" not in str(caught.value)
    assert "the sources it erased before stay erased" in str(caught.value)
