"""An erase reads the tenant's stagings in bounded pages, however many are pending.

An erase gives up its target's stagings (``P:pend`` members ``"<bucket> <row>"``) before it lists
anything and after its sweep. It read them with ``ZRANGE P:pend 0 -1``: every pending staging of the
whole tenant in one reply, inside a script that held the server while it ran, so an erase's cost grew
with the tenant's stagings without bound. Now it reads them in pages of at most ``PEND_PAGE`` members,
each going on from the (score, member) place the last one ended at, so a staging present for the whole
walk is found whatever is added or removed meanwhile. The stagings here are ones crashed writers left
(a bucket and a lease each, no row), written with redis-py as ``BEGIN`` leaves them.
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
from agentium_recall_redis.erase_stagings import PEND_PAGE

pytestmark = pytest.mark.anyio

SENTINEL: Final = "agentium-paged-stagings-sentinel"
LEASE: Final = 10**15  # a lease (server ms) that never ends in the test
#: Commands that read P:pend one member or one number at a time (or write it).
_POINT: Final = {"ZSCORE", "ZRANK", "ZCOUNT", "ZCARD", "ZREM", "ZADD", "TYPE", "EXISTS"}


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _server_commands(server: ServerProcess, action: Callable[[], Awaitable[Any]]) -> list[list[str]]:
    """Every command the server ran while ``action`` ran, those of scripts included (``MONITOR``), split."""
    watcher = aioredis.Redis.from_url(server.url)
    poke = aioredis.Redis.from_url(server.url)
    seen: list[list[str]] = []
    try:
        async with watcher.monitor() as monitor:
            await poke.echo(f"{SENTINEL}-start")
            while SENTINEL not in (await monitor.next_command())["command"]:
                pass
            await action()
            await poke.echo(SENTINEL)
            with anyio.fail_after(30):
                while SENTINEL not in (entry := await monitor.next_command())["command"]:
                    seen.append(entry["command"].split(" "))
    finally:
        await poke.aclose()
        await watcher.aclose()
    return seen


def _pend_reads(commands: list[list[str]], tp: str) -> list[tuple[str, int | None]]:
    """Each command on ``<tp>:pend`` with the most members it can return (None: no bound)."""
    out: list[tuple[str, int | None]] = []
    for words in commands:
        if len(words) < 2 or words[1] != f"{tp}:pend":
            continue
        name = words[0].upper()
        if name in _POINT:
            out.append((name, 1))
        elif name == "ZRANGE" and len(words) >= 4 and words[2].isdigit() and words[3].isdigit():
            out.append((" ".join(words[:4]), int(words[3]) - int(words[2]) + 1))
        elif name.startswith("ZRANGEBY") and "LIMIT" in words[:-2]:  # the reaper's (lua.py): LIMIT 0 16
            at = words.index("LIMIT")
            out.append((" ".join(words[: at + 3]), int(words[at + 2])))
        else:  # a range by score or lex, a scan, a negative index ("0 -1": to the end)
            out.append((" ".join(words[:6]), None))
    return out


async def _begun(admin: aioredis.Redis, tp: str, owners: dict[str, str], reverse: bool) -> None:
    """Buckets as crashed ``BEGIN`` calls left them: the bucket map (and its reverse entries)."""
    assert await admin.hset(f"{tp}:bk", mapping=owners) == len(owners)
    if reverse:
        assert await admin.hset(f"{tp}:kb", mapping={b: o for o, b in owners.items()}) == len(owners)


@pytest.mark.parametrize("reverse", [True, False], ids=["reverse map", "no reverse map"])
async def test_an_erase_reads_many_stagings_in_bounded_pages_and_gives_up_every_one_of_the_target(
    server: ServerProcess, admin: aioredis.Redis, reverse: bool
) -> None:
    # 1,300 stagings of ana (over two pages; 600 of them at one score, so pages go on inside a score)
    # and 700 of bob. Before: one ZRANGE P:pend 0 -1 read all 2,000 in each walk, and again in the ERASE
    # call removing ana's row. Without the reverse map (an older store's buckets) the bucket map is walked
    # too, and the stagings still read in pages.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(SourceOwner("acme", "ana"), "mine", "qstagedana text", _ctx())
            await store.index_document(SourceOwner("acme", "bob"), "kept", "qstagedbob text", _ctx())
            bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
            ana_row = (await admin.hget(f"{tp}:bk", "ana/~/~/~") or b"").decode()
            ana = {f"ana/s{i}/~/~": str(2 * 10**6 + i) for i in range(5)}
            await _begun(admin, tp, ana, reverse)
            if not reverse:
                await admin.delete(f"{tp}:kb")
            buckets = sorted(ana.values())
            ana_stagings = {
                f"{buckets[i % 5]} {10**6 + i}": LEASE if i < 600 else LEASE - i for i in range(1300)
            }
            bob_stagings = {f"{bob} {3 * 10**6 + i}": LEASE - 2 * i for i in range(700)}
            assert await admin.zadd(f"{tp}:pend", ana_stagings | bob_stagings) == 2000
            reports: list[Any] = []

            async def erase() -> None:
                reports.append(await store.erase(EraseTarget.user("acme", "ana"), _ctx()))

            commands = await _server_commands(server, erase)
        assert reports[0].status is EraseStatus.COMPLETE and reports[0].count("document") == 1
        # The bucket ana's row left empty went with its owner key (no staging writes into it).
        assert await admin.hget(f"{tp}:bk", "ana/~/~/~") is None
        assert await admin.hget(f"{tp}:bn", ana_row) is None and await admin.hget(f"{tp}:kb", ana_row) is None
        assert b"qstagedana" not in repr(await key_space(admin, tp)).encode()
        reads = _pend_reads(commands, tp)
        assert any(name.startswith("ZRANGE") for name, _ in reads)  # the stagings were read
        unbounded = [(name, most) for name, most in reads if most is None or most > PEND_PAGE]
        assert unbounded == [], unbounded[:3]
        left = {m.decode() for m in await admin.zrange(f"{tp}:pend", 0, -1)}
        assert left == set(bob_stagings), f"{len(left & set(ana_stagings))} of ana's stagings left"
        # Given up, not dropped: each one's postings queued for collection (collected by the erase).
        assert await admin.llen(f"{tp}:gc") == 0
    finally:
        await store.aclose()


@pytest.mark.parametrize("reverse", [True, False], ids=["reverse map", "no reverse map"])
async def test_stagings_added_and_removed_between_pages_never_hide_one_present_throughout(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, reverse: bool
) -> None:
    # Between pages of the walk, other owners' stagings come (BEGIN) and go (COMMIT, ABORT, a lease
    # reaped), at scores before the place the walk goes on from, at it and after it; the member the
    # place names goes too. Every staging of ana present throughout is given up all the same, every
    # one of bob's is left, and the erase completes.
    from agentium_recall_redis.store import RedisRecallStore as StoreClass

    original = StoreClass._script
    places: list[bytes] = []
    added: set[str] = set()
    removed: set[str] = set()
    starts: list[int] = []  # ana's stagings left when each walk starts (the erase walks twice)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    admin_pend = f"{tp}:pend"
    buckets: list[str] = []

    async def script(self: StoreClass, which: Any, keys: Any, args: Any, *rest: Any) -> Any:
        if which.name == "erase_stagings" and not args[2]:
            members = await admin.zrange(admin_pend, 0, -1)
            starts.append(sum(m.decode().split(" ")[0] in buckets for m in members))
        elif which.name == "erase_stagings" and args[2]:
            place = bytes(args[2])
            places.append(place)
            score, member = place.decode().split(" ", 1)
            # The member the place names, and bob's on either side of it, go; new ones of bob come at
            # the place's score (members sorting before and after it) and at scores before and after
            # (leases not ended: the writes' reaper gives up a staging whose lease has).
            members = await admin.zrange(admin_pend, 0, -1)
            gone = [m.decode() for m in members if m.decode().startswith(f"{bob} ")][::7]
            gone.append(member)
            await admin.zrem(admin_pend, *gone)
            removed.update(gone)
            come = {
                f"{bob} {9 * 10**6 + 10 * len(places) + i}": s
                for i, s in enumerate((float(score), float(score), LEASE // 2, LEASE + 5, float(score) - 1))
            }
            await admin.zadd(admin_pend, come)
            added.update(come)
        return await original(self, which, keys, args, *rest)

    monkeypatch.setattr(StoreClass, "_script", script)  # the store binds it when built
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(SourceOwner("acme", "bob"), "kept", "qstagedbob text", _ctx())
            bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
            ana = {f"ana/s{i}/~/~": str(2 * 10**6 + i) for i in range(3)}
            await _begun(admin, tp, ana, reverse)
            if not reverse:
                await admin.delete(f"{tp}:kb")
            buckets[:] = sorted(ana.values())
            # Three scores, ana's and bob's members interleaved at each (bob's bucket sorts first).
            scores = (LEASE - 2, LEASE - 1, LEASE)
            ana_stagings = {f"{buckets[i % 3]} {10**6 + i}": scores[i % 3] for i in range(900)}
            bob_stagings = {f"{bob} {4 * 10**6 + i}": scores[i % 3] for i in range(900)}
            assert await admin.zadd(admin_pend, ana_stagings | bob_stagings) == 1800
            report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
        assert report.status is EraseStatus.COMPLETE
        # The first walk alone gave up every one (the second, after the sweep, would hide a miss).
        assert starts == [900, 0], starts
        assert len(places) >= 3  # the walks went on from a place more than once (two walks, 1,800 stagings)
        left = {m.decode() for m in await admin.zrange(admin_pend, 0, -1)}
        assert not left & set(ana_stagings), f"{len(left & set(ana_stagings))} of ana's stagings left"
        assert left == (set(bob_stagings) | added) - removed
    finally:
        await store.aclose()


@pytest.mark.parametrize("extra", [0, 1], ids=["exactly the cap", "one past the cap"])
async def test_a_walk_of_exactly_its_page_cap_completes_and_one_more_staging_fails_typed(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, extra: int
) -> None:
    # The cap (20,000 pages of 512) made 2 pages of 2 here. Before: a walk of exactly the cap's full pages
    # failed, its last page full and so followed by one more read, which the cap had no room for. Now a
    # page says whether a member follows it: exactly the cap completes, one staging more fails typed,
    # nothing of the row erased.
    from agentium_recall_redis import RedisRecallError, erase_stagings

    monkeypatch.setattr(erase_stagings, "PEND_PAGE", 2)
    monkeypatch.setattr(erase_stagings, "_MAX_PEND_PAGES", 2)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        with anyio.fail_after(30):
            await store.index_document(SourceOwner("acme", "ana"), "mine", "qstagedana text", _ctx())
            await store.index_document(SourceOwner("acme", "bob"), "kept", "qstagedbob text", _ctx())
            bob = (await admin.hget(f"{tp}:bk", "bob/~/~/~") or b"").decode()
            # Bob's stagings (not the target's): every walk reads them all, none given up.
            bob_stagings = {f"{bob} {3 * 10**6 + i}": LEASE - i for i in range(4 + extra)}
            assert await admin.zadd(f"{tp}:pend", bob_stagings) == 4 + extra
            if extra:
                with pytest.raises(RedisRecallError, match="did not end within 2 pages"):
                    await store.erase(EraseTarget.user("acme", "ana"), _ctx())
                assert b"qstagedana" in repr(await key_space(admin, tp)).encode()  # nothing erased
            else:
                report = await store.erase(EraseTarget.user("acme", "ana"), _ctx())
                assert report.status is EraseStatus.COMPLETE and report.count("document") == 1
                assert b"qstagedana" not in repr(await key_space(admin, tp)).encode()
        left = {m.decode() for m in await admin.zrange(f"{tp}:pend", 0, -1)}
        assert left == set(bob_stagings)
    finally:
        await store.aclose()
