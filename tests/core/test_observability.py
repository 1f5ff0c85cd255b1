"""Observability (issue 24): one span per turn with a child per stage, GenAI attributes, metrics, logs.

Spans and metrics go to the OpenTelemetry SDK's in-memory exporter and
reader, passed to the runtime through ``Telemetry``, so no global provider is
touched. Content (user input, replies, tool arguments, memory facts, recalled
text, raw ids) must appear nowhere unless the host opts in.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from _telemetry_support import Telemetered
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from agentium_harness import (
    AgentiumError,
    CommitState,
    EvictionStatus,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    RecallLimits,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    Telemetry,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    SourceOwner,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

pytestmark = pytest.mark.anyio

DOC = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text(encoding="utf-8")

ANA = VerifiedIdentity("acme-tenant", "ana-user", "test-auth")
SESSION = "session-s1"
SECRET_INPUT = "please remember my password hunter2"
SECRET_REPLY = "the vault code is 4711"
SECRET_TOOL_ARG = "card-5555-4444"
SECRET_FACT = "Ana is allergic to peanuts"
SECRET_DOC = "the launch date is octember"
CONTENT = (SECRET_INPUT, SECRET_REPLY, SECRET_TOOL_ARG, SECRET_FACT, SECRET_DOC, "hunter2", "4711")
RAW_IDS = ("acme-tenant", "ana-user", SESSION)


class Pass(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return VerificationResult(Verdict.PASS, (), "ok")


def parent_of(spans: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan | None:
    if span.parent is None:
        return None
    for other in spans:
        if other.context.span_id == span.parent.span_id:
            return other
    return None


def texts(spans: Sequence[ReadableSpan]) -> Iterator[str]:
    """Every string a span carries: name, attributes, events and their attributes, status."""
    for span in spans:
        yield span.name
        yield str(span.status.description or "")
        for value in (span.attributes or {}).values():
            yield str(value)
        for event in span.events:
            yield event.name
            for value in (event.attributes or {}).values():
                yield str(value)


def lookup_tool() -> Tool:
    async def lookup(args: dict[str, Any]) -> str:
        return f"found {args.get('card')}: {SECRET_REPLY}"

    return Tool("lookup", lookup, description="look a card up")


def rich_runtime(t: Telemetered, **kw: Any) -> Any:
    """Recall, memory, a tool call, verification, eviction (one resident group): every stage."""
    recall = InMemoryRecallStore()
    replies = [
        {
            "content": "",
            "tool_calls": [{"id": "call-1", "name": "lookup", "arguments": {"card": SECRET_TOOL_ARG}}],
        },
        SECRET_REPLY,
    ]
    return recall, create_harness_runtime(
        provider=ScriptedProvider(replies=replies, cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        # A loaded two-core machine must not turn the recall partial: the spans asserted assume it complete.
        recall_limits=RecallLimits(max_latency_s=120),
        memory=InMemoryMemoryStore(),
        verifier=Pass(),
        tools=ToolRegistry([lookup_tool()]),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=kw.pop("telemetry", None) or t.telemetry(),
        **kw,
    )


async def two_turns(t: Telemetered, **kw: Any) -> tuple[Any, Any]:
    recall, runtime = rich_runtime(t, **kw)
    async with runtime:
        await recall.index_document(
            SourceOwner("acme-tenant", "ana-user", SESSION), "launch", SECRET_DOC, OpContext()
        )
        await runtime.memory.remember(MemoryFact(MemoryScope("acme-tenant", "ana-user"), SECRET_FACT))
        first = await runtime.run(ANA, SESSION, SECRET_INPUT + " launch", grants=["lookup"], completion=True)
        second = await runtime.run(ANA, SESSION, SECRET_INPUT + " launch", grants=["lookup"], completion=True)
    return first, second


async def test_a_turn_is_one_span_with_a_child_span_per_stage() -> None:
    t = Telemetered()
    _, second = await two_turns(t)
    assert second.committed and second.eviction is EvictionStatus.ARCHIVED
    spans = t.spans
    turns = t.named("invoke_agent agentium")
    assert len(turns) == 2
    turn = turns[1]
    assert turn.parent is None
    attributes = turn.attributes or {}
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "agentium"
    assert attributes["agentium.run.status"] == "completed"
    assert attributes["agentium.commit_state"] == "committed"
    assert attributes["agentium.eviction.status"] == "archived"
    assert attributes["agentium.verification.verdict"] == "pass"
    assert attributes["gen_ai.usage.input_tokens"] == second.usage.input_tokens
    # The conversation id identifies the session without revealing it: the same hash on both turns.
    conversation = attributes["gen_ai.conversation.id"]
    assert conversation == (turns[0].attributes or {})["gen_ai.conversation.id"]
    assert all(raw not in str(conversation) for raw in RAW_IDS)

    children = {s.name: s for s in spans if parent_of(spans, s) is turn}
    for stage in (
        "agentium.admission",
        "agentium.load",
        "retrieval InMemoryRecallStore",
        "agentium.request",
        "chat",
        "execute_tool lookup",
        "agentium.verification",
        "agentium.recall.validate",
        "agentium.commit",
    ):
        assert stage in children, f"{stage} is not a child of the turn span: {sorted(children)}"
    retrieval = children["retrieval InMemoryRecallStore"].attributes or {}
    assert retrieval["gen_ai.operation.name"] == "retrieval"
    assert retrieval["gen_ai.data_source.id"] == "InMemoryRecallStore"
    assert retrieval["agentium.recall.status"] == "complete"
    assert retrieval["agentium.recall.included"] == 1

    mine = [s for s in spans if _under(spans, s, turn)]
    chats = [s for s in mine if s.name == "chat"]
    assert len(chats) == 2  # the tool call, then the answer
    chat = chats[0].attributes or {}
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "ScriptedProvider"
    assert "gen_ai.usage.input_tokens" in chat and "gen_ai.usage.output_tokens" in chat
    tool = children["execute_tool lookup"].attributes or {}
    assert tool["gen_ai.tool.name"] == "lookup"
    # The script calls call-1 on both turns: the first turn's group is in the history this turn's
    # request sends, so this call runs (and its span is named) under an id of its own.
    assert tool["gen_ai.tool.call.id"] == "call-1_1"
    assert tool["agentium.tool.status"] == "ok"

    memory = [s for s in mine if s.name == "search_memory"]
    assert len(memory) == 1 and parent_of(spans, memory[0]) is children["agentium.request"]
    assert (memory[0].attributes or {})["gen_ai.memory.record.count"] == 1

    commit = children["agentium.commit"]
    [eviction] = [s for s in spans if parent_of(spans, s) is commit and s.name == "agentium.eviction"]
    [append] = [s for s in spans if parent_of(spans, s) is eviction]
    assert append.name == "agentium.archive.append"
    assert [s.name for s in spans if parent_of(spans, s) is children["agentium.load"]] == [
        "agentium.erasure.fence",
        "agentium.session.load",
    ]
    # Every span of the turn ended inside it, and none failed.
    assert all(s.status.status_code is not StatusCode.ERROR for s in mine)


def _under(spans: Sequence[ReadableSpan], span: ReadableSpan, root: ReadableSpan) -> bool:
    parent = parent_of(spans, span)
    while parent is not None:
        if parent is root:
            return True
        parent = parent_of(spans, parent)
    return False


def _holds(text: str, secret: str) -> bool:
    """Whether ``secret`` stands in ``text`` as itself, not as a run of digits inside a longer number.

    The content marker 4711 turns up inside timestamps and durations by chance (312696.4817047119).
    """
    return re.search(rf"(?<![0-9A-Za-z.]){re.escape(secret)}(?![0-9A-Za-z])", text) is not None


async def test_no_content_and_no_raw_ids_by_default(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetered()
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        await two_turns(t)
    assert caplog.records, "the runs logged nothing at DEBUG"
    carried = list(texts(t.spans))
    logged = [r.getMessage() for r in caplog.records] + [
        str(v) for r in caplog.records for v in vars(r).values()
    ]
    for secret in (*CONTENT, *RAW_IDS):
        assert not [x for x in carried if _holds(x, secret)], f"{secret!r} is on a span"
        assert not [x for x in logged if _holds(x, secret)], f"{secret!r} is in a log record"


async def test_content_and_raw_ids_only_when_the_host_opts_in() -> None:
    t = Telemetered()
    await two_turns(t, telemetry=t.telemetry(capture_content=True, hash_ids=False))
    chat = [s for s in t.named("chat")][-1].attributes or {}
    assert SECRET_INPUT in str(chat["gen_ai.input.messages"])
    assert SECRET_REPLY in str(chat["gen_ai.output.messages"])
    tool = t.named("execute_tool lookup")[-1].attributes or {}
    assert SECRET_TOOL_ARG in str(tool["gen_ai.tool.call.arguments"])
    turn = t.named("invoke_agent agentium")[-1].attributes or {}
    assert turn["gen_ai.conversation.id"] == f"acme-tenant/ana-user/{SESSION}"


async def test_the_environment_opt_in_turns_content_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    t = Telemetered()
    await two_turns(t)
    assert any(SECRET_INPUT in x for x in texts(t.named("chat")))
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    t = Telemetered()
    await two_turns(t)
    assert not any(SECRET_INPUT in x for x in texts(t.spans))


async def test_a_keyed_hash_differs_from_the_plain_one() -> None:
    plain, keyed = Telemetered(), Telemetered()
    await two_turns(plain)
    await two_turns(keyed, telemetry=keyed.telemetry(hash_key="a-secret"))
    ids = [
        (t.named("invoke_agent agentium")[0].attributes or {})["gen_ai.conversation.id"]
        for t in (plain, keyed)
    ]
    assert ids[0] != ids[1]


def test_an_empty_hash_key_is_refused_naming_how_to_get_plain_hashes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "" gave plain SHA-256 silently, and hid a key set in AGENTIUM_TELEMETRY_HASH_KEY (only None reads it).
    from agentium_harness import InvalidArgumentError

    monkeypatch.setenv("AGENTIUM_TELEMETRY_HASH_KEY", "env-secret")
    with pytest.raises(InvalidArgumentError, match=r"non-empty secret.*leave it None"):
        Telemetry(hash_key="")
    keyed = Telemetry().resolve()
    assert keyed.key == b"env-secret" and keyed.ident("a") != Telemetry(hash_key="x").resolve().ident("a")
    monkeypatch.setenv("AGENTIUM_TELEMETRY_HASH_KEY", "")  # an empty variable is no key, as unset
    assert Telemetry().resolve().key == b""


class Broken(SpanProcessor):
    def __init__(self) -> None:
        # A class of its own per test: the instrumentation reports each kind of failure once.
        self.error = type("ProcessorBroke", (RuntimeError,), {})

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise self.error("processor on_start broke")

    def on_end(self, span: ReadableSpan) -> None:
        raise self.error("processor on_end broke")


class FailingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise ConnectionError("collector unreachable")


class BrokenMeterProvider:
    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no meter for you")


async def test_a_failing_exporter_or_processor_never_fails_a_turn(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetered(Broken(), SimpleSpanProcessor(FailingExporter()))
    telemetry = Telemetry(tracer_provider=t.tracer_provider, meter_provider=BrokenMeterProvider())
    with caplog.at_level(logging.WARNING, logger="agentium.telemetry"):
        first, second = await two_turns(t, telemetry=telemetry)
    assert first.committed and second.committed and second.status is RunStatus.COMPLETED
    assert second.group_seq == 1
    assert any(r.name == "agentium.telemetry" for r in caplog.records)


class Failing(ModelProvider):
    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        raise ValueError(f"upstream said: {request.turn[-1].content}")


async def test_an_exception_records_its_type_not_its_message(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=Failing(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            with pytest.raises(AgentiumError) as raised:
                await runtime.run(ANA, SESSION, SECRET_INPUT)
    assert raised.value.commit_state is CommitState.NOT_COMMITTED
    chat = t.one("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "ProviderError"
    assert [e.attributes for e in chat.events if e.name == "exception"] == [
        {"exception.type": "ProviderError"}
    ]
    turn = t.one("invoke_agent agentium")
    assert turn.status.status_code is StatusCode.ERROR
    assert (turn.attributes or {})["agentium.commit_state"] == "not_committed"
    for x in texts(t.spans):
        assert "hunter2" not in x and "upstream said" not in x
    [failed] = [r for r in caplog.records if r.name == "agentium.engine" and r.levelno == logging.WARNING]
    assert "hunter2" not in failed.getMessage() and failed.agentium_error_type == "ProviderError"


async def test_a_failing_tool_is_a_failed_execute_tool_span_without_its_message() -> None:
    async def explode(args: dict[str, Any]) -> str:
        raise ValueError(f"cannot charge {args['card']}")

    t = Telemetered()
    replies = [
        {
            "content": "",
            "tool_calls": [{"id": "c1", "name": "charge", "arguments": {"card": SECRET_TOOL_ARG}}],
        },
        "sorry",
    ]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=replies),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("charge", explode)]),
        telemetry=t.telemetry(),
    )
    async with runtime:
        result = await runtime.run(ANA, SESSION, "charge it", grants=["charge"])
    assert result.committed
    span = t.one("execute_tool charge")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "failed"
    assert not any(SECRET_TOOL_ARG in x for x in texts(t.spans))


async def test_metrics_count_durations_tokens_and_outcomes() -> None:
    t = Telemetered()
    _, second = await two_turns(t)
    metrics = t.metrics()
    [turns] = metrics["agentium.turn.duration"]
    assert turns.count == 2 and dict(turns.attributes) == {"agentium.run.status": "completed"}
    stages = {dict(p.attributes)["agentium.stage"] for p in metrics["agentium.stage.duration"]}
    assert {
        "admission",
        "load",
        "recall",
        "request",
        "memory",
        "verification",
        "commit",
        "eviction",
    } <= stages
    tokens = {dict(p.attributes)["gen_ai.token.type"]: p.sum for p in metrics["gen_ai.client.token.usage"]}
    assert tokens["input"] > 0 and tokens["output"] > 0
    operations = {
        dict(p.attributes)["gen_ai.operation.name"] for p in metrics["gen_ai.client.operation.duration"]
    }
    assert {"chat", "execute_tool", "retrieval", "search_memory", "create_memory"} <= operations
    [recall] = metrics["agentium.recall.outcomes"]
    assert recall.value == 2 and dict(recall.attributes) == {"agentium.recall.status": "complete"}
    [evictions] = metrics["agentium.evictions"]
    assert evictions.value == 1 and dict(evictions.attributes) == {"agentium.eviction.status": "archived"}
    assert [p.value for p in metrics["agentium.archive.groups"]] == [1]
    [verdicts] = metrics["agentium.verification.verdicts"]
    assert verdicts.value == 2 and dict(verdicts.attributes) == {"agentium.verification.verdict": "pass"}
    assert second.committed


class ThreadedArchive(InMemoryArchive):
    """Appends in a worker thread, where an instrumented client (boto3) would open its own span."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self, tracer_provider: TracerProvider) -> None:
        super().__init__()
        self.tracer = tracer_provider.get_tracer("a-client-library")

    async def append(self, key: Any, groups: Any, ctx: OpContext) -> Any:
        def in_thread() -> None:
            with self.tracer.start_as_current_span("PUT object"):
                pass

        await anyio.to_thread.run_sync(in_thread)
        return await super().append(key, groups, ctx)


