"""A hostile provider or tool never makes ``run()`` raise an untyped error or lose a write that ran.

Once a write tool ran, its group is committed (with an interruption record)
whatever the provider or the tool does next: a reply of the wrong shape,
arguments nested far too deep, an exception whose text cannot be read or
holds a lone surrogate, a tool's return value that is not text, or output far
too large. ``run()`` raises only typed errors carrying ``commit_state``, and
the engine never writes a snapshot its own decoder would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
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
    EncodingError,
    InterruptionCause,
    ProviderError,
    RunResult,
    SessionKey,
    Telemetry,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import commit as commit_module
from agentium_harness._engine import reply_check, turn_budget
from agentium_harness._engine import turn as turn_module
from agentium_harness._text import error_text
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.plugin_api import (
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    Role,
    ToolCall,
    Usage,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")

Step = Callable[[ModelRequest], ModelResponse]


class Hostile(ModelProvider):
    """Answers each model call with the next step of its script (then plain text)."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True)

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if not self.steps:
            return ModelResponse(Message(Role.ASSISTANT, "done"))
        return self.steps.pop(0)(request)


def calls(*made: ToolCall) -> Step:
    return lambda request: ModelResponse(Message(Role.ASSISTANT, "", made))


DEPLOY = calls(ToolCall("c1", "deploy", {}))


def raises(exc: BaseException) -> Step:
    def step(request: ModelRequest) -> ModelResponse:
        raise exc

    return step


def odd_content(content: object) -> Step:
    return lambda request: ModelResponse(Message(Role.ASSISTANT, content))  # type: ignore[arg-type]


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")

    def __repr__(self) -> str:
        raise RuntimeError("repr boom")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("obj str boom")


def nested(depth: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    node = top
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return top


async def _run(
    provider: ModelProvider, handler: Any = None, telemetry: Telemetry | None = None, text: str = "ship it"
) -> tuple[RunResult | AgentiumError, list[int], Any]:
    """One run with a write tool ``deploy``; what it returned or raised, whether the tool ran, the store."""
    ran: list[int] = []

    async def deploy(arguments: dict[str, Any]) -> Any:
        ran.append(1)
        return "deployed" if handler is None else await handler(arguments)

    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        telemetry=telemetry,
    )
    async with runtime:
        try:
            outcome: RunResult | AgentiumError = await runtime.run(ANA, "s1", text, grants=["deploy"])
        except AgentiumError as exc:  # anything else fails the test
            outcome = exc
    return outcome, ran, store


async def _kept(outcome: object, store: InMemorySessionStore, kind: type[AgentiumError]) -> Message:
    """The error says the tool's group was committed, and the stored group holds the tool's result."""
    assert isinstance(outcome, kind), outcome
    assert outcome.commit_state is CommitState.COMMITTED
    assert outcome.run_result is not None and outcome.run_result.group_seq == 0
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [group] = stored.snapshot.resident
    assert group.retained.interruption is not None
    assert group.retained.interruption.cause is InterruptionCause.PROVIDER_FAILED
    return next(m for m in group.messages if m.role is Role.TOOL)


@pytest.mark.parametrize("content", [123, None, ["a"]])
async def test_a_reply_whose_content_is_not_text_after_a_write_is_refused_and_the_write_kept(
    content: object,
) -> None:
    outcome, ran, store = await _run(Hostile(DEPLOY, odd_content(content)))
    assert ran == [1]
    result = await _kept(outcome, store, ContractViolationError)
    assert result.content == "deployed"
    assert "content must be a string" in str(outcome)


@pytest.mark.parametrize("bad", [odd_content(123), calls(ToolCall("c2", "deploy", nested(5000)))])
async def test_a_malformed_reply_is_refused_before_the_model_call_span_reads_it(bad: Step) -> None:
    # With tracing on, the span's token estimate and content read the reply: checked first.
    traces = TracerProvider()
    traces.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    telemetry = Telemetry(tracer_provider=traces, capture_content=True)
    outcome, ran, store = await _run(Hostile(DEPLOY, bad), telemetry=telemetry)
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)


