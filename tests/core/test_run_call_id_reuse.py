"""``run()`` never commits a turn that names one tool call id on two calls.

A provider reply that names an id an earlier call of the same turn already
used is refused as one naming an id twice in one reply is: a
:class:`ContractViolationError`, none of its calls run, and what ran before
it committed with a ``provider_failed`` interruption (a WARNING and span
events, no content). Committed, the group would have held two ``tool``
results of one id, which ``run()`` sends on every later turn and Chat
Completions refuses ("Duplicate value for 'tool_call_id'").
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import (
    AgentiumError,
    CommitState,
    ContractViolationError,
    EffectLevel,
    InterruptionCause,
    Message,
    Role,
    RunResult,
    Telemetry,
    Tool,
    ToolRegistry,
    Verdict,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SECRET_INPUT = "tangerine-input-77"
SECRET_OUTPUT = "tangerine-page-42"


def _calls(*ids: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"id": i, "name": "fetch", "arguments": {"q": i}} for i in ids]}


async def _run(
    script: list[object], grants: list[str], caplog: pytest.LogCaptureFixture
) -> tuple[RunResult | AgentiumError, list[str], list[Message], ScriptedProvider, InMemorySpanExporter]:
    """A run of ``script``; what it returned or raised, the calls that ran, the history, the next request."""
    ran: list[str] = []

    async def fetch(arguments: dict[str, Any]) -> str:
        ran.append(arguments["q"])
        return SECRET_OUTPUT

    exporter = InMemorySpanExporter()
    traces = TracerProvider()
    traces.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider(replies=[*script, "next answer"])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
        telemetry=Telemetry(tracer_provider=traces),
    )
    async with runtime:
        with anyio.fail_after(30), caplog.at_level(logging.DEBUG, logger="agentium"):
            try:
                outcome: RunResult | AgentiumError = await runtime.run(ANA, "s1", SECRET_INPUT, grants=grants)
            except AgentiumError as exc:
                outcome = exc
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
            # The session goes on: the next turn's request holds each tool call id once.
            after = await runtime.run(ANA, "s1", "and now?")
    assert after.output == "next answer"
    return outcome, ran, history, provider, exporter


def _tool_ids(messages: list[Message]) -> tuple[list[str], list[str]]:
    calls = [c.id for m in messages for c in m.tool_calls]
    results = [m.tool_call_id or "" for m in messages if m.role is Role.TOOL]
    return calls, results


@pytest.mark.parametrize(
    "second",
    [pytest.param(("c1",), id="same-id"), pytest.param(("c2", "c1"), id="second-call-of-the-reply")],
)
async def test_a_reply_reusing_an_earlier_call_id_is_refused_and_what_ran_committed(
    second: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    outcome, ran, history, provider, exporter = await _run([_calls("c1"), _calls(*second)], ["fetch"], caplog)
    assert isinstance(outcome, ContractViolationError), outcome
    assert "tool call id 'c1'" in str(outcome) and "earlier" in str(outcome)
    assert outcome.commit_state is CommitState.COMMITTED
    assert outcome.run_result is not None and outcome.run_result.group_seq == 0
    assert ran == ["c1"]  # none of the refused reply's calls ran
    assert _tool_ids(history) == (["c1"], ["c1"])
    # What the next run sent: every tool call id once, each answered.
    request = provider.calls[-1]
    calls, results = _tool_ids([*request.history, *request.turn])
    assert calls == results == ["c1"]
    # Degraded outcome: a WARNING and span events, no content.
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert SECRET_INPUT not in logged and SECRET_OUTPUT not in logged
    spans = exporter.get_finished_spans()
    first_run = next(s for s in spans if s.name.startswith("invoke_agent"))
    events = {(e.name, dict(e.attributes or {}).get("agentium.diagnostic.code")) for e in first_run.events}
    assert ("agentium.diagnostic", "turn_interrupted_committed") in events
    assert any(
        e.name == "exception" and (e.attributes or {}).get("exception.type") == "ContractViolationError"
        for e in first_run.events
    )
    for span in spans:
        shown = repr(dict(span.attributes or {})) + repr([dict(e.attributes or {}) for e in span.events])
        assert SECRET_INPUT not in shown and SECRET_OUTPUT not in shown


async def test_a_reused_id_after_calls_that_never_ran_commits_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No grant: the first call is refused, not run; the reply reusing its id commits nothing at all.
    outcome, ran, history, _provider, _exporter = await _run([_calls("c1"), _calls("c1")], [], caplog)
    assert isinstance(outcome, ContractViolationError), outcome
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    assert ran == [] and history == []


async def test_fresh_ids_on_every_step_still_complete(caplog: pytest.LogCaptureFixture) -> None:
    outcome, ran, history, _provider, _exporter = await _run(
        [_calls("c1"), _calls("c2", "c3"), "done"], ["fetch"], caplog
    )
    assert isinstance(outcome, RunResult) and outcome.output == "done"
    assert ran == ["c1", "c2", "c3"]
    assert _tool_ids(history) == (["c1", "c2", "c3"], ["c1", "c2", "c3"])


async def test_the_interruption_names_the_provider() -> None:
    # The group committed before the refused reply says why the turn has no answer.
    provider = ScriptedProvider(replies=[_calls("c1"), _calls("c1")])

    async def fetch(arguments: dict[str, Any]) -> str:
        return "page"

    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )
    async with runtime:
        with anyio.fail_after(30):
            with pytest.raises(ContractViolationError):
                await runtime.run(ANA, "s1", "go", grants=["fetch"])
            page = await runtime.read_history(ANA, "s1", max_groups=10)
    (entry,) = page.groups
    interruption = entry.group.retained.interruption
    assert interruption is not None and interruption.cause is InterruptionCause.PROVIDER_FAILED


class _Fails(CompletionVerifier):
    """Always ``fail``: the run revises its answer."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return VerificationResult(Verdict.FAIL, (EvidenceEntry("artifact", "out.txt", "differs"),), "draft")


async def test_a_revision_reusing_an_id_of_the_turn_it_continues_is_refused_and_what_ran_committed() -> None:
    # A revision continues the turn (one group): an id its turn already used is refused there too.
    ran: list[str] = []

    async def fetch(arguments: dict[str, Any]) -> str:
        ran.append(arguments["q"])
        return "page"

    provider = ScriptedProvider(replies=[_calls("c1"), "Done.", _calls("c1"), "Revised."])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
        verifier=_Fails(),
    )
    policy = verified_completion_policy(on_fail="revise", max_revisions=1)
    async with runtime:
        with anyio.fail_after(30):
            with pytest.raises(ContractViolationError, match="earlier call of this turn") as caught:
                await runtime.run(ANA, "s1", "write the report", grants=["fetch"], completion=policy)
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
    assert caught.value.commit_state is CommitState.COMMITTED
    assert ran == ["c1"]
    assert _tool_ids(history) == (["c1"], ["c1"])
