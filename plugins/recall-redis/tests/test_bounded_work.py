"""Work per script call and per source is bounded; a source written over several calls stays atomic.

One script call runs alone on the server, so the store bounds what each
call does (``max_terms_per_call`` postings added, as many removed) and what
one source may cost (``max_terms_per_source``). A larger source is staged
over several calls and published by one: readers see the old version whole
until then and the new one whole after. The server's own ``SLOWLOG`` shows
how many arguments each script call carried (issue 21, item 12).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from keyspace import key_space
from redis_servers import ServerProcess, new_prefix

from agentium_harness import InvalidArgumentError, OpContext, RecallLimits, Scope, SourceOwner, SourceRef
from agentium_harness import ValidationStatus as V
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.keys import tenant_prefix

pytestmark = pytest.mark.anyio

OWNER, SCOPE = SourceOwner("bw"), Scope("bw", "u", "s")


def ctx(seconds: float = 30) -> OpContext:
    return OpContext.with_timeout(seconds)


def words(count: int, tag: str) -> str:
    """``count`` distinct words, each ending in ``tag``, plus the shared word "common"."""
    return "common " + " ".join(f"w{i}{tag}" for i in range(count))


@pytest.fixture
def logged(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server of the current flavour whose SLOWLOG records every command slower than 0.1 ms.

    A script call carrying many terms takes far longer; the commands a script runs inside (also logged,
    from the client address ``?:0``) mostly take less, and are left out.
    """
    return make_server("--slowlog-log-slower-than", "100", "--slowlog-max-len", "10000")


async def script_calls(admin: aioredis.Redis) -> list[tuple[int, float]]:
    """(arguments, server milliseconds) of the EVALSHA / EVAL calls in the SLOWLOG, oldest first."""
    out: list[tuple[int, float]] = []
    for entry in reversed(await admin.slowlog_get(10_000)):
        if entry.get("client_address") in {b"?:0", "?:0"}:
            continue  # a command run inside a script
        raw = entry["command"]
        parts = raw.split(b" ") if isinstance(raw, bytes) else raw.split(" ")
        name = parts[0].decode() if isinstance(parts[0], bytes) else parts[0]
        if name.upper() not in {"EVALSHA", "EVAL"}:
            continue
        # The SLOWLOG keeps 32 arguments and says how many more there were: "... (N more arguments)".
        tail = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        more = int(tail.rsplit("(", 1)[1].split()[0]) if tail.endswith("more arguments)") else 0
        out.append((min(len(parts), 32) + more, entry["duration"] / 1000))
    return out


async def _discover(store: RedisRecallStore, query: str, limit: int = 8) -> list[SourceRef]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        return [c.ref for c in await session.discover(query, limit, ctx())]
    finally:
        await session.close()


async def test_no_script_call_carries_more_than_max_terms_per_call(logged: ServerProcess) -> None:
    admin = aioredis.Redis.from_url(logged.url)
    store = RedisRecallStore(RedisRecallConfig(url=logged.url, key_prefix=new_prefix()))
    room = 4096  # the default max_terms_per_call
    text = words(3 * room, "x")  # three calls' worth of distinct words, under the default per-source cap
    try:
        await store.health(ctx())
        await admin.slowlog_reset()
        ref = await store.index_document(OWNER, "big", text, ctx())
        calls = await script_calls(admin)
        # Every call: at most `room` (term, tf) pairs, plus the row's fields and a few counts.
        assert calls and max(args for args, _ in calls) <= 2 * room + 32, calls
        assert len(calls) >= 3  # begin and two more slices (the commit may be under the log's threshold)
        assert await _discover(store, f"w0x w{3 * room - 1}x") == [ref]  # first and last slice
        session = await store.open(SCOPE, RecallLimits(), ctx())
        [v] = await session.validate([ref], ctx())
        [excerpt] = await session.read([ref], 64, ctx())
        await session.close()
        assert v.status is V.CURRENT and excerpt.text.startswith("common w0x")
    finally:
        await store.aclose()
        await admin.aclose()


async def test_a_batch_of_groups_is_split_by_terms_too(logged: ServerProcess) -> None:
    from agentium_harness import SessionKey
    from agentium_harness.plugin_api import ArchiveReceipt
    from agentium_harness.testing import plain_group

    admin = aioredis.Redis.from_url(logged.url)
    store = RedisRecallStore(
        RedisRecallConfig(url=logged.url, key_prefix=new_prefix(), max_terms_per_call=300)
    )
    key = SessionKey("bw", "u", "s")
    groups = [plain_group(i, words(100, f"g{i}")) for i in range(12)]  # ~1,200 terms in all
    try:
        await store.health(ctx())
        await admin.slowlog_reset()
        assert (
            await store.index_groups(
                key, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx()
            )
            == 12
        )
        calls = await script_calls(admin)
        assert len(calls) >= 4 and max(args for args, _ in calls) <= 2 * 300 + 12 * 16, calls
        assert list(await store.seek_groups(key, 0, 20, ctx())) == groups
    finally:
        await store.aclose()
        await admin.aclose()