async def test_arguments_nested_thousands_deep_after_a_write_are_refused_and_the_write_kept() -> None:
    outcome, ran, store = await _run(Hostile(DEPLOY, calls(ToolCall("c2", "deploy", nested(5000)))))
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)


async def test_a_provider_error_whose_text_cannot_be_read_is_a_provider_error_and_the_write_kept() -> None:
    outcome, ran, store = await _run(Hostile(DEPLOY, raises(Unreadable())))
    assert ran == [1]
    await _kept(outcome, store, ProviderError)
    assert "Unreadable (its message could not be read)" in str(outcome)


async def test_a_provider_error_with_a_lone_surrogate_still_commits_the_write() -> None:
    outcome, ran, store = await _run(Hostile(DEPLOY, raises(RuntimeError("secret \ud800 content"))))
    assert ran == [1]
    await _kept(outcome, store, ProviderError)
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    interruption = stored.snapshot.resident[0].retained.interruption
    assert interruption is not None and "secret \ufffd content" in interruption.detail


@pytest.mark.parametrize(
    ("returned", "words"),
    [(None, "returned NoneType, not text"), (42, "returned int, not text"), (Unprintable(), "Unprintable")],
)
async def test_a_tool_that_returns_no_text_is_invalid_output_and_its_effect_kept(
    returned: object, words: str
) -> None:
    async def handler(arguments: dict[str, Any]) -> object:
        return returned

    outcome, ran, _ = await _run(Hostile(DEPLOY), handler)
    assert ran == [1]
    assert isinstance(outcome, RunResult) and outcome.committed
    [done] = outcome.tool_outcomes
    assert done.status is ToolStatus.INVALID_OUTPUT and words in done.detail
    assert outcome.has("tool_invalid_output")


@pytest.mark.parametrize(
    ("exc", "detail"),
    [
        (Unreadable(), "Unreadable (its message could not be read)"),
        (ValueError("cannot open /srv/\udcff.cfg"), "ValueError: cannot open /srv/\ufffd.cfg"),
    ],
)
async def test_a_tool_whose_exception_text_is_unusable_fails_typed_and_its_effect_kept(
    exc: Exception, detail: str
) -> None:
    async def handler(arguments: dict[str, Any]) -> str:
        raise exc

    outcome, ran, store = await _run(Hostile(DEPLOY), handler)
    assert ran == [1]
    assert isinstance(outcome, RunResult) and outcome.committed
    [done] = outcome.tool_outcomes
    assert done.status is ToolStatus.FAILED and done.detail == detail
    # A handler that ran and raised failed: it was not refused.
    assert [d.code for d in outcome.diagnostics if d.code.startswith("tool_")] == ["tool_failed"]
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [tool_message] = [m for m in stored.snapshot.resident[0].messages if m.role is Role.TOOL]
    assert tool_message.content == f"error: {detail}"


def test_error_text_never_raises_and_is_always_storable() -> None:
    assert error_text(Unreadable()) == "Unreadable (its message could not be read)"
    assert error_text(Unreadable(), named=False) == "(its message could not be read)"
    assert error_text(ValueError("a\udc80b")) == "ValueError: a\ufffdb"
    assert error_text(ValueError("plain"), named=False) == "plain"


async def test_tool_output_over_the_bound_is_cut_with_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_module, "MAX_TOOL_OUTPUT_BYTES", 1000)

    async def handler(arguments: dict[str, Any]) -> str:
        return "z" * 5000

    outcome, _, store = await _run(Hostile(DEPLOY), handler)
    assert isinstance(outcome, RunResult) and outcome.committed
    [done] = outcome.tool_outcomes
    assert done.status is ToolStatus.OK and "were cut" in done.detail
    assert outcome.has("tool_output_cut")
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [tool_message] = [m for m in stored.snapshot.resident[0].messages if m.role is Role.TOOL]
    assert len(tool_message.content.encode()) <= 1000 and "5000 bytes, cut" in tool_message.content


async def test_a_reply_over_the_bound_after_a_write_is_refused_and_the_write_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reply_check, "MAX_REPLY_BYTES", 1000)
    outcome, ran, store = await _run(Hostile(DEPLOY, odd_content("y" * 1001)))
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)
    assert "more than 1000 bytes" in str(outcome)


