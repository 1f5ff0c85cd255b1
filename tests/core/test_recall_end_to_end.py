"""Recall end to end on the built-in stores: what is evicted is indexed, then recalled into the request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentium_harness import (
    RecallStatus,
    RunStatus,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._ports import OpContext
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing import record_requests

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


class FlakyArchive(InMemoryArchive):
    """A real in-memory archive whose appends fail while ``down`` is set."""

    down = True

    async def append(self, key: SessionKey, groups: Any, ctx: OpContext) -> Any:
        if self.down:
            raise ConnectionError("archive unreachable")
        return await super().append(key, groups, ctx)


def _runtime(tmp_path: Path, archive: Any, provider: Any) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=InMemorySessionStore(),
        recall=SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db"))),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def test_a_fact_evicted_early_is_recalled_into_the_request(tmp_path: Path) -> None:
    provider = ExtractiveProvider()
    requests = record_requests(provider)
    runtime = _runtime(tmp_path, InMemoryArchive(), provider)
    await runtime.run(ANA, "s1", "Remember: the staging database password rotates every 45 days.")
    for i in range(4):
        await runtime.run(ANA, "s1", f"Unrelated chatter number {i}.")
    # The fact's group is no longer resident: only recall can bring it back.
    history = [m.content for m in requests[-1].history]
    assert not any("45 days" in h for h in history)
    result = await runtime.run(ANA, "s1", "How often does the staging database password rotate?")
    assert result.status is RunStatus.COMPLETED
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    request = requests[-1]
    recalled = [b for b in request.sources if b.source_id == "group/acme/ana/s1/0"]
    assert recalled and "45 days" in recalled[0].content
    assert "45 days" in result.output
    assert result.retained.source_view_revision == result.recall.source_view_revision
    await runtime.recall.aclose()


async def test_close_session_flush_indexes_what_it_archives(tmp_path: Path) -> None:
    archive = FlakyArchive()
    runtime = _runtime(tmp_path, archive, ExtractiveProvider())
    for i in range(4):
        result = await runtime.run(ANA, "s1", f"turn {i} mentions the word zebra{i}")
    assert result.has("eviction_deferred")
    store = runtime.recall
    assert list(await store.seek_groups(KEY, 0, 10, OpContext())) == []  # nothing archived, nothing indexed
    archive.down = False
    report = await runtime.resources.close_session(ANA, "s1")
    assert report.flushed_groups > 0
    indexed = list(await store.seek_groups(KEY, 0, 10, OpContext()))
    assert [g.seq for g in indexed] == list(range(report.flushed_groups))
    await store.aclose()


async def test_the_in_memory_recall_store_recalls_an_evicted_fact() -> None:
    from agentium_harness.adapters.memory_recall import InMemoryRecallStore

    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=InMemoryRecallStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    await runtime.run(ANA, "s1", "Remember: the badge office closes at 16:30.")
    for i in range(3):
        await runtime.run(ANA, "s1", f"Unrelated chatter number {i}.")
    result = await runtime.run(ANA, "s1", "When does the badge office close?")
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    assert "16:30" in result.output