async def test_a_source_over_max_terms_per_source_is_refused_and_nothing_is_written(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    store = RedisRecallStore(
        RedisRecallConfig(url=server.url, key_prefix=new_prefix(), max_terms_per_source=1000)
    )
    try:
        await store.index_document(OWNER, "small", "apple", ctx())
        before = await key_space(admin, store.config.key_prefix)
        with pytest.raises(InvalidArgumentError, match="max_terms_per_source"):
            await store.index_document(OWNER, "big", words(1000, "y"), ctx())  # 1,001 distinct words
        assert await key_space(admin, store.config.key_prefix) == before
        await store.index_document(OWNER, "fits", words(999, "y"), ctx())
    finally:
        await store.aclose()


@pytest.mark.parametrize(
    "options",
    [
        {"max_terms_per_call": 0},
        {"max_terms_per_call": 65_537},
        {"max_terms_per_source": 0},
        {"max_terms_per_source": 10_000_001},
        {"max_terms_per_call": True},
        {"max_terms_per_source": 2.5},
    ],
)
def test_the_term_limits_are_validated(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="max_terms_per_"):
        RedisRecallConfig(**options)


async def test_readers_see_the_old_version_or_the_new_one_whole_while_a_large_source_is_staged(
    server: ServerProcess,
) -> None:
    prefix = new_prefix()
    config = RedisRecallConfig(url=server.url, key_prefix=prefix, max_terms_per_call=100)
    writer, reader = RedisRecallStore(config), RedisRecallStore(config)
    old_text, new_text = words(2000, "old"), words(2000, "new")
    try:
        old = await writer.index_document(OWNER, "doc", old_text, ctx())
        seen: list[tuple[list[SourceRef], list[SourceRef], list[SourceRef]]] = []
        done = anyio.Event()
        new: list[SourceRef] = []

        async def write() -> None:
            for _ in range(3):
                new[:] = [await writer.index_document(OWNER, "doc", new_text, ctx())]
                await writer.index_document(OWNER, "doc", old_text, ctx())
            done.set()

        async def read() -> None:
            while not done.is_set():
                seen.append(
                    (
                        await _discover(reader, "common"),
                        await _discover(reader, "w1999old"),
                        await _discover(reader, "w1999new"),
                    )
                )

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            tg.start_soon(read)
        [fresh] = new
        assert seen  # readers ran while the writer staged (how often depends on scheduling)
        for common, old_word, new_word in seen:
            # Exactly one version is ever visible, and only through its own words.
            assert len(common) == 1 and common[0].revision in {old.revision, fresh.revision}, common
            assert old_word in ([], [old]) and new_word in ([], [fresh])
    finally:
        await writer.aclose()
        await reader.aclose()


async def _orphans(admin: aioredis.Redis, prefix: str, tenant: str) -> tuple[int, int, int]:
    """Postings whose row is gone, staged rows still leased, and queued garbage rows."""
    tp = tenant_prefix(prefix, tenant)
    orphans = 0
    async for key in admin.scan_iter(match=f"{tp}:p:*", count=1000):
        for member in await admin.zrange(key, 0, -1):
            if not await admin.exists(f"{tp}:m:{member.decode()}"):
                orphans += 1
    return orphans, await admin.zcard(f"{tp}:pend"), await admin.llen(f"{tp}:gc")


@pytest.mark.parametrize("deadline", [0.005, 0.02, 0.05, 0.15])
async def test_a_staged_write_cut_off_anywhere_leaves_no_trace_once_collected(
    server: ServerProcess, admin: aioredis.Redis, deadline: float
) -> None:
    prefix = new_prefix()
    config = RedisRecallConfig(url=server.url, key_prefix=prefix, max_terms_per_call=100)
    store = RedisRecallStore(config)
    try:
        old = await store.index_document(OWNER, "doc", words(1500, "old"), ctx())
        new_text = words(3000, "new")
        try:
            new = await store.index_document(OWNER, "doc", new_text, ctx(deadline))
        except Exception:  # cut off: OperationCancelledError or RedisRecallTimeoutError (applied or not)
            new = None
    finally:
        await store.aclose()  # waits for background settlements, aborts and collection
    check = RedisRecallStore(config)
    try:
        session = await check.open(SCOPE, RecallLimits(), ctx())
        [v] = await session.validate([old], ctx())
        await session.close()
        published = v.status is V.CHANGED
        assert v.status in {V.CURRENT, V.CHANGED}
        if new is not None:
            assert published
        assert await _discover(check, "w2999new") == (
            [SourceRef(old.source_id, v.current_revision)] if published else []
        )
        assert await _discover(check, "w0old") == ([] if published else [old])
        assert await _orphans(admin, prefix, "bw") == (0, 0, 0)
    finally:
        await check.aclose()


async def test_a_replaced_or_deleted_large_source_leaves_no_postings_behind(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    config = RedisRecallConfig(url=server.url, key_prefix=prefix, max_terms_per_call=200)
    store = RedisRecallStore(config)
    try:
        await store.index_document(OWNER, "doc", words(1000, "a"), ctx())
        second = await store.index_document(OWNER, "doc", words(1000, "b"), ctx())
        assert await _discover(store, "w5a") == [] and await _discover(store, "w5b") == [second]
        await store.index_document(OWNER, "other", "common kiwi", ctx())
        assert await store.delete_document(OWNER, "doc", ctx())
        assert await _discover(store, "w5b") == []
    finally:
        await store.aclose()
    tp = tenant_prefix(prefix, "bw")
    assert await _orphans(admin, prefix, "bw") == (0, 0, 0)
    assert await admin.zcard(f"{tp}:p:1:w5a") == 0 and await admin.zcard(f"{tp}:p:1:w5b") == 0


async def test_postings_without_a_row_take_no_place_in_discovery(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    ref = await store.index_document(OWNER, "d", "kiwi orchard", ctx())
    tp = tenant_prefix(store.config.key_prefix, "bw")
    # A newer posting whose row is not there (a staged source not yet published looks just like this).
    await admin.zadd(f"{tp}:p:1:kiwi", {"999": 999 * 1024 + 5})
    assert await _discover(store, "kiwi", limit=1) == [ref]


async def test_an_index_of_layout_2_without_neighbouring_context_is_refused(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """A tenant of layout 2 (stemmed words, groups without neighbouring context) is refused, not mixed.

    Its groups were indexed without the edge lines of their neighbours, so
    they would rank below groups indexed now; discovery and indexing raise
    ``RedisRecallLayoutError`` and write nothing, reads still work.
    """
    from agentium_recall_redis import RedisRecallLayoutError

    ref = await store.index_document(OWNER, "d", "kiwi orchard", ctx())
    tp = tenant_prefix(store.config.key_prefix, "bw")
    assert await admin.get(f"{tp}:v") == b"4"
    await admin.set(f"{tp}:v", "2")  # as the previous version of the store left it
    before = await key_space(admin, store.config.key_prefix)
    with pytest.raises(RedisRecallLayoutError, match="layout 2"):
        await _discover(store, "kiwi")
    with pytest.raises(RedisRecallLayoutError, match="nothing was written"):
        await store.index_document(OWNER, "other", "plum", ctx())
    assert await key_space(admin, store.config.key_prefix) == before
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        assert [e.text for e in await session.read([ref], 100, ctx())] == ["kiwi orchard"]
    finally:
        await session.close()


async def test_an_index_of_the_previous_key_layout_is_refused_never_mixed(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """A tenant written by an earlier version (unstemmed words, no ``P:v``) is refused, not mixed.

    Its postings hold words as they were (``apples``), which stemmed queries
    (``appl``) would never find, and stemmed postings added beside them would
    make one index of two vocabularies. So discovery and indexing raise
    ``RedisRecallLayoutError`` (naming the way out) and write nothing, while
    validations and deletes, which do not depend on words, still work; a row
    of that layout (its terms in its row hash) is still deleted whole. A read
    of it raises ``RedisRecallLayoutError`` too: its text has no block
    digests, so it cannot be checked, and is never returned unchecked.
    """
    from agentium_harness.plugin_api import digest_of, document_source_id
    from agentium_recall_redis import RedisRecallLayoutError

    tp = tenant_prefix(store.config.key_prefix, "bw")
    sid, revision = document_source_id(OWNER, "legacy"), digest_of({"title": "", "text": "apples pear"})
    # The first layout of one document row (its terms in the field "terms"), written by hand.
    row = {"sid": sid, "rev": revision, "title": "", "size": "11", "o": "~/~/~/~", "b": "1", "kind": "d"}
    await admin.hset(f"{tp}:m:1", mapping={**row, "terms": "apples pear", "seq": "", "dg": ""})
    await admin.set(f"{tp}:t:1", "apples pear")
    for term in ("apples", "pear"):
        await admin.zadd(f"{tp}:p:1:{term}", {"1": 1024 + 1})
    await admin.hset(f"{tp}:ids", sid, "1")
    await admin.hset(f"{tp}:rev", sid, revision)
    await admin.hset(f"{tp}:bk", "~/~/~/~", "1")
    await admin.hset(f"{tp}:bn", "1", "1")
    await admin.set(f"{tp}:nb", "1")
    await admin.set(f"{tp}:n", "1")
    before = await key_space(admin, store.config.key_prefix)
    with pytest.raises(RedisRecallLayoutError, match="Upgrading the key layout"):
        await _discover(store, "apples")
    with pytest.raises(RedisRecallLayoutError, match="nothing was written"):
        await store.index_document(OWNER, "other", "plum", ctx())
    with pytest.raises(RedisRecallLayoutError):
        await store.index_document(OWNER, "big", words(5000, "b"), ctx())  # the staged path too
    assert await key_space(admin, store.config.key_prefix) == before
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        ref = SourceRef(sid, revision)
        assert [v.status for v in await session.validate([ref], ctx())] == [V.CURRENT]
        with pytest.raises(RedisRecallLayoutError, match="no block digests"):
            await session.read([ref], 100, ctx())
    finally:
        await session.close()
    assert await store.delete_document(OWNER, "legacy", ctx())
    assert await admin.zcard(f"{tp}:p:1:apples") == 0 and await admin.hget(f"{tp}:bn", "1") == b"0"