async def test_a_client_span_in_a_worker_thread_nests_under_the_adapter_call() -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=ThreadedArchive(t.tracer_provider),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    async with runtime:
        await runtime.run(ANA, SESSION, "one")
        await runtime.run(ANA, SESSION, "two")
    [put] = t.named("PUT object")
    parent = parent_of(t.spans, put)
    assert parent is not None and parent.name == "agentium.archive.append"


@pytest.mark.parametrize("capture", [False, True])
async def test_memory_lifecycle_calls_are_genai_memory_spans(capture: bool) -> None:
    t = Telemetered()
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=t.telemetry(capture_content=capture))
    scope = MemoryScope("acme-tenant", "ana-user")
    ack = await manager.remember(MemoryFact(scope, SECRET_FACT))
    assert ack.fact_id is not None
    await manager.correct(scope, ack.fact_id, MemoryFact(scope, "Ana is allergic to nothing"))
    await manager.list(scope)
    await manager.forget(scope, ack.fact_id)
    names = [s.name for s in t.spans if not s.name.endswith(".owner.check")]
    assert names == ["create_memory", "update_memory", "search_memory", "delete_memory"]
    # Correct and forget first check the fact's owner: a plain adapter-call span of its own.
    checks = [s.name for s in t.spans if s.name.endswith(".owner.check")]
    assert checks == ["agentium.memory.correct.owner.check", "agentium.memory.forget.owner.check"]
    for span in t.spans:
        if span.name in checks:
            continue
        attributes = span.attributes or {}
        assert attributes["gen_ai.operation.name"] == span.name
        assert span.parent is None
    # A fact id is content, as in the engine's diagnostics: named on a write's span only with capture.
    for name in ("create_memory", "update_memory", "delete_memory"):
        attributes = t.one(name).attributes or {}
        assert attributes["gen_ai.memory.record.count"] == 1
        if capture:
            assert attributes["gen_ai.memory.record.id"] == ack.fact_id
        else:
            assert "gen_ai.memory.record.id" not in attributes
    assert (t.one("search_memory").attributes or {})["gen_ai.memory.record.count"] == 1
    if not capture:
        assert not any(SECRET_FACT in x or ack.fact_id in x for x in texts(t.spans))


