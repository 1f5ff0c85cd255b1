"""SIGKILL of a server with AOF ``appendfsync always`` loses no acknowledged write (D2); restarts are seen."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from redis_servers import ServerProcess, new_prefix

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
from agentium_recall_redis.link import ServerReport

pytestmark = pytest.mark.anyio


def ctx(seconds: float = 30) -> OpContext:
    return OpContext.with_timeout(seconds)


async def test_sigkill_with_aof_always_loses_no_acknowledged_write(aof_server: ServerProcess) -> None:
    # The writes before the kill must be acknowledged (each writer stops at its first failure, and
    # the test needs 300 of them): with appendfsync always, a loaded disk can hold a reply for
    # seconds, so connecting and replies get 30 s. After the kill every call fails at once
    # (refused, reset); only settling a write cut off by it is bounded short, as it has nothing
    # to reach.
    config = RedisRecallConfig(
        url=aof_server.url, connect_timeout_s=30, socket_timeout_s=30, settle_timeout_s=0.5
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
        checked = await session.validate([ref for ref, _ in documents], ctx())
        assert [v.status for v in checked] == [V.CURRENT] * len(documents)
        sample = documents[:: max(1, len(documents) // 50)]
        excerpts = await session.read([ref for ref, _ in sample], 4096, ctx())
        assert [e.text for e in excerpts] == [text for _, text in sample]
        await session.close()
        assert list(await after.seek_groups(key, 0, len(groups), ctx()))[: len(groups)] == groups
    finally:
        await after.aclose()


async def test_a_restart_without_persistence_is_reported_without_asking(
    aof_server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The report follows the server: a restart without AOF is seen on the next call, not only by health()."""
    store = RedisRecallStore(RedisRecallConfig(url=aof_server.url, key_prefix=new_prefix()))
    owner = SourceOwner("dur")
    plain: ServerProcess | None = None
    try:
        ref = await store.index_document(owner, "d", "kiwi text", ctx())
        before = store.server_report
        assert before is not None and before.durable is True
        aof_server.kill()
        # The same address now answers from a server without persistence: what was indexed is gone.
        plain = ServerProcess(aof_server.flavour, tmp_path / "plain").start(aof_server.port)
        with caplog.at_level(logging.WARNING, logger="agentium.plugins.recall_redis"):
            session = await store.open(Scope("dur", "u", "s"), RecallLimits(), ctx())
            [v] = await session.validate([ref], ctx())
            await session.close()
        assert v.status is V.DELETED
        # The restart is a WARNING on the plugin's logger (issue 24).
        assert any("restarted" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        after = store.server_report
        assert after is not None and (after.appendonly, after.durable) == ("no", False)
        assert after.run_id != before.run_id and (before.restarts, after.restarts) == (0, 1)
        assert "not durable" in after.describe() and "restarted" in after.describe()
    finally:
        await store.aclose()
        if plain is not None:
            plain.stop()


def test_the_servers_own_words_in_its_report_cannot_forge_a_log_line() -> None:
    """Its version (INFO) and its CONFIG GET answers are logged: a newline or an escape in them is escaped."""
    report = ServerReport(
        "redis", "7.2.4\n2026-12-04 WARNING forged", "yes", "no\x1b[2J\u2028x", run_id="r", restarts=1
    )
    text = report.describe()
    assert text.isprintable(), text
    assert "7.2.4\\x0a2026-12-04 WARNING forged" in text and "no\\x1b[2J\\u2028x" in text
