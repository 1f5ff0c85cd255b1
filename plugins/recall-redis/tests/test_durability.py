"""SIGKILL of a server with AOF ``appendfsync always`` loses no acknowledged write (D2)."""

from __future__ import annotations

import anyio
import pytest
from redis_servers import ServerProcess

from agentium_harness import (
    OpContext,
    OperationCancelledError,
    RecallLimits,
    Scope,
    SessionKey,
    SourceOwner,
    SourceRef,
)
from agentium_harness import ValidationStatus as V
from agentium_harness.plugin_api import ArchiveReceipt, MessageGroup
from agentium_harness.testing import plain_group
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore

pytestmark = pytest.mark.anyio


def ctx(seconds: float = 5) -> OpContext:
    return OpContext.with_timeout(seconds)


async def test_sigkill_with_aof_always_loses_no_acknowledged_write(aof_server: ServerProcess) -> None:
    config = RedisRecallConfig(
        url=aof_server.url, connect_timeout_s=0.5, socket_timeout_s=2, settle_timeout_s=0.5
    )
    store = RedisRecallStore(config)
    owner, key = SourceOwner("dur"), SessionKey("dur", "u", "s")
    documents: list[tuple[SourceRef, str]] = []
    groups: list[MessageGroup] = []
    enough = anyio.Event()

    def progress() -> None:
        if len(documents) >= 300 and len(groups) >= 30:
            enough.set()

    async def write_documents(writer: int) -> None:
        for i in range(100_000):
            text = f"writer {writer} note {i} about apricots"
            try:
                ref = await store.index_document(owner, f"w{writer}-{i}", text, ctx())
            except (RedisRecallError, OperationCancelledError):
                return  # the server is gone: this write is not acknowledged
            documents.append((ref, text))
            progress()

    async def write_groups() -> None:
        for seq in range(100_000):
            group = plain_group(seq, f"group {seq} about plums")
            try:
                await store.index_groups(key, [group], [ArchiveReceipt(seq, group.digest, "x")], ctx())
            except (RedisRecallError, OperationCancelledError):
                return
            groups.append(group)
            progress()

    async with anyio.create_task_group() as tg:
        for writer in range(4):
            tg.start_soon(write_documents, writer)
        tg.start_soon(write_groups)
        with anyio.fail_after(30):
            await enough.wait()
        aof_server.kill()  # SIGKILL while writes are in flight
    await store.aclose()
    assert aof_server.proc is not None and aof_server.proc.returncode == -9

    aof_server.restart()
    after = RedisRecallStore(RedisRecallConfig(url=aof_server.url))
    try:
        session = await after.open(Scope("dur", "u", "s"), RecallLimits(), ctx())
        checked = await session.validate([ref for ref, _ in documents], ctx(30))
        assert [v.status for v in checked] == [V.CURRENT] * len(documents)
        sample = documents[:: max(1, len(documents) // 50)]
        excerpts = await session.read([ref for ref, _ in sample], 4096, ctx())
        assert [e.text for e in excerpts] == [text for _, text in sample]
        await session.close()
        assert list(await after.seek_groups(key, 0, len(groups), ctx()))[: len(groups)] == groups
    finally:
        await after.aclose()