async def test_a_summary_update_is_a_span_under_its_turn() -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=ExtractiveSummarizer(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    async with runtime:
        for text in ("one", "two", "three"):
            await runtime.run(ANA, SESSION, text)
        await runtime.drain()
    summaries = t.named("agentium.summary")
    assert summaries, [s.name for s in t.spans]
    for span in summaries:
        parent = parent_of(t.spans, span)
        assert parent is not None and parent.name == "invoke_agent agentium"
        assert "agentium.summary.moved" in (span.attributes or {})
    # On a loaded machine an update may time out and leave the frontier for the next one; one moves it.
    assert any((span.attributes or {})["agentium.summary.moved"] is True for span in summaries)


class FlakyArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities

    async def append(self, key: Any, groups: Any, ctx: OpContext) -> Any:
        raise OSError(f"archive unavailable while storing {SECRET_INPUT}")


async def test_a_degraded_outcome_is_a_warning_on_its_stage_logger(caplog: pytest.LogCaptureFixture) -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=FlakyArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            await runtime.run(ANA, SESSION, "one")
            result = await runtime.run(ANA, SESSION, "two")
    assert result.eviction is EvictionStatus.DEFERRED
    [deferred] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "eviction_deferred"]
    assert deferred.name == "agentium.engine.commit" and deferred.levelno == logging.WARNING
    assert deferred.agentium_severity == "warning"
    assert deferred.agentium_run_status == "completed"
    assert "hunter2" not in deferred.getMessage()
    # The same diagnostic is an event on the turn span, and the failed append a failed span.
    turn = t.named("invoke_agent agentium")[-1]
    codes = [(e.attributes or {}).get("agentium.diagnostic.code") for e in turn.events]
    assert "eviction_deferred" in codes
    [append] = t.named("agentium.archive.append")
    assert (
        append.status.status_code is StatusCode.ERROR and (append.attributes or {})["error.type"] == "OSError"
    )


