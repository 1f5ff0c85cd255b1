"""Archived groups the index lost or missed are indexed again without an operator (issue 21, item 12).

A server that restarts without persistence comes back empty; groups
archived while it was down were never indexed. The store says which
archived seqs it lacks (``unindexed_groups``, bounded), and the engine
indexes them from the archive, a bounded number per archiving commit.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    OpContext,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import ArchiveReceipt
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore
from agentium_recall_redis.session import MAX_UNINDEXED

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


def ctx() -> OpContext:
    return OpContext.with_timeout(30)


async def test_unindexed_groups_lists_the_gaps_below_a_seq(store: RedisRecallStore) -> None:
    assert await store.unindexed_groups(KEY, 3, 16, ctx()) == [0, 1, 2]  # nothing indexed yet
    groups = [plain_group(seq, f"group {seq}") for seq in (0, 1, 2, 5, 6, 9)]
    await store.index_groups(KEY, groups, [ArchiveReceipt(g.seq, g.digest, "x") for g in groups], ctx())
    assert await store.unindexed_groups(KEY, 12, 16, ctx()) == [3, 4, 7, 8, 10, 11]
    assert await store.unindexed_groups(KEY, 12, 2, ctx()) == [3, 4]  # at most max_groups
    assert await store.unindexed_groups(KEY, 3, 16, ctx()) == []
    assert await store.unindexed_groups(KEY, 0, 16, ctx()) == []
    assert await store.unindexed_groups(SessionKey("acme", "ana", "other"), 2, 16, ctx()) == [0, 1]


async def test_a_long_index_is_searched_in_bounded_work(store: RedisRecallStore) -> None:
    groups = [plain_group(seq, f"group {seq}") for seq in range(2000) if seq != 1500]
    receipts = [ArchiveReceipt(g.seq, g.digest, "x") for g in groups]
    await store.index_groups(KEY, groups, receipts, ctx())
    before = store.round_trips
    assert await store.unindexed_groups(KEY, 2000, 16, ctx()) == [1500]
    assert store.round_trips - before == 1


async def test_a_huge_max_groups_or_seq_is_clamped_and_never_holds_the_server(
    make_server: Callable[..., ServerProcess],
) -> None:
    """``max_groups`` and seqs past any real session are clamped, so the script's scan stays bounded.

    Unclamped, ``max_groups=10**30`` made the MISSING script loop (and grow a
    table) for ever: the call timed out and the server answered every other
    client BUSY. Its own server, so a regression cannot wedge the shared one.
    """
    server = make_server()
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    try:
        with anyio.fail_after(20):
            found = await store.unindexed_groups(KEY, 10**30, 10**30, ctx(), start_seq=-(10**30))
            assert found == list(range(MAX_UNINDEXED))  # nothing indexed: the lowest gaps, at most the cap
            assert await store.unindexed_groups(KEY, 10**30, 3, ctx(), start_seq=10**29) == []
            # The server is free: another call answers at once.
            assert await store.unindexed_groups(KEY, 3, 16, ctx()) == [0, 1, 2]
    finally:
        await store.aclose()


async def test_groups_lost_by_a_restart_without_persistence_are_indexed_again_by_the_next_commits(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server()  # persistence off: a restart empties it
    store = RedisRecallStore(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        for i in range(21):
            await runtime.run(ANA, "s1", f"q{i}z")  # words no other turn has: recall finds nothing
        indexed = [g.seq for g in await store.seek_groups(KEY, 0, 100, ctx())]
        assert indexed == list(range(20))
        server.kill()
        server.restart()  # empty now
        result = await runtime.run(ANA, "s1", "q21z")
        assert result.status is RunStatus.COMPLETED
        codes = [d.code for d in result.diagnostics]
        assert "recall_index_caught_up" in codes and "recall_index_behind" in codes  # 16 per commit
        assert len(await store.seek_groups(KEY, 0, 100, ctx())) == 16 + 1
        await runtime.run(ANA, "s1", "q22z")
        assert [g.seq for g in await store.seek_groups(KEY, 0, 100, ctx())] == list(range(22))
        assert store.server_report is not None and store.server_report.restarts == 1
    finally:
        await runtime.aclose()
        await store.aclose()
