"""Deadlines, cancellation, retries and bad answers, each against the stub server over real HTTP.

No test asserts a wall-clock time: a call that must stop early is held by the
server until the test releases it, so returning at all proves it stopped.
"""

from __future__ import annotations

import logging
import threading

import anyio
import pytest
from openai_helpers import make_provider, request_arrived
from openai_stub_server import Reply, StubServer, recording, running

from agentium_harness import OperationCancelledError
from agentium_harness.plugin_api import CancelSignal, Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    OpenAIMalformedReplyError,
    OpenAIProvider,
    OpenAIRetriesExhaustedError,
    OpenAIStatusError,
    OpenAIStreamingOnlyError,
)

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, "hi"),))


async def test_past_its_deadline_the_call_stops(stub: StubServer, provider: OpenAIProvider) -> None:
    """The server does not answer before the deadline: OperationCancelledError, 'deadline passed'."""
    release = threading.Event()
    stub.add(Reply.recorded("plain_answer", hold=release))
    try:
        with pytest.raises(OperationCancelledError) as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(0.3))
    finally:
        release.set()
    assert caught.value.reason == "deadline passed"
    assert "deadline" in str(caught.value)
    # At most one request (on a loaded machine it may not even have arrived), never a retry.
    assert len(stub.completions) <= 1


async def test_an_expired_context_sends_nothing(stub: StubServer, provider: OpenAIProvider) -> None:
    """A context already past its deadline (or cancelled) is refused before any request."""
    expired = OpContext.with_timeout(0.0)
    with pytest.raises(OperationCancelledError):
        await provider.complete(REQUEST, expired)
    cancelled = OpContext.unbounded()
    cancelled.signal.cancel("host stopped")
    with pytest.raises(OperationCancelledError, match="host stopped"):
        await provider.complete(REQUEST, cancelled)
    assert stub.requests == []


async def test_cancelling_the_signal_abandons_the_request(stub: StubServer, provider: OpenAIProvider) -> None:
    """The operation's signal cancelled mid-request: the call stops while the server still holds it."""
    release = threading.Event()
    stub.add(Reply.recorded("plain_answer", hold=release))
    parent = CancelSignal()
    ctx = OpContext(signal=parent.child())
    outcome: list[BaseException] = []

    async def call() -> None:
        try:
            await provider.complete(REQUEST, ctx)
        except OperationCancelledError as exc:
            outcome.append(exc)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await request_arrived(stub)
            parent.cancel("run cancelled by the host")
    finally:
        release.set()
    assert len(outcome) == 1 and isinstance(outcome[0], OperationCancelledError)
    assert outcome[0].reason == "run cancelled by the host"
    # The server was still holding the answer (released only above): the call stopped on the signal.
    assert len(stub.completions) == 1


async def test_cancel_scope_cancellation_propagates(stub: StubServer, provider: OpenAIProvider) -> None:
    """Cancelled from outside by an anyio scope (as the engine does at its deadline), the call just ends."""
    release = threading.Event()
    stub.add(Reply.recorded("plain_answer", hold=release))
    try:
        with anyio.CancelScope() as scope:

            async def cancel_when_sent() -> None:
                await request_arrived(stub)
                scope.cancel()

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_when_sent)
                await provider.complete(REQUEST, OpContext.unbounded())
    finally:
        release.set()
    assert scope.cancelled_caught


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_a_retryable_status_is_retried_then_succeeds(stub: StubServer, status: int) -> None:
    """429 and 5xx are retried (with the server's Retry-After honoured) and the later success is returned."""
    stub.add(
        Reply.error(status, "slow down", headers={"Retry-After": "0.02"}),
        Reply.error(status, "still busy"),
        Reply.recorded("plain_answer"),
    )
    provider = make_provider(stub, max_retries=2)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert response.message.content == recording("plain_answer")["choices"][0]["message"]["content"]
    assert len(stub.completions) == 3 and provider.attempts == 3
    # Every attempt sent the same request.
    assert len({repr(r.body) for r in stub.completions}) == 1


