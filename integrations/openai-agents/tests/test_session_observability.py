"""The session's degraded outcomes: each a WARNING on ``agentium.openai_agents`` and a span event, no content.

Found by the observability audit: ``get_items`` and ``pop_item`` failing
closed on an item that is no item of this SDK (``ForeignItemError``), a pop
refused (``PopRefusedError``), a clear given up on a view that changed at
every read (``HistoryChangedError``), and a read leaving out native tool
calls whose output a host retracted logged nothing and put nothing on any
span (the package had no logger). The core's spans of the reads have ended
when the integration finds these, so the event goes on the span current in
the call (here a host's span, under the global tracer provider). Each case
stores a distinctive secret in the message content, which must appear in no
log record and on no span.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import opentelemetry.trace as otel_trace
import pytest
from sdk_sessions import ANA

from agentium_harness import (
    CommitState,
    HarnessRuntime,
    Message,
    Role,
    Telemetry,
    ToolCall,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing import SpanRecorder, recording_spans
from agentium_openai_agents import AgentiumSession, ForeignItemError, HistoryChangedError, PopRefusedError
from agentium_openai_agents._observe import failed

pytestmark = pytest.mark.anyio

#: Stands for a user's words: no hex digit runs through it, so no digest or hashed id can hold it.
SECRET = "QZV-secret-7731"
LOGGER = "agentium.openai_agents"
#: The session call's own span: agentium.openai_agents.<operation> (README).
SPAN_PREFIX = LOGGER + "."
FOREIGN = Message(
    Role.USER,
    f"{SECRET} from another framework",
    payload={"type": "message", "role": "user", "contents": [{"type": "text", "text": SECRET}]},
    payload_format="agent_framework.message/v1",
)


@pytest.fixture
def spans() -> Iterator[SpanRecorder]:
    # The global provider, for this test only: the integration's events go where the host's
    # spans go (the global provider's).
    with recording_spans() as recorder:
        yield recorder


def _runtime(path: Path, spans: SpanRecorder) -> HarnessRuntime:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        telemetry=Telemetry(tracer_provider=spans.provider),
    )


async def _foreign_last(rt: HarnessRuntime) -> AgentiumSession:
    await rt.append(ANA, "chat-1", [Message(Role.USER, f"{SECRET} hello"), FOREIGN])
    return AgentiumSession(rt, ANA, "chat-1")


async def _get_foreign(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    return await (await _foreign_last(rt)).get_items()


async def _pop_foreign(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    return await (await _foreign_last(rt)).pop_item()


def _exchange() -> list[Message]:
    call = ToolCall("c1", "lookup", {"q": SECRET})
    return [
        Message(Role.USER, f"{SECRET} asks"),
        Message(Role.ASSISTANT, f"{SECRET} thinking", tool_calls=(call,)),
        Message(Role.TOOL, f"{SECRET} result", tool_call_id="c1"),
    ]


async def _pop_tool_result(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # The last message is a tool result of Agentium's own run(): popped alone it would orphan its call.
    await rt.append(ANA, "chat-1", _exchange())
    return await AgentiumSession(rt, ANA, "chat-1").pop_item()


async def _clear_changing(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Another writer lands after each read (a real append), so the reset at the revision read never is.
    session = AgentiumSession(rt, ANA, "chat-1", busy_timeout_s=0)
    await rt.append(ANA, "chat-1", [Message(Role.USER, f"{SECRET} first")])
    read = rt.read_history

    async def read_then_append(*args: Any, **kwargs: Any) -> Any:
        page = await read(*args, **kwargs)
        await rt.append(ANA, "chat-1", [Message(Role.USER, f"{SECRET} meanwhile")])
        return page

    monkeypatch.setattr(rt, "read_history", read_then_append)
    return await session.clear_session()


async def _get_call_without_output(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # A host retracted the tool result: the call, sent without its output, is an API error, left out.
    await rt.append(ANA, "chat-1", _exchange())
    await rt.retract(ANA, "chat-1", count=1, reason="host")
    items = await AgentiumSession(rt, ANA, "chat-1").get_items()
    assert [item.get("type", "message") for item in items] == ["message", "message"]  # no function_call
    return items


def _ours(span: Any) -> list[tuple[str, dict[str, Any]]]:
    """The integration's events on ``span`` (an error leaving the call adds OpenTelemetry's ``exception``)."""
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith(SPAN_PREFIX)]


@dataclass(frozen=True)
class Case:
    run: Callable[[HarnessRuntime, pytest.MonkeyPatch], Awaitable[Any]]
    raises: type[Exception] | None
    message: str
    event: str
    attributes: dict[str, Any]


CASES: dict[str, Case] = {
    "get_items of another framework's item": Case(
        _get_foreign,
        ForeignItemError,
        "get_items failed: ForeignItemError",
        "agentium.openai_agents.failed",
        {"agentium.operation": "get_items", "error.type": "ForeignItemError"},
    ),
    "pop_item of another framework's item": Case(
        _pop_foreign,
        ForeignItemError,
        "pop_item failed: ForeignItemError",
        "agentium.openai_agents.failed",
        {
            "agentium.operation": "pop_item",
            "error.type": "ForeignItemError",
            "agentium.commit_state": "not_committed",
        },
    ),
    "pop_item of run()'s tool result": Case(
        _pop_tool_result,
        PopRefusedError,
        "pop_item failed: PopRefusedError",
        "agentium.openai_agents.failed",
        {
            "agentium.operation": "pop_item",
            "error.type": "PopRefusedError",
            "agentium.commit_state": "not_committed",
        },
    ),
    "clear_session of a view changing at every read": Case(
        _clear_changing,
        HistoryChangedError,
        "clear_session failed: HistoryChangedError",
        "agentium.openai_agents.failed",
        {
            "agentium.operation": "clear_session",
            "error.type": "HistoryChangedError",
            "agentium.commit_state": "not_committed",
        },
    ),
    "get_items leaving out a call without its output": Case(
        _get_call_without_output,
        None,
        "get_items: 1 tool calls of Agentium's run() without their output in the view left out",
        "agentium.openai_agents.items_left_out",
        {"agentium.operation": "get_items", "agentium.items.left_out": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_degraded_outcome_is_a_warning_and_an_event_on_the_current_span_without_content(
    name: str,
    tmp_path: Path,
    spans: SpanRecorder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    case = CASES[name]
    caplog.set_level(logging.DEBUG, logger="agentium")
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        with otel_trace.get_tracer("host").start_as_current_span("host turn"):
            if case.raises is None:
                await case.run(rt, monkeypatch)
            else:
                with pytest.raises(case.raises) as raised:
                    await case.run(rt, monkeypatch)
                assert type(raised.value) is case.raises
        monkeypatch.undo()
        # The secret is there to be leaked: it is in the history the call read.
        stored = await rt.read_history(ANA, "chat-1", view=False, max_groups=20)
        assert any(SECRET in m.content for g in stored.groups for m in g.messages)
    warned = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelno, r.getMessage()) for r in warned] == [(logging.WARNING, case.message)]
    # The record's fields are the event's attributes, named as the core names its own (README).
    fields = {
        "agentium_" + k.removeprefix("agentium.").replace(".", "_"): v for k, v in case.attributes.items()
    }
    assert {name: getattr(warned[0], name, None) for name in fields} == fields
    # The event is on the session call's own span, a child of the host's span current in the call.
    [host] = [s for s in spans.finished if s.name == "host turn"]
    [call] = [s for s in spans.finished if s.name == SPAN_PREFIX + case.attributes["agentium.operation"]]
    assert call.parent is not None and call.parent.span_id == host.context.span_id
    assert _ours(call) == [(case.event, case.attributes)]
    assert not host.events
    # No content anywhere: not in a record (message, fields), not on a span of the host or the core.
    records = [f"{r.getMessage()} {vars(r)}" for r in caplog.records]
    assert not [text for text in records if SECRET in text]
    assert not [text for text in spans.carried() if SECRET in text]


@pytest.mark.parametrize("name", sorted(CASES))
async def test_with_tracing_on_the_runtime_only_the_event_is_on_a_span_of_the_runtimes_provider(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # No global tracer provider: the host configured tracing only as Telemetry(tracer_provider=...)
    # (docs/observability.md). Reaching the current span through the global provider, the events
    # were lost: the WARNING only.
    monkeypatch.setattr(otel_trace, "_TRACER_PROVIDER", None)
    recorder = SpanRecorder()
    case = CASES[name]
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with _runtime(tmp_path / "agentium.db", recorder) as rt:
        if case.raises is None:
            await case.run(rt, monkeypatch)
        else:
            with pytest.raises(case.raises):
                await case.run(rt, monkeypatch)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [case.message]
    operation = case.attributes["agentium.operation"]
    [call] = [s for s in recorder.finished if s.name == SPAN_PREFIX + operation]
    failed = {} if case.raises is None else {"error.type": case.raises.__name__}
    assert dict(call.attributes or {}) == {"agentium.operation": operation, **failed}
    assert _ours(call) == [(case.event, case.attributes)]
    # The core's history reads made in the call are its children, in the same trace.
    reads = [s for s in recorder.finished if s.name == "agentium.history.read"]
    assert reads and all(s.parent is not None and s.parent.span_id == call.context.span_id for s in reads)
    assert not [text for text in recorder.carried() if SECRET in text]
    recorder.provider.shutdown()


async def test_with_no_host_span_current_the_event_is_on_the_calls_span(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, the event needed a host's span to go on and there was the WARNING only.
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        session = await _foreign_last(rt)
        with pytest.raises(ForeignItemError):
            await session.get_items()
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "get_items failed: ForeignItemError"
    ]
    [call] = [s for s in spans.finished if s.name == "agentium.openai_agents.get_items"]
    assert call.parent is None and [e.name for e in call.events] == [
        "agentium.openai_agents.failed",
        "exception",  # the error leaving the call fails its span: its type only
    ]
    assert dict(call.attributes or {})["error.type"] == "ForeignItemError"
    assert not [text for text in spans.carried() if SECRET in text]


async def test_with_a_runtime_recording_nothing_no_event_goes_to_the_global_provider(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # The runtime's Telemetry decides where its session's events go: a provider that records
    # nothing (the API's no-op one) sends them nowhere, not to the host's global provider.
    caplog.set_level(logging.WARNING, logger=LOGGER)
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    quiet = Telemetry(tracer_provider=otel_trace.NoOpTracerProvider())
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        telemetry=quiet,
    )
    async with rt:
        with otel_trace.get_tracer("host").start_as_current_span("host turn"):
            with pytest.raises(ForeignItemError):
                await (await _foreign_last(rt)).get_items()
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "get_items failed: ForeignItemError"
    ]
    assert [s.name for s in spans.finished] == ["host turn"] and not spans.finished[0].events


async def test_a_refusal_of_the_hosts_own_items_is_raised_not_logged(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Bad input is the caller's error (as the core's argument checks): typed, nothing written, no WARNING.
    caplog.set_level(logging.DEBUG, logger="agentium")
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        with pytest.raises(ForeignItemError):
            await AgentiumSession(rt, ANA, "chat-1").add_items([{"role": "tool", "content": SECRET}])
        assert (await rt.read_history(ANA, "chat-1", max_groups=1)).groups == ()
    assert not [r for r in caplog.records if r.name == LOGGER]


async def test_a_failure_that_committed_says_so_on_the_record_and_the_event(
    spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # A pop whose retraction took another session's message (an erasure and the id used again in
    # between) raises with commit_state committed: what was done is on both, still without its text.
    refused = ForeignItemError(f"message {SECRET} retracted all the same")
    refused.commit_state = CommitState.COMMITTED
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with otel_trace.get_tracer("host").start_as_current_span("host turn"):
        failed("pop_item", refused)
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert (record.getMessage(), record.agentium_commit_state) == (
        "pop_item failed: ForeignItemError",
        "committed",
    )
    [host] = spans.finished
    assert [(e.name, dict(e.attributes or {})) for e in host.events] == [
        (
            "agentium.openai_agents.failed",
            {
                "agentium.operation": "pop_item",
                "error.type": "ForeignItemError",
                "agentium.commit_state": "committed",
            },
        )
    ]
    assert SECRET not in f"{record.getMessage()} {vars(record)}" and SECRET not in " ".join(spans.carried())
