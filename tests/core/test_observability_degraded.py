"""Degraded outcomes outside a run, and what telemetry may carry: a WARNING, a span event, never content.

The companion of test_observability.py (which covers a run): the history
API's writes, forgetting, tool calls the model made up, and log lines an
adapter's error text could forge. Spans go to the SDK's in-memory exporter
through ``Telemetry``, as there.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import anyio
import pytest
from _telemetry_support import Telemetered
from opentelemetry.sdk.trace import ReadableSpan

from agentium_harness import (
    Agent,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Message,
    MessageGroup,
    OperatorAttestation,
    ProviderError,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    SessionStoreError,
    SummaryLimits,
    Telemetry,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    OpContext,
    Summarizer,
    SummarizerCapabilities,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

pytestmark = pytest.mark.anyio

SECRET = "ZQX-secret-4242"
ANA = VerifiedIdentity("tenant-q1", "user-q1", "test-auth")
SESSION = "session-q1"
RAW_IDS = ("tenant-q1", "user-q1", SESSION)


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record's message, arguments and structured fields, as text."""
    return [r.getMessage() for r in caplog.records] + [
        str(v) for r in caplog.records for k, v in vars(r).items() if k == "args" or k.startswith("agentium")
    ]


def diagnostic_codes(span: ReadableSpan) -> list[str]:
    return [
        str((e.attributes or {}).get("agentium.diagnostic.code"))
        for e in span.events
        if e.name == "agentium.diagnostic"
    ]


class BrokenSummarizer(Summarizer):
    capabilities = SummarizerCapabilities(incremental=True)

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        raise ValueError(f"cannot summarize {groups[-1].messages[0].content}")


class FlakyArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities

    async def append(self, key: Any, groups: Any, ctx: OpContext) -> Any:
        raise OSError(f"archive down while storing {groups[0].messages[0].content}")


def exchange(i: int) -> list[Message]:
    return [Message(Role.USER, f"{SECRET} asks {i}"), Message(Role.ASSISTANT, f"{SECRET} answers {i}")]


@pytest.mark.parametrize(
    ("archive", "summarizer", "code", "logger", "level"),
    [
        (FlakyArchive, None, "eviction_deferred", "agentium.engine.commit", logging.WARNING),
        (InMemoryArchive, BrokenSummarizer, "summary_failed", "agentium.engine.summary", logging.ERROR),
    ],
)
async def test_a_history_writes_degraded_outcomes_are_logged_and_span_events(
    caplog: pytest.LogCaptureFixture, archive: Any, summarizer: Any, code: str, logger: str, level: int
) -> None:
    """An append, a retraction and a reset report diagnostics as a run does: logged and on their span."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer() if summarizer is not None else None,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        # The summary updated in the write itself: its diagnostics are the write's own. (A background
        # update says its own as it ends, and a later write that carries them does not say them again:
        # test_background_summary_said_once.py.)
        summary_limits=SummaryLimits(background=False) if summarizer is not None else None,
        telemetry=t.telemetry(),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            results = [await runtime.append(ANA, SESSION, exchange(i)) for i in range(3)]
            retracted = await runtime.retract(ANA, SESSION, count=1, reason=f"undo {SECRET}")
            reset = await runtime.reset_view(ANA, SESSION, reason=f"reset {SECRET}")
    writes = (*results, retracted, reset)
    assert any(r.has(code) for r in writes)
    # Each diagnostic of each write is a record on its stage's logger at its severity, its text left out.
    [record, *_] = [r for r in caplog.records if getattr(r, "agentium_code", None) == code]
    assert (record.name, record.levelno, record.getMessage()) == (
        logger,
        level,
        f"{code} ({record.agentium_severity})",
    )
    assert record.agentium_operation in {"append", "retraction", "view reset"}
    # ... and an event on the write's own span, counted in agentium.diagnostics.
    spans = [*t.named("agentium.history.append"), *t.named("agentium.history.retraction")]
    spans.append(t.named("agentium.history.view_reset")[0])
    assert [diagnostic_codes(s) for s in spans] == [[d.code for d in r.diagnostics] for r in writes]
    metrics = t.reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    counted = [
        dict(p.attributes) for m in metrics if m.name == "agentium.diagnostics" for p in m.data.data_points
    ]
    assert {
        "agentium.diagnostic.code": code,
        "agentium.diagnostic.severity": record.agentium_severity,
    } in counted
    for text in (*t.carried(), *logged(caplog)):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


async def test_a_history_write_that_fails_is_a_warning_with_its_error_type_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BrokenSave(InMemorySessionStore):
        async def save(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError(f"disk full while saving {SECRET}")

    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=BrokenSave(),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            with pytest.raises(SessionStoreError):
                await runtime.append(ANA, SESSION, exchange(0))
    [failed] = [r for r in caplog.records if r.name == "agentium.engine" and r.levelno == logging.WARNING]
    assert failed.getMessage() == "append failed: SessionStoreError"
    assert (
        failed.agentium_error_type == "SessionStoreError" and failed.agentium_commit_state == "not_committed"
    )
    for text in logged(caplog):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


async def test_forget_warns_of_a_forged_provenance_with_the_session_hashed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The WARNING about cited groups whose digest matches nothing names the session as telemetry does."""
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    scope = MemoryScope("tenant-q1", "user-q1")
    async with runtime:
        for i in range(2):
            await runtime.run(ANA, SESSION, f"{SECRET} turn {i}")
        forged = GroupRef(SESSION, 0, "sha256:" + "0" * 64)
        ack = await runtime.memory.remember(MemoryFact(scope, f"fact {SECRET}", provenance=[forged]))
        assert ack.fact_id is not None
        with caplog.at_level(logging.DEBUG, logger="agentium"):
            result = await runtime.forget(scope, ack.fact_id)
    assert any("digest the stored group does not have" in note for note in result.notes)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    hashed = Telemetry().resolve().ident("tenant-q1", "user-q1", SESSION)
    assert warning.levelno == logging.WARNING and hashed in warning.getMessage()
    assert warning.agentium_session == hashed
    for text in logged(caplog):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


