"""An erase with a staging pending reads the stagings, not every owner the tenant ever had.

An erase gives up its target's stagings (``P:pend`` members ``"<bucket> <row>"``) twice per call. To
tell which buckets are its target's owners', it read the tenant's whole bucket map (``HGETALL
P:bk``, one field per owner) in each: a tenant of a million owners cost a million fields per erase
call while any staging was pending, in calls that held the server. Each new bucket now also writes
its reverse entry (``P:kb``), and buckets made before it are walked once, in bounded ``HSCAN`` pages
that write theirs. The staging here is one a crashed writer left (its lease far off), written with
redis-py as it would be left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

SENTINEL: Final = "agentium-stagings-sentinel"
LEASE: Final = 10**15  # a lease (server ms) that never ends in the test


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _server_commands(server: ServerProcess, action: Callable[[], Awaitable[Any]]) -> list[str]:
    """Every command the server ran while ``action`` ran, those of scripts included (``MONITOR``)."""
    watcher = aioredis.Redis.from_url(server.url)
    poke = aioredis.Redis.from_url(server.url)
    seen: list[str] = []
    try:
        async with watcher.monitor() as monitor:
            await poke.echo(f"{SENTINEL}-start")
            while SENTINEL not in (await monitor.next_command())["command"]:
                pass
            await action()
            await poke.echo(SENTINEL)
            with anyio.fail_after(30):
                while SENTINEL not in (entry := await monitor.next_command())["command"]:
                    seen.append(entry["command"])
    finally:
        await poke.aclose()
        await watcher.aclose()
    return seen


async def _tenant(store: RedisRecallStore, owners: int) -> None:
    await store.index_document(SourceOwner("acme", "ana"), "mine", "qstagedana text", _ctx())
    await store.index_document(SourceOwner("acme", "bob"), "kept", "qstagedbob text", _ctx())
    for i in range(owners):
        await store.index_document(SourceOwner("acme", f"user{i}"), "d", f"qother{i} text", _ctx())


def _bucket_map_reads(commands: list[str]) -> list[str]:
    return [c for c in commands if c.split(" ", 1)[0].upper() in ("HGETALL", "HSCAN") and ":bk" in c]


async def test_an_erase_with_a_staging_pending_reads_the_stagings_not_every_owner(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _tenant(store, 300)
        bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
        assert bob and await admin.zadd(f"{tp}:pend", {f"{bob} 999999": LEASE}) == 1
        reports: list[Any] = []

        async def erase() -> None:
            reports.append(await store.erase(EraseTarget.user("acme", "ana"), _ctx()))

        commands = await _server_commands(server, erase)
        assert reports[0].status is EraseStatus.COMPLETE and reports[0].count("document") == 1
        assert _bucket_map_reads(commands) == []  # before: HGETALL of all 302 owners, twice
        assert await admin.zrange(f"{tp}:pend", 0, -1) == [f"{bob} 999999".encode()]  # bob's: kept
        left = repr(await key_space(admin, tp)).encode()
        assert b"qstagedana" not in left and b"qstagedbob" in left
    finally:
        await store.aclose()


async def test_buckets_made_before_their_reverse_entries_are_walked_once_and_stagings_still_given_up(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # As an older store left the tenant: no reverse map. Ana's staging must still be given up (bob's
    # kept), by a walk of the bucket map that writes the reverse entries, so the next erase needs none.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        await _tenant(store, 30)
        await store.index_document(SourceOwner("acme", "carl"), "c", "qstagedcarl text", _ctx())
        await admin.delete(f"{tp}:kb")
        buckets = {k.decode(): v.decode() for k, v in (await admin.hgetall(f"{tp}:bk")).items()}
        ana, bob = buckets["ana/~/~/~"], buckets["bob/~/~/~"]
        assert await admin.zadd(f"{tp}:pend", {f"{ana} 999998": LEASE, f"{bob} 999999": LEASE}) == 2

        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert await admin.zrange(f"{tp}:pend", 0, -1) == [f"{bob} 999999".encode()]
        reverse = {k.decode(): v.decode() for k, v in (await admin.hgetall(f"{tp}:kb")).items()}
        assert reverse == {b: o for o, b in buckets.items() if o != "ana/~/~/~"}  # ana's went with it

        commands = await _server_commands(
            server, lambda: store.erase(EraseTarget.user("acme", "carl"), _ctx())
        )
        assert _bucket_map_reads(commands) == []
        assert await admin.zrange(f"{tp}:pend", 0, -1) == [f"{bob} 999999".encode()]
        assert b"qstagedcarl" not in repr(await key_space(admin, tp)).encode()
    finally:
        await store.aclose()


async def test_a_restart_between_pages_of_the_bucket_map_walk_never_leaves_a_staging_of_the_target(
    aof_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An HSCAN cursor means something only to the process that made it (the hash function is seeded at
    # random when a server starts). Before: a walk of the bucket map that went on after a restart (each
    # of the erase's two walks here) with the old process's cursor stepped past entries there throughout,
    # and those buckets' stagings stayed, their postings in Redis, while the erase said complete (about a
    # tenth of ana's 300 here). Now a page from another process than the walk's first starts it over.
    from agentium_recall_redis.store import RedisRecallStore as StoreClass

    original = StoreClass._script
    restarts: list[str] = []
    walks: list[int] = []  # pages sent per walk of the bucket map
    armed = [False]

    async def script(self: StoreClass, which: Any, keys: Any, args: Any, *rest: Any) -> Any:
        if armed[0] and which.name == "erase_stagings_scan":
            if str(args[2]) == "0":
                walks.append(0)
            walks[-1] += 1
            # The erase walks the map before its sweep and after: a restart before the first walk's third
            # page, and before the second walk's second (what the first left is what the second reads first).
            if (len(walks), walks[-1]) in ((1, 3), (2, 2)):
                restarts.append(str(args[2]))
                aof_server.stop()
                aof_server.restart()
        return await original(self, which, keys, args, *rest)

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    admin = aioredis.Redis.from_url(aof_server.url)
    monkeypatch.setattr(StoreClass, "_script", script)  # the store binds it when built
    store = RedisRecallStore(RedisRecallConfig(url=aof_server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(SourceOwner("acme", "ana"), "mine", "qstagedana text", _ctx())
            await store.index_document(SourceOwner("acme", "bob"), "kept", "qstagedbob text", _ctx())
            # 300 sessions of ana whose writers crashed after BEGIN (a bucket and a staging each, no row
            # yet), and the buckets of 3,000 other owners: an HSCAN walk of several pages.
            begun = {f"ana/b{i}/~/~": str(2 * 10**6 + i) for i in range(300)}
            pad = {f"pad{i}/~/~/~": str(10**6 + i) for i in range(3000)}
            assert await admin.hset(f"{tp}:bk", mapping=begun | pad) == len(begun) + len(pad)
            await admin.delete(f"{tp}:kb")  # as an older store left the tenant: no reverse map
            bob = f"{(await admin.hget(f'{tp}:bk', 'bob/~/~/~') or b'').decode()} 999999"
            stagings = {f"{b} {900000 + i}": LEASE for i, b in enumerate(begun.values())} | {bob: LEASE}
            assert await admin.zadd(f"{tp}:pend", stagings) == len(begun) + 1
            armed[0] = True
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert len(restarts) == 2, restarts
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        left = await admin.zrange(f"{tp}:pend", 0, -1)
        assert left == [bob.encode()], f"{len(left) - 1} of ana's stagings left"  # every one given up
    finally:
        await store.aclose()
        await admin.aclose()


async def test_a_bucket_map_walk_cut_at_its_page_bound_fails_the_erase_not_leaves_a_staging(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk of the bucket map stops after a bound of pages (10,000: a map of about 10^7 owners). Before:
    # cut there, it gave up the stagings it had met and the erase went on and said complete, the others of
    # the target's left. Now the erase fails (RedisRecallError) and says nothing erased; with the bound
    # enough, the next erase gives every one up. The bound is made 2 pages here, the map 4 or so.
    from agentium_recall_redis import RedisRecallError, erase_stagings

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(SourceOwner("acme", "ana"), "mine", "qstagedana text", _ctx())
            begun = {f"ana/b{i}/~/~": str(2 * 10**6 + i) for i in range(300)}
            pad = {f"pad{i}/~/~/~": str(10**6 + i) for i in range(3000)}
            assert await admin.hset(f"{tp}:bk", mapping=begun | pad) == len(begun) + len(pad)
            await admin.delete(f"{tp}:kb")  # as an older store left the tenant: no reverse map
            stagings = {f"{b} {900000 + i}": LEASE for i, b in enumerate(begun.values())}
            assert await admin.zadd(f"{tp}:pend", stagings) == len(begun)
            monkeypatch.setattr(erase_stagings, "_MAX_PAGES", 2)
            with pytest.raises(RedisRecallError, match="staging"):
                await store.erase(EraseTarget.user("acme", "ana"), _ctx())
            assert b"qstagedana" in repr(await key_space(admin, tp)).encode()  # refused before the sweep
            monkeypatch.setattr(erase_stagings, "_MAX_PAGES", 10_000)
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert await admin.zrange(f"{tp}:pend", 0, -1) == []
    finally:
        await store.aclose()


async def test_a_staging_with_no_bucket_map_to_walk_leaves_the_erase_complete(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    # The bucket map deleted behind the store's back: a staging's bucket then has no owner to check, the
    # walk has no map to read (its page says so at once). The erase of ana's row still completes. The
    # staging, whose bucket no owner holds, is given up: it could never publish (COMMIT refuses a bucket
    # its owner does not hold, tests/test_erase_fence_lapse.py). Before, it stayed, and every erase
    # meeting it walked the map again.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await _tenant(store, 3)
            bob = f"{(await admin.hget(f'{tp}:bk', 'bob/~/~/~') or b'').decode()} 999999"
            assert await admin.zadd(f"{tp}:pend", {bob: LEASE}) == 1
            assert await admin.delete(f"{tp}:bk", f"{tp}:kb") == 2
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert await admin.zrange(f"{tp}:pend", 0, -1) == []
        assert await admin.lrange(f"{tp}:gc", 0, -1) == []  # queued, then collected by the erase
        assert b"qstagedana" not in repr(await key_space(admin, tp)).encode()
    finally:
        await store.aclose()


@pytest.mark.parametrize("damage", ["bucket map entry edited", "bucket counter lowered"])
@pytest.mark.parametrize("size", ["small", "staged"])
async def test_a_write_is_refused_a_bucket_the_reverse_map_gives_another_owner(
    server: ServerProcess, admin: aioredis.Redis, damage: str, size: str
) -> None:
    # An erase trusts P:kb's owner of a staging's bucket once P:bk confirms it, as the bucket's only owner.
    # Damage could file a second owner under that bucket: ana's bucket-map entry edited to bob's bucket, or
    # the bucket counter lowered so a new owner's bucket takes bob's number. Before: the write went on,
    # and that owner's staging in the bucket was left by its own erase, which said complete (before P:kb,
    # the erase read the whole map and gave it up). Now the write is refused (typed), nothing written.
    from agentium_recall_redis import RedisRecallError

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix, max_terms_per_call=64))
    try:
        with anyio.fail_after(30):
            await _tenant(store, 3)
            bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
            assert await admin.hget(f"{tp}:kb", bob) == b"bob/~/~/~"
            if damage == "bucket map entry edited":
                writer = SourceOwner("acme", "ana")
                assert await admin.hset(f"{tp}:bk", "ana/~/~/~", bob) == 0
            else:
                writer = SourceOwner("acme", "carl")
                await admin.set(f"{tp}:nb", str(int(bob) - 1))
            before = repr(await key_space(admin, tp))
            words = 10 if size == "small" else 200  # past max_terms_per_call: BEGIN, STAGE, COMMIT
            text = " ".join(f"qwritten{i}x" for i in range(words))
            with pytest.raises(RedisRecallError, match="bucket"):
                await store.index_document(writer, "new", text, _ctx())
        assert repr(await key_space(admin, tp)) == before  # nothing written
    finally:
        await store.aclose()


async def test_a_small_encoded_bucket_map_comes_back_whole_and_its_one_page_is_all_handled(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # COUNT is a hint: a small-encoded map (listpack, at most the server's hash-max-listpack-entries
    # owners, 128 by default) comes back whole in one HSCAN page however small COUNT is. Made COUNT 1 and a
    # bound of 1 page here: the walk still ends in its one page, every staging of ana's 40 buckets given
    # up and every reverse entry written, none of the page's entries cut off at COUNT.
    from agentium_recall_redis import erase_stagings

    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await _tenant(store, 0)
            ana = {f"ana/b{i}/~/~": str(2 * 10**6 + i) for i in range(40)}
            assert await admin.hset(f"{tp}:bk", mapping=ana) == len(ana)
            await admin.delete(f"{tp}:kb")  # as an older store left the tenant: no reverse map
            assert await admin.object("encoding", f"{tp}:bk") in (b"listpack", b"ziplist")
            bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
            stagings = {f"{b} {900000 + i}": LEASE for i, b in enumerate(ana.values())}
            assert await admin.zadd(f"{tp}:pend", stagings | {f"{bob} 999999": LEASE}) == len(ana) + 1
            monkeypatch.setattr(erase_stagings, "_SCAN_COUNT", 1)
            monkeypatch.setattr(erase_stagings, "_MAX_PAGES", 1)
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
        assert await admin.zrange(f"{tp}:pend", 0, -1) == [f"{bob} 999999".encode()]
        assert await admin.hlen(f"{tp}:kb") == await admin.hlen(f"{tp}:bk")  # every reverse entry
    finally:
        await store.aclose()