async def test_a_snapshot_over_the_decoders_limit_is_never_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # The decoder's limit, made small: what would be saved and never load again is refused whole.
    monkeypatch.setattr(commit_module, "MAX_JSON_BYTES", 20_000)

    async def handler(arguments: dict[str, Any]) -> str:
        return "z" * 30_000

    outcome, ran, store = await _run(Hostile(DEPLOY), handler)
    assert ran == [1]
    assert isinstance(outcome, EncodingError) and outcome.commit_state is CommitState.NOT_COMMITTED
    assert "MAX_JSON_BYTES" in str(outcome)
    assert outcome.run_result is not None and len(outcome.run_result.tool_outcomes) == 1
    assert await store.load(KEY, OpContext()) is None


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (Message(Role.ASSISTANT, "x", payload={"a": 1}), "payload and payload_format together"),
        (
            Message(Role.ASSISTANT, "x", payload={"a": "y" * (9 * 1024 * 1024)}, payload_format="f/v1"),
            "over the limit",
        ),
        (Message(Role.ASSISTANT, "", (ToolCall("c2", "deploy", {1: 2}),)), "not plain JSON"),  # type: ignore[dict-item]
    ],
)
async def test_a_reply_append_would_refuse_is_refused_and_the_write_kept(
    message: Message, words: str
) -> None:
    outcome, ran, store = await _run(Hostile(DEPLOY, lambda request: ModelResponse(message)))
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)
    assert words in str(outcome)


async def test_a_reply_with_too_many_tool_calls_is_refused_before_any_runs() -> None:
    many = tuple(ToolCall(f"c{i}", "deploy", {}) for i in range(turn_module.MAX_TOOL_CALLS + 1))
    outcome, ran, store = await _run(Hostile(calls(*many)))
    assert ran == []
    assert isinstance(outcome, ContractViolationError) and outcome.commit_state is CommitState.NOT_COMMITTED
    assert f"over the limit of {turn_module.MAX_TOOL_CALLS}" in str(outcome)
    assert await store.load(KEY, OpContext()) is None


def _small_turn_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn may take 20,000 bytes and a snapshot 40,000: room for the turn, not for 24 KB of arguments."""
    monkeypatch.setattr(turn_budget, "MAX_TURN_BYTES", 20_000)
    monkeypatch.setattr(commit_module, "MAX_JSON_BYTES", 40_000)


BIG_CALLS = calls(*(ToolCall(f"b{i}", "deploy", {"x": "a" * 8000}) for i in range(3)))


async def test_a_reply_the_turn_could_not_commit_is_refused_before_any_tool_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each call fits every bound of its own; together they could never be committed: none may run.
    _small_turn_bound(monkeypatch)
    outcome, ran, store = await _run(Hostile(BIG_CALLS))
    assert ran == []
    assert isinstance(outcome, ContractViolationError) and outcome.commit_state is CommitState.NOT_COMMITTED
    assert "MAX_TURN_BYTES" in str(outcome) and "aaaa" not in str(outcome)
    assert await store.load(KEY, OpContext()) is None


async def test_a_reply_over_the_turns_room_after_a_write_is_refused_and_the_write_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_turn_bound(monkeypatch)
    outcome, ran, store = await _run(Hostile(DEPLOY, BIG_CALLS))
    assert ran == [1]  # the first reply's call only
    assert (await _kept(outcome, store, ContractViolationError)).content == "deployed"
    assert "MAX_TURN_BYTES" in str(outcome)


@pytest.mark.parametrize("output", ["z" * 45_000, "\x00" * 8_000, RuntimeError("e" * 45_000)])
async def test_a_result_too_large_for_the_turn_is_cut_and_committed(
    monkeypatch: pytest.MonkeyPatch, output: str | Exception
) -> None:
    # The tool ran: its call and (cut) result are committed, and the next call still has room for its own.
    _small_turn_bound(monkeypatch)

    async def handler(arguments: dict[str, Any]) -> str:
        if arguments.get("n") == 2:
            return "second"
        if isinstance(output, Exception):
            raise output
        return output

    two = calls(ToolCall("c1", "deploy", {"n": 1}), ToolCall("c2", "deploy", {"n": 2}))
    outcome, ran, store = await _run(Hostile(two), handler)
    assert ran == [1, 1]
    assert isinstance(outcome, RunResult) and outcome.committed and outcome.output == "done"
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [group] = stored.snapshot.resident
    first, second = (m.content for m in group.messages if m.role is Role.TOOL)
    assert "bytes, cut]" in first and second == "second"
    assert group.size_bytes <= 20_000 + 1_000  # the messages within the bound; the rest is the record
    if not isinstance(output, Exception):
        assert "MAX_TURN_BYTES" in outcome.tool_outcomes[0].detail and outcome.has("tool_output_cut")


async def test_a_turn_within_the_bound_is_committed_whatever_its_characters_could_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Plain text is counted by what it could take at most (six bytes a character, no encoding) and
    # measured when that nears the bound: 3,000 + 2,500 + 6,000 characters of ASCII are 12 KB of
    # JSON, within 20,000, though six times that is not. Nothing is refused and nothing is cut.
    _small_turn_bound(monkeypatch)

    async def handler(arguments: dict[str, Any]) -> str:
        return "z" * 2_500

    long_reply: Step = lambda request: ModelResponse(Message(Role.ASSISTANT, "y" * 6_000))  # noqa: E731
    outcome, ran, store = await _run(Hostile(DEPLOY, long_reply), handler, text="s" * 3_000)
    assert ran == [1]
    assert isinstance(outcome, RunResult) and outcome.committed and outcome.output == "y" * 6_000
    assert not outcome.has("tool_output_cut")
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [group] = stored.snapshot.resident
    assert [m.content for m in group.messages if m.role is Role.TOOL] == ["z" * 2_500]


def rewrites_arguments(request: ModelRequest) -> ModelResponse:
    """Rewrites every tool call's arguments it was handed (the turn's and the history's), then answers."""
    for message in (*request.history, *request.turn):
        for call in message.tool_calls:
            call.arguments["forged"] = object()  # no commit could encode this
    return ModelResponse(Message(Role.ASSISTANT, "done"))