def made_up_tool_call() -> list[Any]:
    return [{"content": "", "tool_calls": [{"id": "c1", "name": f"tell {SECRET}", "arguments": {}}]}, "ok"]


@pytest.mark.parametrize("capture", [False, True])
async def test_a_tool_name_the_model_made_up_is_not_a_span_name(capture: bool) -> None:
    """A called name no tool has is model output: not in the span name, an attribute only with the opt-in."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=made_up_tool_call()),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("lookup", lambda args: "found")]),
        telemetry=t.telemetry(capture_content=capture),
    )
    async with runtime:
        result = await runtime.run(ANA, SESSION, "hi", grants=["lookup"])
    assert result.has("tool_refused")
    [span] = [s for s in t.spans if s.name.startswith("execute_tool")]
    assert span.name == "execute_tool"
    assert (span.attributes or {})["agentium.tool.status"] == "refused_unknown"
    assert (span.attributes or {}).get("gen_ai.tool.name") == (f"tell {SECRET}" if capture else None)
    if not capture:
        assert not [text for text in t.carried() if SECRET in text]


FORGED = "oops\n2026-01-01 00:00:00 CRITICAL agentium.engine forged line \x1b[31mred\x1b[0m \u2028 \u202e"


async def test_a_quoted_error_with_newlines_or_escapes_stays_on_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With content capture, a diagnostic's text is in the record: escaped, so it cannot forge a record."""

    async def boom(args: dict[str, Any]) -> str:
        raise ValueError(FORGED)

    calls = [{"content": "", "tool_calls": [{"id": "c1", "name": "boom", "arguments": {}}]}, "ok"]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=calls),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("boom", boom)]),
        telemetry=Telemetry(capture_content=True),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            result = await runtime.run(ANA, SESSION, "hi", grants=["boom"])
    assert any(FORGED in d.message for d in result.diagnostics)  # the host still gets the text as it was
    [record] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "tool_failed"]
    message = record.getMessage()
    assert "forged line" in message  # the opt-in is honoured ...
    assert message.isprintable(), message  # ... on one line, with no escape sequence
    assert "oops\\x0a2026" in message and "\\x1b[31m" in message and "\\u2028" in message


