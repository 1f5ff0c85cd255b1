"""A tenant written before the erasure index is indexed by a walk that resumes where it was cut short.

A user or session erasure of such a tenant walks the whole tenant (its
revision hash, then its rows by number), filling the index. Before, a walk
cut short (its deadline passed, or ``max_items`` reached) kept nothing of
where it was, and the next erasure walked the tenant from its start again:
a tenant too large for one call's deadline was never indexed, and each
erasure of it cost the whole tenant. Work is counted in script calls (pages
of the walk), never timed; the cut is the caller cancelling the call after
a number of pages, as a deadline passing does.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness import OperationCancelledError
from agentium_harness.plugin_api import EraseStatus, EraseTarget, OpContext, SourceOwner
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.store import RedisRecallStore as StoreClass

pytestmark = pytest.mark.anyio

ANA: Final = SourceOwner("acme", "ana", "s1")
#: Pages of the walk: ids (``HSCAN`` pages of the revision hash) and rows (pages of row numbers).
PAGE: Final = 20
#: What each kind of page is, in this store and in the one before the walk resumed (for the failing run).
ROW_PAGES: Final = {"erase_sweep", "erase_build_rows"}


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def _hscans(admin: aioredis.Redis) -> int:
    """``HSCAN`` commands the server ran so far (those run inside scripts included)."""
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_hscan", {}).get("calls", 0))


def _kind(script: Any) -> str:
    if "'HSCAN'" in script.source:
        return "ids"
    return "rows" if script.name in ROW_PAGES else ""


class _Pages:
    """Counts the walk's script calls per kind, and cancels the running call after ``cut`` of kind ``at``."""

    def __init__(self) -> None:
        self.counts = {"ids": 0, "rows": 0}
        self.cut: tuple[str, int, OpContext] | None = None

    def reset(self) -> None:
        self.counts = {"ids": 0, "rows": 0}


async def _unindexed_tenant(
    store: RedisRecallStore, admin: aioredis.Redis, tp: str, others: int = 300
) -> None:
    """``others`` sources of other users and 5 of ana (2 deleted), written before the erasure index."""
    for i in range(5):
        await store.index_document(ANA, f"a{i}", f"qresume{i}x text", _ctx())
    for i in (0, 1):
        assert await store.delete_document(ANA, f"a{i}", _ctx())
    for i in range(others):
        owner = SourceOwner("acme", f"user{i % 7}", f"s{i % 3}")
        await store.index_document(owner, f"d{i}", f"qotherresume{i} text", _ctx())
    index = [
        k
        for k in await key_space(admin, tp)
        if k.endswith(b":ixm") or k.rsplit(b":", 2)[-2:-1] in ([b"is"], [b"ir"])
    ]
    assert await admin.delete(*index) == len(index)