async def test_diagnostic_text_is_logged_only_with_the_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=FlakyArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=Telemetry(capture_content=True),
    )
    with caplog.at_level(logging.WARNING, logger="agentium"):
        async with runtime:
            await runtime.run(ANA, SESSION, "one")
            await runtime.run(ANA, SESSION, "two")
    [deferred] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "eviction_deferred"]
    assert "archive unavailable" in deferred.getMessage()


async def test_an_incomplete_drain_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    manager = MemoryManager(InMemoryMemoryStore())

    async def stuck() -> None:
        await anyio.sleep(30)

    manager.start_work("stuck-extraction", "extraction", stuck)
    with caplog.at_level(logging.INFO, logger="agentium"):
        with pytest.raises(AgentiumError):
            await manager.drain(0.05, grace_s=0.5)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.lifecycle"]
    assert warning.levelno == logging.WARNING and warning.agentium_drain_cancelled == 1


async def test_telemetry_refuses_what_is_not_a_provider() -> None:
    from agentium_harness import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="tracer_provider"):
        Telemetry(tracer_provider="not a provider")
    with pytest.raises(InvalidArgumentError, match="capture_content"):
        Telemetry(capture_content="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="telemetry must be a Telemetry"):
        create_harness_runtime(
            provider=ScriptedProvider(replies=["ok"]),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            telemetry={"capture_content": True},  # type: ignore[arg-type]
        )


async def test_every_span_and_attribute_a_turn_records_is_in_the_docs() -> None:
    doc = DOC
    t = Telemetered()
    await two_turns(t, telemetry=t.telemetry(capture_content=True))
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=t.telemetry(capture_content=True))
    scope = MemoryScope("acme-tenant", "ana-user")
    ack = await manager.remember(MemoryFact(scope, SECRET_FACT))
    assert ack.fact_id is not None
    await manager.correct(scope, ack.fact_id, MemoryFact(scope, "corrected"))
    await manager.forget(scope, ack.fact_id)
    generic = {"retrieval": "retrieval {store}", "execute_tool": "execute_tool {name}", "chat": "chat"}
    for span in t.spans:
        kind = span.name.split(" ", 1)[0]
        name = generic.get(kind, span.name) if " " in span.name else span.name
        assert f"`{name}`" in doc, f"span {span.name!r} is not in docs/observability.md"
        for key in span.attributes or {}:
            assert f"`{key}`" in doc, f"attribute {key!r} of {span.name!r} is not in docs/observability.md"
        for event in span.events:
            assert f"`{event.name}`" in doc
            for key in event.attributes or {}:
                assert f"`{key}`" in doc, f"event attribute {key!r} is not in docs/observability.md"