async def test_an_error_class_name_cannot_break_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """The class name of an adapter's exception is put in messages (erasure): it is escaped too."""
    from agentium_harness import EraseTarget, ErasureIncompleteError, OperatorAttestation

    odd = type("Disk\nCRITICAL agentium.engine forged", (OSError,), {})

    class Unplugged(InMemoryArchive):
        capabilities = InMemoryArchive.capabilities

        async def erase(self, target: Any, ctx: Any, **kw: Any) -> Any:
            if not kw.get("dry_run"):
                raise odd("gone")
            return await super().erase(target, ctx, **kw)

    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=Unplugged(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("tenant-q1", "ops", "sso"))
    async with runtime:
        await runtime.run(ANA, SESSION, "hi")
        with caplog.at_level(logging.DEBUG, logger="agentium"), pytest.raises(ErasureIncompleteError):
            await runtime.erase(
                EraseTarget.session("tenant-q1", "user-q1", SESSION), reason="asked", attestation=operator
            )
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.erasure"]
    assert warning.getMessage().isprintable() and "Disk\\x0aCRITICAL" in warning.getMessage()
    [erasure] = t.named("agentium.erasure")
    events = [dict(e.attributes or {}) for e in erasure.events if e.name == "agentium.erasure.incomplete"]
    assert events == [{"error.type": "Disk\\x0aCRITICAL agentium.engine forged"}]


class FailingHooks:
    """A plugin registry whose every hook implementation raises, quoting what it was given."""

    def broadcast(self, hook: str, /, **kwargs: Any) -> list[str]:
        return [f"{hook} failed on {kwargs!r} {SECRET}"]


async def test_a_memory_hook_that_fails_is_a_warning_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The memory manager's hook failures go into ack notes and the drain's notes, and are WARNINGs."""
    manager = MemoryManager(InMemoryMemoryStore(), hooks=FailingHooks())
    scope = MemoryScope("tenant-q1", "user-q1")
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        ack = await manager.remember(MemoryFact(scope, f"fact {SECRET}"))
        drained = await manager.drain(30.0)
    assert ack.notes and drained.notes  # the host still gets the hook's text
    hooks = [r for r in caplog.records if r.name == "agentium.engine.hooks"]
    assert [(r.levelno, r.getMessage()) for r in hooks] == [(logging.WARNING, "hook_failed (warning)")] * 2
    for text in logged(caplog):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


class ChokingVerifier(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        raise ValueError(f"verifier choked on {candidate.claim}")


async def test_runtime_verify_records_under_the_runtime_telemetry_and_logs_what_degraded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``runtime.verify()``: span and metric go where the runtime's do; its diagnostics are logged."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=ChokingVerifier(),
        telemetry=t.telemetry(),
    )
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        async with runtime:
            record, notes = await runtime.verify(ANA, SESSION, f"claim {SECRET}")
    assert record.verdict.value == "unknown" and [d.code for d in notes] == ["verifier_failed"]
    [span] = t.named("agentium.verification")
    assert (span.attributes or {})["agentium.verification.verdict"] == "unknown"
    assert diagnostic_codes(span) == ["verifier_failed"]
    [warning] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "verifier_failed"]
    assert warning.name == "agentium.engine.verification" and warning.levelno == logging.WARNING
    metrics = t.reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    assert "agentium.verification.verdicts" in {m.name for m in metrics}
    for text in (*t.carried(), *logged(caplog)):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


class Unplugged(InMemoryArchive):
    """An archive whose appends fail once ``fail`` is set."""

    capabilities = InMemoryArchive.capabilities
    fail = False

    async def append(self, key: Any, groups: Any, ctx: OpContext) -> Any:
        if self.fail:
            raise OSError(f"archive down while storing {groups[0].messages[0].content}")
        return await super().append(key, groups, ctx)


async def test_a_reconciliation_is_a_span_and_reports_what_degraded(caplog: pytest.LogCaptureFixture) -> None:
    """``reconcile_session`` records under the runtime's telemetry; its diagnostics: events, WARNINGs."""
    t = Telemetered()
    archive = Unplugged()
    key = SessionKey("tenant-q1", "user-q1", SESSION)
    await archive.append(key, [MessageGroup(0, (Message(Role.USER, "another writer"),))], OpContext())
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    async with runtime:
        for i in range(2):
            await runtime.run(ANA, SESSION, f"{SECRET} {i}")  # the second one finds the archive diverged
        archive.fail = True
        with caplog.at_level(logging.DEBUG, logger="agentium"):
            report = await runtime.reconcile_session(ANA, SESSION)
    assert report.changed and [d.code for d in report.diagnostics] == ["eviction_deferred"]
    [span] = t.named("agentium.reconciliation")
    assert span.parent is None and diagnostic_codes(span) == ["eviction_deferred"]
    assert (span.attributes or {})["agentium.operation"] == "reconciliation"
    under = {s.name for s in t.spans if s.parent is not None and s.parent.span_id == span.context.span_id}
    assert {"agentium.admission", "agentium.session.save"} <= under
    [deferred] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "eviction_deferred"]
    assert deferred.levelno == logging.WARNING and deferred.agentium_operation == "reconciliation"
    for text in (*t.carried(), *logged(caplog)):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