@pytest.mark.parametrize("phase", ["ids", "rows"])
async def test_a_walk_cut_short_resumes_where_it_stopped(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    from agentium_recall_redis import erase_scripts, erase_sweep

    monkeypatch.setattr(erase_scripts, "_SCAN_PAGE", PAGE)
    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", PAGE)
    try:
        from agentium_recall_redis import erase_build
    except ImportError:  # the store before the walk resumed (the failing run)
        pass
    else:
        monkeypatch.setattr(erase_build, "ID_PAGE", PAGE)
    pages = _Pages()
    original = StoreClass._script

    async def script(self: StoreClass, which: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await original(self, which, *args, **kwargs)
        kind = _kind(which)
        if kind:
            pages.counts[kind] += 1
            if pages.cut is not None and pages.cut[0] == kind and pages.counts[kind] == pages.cut[1]:
                pages.cut[2].signal.cancel("the test's stand-in for a deadline")
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)  # before the store: it binds its method at init
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    target = EraseTarget.user("acme", "ana")
    try:
        await _unindexed_tenant(store, admin, tp)
        # A whole walk's pages, as a dry run (which writes nothing) reads them: ids counted in HSCAN commands,
        # rows in script calls (one per page).
        before = await _hscans(admin)
        planned = await store.erase(target, _ctx(), dry_run=True)
        assert planned.count("document") == 3
        whole = {"ids": await _hscans(admin) - before, "rows": pages.counts["rows"]}
        assert whole["ids"] >= 8 and whole["rows"] >= 8, whole

        # The first erase is cut short halfway through the chosen part of the walk.
        cut = whole[phase] // 2
        pages.reset()
        ctx = _ctx()
        pages.cut = (phase, cut, ctx)
        before = await _hscans(admin)
        with pytest.raises(OperationCancelledError):
            await store.erase(target, ctx)
        pages.cut = None
        assert pages.counts[phase] == cut
        first = {"ids": await _hscans(admin) - before, "rows": pages.counts["rows"]}
        assert await admin.exists(f"{tp}:ixm") == 0  # a walk cut short never marks the tenant

        # The next erase goes on from there: it never walks again what the first one walked.
        pages.reset()
        before = await _hscans(admin)
        report = await store.erase(target, _ctx())
        assert report.status is EraseStatus.COMPLETE  # (the key space below shows ana's sources gone)
        second = {"ids": await _hscans(admin) - before, "rows": pages.counts["rows"]}
        if phase == "ids":
            assert second["ids"] <= whole["ids"] - first["ids"] + 1, (whole, first, second)
        else:
            assert second["ids"] == 0, (whole, first, second)
            # What is left of the rows, and one page of ana's own rows through the index (now marked).
            assert second["rows"] <= whole["rows"] - first["rows"] + 2, (whole, first, second)
        assert await admin.get(f"{tp}:ixm") == b"1"
        left = repr(await key_space(admin, tp)).encode()
        assert b"qresume" not in left and b"/ana/" not in left and b":ana/" not in left
        assert left.count(b"qotherresume") >= 300

        # Another user's erasure reads the index only now: no page of the walk at all.
        pages.reset()
        before = await _hscans(admin)
        report = await store.erase(EraseTarget.user("acme", "user3"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") > 0
        assert await _hscans(admin) == before and pages.counts["rows"] <= 4, pages.counts
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "place",
    [
        {"r": "1e9"},  # Lua's tonumber reads it: trusted, the walk would skip every row
        # Places the store could have written, edited: a row number past row 2 (with or without the
        # walk's end), an end lowered before it. Each skipped ana's row 2 and marked the tenant.
        {"r": "1000000000"},
        {"r": "3", "e": "4"},
        {"r": "1", "e": "1"},
        {"r": "9" * 16},
        {"c": "12abc"},
        {"c": "0", "r": "1"},
        {"x": "1"},
        "junk",  # another type: the call walks the tenant itself
    ],
)
async def test_a_damaged_walk_place_is_never_trusted(
    server: ServerProcess, admin: aioredis.Redis, place: dict[str, str] | str
) -> None:
    # Ana's row 2 is reachable by number only (its ids and rev entries removed, as damage leaves it): a
    # walk that trusted a damaged place past it would mark the tenant without listing it, and her
    # erasure through the index would then leave its text.
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    try:
        for i in range(3):
            await store.index_document(ANA, f"a{i}", f"qplace{i}x text", _ctx())
        await store.index_document(SourceOwner("acme", "bob"), "b", "qbobplace text", _ctx())
        sid = "doc/acme/ana/s1/~/~/a1"
        assert await admin.hdel(f"{tp}:ids", sid) == 1 and await admin.hdel(f"{tp}:rev", sid) == 1
        index = [
            k
            for k in await key_space(admin, tp)
            if k.endswith(b":ixm") or k.rsplit(b":", 2)[-2:-1] in ([b"is"], [b"ir"])
        ]
        await admin.delete(*index)
        if isinstance(place, str):
            await admin.set(f"{tp}:ixw", place)
        else:
            await admin.hset(f"{tp}:ixw", mapping=place)
        reports = [await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())]
        while reports[-1].status is not EraseStatus.COMPLETE and len(reports) < 10:
            reports.append(await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx()))
        assert reports[-1].status is EraseStatus.COMPLETE
        left = repr(await key_space(admin, tp)).encode()
        assert b"qplace" not in left and b"/ana/" not in left, left
        assert b"qbobplace" in left
        assert await admin.get(f"{tp}:ixm") == b"1"
    finally:
        await store.aclose()


