"""Degraded outcomes outside a run's result are span events too, next to their WARNING, with no content.

An ``Agent`` run's memory selection that left facts out or failed, and a
drain that did not settle every item, each logged a WARNING but put nothing
on a span but a status: the standard is a WARNING *and* a span event
(docs/observability.md), and neither may carry a fact's text or the store's
error message unless the host opts in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import anyio
import attrs
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    Agent,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import Citation, ExtractiveSummarizer
from agentium_harness.plugin_api import (
    GroupRef,
    Message,
    MessageGroup,
    OpContext,
    Role,
    SessionKey,
    StoredFact,
    TaskSummary,
)

pytestmark = pytest.mark.anyio

SECRET = "QVX-private-9931"
SCOPE = MemoryScope("acme-tenant", "ana-user")
ANA = VerifiedIdentity("acme-tenant", "ana-user", "test-auth")


class LookupDown(InMemoryMemoryStore):
    """A memory store whose selection fails, its error quoting the query (content)."""

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: OpContext, *, at: datetime | None = None
    ) -> Sequence[StoredFact]:
        raise OSError(f"index unavailable for {query!r}")


async def test_an_agent_runs_failed_memory_selection_is_a_span_event_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = Telemetered()
    manager = MemoryManager(LookupDown(), telemetry=t.telemetry())
    agent = Agent(ScriptedProvider(replies=["ok"]), manager, SCOPE, extraction=False)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        reply = await agent.run(f"what about {SECRET}?")
        await agent.close()
    assert reply.omitted.problems
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    assert warning.levelno == logging.WARNING and warning.agentium_code == "memory_failed"
    span = t.one("search_memory")
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert events == [
        (
            "agentium.diagnostic",
            {"agentium.diagnostic.code": "memory_failed", "agentium.diagnostic.severity": "warning"},
        )
    ]
    [counted] = t.metrics()["agentium.diagnostics"]
    assert dict(counted.attributes)["agentium.diagnostic.code"] == "memory_failed"
    assert not [x for x in t.carried() if SECRET in x]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


async def test_an_agent_runs_facts_left_out_are_span_events_with_their_text_only_on_opt_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for capture in (False, True):
        t = Telemetered()
        store = InMemoryMemoryStore()
        manager = MemoryManager(store, telemetry=t.telemetry(capture_content=capture))
        await store.remember(MemoryFact(SCOPE, f"{SECRET} " + "long fact " * 400), OpContext())
        agent = Agent(ScriptedProvider(replies=["ok"]), manager, SCOPE, extraction=False)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            reply = await agent.run(f"tell me about {SECRET} long fact")
            await agent.close()
        assert reply.omitted.over_budget, "the fact should not fit the memory token budget"
        [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
        assert warning.agentium_code == "memory_omitted"
        [event] = [e for e in t.one("search_memory").events if e.name == "agentium.diagnostic"]
        said = dict(event.attributes or {})
        assert said["agentium.diagnostic.code"] == "memory_omitted"
        assert ("agentium.diagnostic.message" in said) is capture
        if not capture:
            assert not [x for x in t.carried() if SECRET in x]


async def test_an_incomplete_drain_is_a_span_event_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetered()
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=t.telemetry())

    async def stuck() -> None:
        await anyio.sleep(30)

    manager.start_work("stuck-extraction", "extraction", stuck)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        with pytest.raises(MemoryDrainError):
            await manager.drain(0.05, grace_s=0.5)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.lifecycle"]
    assert warning.levelno == logging.WARNING
    events = [(e.name, dict(e.attributes or {})) for e in t.one("agentium.drain").events]
    assert events == [
        (
            "agentium.drain.incomplete",
            {"agentium.drain.completed": 0, "agentium.drain.failed": 0, "agentium.drain.cancelled": 1},
        )
    ]


class Proposes:
    """An extractor proposing two facts; the manager's accept rule refuses the one naming the secret."""

    async def extract(self, scope: MemoryScope, messages: object, ctx: OpContext) -> list[MemoryFact]:
        return [MemoryFact(scope, "likes tea"), MemoryFact(scope, f"card {SECRET}")]