async def test_a_raw_session_id_in_a_log_message_is_escaped(caplog: pytest.LogCaptureFixture) -> None:
    """With ``hash_ids=False`` ids are shown as they are; one holding U+2028 (valid) cannot split a line."""
    session = "s\u2028WARNING forged"
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=Telemetry(hash_ids=False),
    )
    scope = MemoryScope("tenant-q1", "user-q1")
    async with runtime:
        for i in range(2):
            await runtime.run(ANA, session, f"turn {i}")
        forged = GroupRef(session, 0, "sha256:" + "0" * 64)
        ack = await runtime.memory.remember(MemoryFact(scope, "a fact", provenance=[forged]))
        assert ack.fact_id is not None
        with caplog.at_level(logging.DEBUG, logger="agentium"):
            await runtime.forget(scope, ack.fact_id)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.memory"]
    assert warning.getMessage().isprintable() and "s\\u2028WARNING forged" in warning.getMessage()


async def test_a_session_close_is_a_span_with_an_event_per_diagnostic() -> None:
    """``close_session`` logs its diagnostics; it is also a span (runtime telemetry) with their events."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=FlakyArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    async with runtime:
        for i in range(2):
            await runtime.run(ANA, SESSION, f"{SECRET} {i}")
        report = await runtime.resources.close_session(ANA, SESSION)
    assert report.status.value == "incomplete"
    [span] = t.named("agentium.close_session")
    assert span.parent is None and (span.attributes or {})["agentium.operation"] == "close_session"
    assert diagnostic_codes(span) == [d.code for d in report.diagnostics]
    assert "eviction_deferred" in diagnostic_codes(span)
    under = {s.name for s in t.spans if s.parent is not None and s.parent.span_id == span.context.span_id}
    assert "agentium.admission" in under
    assert not [text for text in t.carried() if SECRET in text or any(raw in text for raw in RAW_IDS)]


class FailingLookup(InMemoryMemoryStore):
    async def lookup(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"lookup failed near {SECRET}")


async def test_an_agent_runs_memory_failure_is_a_warning_and_a_failed_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ``Agent`` run selects memory as a harness run does: a ``search_memory`` span, omissions logged."""
    t = Telemetered()
    manager = MemoryManager(FailingLookup(), telemetry=t.telemetry())
    agent = Agent(ScriptedProvider(replies=["ok"], cycle=True), manager, MemoryScope("tenant-q1", "user-q1"))
    with caplog.at_level(logging.DEBUG, logger="agentium"):
        reply = await agent.run(f"hello {SECRET}")
        await agent.close()
    assert reply.omitted.problems  # the host still gets the text
    [span] = t.named("search_memory")
    assert (span.attributes or {})["error.type"] == "memory_selection_failed"
    [warning] = [r for r in caplog.records if getattr(r, "agentium_code", None) == "memory_failed"]
    assert warning.name == "agentium.engine.memory" and warning.levelno == logging.WARNING
    for text in (*t.carried(), *logged(caplog)):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