@pytest.mark.parametrize("walk", ["erase_build_rows", "erase_sweep"])
async def test_the_walk_does_not_chase_rows_written_while_it_runs(
    server: ServerProcess, admin: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, walk: str
) -> None:
    # Rows are walked by number up to the row counter, read again on each page: another user writing as
    # fast as the walk reads kept it chasing new rows until its deadline. A row written after the walk
    # began is listed by its own write (the index build, a real erase), or is not the target's (a sweep of
    # the tenant's rows: a dry run's, here), so the walk stops at the highest row number it found.
    from agentium_recall_redis import erase_sweep

    monkeypatch.setattr(erase_sweep, "SWEEP_PAGE", 1)  # one row a page: one write a page keeps pace
    original = StoreClass._script
    state: dict[str, Any] = {"store": None, "writer": None, "pages": 0, "written": 0}

    async def script(self: StoreClass, which: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await original(self, which, *args, **kwargs)
        if self is state["store"] and which.name == walk:
            state["pages"] += 1
            if state["written"] < 40:  # another user's write lands after every page
                state["written"] += 1
                owner = SourceOwner("acme", "carl")
                await state["writer"].index_document(owner, f"c{state['written']}", "qchase text", _ctx())
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    writer = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix))
    state["store"], state["writer"] = store, writer
    try:
        for i in range(3):
            await store.index_document(ANA, f"a{i}", f"qchaseana{i}x text", _ctx())
        for i in range(20):
            await store.index_document(SourceOwner("acme", "bob"), f"b{i}", "qchasebob text", _ctx())
        index = [
            k
            for k in await key_space(admin, tp)
            if k.endswith(b":ixm") or k.rsplit(b":", 2)[-2:-1] in ([b"is"], [b"ir"])
        ]
        await admin.delete(*index)
        rows = int(await admin.get(f"{tp}:n") or 0)
        dry_run = walk == "erase_sweep"
        report = await store.erase(EraseTarget.user("acme", "ana"), _ctx(), dry_run=dry_run)
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 3
        # The rows there when it began, no more: before, 64 pages for 23 rows (each of 40 writes chased).
        assert state["pages"] <= rows + 1, (rows, state["pages"])
        written = state["written"]
        assert written >= rows, written  # a write landed after every page
        if dry_run:
            return
        assert await admin.get(f"{tp}:ixm") == b"1"
        # Every row written during the walk was listed by its own write: carl's erasure finds them all.
        state["store"] = None
        report = await store.erase(EraseTarget.user("acme", "carl"), _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == written
        assert b"qchase text" not in repr(await key_space(admin, tp)).encode()
    finally:
        await store.aclose()
        await writer.aclose()


async def test_a_walk_cut_short_before_a_restart_walks_the_ids_again(
    aof_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An HSCAN cursor is a place in a hash table whose hash function the server process seeds at random
    # when it starts: resumed in another process (a restart, a failover), it could step past ids that were
    # there throughout. So the stored cursor carries the process's run id, and another process walks the
    # ids from the start (the rows, walked by number, go on where they were).
    from agentium_recall_redis import erase_build, erase_scripts

    monkeypatch.setattr(erase_scripts, "_SCAN_PAGE", PAGE)
    monkeypatch.setattr(erase_build, "ID_PAGE", PAGE)
    ids_pages = [0]
    cut: list[OpContext | None] = [None]
    original = StoreClass._script

    async def script(self: StoreClass, which: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await original(self, which, *args, **kwargs)
        if _kind(which) == "ids":
            ids_pages[0] += 1
            if cut[0] is not None and ids_pages[0] == 4:
                cut[0].signal.cancel("the test's stand-in for a deadline")
        return reply

    monkeypatch.setattr(StoreClass, "_script", script)
    prefix = new_prefix()
    tp = f"{prefix}:{{acme}}"
    target = EraseTarget.user("acme", "ana")
    admin = aioredis.Redis.from_url(aof_server.url)
    store = RedisRecallStore(RedisRecallConfig(url=aof_server.url, key_prefix=prefix))
    try:
        await _unindexed_tenant(store, admin, tp, others=150)
        cut[0] = ctx = _ctx()
        with pytest.raises(OperationCancelledError):
            await store.erase(target, ctx)
        cut[0] = None
        place = await admin.hgetall(f"{tp}:ixw")
        assert place[b"c"] != b"0", place
    finally:
        await store.aclose()
        await admin.aclose()
    aof_server.stop()
    aof_server.restart()
    admin = aioredis.Redis.from_url(aof_server.url)
    store = RedisRecallStore(RedisRecallConfig(url=aof_server.url, key_prefix=prefix))
    try:
        assert (await admin.hgetall(f"{tp}:ixw"))[b"c"] == place[b"c"]  # the place outlived the restart
        before = await _hscans(admin)
        await store.erase(target, _ctx(), dry_run=True)  # a whole walk of the ids, in this process
        whole = await _hscans(admin) - before
        before = await _hscans(admin)
        report = await store.erase(target, _ctx())
        assert report.status is EraseStatus.COMPLETE and report.count("document") == 3
        assert await _hscans(admin) - before == whole  # from the start, not from the stored cursor
        assert len(place[b"id"]) == 40, place  # the cursor was stored with the run id of its process
        assert await admin.get(f"{tp}:ixm") == b"1"
        left = repr(await key_space(admin, tp)).encode()
        assert b"qresume" not in left and b"/ana/" not in left and left.count(b"qotherresume") >= 150
    finally:
        await store.aclose()
        await admin.aclose()
