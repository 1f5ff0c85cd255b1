"""Racing writers, cancellation of in-flight commands, and writes cut off mid-flight (R12, R24, D2).

Servers are slowed for real with ``CLIENT PAUSE`` from another connection: no mocks.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import anyio
import pytest
import redis.asyncio as aioredis
from redis_servers import ServerProcess, new_prefix

from agentium_harness import OpContext, OperationCancelledError, RecallLimits, Scope, SourceOwner, SourceRef
from agentium_harness import ValidationStatus as V
from agentium_harness.plugin_api import ArchiveReceipt, digest_of, document_source_id
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore, RedisRecallTimeoutError
from agentium_recall_redis.keys import tenant_prefix
from agentium_recall_redis.scripts import DELETE, SETTLE, TOKEN_TTL_MS

pytestmark = pytest.mark.anyio


def ctx(seconds: float = 10) -> OpContext:
    return OpContext.with_timeout(seconds)


#: A ``WRITE`` pause: it holds every script call (reads too: the store reads through ``EVALSHA``, and a
#: WRITE pause holds every script, as one may write) far past every bound asserted, and the test lifts it
#: with ``UNPAUSE`` (which a WRITE pause lets through) once it has measured what it asserts. An ``ALL``
#: pause cannot be lifted early, so it had to be short (2 s) and the slack under it shorter still.
PAUSE_MS = 30_000
#: Scheduling slack on a loaded two-core machine, on top of a deadline: far under what the pause adds.
SLACK_S = 10.0


async def _discover(store: RedisRecallStore, scope: Scope, query: str) -> list[str]:
    session = await store.open(scope, RecallLimits(), ctx())
    try:
        return [c.ref.source_id for c in await session.discover(query, 16, ctx())]
    finally:
        await session.close()


async def _rows(admin: aioredis.Redis, prefix: str, tenant: str) -> int:
    """How many rows the store ever created in a tenant (its row counter)."""
    value = await admin.get(f"{tenant_prefix(prefix, tenant)}:n")
    return int(value or 0)


# -- racing writers -------------------------------------------------------------------------------------


async def test_writers_racing_on_one_source_end_with_one_truthful_revision(
    server: ServerProcess, admin: aioredis.Redis
) -> None:
    prefix = new_prefix()
    writers = [RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix)) for _ in range(8)]
    owner, scope = SourceOwner("race"), Scope("race", "u", "s")
    texts = [f"version {i} of the plan, unique word{i}" for i in range(len(writers))]
    refs: dict[int, SourceRef] = {}
    try:
        for w in writers:  # connect first, so the race is between the writes themselves
            await w.health(ctx())

        async def write(i: int) -> None:
            refs[i] = await writers[i].index_document(owner, "plan", texts[i], ctx())

        async with anyio.create_task_group() as tg:
            for i in range(len(writers)):
                tg.start_soon(write, i)
        session = await writers[0].open(scope, RecallLimits(), ctx())
        checked = await session.validate([refs[i] for i in range(len(writers))], ctx())
        winners = [i for i, v in enumerate(checked) if v.status is V.CURRENT]
        assert len(winners) == 1, checked
        [w] = winners
        assert {v.current_revision for v in checked} == {refs[w].revision}
        assert refs[w].revision == digest_of(
            {"title": "", "text": texts[w]}
        )  # the revision of the stored text
        [excerpt] = await session.read([refs[w]], 4096, ctx())
        assert excerpt.text == texts[w]
        await session.close()
        for i in range(len(writers)):  # postings follow the one stored text
            assert await _discover(writers[0], scope, f"word{i}") == ([refs[w].source_id] if i == w else [])
        tp = tenant_prefix(prefix, "race")
        assert await admin.hlen(f"{tp}:ids") == 1
        assert int(await admin.hget(f"{tp}:bn", "1") or 0) == 1
    finally:
        for w in writers:
            await w.aclose()


async def test_racing_archive_indexing_counts_each_group_once(server: ServerProcess) -> None:
    prefix = new_prefix()
    stores = [RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix)) for _ in range(4)]
    from agentium_harness import SessionKey

    key = SessionKey("race", "u", "s")
    groups = [plain_group(i, f"group {i} about kiwis") for i in range(40)]
    receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
    fresh: list[int] = []
    try:

        async def index(store: RedisRecallStore) -> None:
            fresh.append(await store.index_groups(key, groups, receipts, ctx()))

        async with anyio.create_task_group() as tg:
            for s in stores:
                tg.start_soon(index, s)
        assert sum(fresh) == len(groups)
        assert list(await stores[0].seek_groups(key, 0, 100, ctx())) == groups
    finally:
        for s in stores:
            await s.aclose()


async def test_a_delete_racing_an_update_leaves_a_consistent_source(server: ServerProcess) -> None:
    prefix = new_prefix()
    a, b = (RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=prefix)) for _ in range(2))
    owner, scope = SourceOwner("race"), Scope("race", "u", "s")
    try:
        for _ in range(10):
            first = await a.index_document(owner, "doc", "first text melon", ctx())
            updated: list[SourceRef] = []

            async def update(updated: list[SourceRef] = updated) -> None:
                updated.append(await b.index_document(owner, "doc", "second text papaya", ctx()))

            async def delete() -> None:
                await a.delete_document(owner, "doc", ctx())

            async with anyio.create_task_group() as tg:
                tg.start_soon(update)
                tg.start_soon(delete)
            session = await a.open(scope, RecallLimits(), ctx())
            [v] = await session.validate(updated, ctx())
            await session.close()
            if v.status is V.CURRENT:  # the update won: its words only
                assert await _discover(a, scope, "papaya") == [first.source_id]
            else:
                assert v.status is V.DELETED
                assert await _discover(a, scope, "papaya") == []
            assert await _discover(a, scope, "melon") == []
            await a.delete_document(owner, "doc", ctx())
    finally:
        await a.aclose()
        await b.aclose()


# -- cancellation -----------------------------------------------------------------------------------------


@pytest.fixture
async def patient_store(server: ServerProcess) -> AsyncIterator[RedisRecallStore]:
    """A store whose socket timeout (60 s) outlasts the pause: a call waiting for its reply waits all of it.

    With the default 5 s, a call that was not stopped would end at the socket timeout, inside the slack.
    """
    recall = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix(), socket_timeout_s=60))
    yield recall
    await recall.aclose()


async def test_a_cancelled_in_flight_command_leaves_no_stale_reply(
    patient_store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    store = patient_store
    owner, scope = SourceOwner("cx"), Scope("cx", "u", "s")
    ref = await store.index_document(owner, "d", "zebra alpha", ctx())
    session = await store.open(scope, RecallLimits(), ctx())
    await admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")  # holds the discover script
    began = time.monotonic()
    try:
        with anyio.move_on_after(0.1) as cancelled:
            await session.discover(
                "zebra", 4, OpContext()
            )  # no deadline of its own: the cancel scope stops it
        elapsed = time.monotonic() - began
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")  # the held command is answered now
    # Waiting for the reply would take the whole pause (30 s).
    assert cancelled.cancelled_caught and elapsed < 0.1 + SLACK_S, f"the cancel took {elapsed:.2f}s"
    # If the cancelled command's connection went back to the pool, this call would read its reply.
    [v] = await session.validate([ref], ctx())
    assert v.status is V.CURRENT
    assert [c.ref for c in await session.discover("alpha", 4, ctx())] == [ref]
    await session.close()


async def test_a_deadline_mid_read_raises_and_the_store_goes_on(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    owner, scope = SourceOwner("dl"), Scope("dl", "u", "s")
    ref = await store.index_document(owner, "d", "zebra alpha", ctx())
    session = await store.open(scope, RecallLimits(), ctx())
    await admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")  # holds the read script
    try:
        with pytest.raises(OperationCancelledError, match="deadline"):
            await session.read([ref], 1000, ctx(0.1))
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
    [excerpt] = await session.read([ref], 1000, ctx())
    assert excerpt.text == "zebra alpha"
    await session.close()


async def test_a_write_cut_off_mid_flight_is_settled_and_never_double_applied(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    owner, scope = SourceOwner("tx"), Scope("tx", "u", "s")
    await store.health(ctx())
    await admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")  # the write reaches the server
    sid = document_source_id(owner, "d")
    revision = digest_of({"title": "", "text": "kiwi text"})
    began = time.monotonic()
    try:
        await store.index_document(owner, "d", "kiwi text", ctx(0.1))
        applied: bool | None = True
    except RedisRecallTimeoutError as exc:
        # The pause outlasts the deadline, so the settlement (a write too) cannot finish by it either:
        # the outcome is unknown, and settling goes on in the background.
        applied = exc.applied
        assert applied is None and "unknown" in str(exc)
    finally:
        elapsed = time.monotonic() - began
        await admin.execute_command("CLIENT", "UNPAUSE")  # a WRITE pause lets other commands through
    assert elapsed < 0.1 + SLACK_S, f"the write took {elapsed:.2f}s"  # the deadline held; the pause did not
    await anyio.sleep(0.6)  # the pause is over: a copy still in flight has had every chance to run
    session = await store.open(scope, RecallLimits(), ctx())
    [v] = await session.validate([SourceRef(sid, revision)], ctx())
    await session.close()
    if applied is not None:
        assert v.status is (V.CURRENT if applied else V.DELETED)
    # The write ran at most once, and the index agrees with itself.
    assert await _rows(admin, store.config.key_prefix, "tx") == (1 if v.status is V.CURRENT else 0)


async def test_a_fenced_write_arriving_late_does_nothing(
    store: RedisRecallStore, admin: aioredis.Redis
) -> None:
    """What settlement guarantees: once a token is fenced, the write carrying it never applies."""
    owner = SourceOwner("fence")
    ref = await store.index_document(owner, "d", "kiwi text", ctx())
    tp = tenant_prefix(store.config.key_prefix, "fence")
    token = f"{tp}:w:{secrets.token_hex(16)}"
    assert await admin.eval(SETTLE.source, 1, token, TOKEN_TTL_MS) == [b"fenced"]
    late = await admin.eval(DELETE.source, 2, f"{tp}:ids", token, tp, TOKEN_TTL_MS, ref.source_id, "d", 8192)
    assert late == [b"settled", b"fenced"]
    session = await store.open(Scope("fence", "u", "s"), RecallLimits(), ctx())
    [v] = await session.validate([ref], ctx())
    await session.close()
    assert v.status is V.CURRENT  # the late delete did not run
    # And a write that did run reports itself to a settlement: it is never run twice.
    token2 = f"{tp}:w:{secrets.token_hex(16)}"
    ran = await admin.eval(DELETE.source, 2, f"{tp}:ids", token2, tp, TOKEN_TTL_MS, ref.source_id, "d", 8192)
    assert ran[:2] == [b"ok", b"1"]  # then the garbage backlog
    assert await admin.eval(SETTLE.source, 1, token2, TOKEN_TTL_MS) == [b"done:1"]
    again = await admin.eval(
        DELETE.source, 2, f"{tp}:ids", token2, tp, TOKEN_TTL_MS, ref.source_id, "d", 8192
    )
    assert again == [b"settled", b"done:1"]