async def test_history_reads_and_inspection_record_under_the_runtime_telemetry() -> None:
    """Operations outside a run send their adapter calls' spans where the runtime's ``Telemetry`` says."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    async with runtime:
        await runtime.append(ANA, SESSION, exchange(0))
        t.exporter.clear()
        await runtime.read_history(ANA, SESSION, max_groups=10)
        read = [s.name for s in t.spans]
        t.exporter.clear()
        await runtime.inspect_session(ANA, SESSION)
        inspected = [s.name for s in t.spans]
        t.exporter.clear()
        await runtime.list_sessions(ANA, limit=10)
        listed = [s.name for s in t.spans]
    assert "agentium.session.load" in read, read
    assert "agentium.session.load" in inspected, inspected
    assert listed, "the session listing recorded no span"


class Gated(ScriptedProvider):
    """Answers at once until ``hold`` is set, then waits for ``release`` (keeps its session busy)."""

    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.hold = False
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def complete(self, request: Any, ctx: Any) -> Any:
        if self.hold:
            self.entered.set()
            await self.release.wait()
        return await super().complete(request, ctx)


async def test_a_session_retention_passes_over_is_a_warning_with_its_id_hashed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A busy session keeps groups past the policy: said in the result's notes and as a WARNING."""
    from agentium_harness import OperatorAttestation, RetentionPolicy

    provider = Gated()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=1),
    )
    operator = OperatorAttestation(VerifiedIdentity("tenant-q1", "ops", "sso"))
    async with runtime:
        for i in range(4):
            await runtime.run(ANA, SESSION, f"{SECRET} {i}")
        provider.hold = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.run, ANA, SESSION, "busy")
            await provider.entered.wait()
            with caplog.at_level(logging.DEBUG, logger="agentium"):
                result = await runtime.apply_retention(operator)
            provider.release.set()
    assert result.erasures == () and any("SessionBusyError" in note for note in result.notes)
    [warning] = [r for r in caplog.records if r.name == "agentium.engine.erasure"]
    hashed = Telemetry().resolve().ident("tenant-q1", "user-q1", SESSION)
    assert warning.levelno == logging.WARNING and warning.agentium_session == hashed
    assert warning.getMessage() == (
        f"retention passed over session {hashed} (SessionBusyError); apply retention again for it"
    )
    for text in logged(caplog):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text


async def test_runtime_forget_records_its_source_lookups_under_the_runtime_telemetry() -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        telemetry=t.telemetry(),
    )
    scope = MemoryScope("tenant-q1", "user-q1")
    async with runtime:
        await runtime.run(ANA, SESSION, "hello")
        cited = GroupRef(SESSION, 0, "sha256:" + "0" * 64)
        ack = await runtime.memory.remember(MemoryFact(scope, "a fact", provenance=[cited]))
        assert ack.fact_id is not None
        t.exporter.clear()
        await runtime.forget(scope, ack.fact_id)
    names = [s.name for s in t.spans]
    assert "agentium.session.load" in names and "delete_memory" in names, names


async def test_erasure_status_resume_and_a_dry_run_record_under_the_runtime_telemetry() -> None:
    """The erasure API's reads (pending records, the ledger) and a dry run record under its Telemetry."""
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    operator = OperatorAttestation(VerifiedIdentity("tenant-q1", "ops", "test-auth"), "ticket 1")
    target = EraseTarget.session("tenant-q1", "user-q1", SESSION)
    async with runtime:
        await runtime.append(ANA, SESSION, exchange(0))
        await runtime.erase(target, reason="asked", attestation=operator)
        recorded: dict[str, list[str]] = {}
        for name, call in (
            ("status", lambda: runtime.erasure_status(operator)),
            ("resume", lambda: runtime.resume_erasures(operator)),
            ("dry run", lambda: runtime.erase(target, reason="asked", attestation=operator, dry_run=True)),
        ):
            t.exporter.clear()
            await call()
            recorded[name] = [s.name for s in t.spans]
    assert all("agentium.session.load" in names for names in recorded.values()), recorded
    assert any("dry" in name for name in recorded["dry run"]), recorded


class FailingProvider(ScriptedProvider):
    """A provider whose every call fails, its error quoting the conversation."""

    capabilities = ScriptedProvider.capabilities

    async def complete(self, request: Any, ctx: Any) -> Any:
        raise RuntimeError(f"upstream refused: {request.turn[-1].content}")


async def test_an_agent_runs_provider_failure_is_a_warning_and_a_failed_chat_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As a harness run's: a ``chat`` span failed with the error's type, a WARNING, never the content."""
    t = Telemetered()
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=t.telemetry())
    agent = Agent(FailingProvider(replies=["ok"]), manager, MemoryScope("tenant-q1", "user-q1"))
    with caplog.at_level(logging.DEBUG, logger="agentium"), pytest.raises(ProviderError):
        await agent.run(f"hello {SECRET}")
    await agent.close()
    assert agent.history == ()
    [span] = [s for s in t.spans if s.name.startswith("chat")]
    assert (span.attributes or {})["error.type"] == "ProviderError"
    assert span.status.status_code.name == "ERROR"
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "agentium.engine"]
    assert "ProviderError" in warning.getMessage()
    for text in (*t.carried(), *logged(caplog)):
        assert SECRET not in text and not any(raw in text for raw in RAW_IDS), text