async def test_facts_an_extraction_had_rejected_are_a_span_event_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = Telemetered()
    manager = MemoryManager(
        InMemoryMemoryStore(),
        extractor=Proposes(),
        accept=lambda fact: "holds a card number" if SECRET in fact.text else None,
        telemetry=t.telemetry(),
    )
    source = GroupRef("s1", 0, "sha256:" + "0" * 64)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        manager.extract_in_background(
            SCOPE, [Message(Role.USER, f"my card is {SECRET}")], "extraction-1", sources=[source]
        )
        result = await manager.drain(20)
    assert result.completed == ("extraction-1",)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    assert warning.levelno == logging.WARNING and "1 of the 2 facts" in warning.getMessage()
    assert t.events("agentium.memory.extraction_rejected") == [
        (
            "agentium.memory.extraction",
            "agentium.memory.extraction_rejected",
            {"agentium.memory.rejected": 1, "agentium.memory.proposed": 2},
        )
    ]
    assert not [x for x in t.carried() if SECRET in x]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


class CitesNoGroup(ExtractiveSummarizer):
    """A summarizer whose answer also cites a group it was not given: the update drops it (a warning)."""

    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        summary = await super().summarize(previous, groups, ctx)
        return attrs.evolve(summary, citations=(*summary.citations, Citation(999, "sha256:" + "1" * 64)))


@pytest.mark.parametrize("capture", [False, True])
async def test_a_background_summary_updates_warning_is_said_when_it_ends(
    caplog: pytest.LogCaptureFixture, capture: bool
) -> None:
    """No later run of the session carries the update's diagnostics: it says them itself, as it ends."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=CitesNoGroup(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        summary_limits=SummaryLimits(background=True),
        telemetry=t.telemetry(capture_content=capture),
    )
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        async with runtime:
            for i in range(2):
                await runtime.run(ANA, "s1", f"{SECRET} turn {i}")
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.summary"]
    assert warning.levelno == logging.WARNING and warning.agentium_code == "summarizer_contract_violation"
    [summary] = t.named("agentium.summary")
    [event] = [dict(e.attributes or {}) for e in summary.events if e.name == "agentium.diagnostic"]
    assert event["agentium.diagnostic.code"] == "summarizer_contract_violation"
    assert ("agentium.diagnostic.message" in event) is capture
    if not capture:
        assert not [x for x in t.carried() if SECRET in x]
        assert not [r for r in caplog.records if SECRET in r.getMessage()]


class NoLookback(InMemoryMemoryStore):
    """A memory store declaring neither history nor listing: a fact's sources cannot be found."""

    capabilities = attrs.evolve(InMemoryMemoryStore.capabilities, history=False, listing=False)


async def test_a_forget_whose_sources_cannot_be_found_is_a_span_event_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Asked to erase the fact's sources, forget could find none of them: nothing of them was erased."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=NoLookback(),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme-tenant", "ops", "sso"), "dsr")
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        async with runtime:
            ack = await runtime.memory.remember(MemoryFact(SCOPE, f"card {SECRET}"))
            result = await runtime.forget(
                SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=operator
            )
    assert result.erasures == () and any("sources are unknown" in n for n in result.notes)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    assert warning.levelno == logging.WARNING and "sources" in warning.getMessage()
    assert t.events("agentium.forget.") == [
        ("agentium.forget", "agentium.forget.sources_unknown", {"agentium.forget.erase_sources": True})
    ]
    assert not [x for x in t.carried() if SECRET in x]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


async def test_a_source_forget_could_not_erase_is_a_span_event_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Asked to erase the fact's sources, forget left one: it is resident, in every request of its session."""
    t = Telemetered()
    sessions = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=sessions,
        memory=InMemoryMemoryStore(),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme-tenant", "ops", "sso"), "dsr")
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        async with runtime:
            await runtime.run(ANA, "s1", f"my card is {SECRET}")
            stored = await sessions.load(SessionKey("acme-tenant", "ana-user", "s1"), OpContext())
            assert stored is not None
            group = stored.snapshot.resident[-1]
            source = GroupRef("s1", group.seq, group.digest)
            ack = await runtime.memory.remember(MemoryFact(SCOPE, f"card {SECRET}", provenance=[source]))
            result = await runtime.forget(
                SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=operator
            )
    assert result.erasures == () and len(result.still_held) == 1
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    assert warning.levelno == logging.WARNING and "not erased" in warning.getMessage()
    assert t.events("agentium.forget.") == [
        (
            "agentium.forget",
            "agentium.forget.sources_left",
            {"agentium.forget.resident": 1, "agentium.forget.not_held": 0},
        )
    ]
    assert not [x for x in t.carried() if SECRET in x]
    assert not [r for r in caplog.records if SECRET in r.getMessage()]