async def test_a_history_append_is_a_span_with_its_stages_under_it() -> None:
    from agentium_harness import Message, Role

    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    async with runtime:
        for text in ("one", "two"):
            await runtime.append(
                ANA, SESSION, [Message(Role.USER, SECRET_INPUT + text), Message(Role.ASSISTANT, SECRET_REPLY)]
            )
    appends = t.named("agentium.history.append")
    assert len(appends) == 2 and all(s.parent is None for s in appends)
    children = [s.name for s in t.spans if parent_of(t.spans, s) is appends[1]]
    assert children[:3] == ["agentium.admission", "agentium.load", "agentium.commit"]
    under_commit = [s.name for s in t.spans if parent_of(t.spans, s) is t.named("agentium.commit")[1]]
    assert "agentium.eviction" in under_commit
    attributes = appends[1].attributes or {}
    assert attributes["agentium.operation"] == "append"
    assert (
        attributes["gen_ai.conversation.id"]
        == (t.named("agentium.history.append")[0].attributes or {})["gen_ai.conversation.id"]
    )
    assert not any(secret in x for x in texts(t.spans) for secret in (*CONTENT, *RAW_IDS))


async def test_a_refused_history_write_is_a_failed_span_and_the_next_one_is_a_root_again() -> None:
    """The history operation's span takes the error that leaves it, and its context is left either way."""
    from agentium_harness import Message, Role, SessionConflictError

    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    messages = [Message(Role.USER, "one"), Message(Role.ASSISTANT, "two")]
    async with runtime:
        with pytest.raises(SessionConflictError):
            await runtime.append(ANA, SESSION, messages, expected_revision=3)
        await runtime.append(ANA, SESSION, messages)
    refused, done = t.named("agentium.history.append")
    assert refused.status.status_code is StatusCode.ERROR
    assert (refused.attributes or {})["error.type"] == "SessionConflictError"
    assert "agentium.commit_state" in (refused.attributes or {})
    assert [e.name for e in refused.events] == ["exception"]
    assert done.parent is None and done.status.status_code is not StatusCode.ERROR
    assert all(parent_of(t.spans, s) is not refused for s in t.spans if s.start_time > refused.end_time)