async def test_retries_are_bounded(stub: StubServer) -> None:
    """After 1 + max_retries retryable failures: OpenAIRetriesExhaustedError with the last status."""
    stub.add(*(Reply.error(503, "overloaded") for _ in range(5)))
    provider = make_provider(stub, max_retries=2)
    try:
        with pytest.raises(OpenAIRetriesExhaustedError) as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.attempts == 3 and caught.value.status == 503
    assert "HTTP 503" in str(caught.value) and "max_retries=2" in str(caught.value)
    assert len(stub.completions) == 3 and len(stub.script) == 2  # nothing sent beyond the bound


async def test_a_wait_past_the_deadline_is_not_started(stub: StubServer) -> None:
    """A Retry-After longer than the time left ends the call at once with the failure, not a late retry."""
    stub.add(Reply.error(429, "rate limited", headers={"Retry-After": "30"}), Reply.recorded("plain_answer"))
    provider = make_provider(stub, max_retries=3, retry_backoff_max_s=60)
    try:
        # 20 s: the first answer must arrive within it; the 30 s Retry-After still outlasts it.
        with pytest.raises(OpenAIRetriesExhaustedError, match="past the deadline") as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(20))
    finally:
        await provider.aclose()
    assert caught.value.status == 429 and len(stub.completions) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_statuses_are_not_retried(stub: StubServer, status: int) -> None:
    """A status retrying cannot fix fails at once with OpenAIStatusError naming the status."""
    stub.add(Reply.error(status, "not for you"), Reply.recorded("plain_answer"))
    provider = make_provider(stub, max_retries=3)
    try:
        with pytest.raises(OpenAIStatusError) as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.status == status and f"HTTP {status}" in str(caught.value)
    assert len(stub.completions) == 1


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_not_followed(stub: StubServer, status: int) -> None:
    """A 3xx to another server: the conversation is not sent there; the status is the error."""
    with running() as elsewhere:
        target = f"{elsewhere.base_url}/chat/completions"
        stub.add(Reply(body={}, status=status, headers={"Location": target}))
        elsewhere.add(Reply.recorded("plain_answer"))
        provider = make_provider(stub, max_retries=2)
        try:
            with pytest.raises(OpenAIStatusError) as caught:
                await provider.complete(REQUEST, OpContext.with_timeout(30))
        finally:
            await provider.aclose()
        assert caught.value.status == status
        assert elsewhere.requests == [] and len(stub.completions) == 1


async def test_the_key_never_appears_in_an_error(stub: StubServer) -> None:
    """A server that echoes the key in its 401 message: the provider's message has *** instead."""
    assert stub.api_key
    stub.add(Reply.error(401, f"Incorrect API key provided: {stub.api_key}."))
    provider = make_provider(stub)
    try:
        with pytest.raises(OpenAIStatusError) as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert stub.api_key not in str(caught.value) and "***" in str(caught.value)
    assert stub.api_key not in repr(provider) and stub.api_key not in repr(provider.config)


async def test_an_unreachable_server_is_retried_then_reported(stub: StubServer) -> None:
    """Connection refused counts as retryable; when attempts run out the error says it was the connection."""
    port = stub.port
    stub.stop()
    provider = make_provider(stub, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    try:
        with pytest.raises(OpenAIRetriesExhaustedError, match="connection failed") as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.attempts == 2 and caught.value.status is None


async def test_a_slow_attempt_times_out_and_is_retried(stub: StubServer) -> None:
    """An attempt longer than timeout_s is abandoned and retried; the next answer is used."""
    release = threading.Event()
    stub.add(Reply.recorded("plain_answer", hold=release), Reply.recorded("after_tool"))
    provider = make_provider(stub, timeout_s=1.0, max_retries=1)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(20))
    finally:
        release.set()
        await provider.aclose()
    assert response.message.content == "It is 21 °C and sunny in Lisbon."
    assert len(stub.completions) == 2


