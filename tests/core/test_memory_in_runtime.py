"""Memory in the harness runtime (issue 11, R36–R40): injected as labeled data, drained with owned work."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _memory_support import OkProvider

from agentium_harness import (
    Agent,
    ExtractionConflictError,
    LifecycleState,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    RuntimeCloseError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._cli import main
from agentium_harness._config.runtime import load_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import (
    ModelProvider,
    ModelRequest,
    SourceKind,
)
from agentium_harness._ports.summary import SummaryLimits
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer, ExtractiveSummarizerConfig

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity(tenant="acme", user="alice", verified_by="test")
ALICE_MEMORY = MemoryScope("acme", "alice")
BOB_MEMORY = MemoryScope("acme", "bob")


def runtime_with(memory: Any, provider: ModelProvider | None = None, **kwargs: Any) -> Any:
    return create_harness_runtime(
        provider=provider or OkProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=memory,
        **kwargs,
    )


def memory_blocks(request: ModelRequest) -> list[Any]:
    return [b for b in request.sources if b.kind is SourceKind.MEMORY]


async def test_host_facts_reach_the_request_as_labeled_memory_data() -> None:
    provider = OkProvider()
    store = InMemoryMemoryStore()
    async with runtime_with(store, provider) as rt:
        ack = await rt.memory.remember(MemoryFact(ALICE_MEMORY, "Alice deploys on Thursdays"))
        await rt.memory.remember(MemoryFact(BOB_MEMORY, "Bob deploys on Mondays"))
        result = await rt.run(ALICE, "s1", "When do I deploy?")
    [block] = memory_blocks(provider.requests[0])
    assert block.content == "Alice deploys on Thursdays"
    assert block.source_id == f"memory/{ack.fact_id}"
    assert "Thursdays" not in provider.requests[0].instructions
    assert block.render().startswith("<source-data")
    assert result.committed


async def test_forgotten_and_expired_facts_are_not_injected() -> None:
    provider = OkProvider()
    now = datetime.now(UTC)
    async with runtime_with(InMemoryMemoryStore(), provider) as rt:
        gone = await rt.memory.remember(MemoryFact(ALICE_MEMORY, "Alice's desk is 4B"))
        await rt.memory.forget(ALICE_MEMORY, gone.fact_id)
        await rt.memory.remember(
            MemoryFact(
                ALICE_MEMORY,
                "Alice is on call",
                valid_from=now - timedelta(days=2),
                valid_until=now - timedelta(days=1),
            )
        )
        await rt.memory.remember(MemoryFact(ALICE_MEMORY, "Alice likes tea"))
        await rt.run(ALICE, "s1", "What do you know about me?")
    assert [b.content for b in memory_blocks(provider.requests[0])] == ["Alice likes tea"]


async def test_memory_over_its_budget_is_omitted_whole_and_reported() -> None:
    from agentium_harness._engine.memory.manager import MemoryLimits

    provider = OkProvider()
    manager = MemoryManager(InMemoryMemoryStore(), limits=MemoryLimits(injection_tokens=60))
    async with runtime_with(manager, provider) as rt:
        for i in range(6):
            await manager.remember(MemoryFact(ALICE_MEMORY, f"fact number {i}: " + "word " * 20))
        result = await rt.run(ALICE, "s1", "facts?")
    blocks = memory_blocks(provider.requests[0])
    assert len(blocks) < 6
    assert all(b.content.endswith("word ") or b.content.endswith("word") for b in blocks)
    assert any("memory" in d.code for d in result.diagnostics)


async def test_a_borrowed_manager_stays_open_and_a_wrapped_store_is_closed_with_its_manager() -> None:
    manager = MemoryManager(InMemoryMemoryStore())
    async with runtime_with(manager):
        pass
    assert not manager.closed
    rt = runtime_with(InMemoryMemoryStore())
    await rt.aclose()
    assert rt.memory.closed and rt.state is LifecycleState.CLOSED


class SlowSummarizer(ExtractiveSummarizer):
    """The extractive summarizer, held until ``release`` once offered group 1 or later.

    So the third turn's background update is still running at drain time however
    loaded the machine is (a fixed delay could end first), while the second
    turn's, which the third waits for, runs at once.
    """

    def __init__(self, config: ExtractiveSummarizerConfig) -> None:
        super().__init__(config)
        self.release = anyio.Event()

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        if any(g.seq >= 1 for g in groups):
            await self.release.wait()
        return await super().summarize(previous, groups, ctx)


async def test_drain_covers_the_runtimes_background_summary_updates() -> None:
    summarizer = SlowSummarizer(ExtractiveSummarizerConfig())
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["a", "b", "c", "d"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=True),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    async with rt:
        for text in ["one", "two", "three"]:
            await rt.run(ALICE, "s1", text)
        assert rt.memory.running(), "the summary update should still be running"
        summarizer.release.set()  # it can finish now, but has not: the drain waits for it
        result = await rt.drain(30.0)
    assert result.ok
    assert len(result.completed) == 1 and result.completed[0].startswith("summary update")
    assert "s1" in result.completed[0]


async def test_drain_names_hanging_memory_work_and_aclose_reports_it() -> None:
    manager = MemoryManager(InMemoryMemoryStore())
    # The close after the drain is to be clean: generous bounds (only the drain's 0.1 s runs out).
    rt = runtime_with(manager, limits=RuntimeLimits(settle_timeout_s=30, close_timeout_s=30))
    release = anyio.Event()

    async def hang() -> None:
        await release.wait()

    manager.start_work("final write of alice", "final-write", hang)
    with pytest.raises(MemoryDrainError) as caught:
        await rt.drain(0.1)
    assert "final write of alice" in caught.value.result.cancelled
    # The drained work was cancelled and stopped; a clean close follows.
    assert rt.memory.running() == ()
    await rt.aclose()
    assert rt.state is LifecycleState.CLOSED


async def test_aclose_fails_and_stays_closing_while_owned_work_will_not_stop() -> None:
    manager = MemoryManager(InMemoryMemoryStore())
    rt = runtime_with(manager, limits=RuntimeLimits(settle_timeout_s=0.1, close_timeout_s=0.1))
    stop = anyio.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.05)

    manager.start_work("stubborn extraction", "extraction", stubborn)
    with pytest.raises(RuntimeCloseError, match="stubborn extraction"):
        await rt.aclose()
    assert rt.state is LifecycleState.CLOSING
    stop.set()
    await anyio.sleep(0.2)
    rt.limits = attrs.evolve(rt.limits, close_timeout_s=30)  # the retry is to succeed: generous
    await rt.aclose()
    assert rt.state is LifecycleState.CLOSED


async def test_agent_extraction_on_a_harness_session_is_refused() -> None:
    class Extractor:
        async def extract(self, scope: MemoryScope, messages: Any, ctx: OpContext) -> list[MemoryFact]:
            return []

    manager = MemoryManager(InMemoryMemoryStore(), extractor=Extractor())
    async with runtime_with(manager) as rt:
        await rt.run(ALICE, "s1", "hello")  # the harness now owns s1's canonical history
        with pytest.raises(ExtractionConflictError):
            Agent(ScriptedProvider(replies=["x"]), manager, ALICE_MEMORY, session="s1")


async def test_a_config_with_memory_builds_a_runtime_that_injects(tmp_path: Path) -> None:
    cfg = tmp_path / "agentium.toml"
    cfg.write_text(
        f"""
[provider]
plugin = "scripted"
[provider.options]
responses = ["ok"]
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[memory]
plugin = "sqlite"
[memory.options]
path = "{tmp_path / "memory.db"}"
""",
        encoding="utf-8",
    )
    assert main(["check", str(cfg)]) == 0
    async with load_runtime(cfg) as rt:
        assert rt.memory is not None
        await rt.memory.remember(MemoryFact(ALICE_MEMORY, "Alice deploys on Thursdays"))
        result = await rt.run(ALICE, "s1", "When do I deploy?")
    assert result.committed
