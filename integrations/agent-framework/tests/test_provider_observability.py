"""The provider's degraded outcomes: a WARNING on ``agentium.agent_framework`` and a span event, no content.

Found by the observability audit: ``get_messages`` failing closed on a stored
message that does not decode or is another framework's, and a save's replay
check failing closed on one (``ForeignMessageError``), logged nothing and put
nothing on any span; a load or a save given up on a session that changed at
every read (``SessionConflictError``) logged nothing either; and the WARNINGs
it had (a save refused past the replay check's read bound, a group over a
load's bound cut, tool contents left out of a load) were on no span. The
core's spans of the reads have ended when the provider finds these, so the
event goes on the span current in the call (here a host's span, under the
global tracer provider; the framework's ``invoke_agent`` span when its
instrumentation is on). Each case stores a distinctive secret in the message
content, which must appear in no log record and on no span.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import opentelemetry.trace as otel_trace
import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
)
from agent_framework import Message as AFMessage

from agentium_agent_framework import (
    MESSAGE_FORMAT,
    AgentiumHistoryProvider,
    ForeignMessageError,
    ReplayCheckLimitError,
    _provider,
)
from agentium_harness import (
    HarnessRuntime,
    Message,
    Role,
    SessionConflictError,
    Telemetry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.testing import SpanRecorder, recording_spans

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
#: Stands for a user's words: no hex digit runs through it, so no digest or hashed id can hold it.
SECRET = "QZV-secret-7731"
LOGGER = "agentium.agent_framework"
#: The provider call's own span: agentium.agent_framework.<operation> (README).
SPAN_PREFIX = LOGGER + "."
MIB = 1024 * 1024


@pytest.fixture
def spans() -> Iterator[SpanRecorder]:
    # The global provider, for this test only: the provider's events go where the host's
    # (or the framework's) spans go.
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


Scenario = Callable[[HarnessRuntime, pytest.MonkeyPatch], Awaitable[Any]]

#: A payload in this framework's format that ``Message.from_dict`` refuses, quoting the secret.
UNDECODABLE = {"type": f"my words {SECRET}", "role": "user", "contents": []}


async def _store_last(rt: HarnessRuntime, message: Message) -> None:
    fine = AFMessage("user", [f"{SECRET} fine"])
    ours = Message(Role.USER, f"{SECRET} fine", payload=fine.to_dict(), payload_format=MESSAGE_FORMAT)
    await rt.append(ANA, "chat-1", [ours, message])


async def _load_undecodable(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    await _store_last(rt, Message(Role.USER, SECRET, payload=UNDECODABLE, payload_format=MESSAGE_FORMAT))
    return await AgentiumHistoryProvider(rt, ANA).get_messages("chat-1")


async def _load_foreign(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    item = {"role": "user", "content": SECRET}
    await _store_last(
        rt, Message(Role.USER, SECRET, payload=item, payload_format="openai.responses.input_item/v1")
    )
    return await AgentiumHistoryProvider(rt, ANA).get_messages("chat-1")


async def _save_after_undecodable(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # The replay check reads the tail, and a message of ours there that does not decode fails it closed.
    await _store_last(rt, Message(Role.USER, SECRET, payload=UNDECODABLE, payload_format=MESSAGE_FORMAT))
    return await AgentiumHistoryProvider(rt, ANA).save_messages("chat-1", [AFMessage("user", ["new"])])


async def _load_changing(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Pages of 2 groups; another writer retracts after each first page: no two pages ever join.
    monkeypatch.setattr(_provider, "MAX_PAGE_GROUPS", 2)
    provider = AgentiumHistoryProvider(rt, ANA, busy_timeout_s=0)
    for n in range(8):
        await provider.save_messages("chat-1", [AFMessage("user", [f"{SECRET} m{n}"])])
    read = rt.read_history

    async def read_then_retract(*args: Any, **kwargs: Any) -> Any:
        page = await read(*args, **kwargs)
        if kwargs.get("before_seq") is None:
            await rt.retract(ANA, "chat-1", count=1, reason="another writer")
        return page

    monkeypatch.setattr(rt, "read_history", read_then_retract)
    return await provider.get_messages("chat-1")


async def _save_changing(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Another writer appends before each of the save's appends at the revision it read: every race lost.
    provider = AgentiumHistoryProvider(rt, ANA, busy_timeout_s=0)
    await provider.save_messages("chat-1", [AFMessage("user", [f"{SECRET} first"])])
    append = rt.append

    async def interfere_then_append(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("expected_revision") is not None:
            await append(ANA, "chat-1", [Message(Role.USER, f"{SECRET} other")])
        return await append(*args, **kwargs)

    monkeypatch.setattr(rt, "append", interfere_then_append)
    return await provider.save_messages("chat-1", [AFMessage("user", [f"{SECRET} mine"])])


async def _save_past_replay_bound(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Five groups of about 7 MiB: deciding what the replayed transcript repeats needs all 35 MiB,
    # past the 32 MiB the check reads (test_replay_bound.py).
    provider = AgentiumHistoryProvider(rt, ANA)
    big = [AFMessage("user", [f"{SECRET}{n}" + "x" * (7 * MIB)]) for n in range(5)]
    for message in big:
        await provider.save_messages("chat-1", [message])
    return await provider.save_messages("chat-1", [*big, AFMessage("user", ["new"])])


async def _load_group_over_bound(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    provider = AgentiumHistoryProvider(rt, ANA, max_messages=2)
    await provider.save_messages("chat-1", [AFMessage("user", [f"{SECRET} {n}"]) for n in range(4)])
    loaded = await provider.get_messages("chat-1")
    assert [m.text for m in loaded] == [f"{SECRET} 2", f"{SECRET} 3"]
    return loaded


async def _load_half_exchange(rt: HarnessRuntime, monkeypatch: pytest.MonkeyPatch) -> Any:
    # A host retracted the result and the answer: the call alone would be refused by the chat API.
    provider = AgentiumHistoryProvider(rt, ANA)
    call = AFMessage("assistant", [Content.from_function_call(call_id="w1", name="weather", arguments={})])
    result = AFMessage("tool", [Content.from_function_result(call_id="w1", result=f"{SECRET} sunny")])
    said = [AFMessage("user", [f"{SECRET} weather?"]), call, result, AFMessage("assistant", [SECRET])]
    await provider.save_messages("chat-1", said)
    await rt.retract(ANA, "chat-1", count=2, reason="undo")
    loaded = await provider.get_messages("chat-1")
    assert [m.text for m in loaded] == [f"{SECRET} weather?"]
    return loaded


def _ours(span: Any) -> list[tuple[str, dict[str, Any]]]:
    """The provider's events on ``span`` (an error leaving the call adds OpenTelemetry's ``exception``)."""
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith(SPAN_PREFIX)]


@dataclass(frozen=True)
class Case:
    run: Scenario
    raises: type[Exception] | None
    message: str
    event: str
    attributes: dict[str, Any]


def _failed(operation: str, error: str, state: str | None = None) -> dict[str, Any]:
    out = {"agentium.operation": operation, "error.type": error}
    return out if state is None else {**out, "agentium.commit_state": state}


FAILED = "agentium.agent_framework.failed"
HALF = "get_messages leaving out a call without its result"
CASES: dict[str, Case] = {
    "get_messages of an undecodable message": Case(
        _load_undecodable,
        ForeignMessageError,
        "get_messages failed: ForeignMessageError",
        FAILED,
        _failed("get_messages", "ForeignMessageError"),
    ),
    "get_messages of another framework's item": Case(
        _load_foreign,
        ForeignMessageError,
        "get_messages failed: ForeignMessageError",
        FAILED,
        _failed("get_messages", "ForeignMessageError"),
    ),
    "save_messages' replay check on an undecodable message": Case(
        _save_after_undecodable,
        ForeignMessageError,
        "save_messages failed: ForeignMessageError",
        FAILED,
        _failed("save_messages", "ForeignMessageError", "not_committed"),
    ),
    "get_messages of a view changing between every two pages": Case(
        _load_changing,
        SessionConflictError,
        "get_messages failed: SessionConflictError",
        FAILED,
        _failed("get_messages", "SessionConflictError", "not_committed"),
    ),
    "save_messages losing every race": Case(
        _save_changing,
        SessionConflictError,
        "save_messages failed: SessionConflictError",
        FAILED,
        _failed("save_messages", "SessionConflictError", "not_committed"),
    ),
    "save_messages past the replay check's bound": Case(
        _save_past_replay_bound,
        ReplayCheckLimitError,
        "save_messages failed: ReplayCheckLimitError "
        "(the replay check passed its read bound of 33554432 bytes)",
        FAILED,
        _failed("save_messages", "ReplayCheckLimitError", "not_committed"),
    ),
    "get_messages cutting a group alone over max_messages": Case(
        _load_group_over_bound,
        None,
        "get_messages: group 0 alone is over the bound; 2 of its 4 messages returned",
        "agentium.agent_framework.group_cut",
        {
            "agentium.operation": "get_messages",
            "agentium.group.seq": 0,
            "agentium.messages.kept": 2,
            "agentium.messages.stored": 4,
        },
    ),
    HALF: Case(
        _load_half_exchange,
        None,
        "get_messages: 1 tool call or result contents without their other half in the view left out "
        "(1 messages with nothing else left out with them)",
        "agentium.agent_framework.half_exchanges_left_out",
        {
            "agentium.operation": "get_messages",
            "agentium.contents.left_out": 1,
            "agentium.messages.left_out": 1,
        },
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
        stored = await rt.read_history(ANA, "chat-1", view=False, max_groups=50, max_bytes=64 * MIB)
        assert any(SECRET in m.content for g in stored.groups for m in g.messages)
    warned = [r for r in caplog.records if r.name == LOGGER]
    assert [(r.levelno, r.getMessage()) for r in warned] == [(logging.WARNING, case.message)]
    # The record's fields are the event's attributes, named as the core names its own (README).
    fields = {
        "agentium_" + k.removeprefix("agentium.").replace(".", "_"): v for k, v in case.attributes.items()
    }
    assert {name: getattr(warned[0], name, None) for name in fields} == fields
    # The event is on the provider call's own span, a child of the host's span current in the call.
    [host] = [s for s in spans.finished if s.name == "host turn"]
    # The scenario's own earlier loads and saves have spans too: one has the case's event.
    calls = [s for s in spans.finished if s.name == SPAN_PREFIX + case.attributes["agentium.operation"]]
    [call] = [s for s in calls if _ours(s)]
    assert call.parent is not None and call.parent.span_id == host.context.span_id
    assert _ours(call) == [(case.event, case.attributes)]
    assert not host.events and not [e for s in spans.finished if s is not call for e in _ours(s)]
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
    # The scenario's own earlier loads and saves have spans too: the case's ended last.
    call = [s for s in recorder.finished if s.name == SPAN_PREFIX + operation][-1]
    failed = {} if case.raises is None else {"error.type": case.raises.__name__}
    assert dict(call.attributes or {}) == {"agentium.operation": operation, **failed}
    assert _ours(call) == [(case.event, case.attributes)]
    # The core's history reads made in the call are its children, in the same trace.
    reads = [
        s
        for s in recorder.finished
        if s.name == "agentium.history.read"
        and s.parent is not None
        and s.parent.span_id == call.context.span_id
    ]
    assert reads
    assert not [text for text in recorder.carried() if SECRET in text]
    recorder.provider.shutdown()


async def test_with_no_host_span_current_the_event_is_on_the_calls_span(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, the event needed a host's span to go on and there was the WARNING only.
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        with pytest.raises(ForeignMessageError):
            await _load_undecodable(rt, pytest.MonkeyPatch())
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "get_messages failed: ForeignMessageError"
    ]
    [call] = [s for s in spans.finished if s.name == "agentium.agent_framework.get_messages"]
    assert call.parent is None and _ours(call) == [(FAILED, _failed("get_messages", "ForeignMessageError"))]
    assert dict(call.attributes or {})["error.type"] == "ForeignMessageError"
    assert not [text for text in spans.carried() if SECRET in text]


async def test_a_refusal_of_the_hosts_own_messages_is_raised_not_logged(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Bad input is the caller's error (as the core's argument checks): typed, nothing written, no WARNING.
    caplog.set_level(logging.DEBUG, logger="agentium")
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        with pytest.raises(ForeignMessageError):
            await AgentiumHistoryProvider(rt, ANA).save_messages("chat-1", [{"role": "user", "text": SECRET}])  # type: ignore[list-item]
        assert (await rt.read_history(ANA, "chat-1", max_groups=1)).groups == ()
    assert not [r for r in caplog.records if r.name == LOGGER]


class _Client(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):  # type: ignore[misc,type-arg]
    """A chat client composed as the framework's own are, answering every request at once (no network)."""

    async def _inner_get_response(  # type: ignore[override]
        self, *, messages: Sequence[AFMessage], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> ChatResponse:
        return ChatResponse(messages=[AFMessage("assistant", ["ok"])], response_id="r")


async def test_in_an_agent_run_the_event_is_on_the_load_span_under_the_frameworks_invoke_agent(
    tmp_path: Path, spans: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # The framework's own instrumentation (on by default) opens invoke_agent around the run's load.
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with _runtime(tmp_path / "agentium.db", spans) as rt:
        await _load_half_exchange(rt, pytest.MonkeyPatch())
        caplog.clear()
        spans.clear()
        agent = Agent(_Client(), context_providers=[AgentiumHistoryProvider(rt, ANA, store_outputs=False)])
        await agent.run("And now?", session=agent.create_session(session_id="chat-1"))
    [run] = [s for s in spans.finished if s.name.startswith("invoke_agent")]
    [load] = [s for s in spans.finished if s.name == "agentium.agent_framework.get_messages"]
    assert load.parent is not None and load.parent.span_id == run.context.span_id
    assert _ours(load) == [("agentium.agent_framework.half_exchanges_left_out", CASES[HALF].attributes)]
    assert not _ours(run)
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    assert not [text for text in spans.carried() if SECRET in text]