async def test_a_provider_that_rewrites_the_arguments_it_was_handed_changes_no_committed_history() -> None:
    provider = Hostile(DEPLOY, rewrites_arguments, DEPLOY, rewrites_arguments)
    store = InMemorySessionStore()

    async def deploy(arguments: dict[str, Any]) -> str:
        return "deployed"

    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
    )
    async with runtime:
        for _ in range(2):  # the second run's history holds the first run's tool call
            result = await runtime.run(ANA, "s1", "ship it", grants=["deploy"])
            assert result.output == "done" and result.tool_outcomes[0].status is ToolStatus.OK
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    committed = [c.arguments for g in stored.snapshot.resident for m in g.messages for c in m.tool_calls]
    assert committed == [{}, {}]  # the arguments the tool ran with


class Escaping(BaseException):
    """Neither an Exception nor a cancellation: what no adapter (or tool) may raise."""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_provider_raising_a_base_exception_after_a_write_is_a_typed_error_and_the_write_kept(
    backend: str,
) -> None:
    # On trio it escaped the call's system task and ended the whole program (TrioInternalError);
    # on asyncio the caller read a cancellation and asyncio logged the exception's text.
    outcome, ran, store = anyio.run(_run, Hostile(DEPLOY, raises(Escaping("boom"))), backend=backend)
    assert ran == [1]
    anyio.run(_kept, outcome, store, ContractViolationError)
    assert "Escaping" in str(outcome) and "cancelled" not in str(outcome)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_tool_raising_a_base_exception_fails_and_its_effect_is_kept(backend: str) -> None:
    async def handler(arguments: dict[str, Any]) -> str:
        raise Escaping("boom")

    outcome, ran, _store = anyio.run(_run, Hostile(DEPLOY), handler, backend=backend)
    assert ran == [1] and isinstance(outcome, RunResult)
    assert outcome.tool_outcomes[0].status is ToolStatus.FAILED
    assert "Escaping" in outcome.tool_outcomes[0].detail


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_keyboard_interrupt_in_a_provider_reaches_the_host_as_itself(backend: str) -> None:
    with pytest.raises(KeyboardInterrupt):
        anyio.run(_run, Hostile(raises(KeyboardInterrupt())), backend=backend)