async def test_an_incomplete_session_close_and_its_diagnostics_are_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=FlakyArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    with caplog.at_level(logging.INFO, logger="agentium"):
        async with runtime:
            await runtime.run(ANA, SESSION, "one")
            await runtime.run(ANA, SESSION, "two")
            report = await runtime.resources.close_session(ANA, SESSION)
    assert report.status.value == "incomplete"
    [closed] = [r for r in caplog.records if r.name == "agentium.engine.maintenance"]
    assert closed.levelno == logging.WARNING and closed.agentium_cleanup_status == "incomplete"
    assert any(getattr(r, "agentium_code", None) == "eviction_deferred" for r in caplog.records)
    lifecycle = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.lifecycle"]
    assert "runtime closing" in lifecycle and "runtime closed" in lifecycle


async def test_a_drain_counts_its_items_by_outcome() -> None:
    t = Telemetered()
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=t.telemetry())

    async def quick() -> None:
        await anyio.lowlevel.checkpoint()

    manager.start_work("quick-extraction", "extraction", quick)
    result = await manager.drain(5)
    assert result.completed == ("quick-extraction",)
    [items] = t.metrics()["agentium.drain.items"]
    assert items.value == 1 and dict(items.attributes) == {"agentium.drain.outcome": "completed"}
    assert (t.one("agentium.drain").attributes or {})["agentium.drain.completed"] == 1