async def test_malformed_tool_arguments_are_a_clear_error(stub: StubServer, provider: OpenAIProvider) -> None:
    """Arguments that are not valid JSON: OpenAIMalformedReplyError naming the call; no retry."""
    stub.add(Reply.recorded("malformed_arguments"))
    with pytest.raises(OpenAIMalformedReplyError, match=r"tool call 0 \('get_weather'\) are not valid JSON"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert len(stub.completions) == 1


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('"just a string"', "JSON str, not an object"),
        ("[1, 2]", "JSON list, not an object"),
        (12, "are not a JSON string"),
    ],
)
async def test_arguments_must_be_an_object(
    stub: StubServer, provider: OpenAIProvider, arguments: object, expected: str
) -> None:
    """Valid JSON that is not an object cannot be a tool's arguments (nor can a bare number)."""
    body = recording("tool_call")
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = arguments
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match=expected):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


async def test_a_tool_call_without_an_id(stub: StubServer, provider: OpenAIProvider) -> None:
    """A tool call whose id is missing is refused before anything could run it."""
    body = recording("tool_call")
    del body["choices"][0]["message"]["tool_calls"][0]["id"]
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match="no usable id or name"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


async def test_no_choices_is_a_clear_error(stub: StubServer, provider: OpenAIProvider) -> None:
    """A 200 answer with an empty choices list: OpenAIMalformedReplyError, 'no choices'."""
    stub.add(Reply.recorded("no_choices"))
    with pytest.raises(OpenAIMalformedReplyError, match="no choices"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>bad gateway</html>", "not JSON"),
        ([1, 2, 3], "not an object"),
        ({"choices": [{"index": 0}]}, "no message object"),
        ({"choices": [{"message": {"role": "assistant", "content": 12}}]}, "not text"),
        # A tool_calls of the wrong type, even an empty one, was once taken for "no calls": an answer.
        ({"choices": [{"message": {"content": "ok", "tool_calls": {}}}]}, "tool_calls is a JSON dict"),
        ({"choices": [{"message": {"content": "ok", "tool_calls": ""}}]}, "tool_calls is '', not a list"),
        ({"choices": [{"message": {"content": "ok", "tool_calls": False}}]}, "tool_calls is a JSON bool"),
        ({"choices": [{"message": {"content": "ok", "tool_calls": {"id": "c"}}}]}, "not a list"),
    ],
)
async def test_other_malformed_bodies(
    stub: StubServer, provider: OpenAIProvider, body: object, expected: str
) -> None:
    """Every unusable 200 body is an OpenAIMalformedReplyError, never an AttributeError or KeyError."""
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match=expected):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


async def test_an_event_stream_answer_is_refused_clearly(stub: StubServer, provider: OpenAIProvider) -> None:
    """A streaming-only server answers with text/event-stream: OpenAIStreamingOnlyError says what to do."""
    stub.add(Reply.event_stream())
    with pytest.raises(OpenAIStreamingOnlyError, match="event stream") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert '"stream": false' in str(caught.value)
    assert stub.completions[0].body["stream"] is False  # we asked for one JSON answer


async def test_a_server_that_refuses_non_streamed_requests(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """A 400 that says only streaming is served is reported as streaming-only, not as a bad request."""
    stub.add(Reply.error(400, "This endpoint only supports stream=true requests"))
    with pytest.raises(OpenAIStreamingOnlyError, match="refused a non-streamed request"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert len(stub.completions) == 1


async def test_retries_and_giving_up_are_warnings_without_the_server_text(
    stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each retried attempt and the give-up are WARNINGs on agentium.plugins.provider_openai (issue 24)."""
    stub.add(*(Reply.error(503, "overloaded: your prompt was hi") for _ in range(3)))
    provider = make_provider(stub, max_retries=2)
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
        try:
            with pytest.raises(OpenAIRetriesExhaustedError):
                await provider.complete(REQUEST, OpContext.with_timeout(30))
        finally:
            await provider.aclose()
    records = [r for r in caplog.records if r.name == "agentium.plugins.provider_openai"]
    assert [r.agentium_attempts for r in records] == [1, 2, 3]
    assert all(r.levelno == logging.WARNING and r.agentium_http_status == 503 for r in records)
    assert "giving up" in records[-1].getMessage()
    assert not any("your prompt" in r.getMessage() for r in records)


def test_the_provider_names_itself_for_genai_spans(stub: StubServer) -> None:
    provider = make_provider(stub)
    assert provider.gen_ai_provider_name == "openai"
    assert provider.gen_ai_request_model == provider.config.model