class FlippingUsage(ModelResponse):
    """Reports valid usage when first read, then counts that are no numbers."""

    __slots__ = ("reads",)

    @property  # type: ignore[override]
    def usage(self) -> Usage:
        reads = getattr(self, "reads", 0)
        object.__setattr__(self, "reads", reads + 1)
        return Usage(1, 1) if reads == 0 else Usage("many", -5)  # type: ignore[arg-type]

    @usage.setter
    def usage(self, value: Usage) -> None:
        pass


class Liar(int):
    """A negative count that says it is not below 0."""

    def __ge__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize(
    "usage",
    [Usage(10**30, 1), Usage(1, 10**5000), Usage(Liar(-5), 1)],
    ids=["huge", "unprintable", "int-subclass"],
)
async def test_usage_no_count_can_be_is_refused_and_the_write_kept(usage: Usage) -> None:
    outcome, ran, store = await _run(
        Hostile(DEPLOY, lambda request: ModelResponse(Message(Role.ASSISTANT, "done"), usage))
    )
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)
    assert "invalid usage" in str(outcome)


async def test_usage_that_changes_when_read_again_is_read_once() -> None:
    # The check read a valid usage; the run then read the property again and raised a bare TypeError.
    outcome, ran, _store = await _run(
        Hostile(DEPLOY, lambda request: FlippingUsage(Message(Role.ASSISTANT, "ok")))
    )
    assert ran == [1] and isinstance(outcome, RunResult)
    assert outcome.usage.input_tokens is not None and outcome.usage.input_tokens >= 1


class FlippingCalls(Message):
    """One tool call when first read, then the same call twice (and more than the limit allows)."""

    __slots__ = ("reads",)

    @property  # type: ignore[override]
    def tool_calls(self) -> tuple[ToolCall, ...]:
        reads = getattr(self, "reads", 0)
        object.__setattr__(self, "reads", reads + 1)
        call = ToolCall("c1", "deploy", {})
        return (call,) if reads == 0 else (call,) * (turn_module.MAX_TOOL_CALLS + 1)

    @tool_calls.setter
    def tool_calls(self, value: tuple[ToolCall, ...]) -> None:
        pass


async def test_tool_calls_that_change_when_read_again_are_checked_as_they_run() -> None:
    outcome, ran, store = await _run(
        Hostile(lambda request: ModelResponse(FlippingCalls(Role.ASSISTANT, "")))
    )
    assert ran == []  # none of the 129 calls (one id, repeated) was run
    assert isinstance(outcome, ContractViolationError)
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    assert await store.load(KEY, OpContext()) is None


class Alias(str):
    """A tool name that hashes and compares as ``deploy`` whatever it says it is."""

    def __hash__(self) -> int:
        return hash("deploy")

    def __eq__(self, other: object) -> bool:
        return other == "deploy"


async def test_a_tool_name_that_compares_as_another_runs_only_the_tool_it_names() -> None:
    # The registry looked the name up by its own hash and ==: 'deploy' ran, history said 'harmless'.
    outcome, ran, store = await _run(Hostile(calls(ToolCall("c1", Alias("harmless"), {}))))
    assert ran == [] and isinstance(outcome, RunResult)
    [refused] = outcome.tool_outcomes
    assert refused.name == "harmless" and refused.status is ToolStatus.REFUSED_UNKNOWN
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [call] = [c for g in stored.snapshot.resident for m in g.messages for c in m.tool_calls]
    assert type(call.name) is str and call.name == "harmless"


def _from_another_run() -> ContractViolationError:
    """An error as a nested runtime's run() raises it: with that run's commit state."""
    error = ContractViolationError("the inner run's provider broke its contract")
    error.commit_state = CommitState.COMMITTED
    return error


async def test_an_error_from_another_run_does_not_speak_for_this_one() -> None:
    # It was passed on as it was: 'committed' (the inner run's), and this run's write never committed.
    outcome, ran, store = await _run(Hostile(DEPLOY, raises(_from_another_run())))
    assert ran == [1]
    await _kept(outcome, store, ContractViolationError)