async def test_the_runtime_drain_and_close_record_under_the_runtime_telemetry() -> None:
    """``drain()`` and ``aclose()`` record their drain span and metrics with the runtime's own providers."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    await runtime.run(ANA, "s", "hello")
    await runtime.drain(30.0)
    assert len(t.named("agentium.drain")) == 1
    await runtime.aclose()
    assert len(t.named("agentium.drain")) == 2
    assert "agentium.stage.duration" in t.metrics()


async def test_an_erasure_is_a_span_and_one_that_stops_part_way_is_a_warning_and_an_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agentium_harness import ArchiveError, EraseTarget, ErasureIncompleteError, OperatorAttestation

    class Unplugged(InMemoryArchive):
        fail = True

        async def erase(self, target: Any, ctx: Any, **kw: Any) -> Any:
            if self.fail and not kw.get("dry_run"):
                raise ArchiveError(f"the disk went away while holding {SECRET_INPUT}")
            return await super().erase(target, ctx, **kw)

    t = Telemetered()
    archive = Unplugged()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[SECRET_REPLY], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme-tenant", "ops", "sso"))
    target = EraseTarget.session("acme-tenant", "ana-user", SESSION)
    async with runtime:
        for text in ("one", "two"):
            await runtime.run(ANA, SESSION, f"{SECRET_INPUT} {text}")
        with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(ErasureIncompleteError):
            await runtime.erase(target, reason="request", attestation=operator)
        archive.fail = False
        await runtime.resume_erasures(operator)
    stopped, done = t.named("agentium.erasure")
    assert [(e.name, dict(e.attributes or {})) for e in stopped.events if e.name != "exception"] == [
        ("agentium.erasure.incomplete", {"error.type": "ArchiveError"})
    ]
    assert (stopped.attributes or {})["agentium.erasure.kind"] == "erasure"
    assert stopped.status.status_code is StatusCode.ERROR and done.status.status_code is not StatusCode.ERROR
    (warning,) = [r for r in caplog.records if r.name == "agentium.engine.erasure"]
    assert warning.levelno == logging.WARNING and "ArchiveError" in warning.getMessage()
    assert not any(secret in x for x in texts(t.spans) for secret in (*CONTENT, *RAW_IDS))
    assert not any(secret in r.getMessage() for r in caplog.records for secret in (*CONTENT, *RAW_IDS))
