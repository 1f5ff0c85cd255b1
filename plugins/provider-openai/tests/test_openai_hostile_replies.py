"""Hostile 200 answers and error texts, each against the stub server over real HTTP.

A server may echo the key (and the request) in whatever it sends back; every
text a message quotes of it is scrubbed (``***`` for the key, control
characters escaped, length capped). Every value read from a reply that is
unusable is a typed error of the plugin, never a bare ``TypeError`` or
``OverflowError``.
"""

from __future__ import annotations

import json

import openai
import pytest
from openai_helpers import KEY_ENV
from openai_stub_server import Reply, StubServer, recording, running

from agentium_harness.plugin_api import InvalidArgumentError, Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    OpenAIEmbeddingReplyError,
    OpenAIMalformedReplyError,
    OpenAIProvider,
    OpenAIProviderConfig,
    OpenAIStatusError,
    OpenAIStreamingOnlyError,
)

pytestmark = pytest.mark.anyio

PRIVATE = "my private diary text"
REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, PRIVATE),))


def _embedder(stub: StubServer, dimension: int = 3) -> OpenAIEmbedder:
    config = OpenAIEmbedderConfig(
        model="stub-embed", dimension=dimension, base_url=stub.base_url, api_key_env=KEY_ENV, max_retries=0
    )
    return OpenAIEmbedder(config, environ={KEY_ENV: stub.api_key or ""})


async def test_a_200_error_object_echoing_the_key_is_scrubbed(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """A 200 body that is an error object: only its message is quoted, with the key as ***."""
    key = stub.api_key
    assert key
    stub.add(Reply(body={"error": {"message": f"Incorrect API key provided: {key}.\x1b[2J bye"}}))
    stub.add(Reply(body={"error": {"code": 401, "param": key, "message": None}}))
    with pytest.raises(OpenAIMalformedReplyError, match="error object") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    text = str(caught.value)
    assert key not in text and "Incorrect API key provided: ***." in text
    assert "\x1b" not in text and "***.\\x1b[2J bye" in text  # shown, not obeyed by a terminal
    # An error object without a message: nothing of it is quoted (no str() of the whole object).
    with pytest.raises(OpenAIMalformedReplyError, match="error object") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert key not in str(caught.value) and "param" not in str(caught.value)


async def test_tool_call_texts_quoted_in_errors_are_scrubbed(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """A tool's name and the start of its bad arguments are quoted with the key replaced, before any cut."""
    key = stub.api_key
    assert key
    body = recording("tool_call")
    function = body["choices"][0]["message"]["tool_calls"][0]["function"]
    function["name"] = f"tool-{key}"
    function["arguments"] = "x" * 70 + key + ' {"a": '
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match="not valid JSON") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    text = str(caught.value)
    assert "'tool-***'" in text and "x" * 70 + "***" in text
    assert key[:8] not in text  # not even the part of it a cut would leave


async def test_embedding_texts_quoted_in_errors_are_scrubbed(stub: StubServer) -> None:
    key = stub.api_key
    assert key
    stub.embedding_script.append(Reply(body={"data": [{"index": key, "embedding": [1, 2, 3]}]}))
    stub.embedding_script.append(Reply(body={"data": [{"index": 0, "embedding": [1, key, 3]}]}))
    stub.embedding_script.append(Reply(body=f'{{"data": [], "{key}": 1, "{key}": 2}}'.encode()))
    embedder = _embedder(stub)
    try:
        for _ in range(3):
            with pytest.raises(OpenAIEmbeddingReplyError) as caught:
                await embedder.embed(["a"], OpContext.with_timeout(30))
            assert key not in str(caught.value) and "***" in str(caught.value)
    finally:
        await embedder.aclose()


@pytest.mark.parametrize("finish_reason", [["length"], {"why": "length"}, 3, True])
async def test_a_finish_reason_that_is_not_text_is_malformed(
    stub: StubServer, provider: OpenAIProvider, finish_reason: object
) -> None:
    """A finish_reason list or object (unhashable) is a typed malformed reply, not a bare TypeError."""
    body = recording("tool_call")
    body["choices"][0]["finish_reason"] = finish_reason
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match="finish_reason is a JSON"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert len(stub.completions) == 1


@pytest.mark.parametrize("role", ["user", "system", "developer", "tool", "Assistant", "", ["assistant"], 1])
async def test_a_reply_in_another_speakers_name_is_malformed(
    stub: StubServer, provider: OpenAIProvider, role: object
) -> None:
    """A message whose role is not "assistant" is never taken for the model's answer, nor its tool calls."""
    body = recording("tool_call")
    body["choices"][0]["message"]["role"] = role
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIMalformedReplyError, match=r"role is .*not 'assistant'"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert len(stub.completions) == 1  # refused, not retried


async def test_a_reply_without_a_role_is_still_the_answer(stub: StubServer, provider: OpenAIProvider) -> None:
    """A missing (or null) role names no other speaker: the message is the assistant's, as before."""
    for role in ("missing", None):
        body = recording("plain_answer")
        if role is None:
            body["choices"][0]["message"]["role"] = None
        else:
            del body["choices"][0]["message"]["role"]
        stub.add(Reply(body=body))
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
        assert response.message.role is Role.ASSISTANT and response.message.content


@pytest.mark.parametrize(
    "message",
    [
        "This endpoint only supports stream=true requests",
        "Streaming is required for this model",
        "'stream' must be set to true",
        "non-streaming requests are not supported",
        "This model does not support non-streaming",
    ],
)
async def test_a_4xx_that_says_streaming_is_required_is_streaming_only(
    stub: StubServer, provider: OpenAIProvider, message: str
) -> None:
    stub.add(Reply.error(400, message))
    with pytest.raises(OpenAIStreamingOnlyError, match="refused a non-streamed request"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, 'bad request; you sent {"model":"stub-model","stream":false,"messages":[]}'),
        (422, 'field "stream": unexpected value false'),
        (404, "The model `gpt-5` does not exist upstream"),
        (400, "Unrecognized request argument supplied: stream_options"),
    ],
)
async def test_a_4xx_that_only_mentions_stream_is_a_status_error(
    stub: StubServer, provider: OpenAIProvider, status: int, message: str
) -> None:
    """An error echoing the request ("stream":false) or saying "upstream" is not a streaming-only server."""
    stub.add(Reply.error(status, message))
    with pytest.raises(OpenAIStatusError) as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert not isinstance(caught.value, OpenAIStreamingOnlyError)
    assert caught.value.status == status


async def test_an_embedding_integer_too_large_for_a_float_is_a_typed_error(stub: StubServer) -> None:
    """A 400-digit integer in a vector: OpenAIEmbeddingReplyError, not a bare OverflowError."""
    huge = b"9" * 400
    stub.embedding_script.append(Reply(body=b'{"data": [{"index": 0, "embedding": [1, 2, ' + huge + b"]}]}"))
    embedder = _embedder(stub)
    try:
        with pytest.raises(OpenAIEmbeddingReplyError, match="an integer of 400 digits"):
            await embedder.embed(["a"], OpContext.with_timeout(30))
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(
    "count",
    [10**1000, 2**53, -1, 1.5, True, "12"],
    ids=["1001 digits", "2**53", "negative", "float", "bool", "text"],
)
async def test_a_nonsense_token_count_stays_unknown(
    stub: StubServer, provider: OpenAIProvider, count: object
) -> None:
    body = recording("plain_answer")
    body["usage"] = {"prompt_tokens": count, "completion_tokens": 7}
    stub.add(Reply(body=body))
    response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert response.usage.input_tokens is None and response.usage.output_tokens == 7


async def test_the_probe_shows_few_short_escaped_model_names(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """Model names are the server's text: control characters shown escaped, length and count capped."""
    names = [
        "\x1b[2J\x1b[31mPWNED\x07",
        "a\nok: fake line",
        "x" * 3_000_000,
        *(f"m{i:02}" for i in range(20)),
    ]
    stub.model_replies.append(Reply(body={"object": "list", "data": [{"id": n} for n in names]}))
    answer = await provider.health(OpContext.with_timeout(30))
    assert answer.isprintable() and "\n" not in answer
    assert "\\x1b[2J\\x1b[31mPWNED\\x07" in answer and "a ok: fake line" in answer
    assert len(answer) < 2000
    assert answer.startswith("23 model(s)") and "(+13 more)" in answer


@pytest.mark.parametrize("data", [[{"id": {"a": [1, 2]}}], [{"id": [1]}], [5], {"id": 1}])
async def test_a_model_list_without_text_ids_is_malformed(
    stub: StubServer, provider: OpenAIProvider, data: object
) -> None:
    stub.model_replies.append(Reply(body={"object": "list", "data": data}))
    with pytest.raises(OpenAIMalformedReplyError, match="GET /models"):
        await provider.health(OpContext.with_timeout(30))


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        ([b"bytes"], "sequence of strings"),
        (["a", None], "sequence of strings"),
        ("one string", "sequence of strings"),
        # Once a bare UnicodeEncodeError from the client's JSON encoder.
        (["a", "b\ud800"], r"texts\[1\] is not valid Unicode"),
    ],
    ids=["bytes", "None", "str", "lone surrogate"],
)
async def test_embedding_texts_that_are_not_strings_are_refused_before_sending(
    stub: StubServer, texts: object, expected: str
) -> None:
    embedder = _embedder(stub)
    try:
        with pytest.raises(InvalidArgumentError, match=expected):
            await embedder.embed(texts, OpContext.with_timeout(30))  # type: ignore[arg-type]
    finally:
        await embedder.aclose()
    assert not [r for r in stub.requests if r.path.endswith("/embeddings")]


#: A key of characters JSON and repr() escape (a backslash, a quote, a slash), ending in a tail
#: that shows any copy of it, escaped or not.
ESCAPED_KEY = 'sk-a\\b/c"d-TAIL0123456789'


@pytest.mark.parametrize("where", ["lent client, error body without a message", "bad tool arguments"])
async def test_a_key_the_server_echoes_escaped_is_scrubbed(where: str) -> None:
    """The key quoted in an escaped form (repr's, JSON's, "/" as "\\/") is scrubbed like the key itself."""
    with running(api_key=ESCAPED_KEY) as stub:
        if where.startswith("lent"):
            # The client's own message is "Error code: 401 - {...}": the body's repr(), backslash doubled.
            stub.add(Reply(body={"detail": f"invalid key {ESCAPED_KEY}"}, status=401))
            client = openai.AsyncOpenAI(api_key=ESCAPED_KEY, base_url=stub.base_url)
            provider = OpenAIProvider(OpenAIProviderConfig(model="stub-model", max_retries=0), client=client)
            expected: type[Exception] = OpenAIStatusError
        else:
            body = recording("tool_call")
            # Bad JSON quoting the key as a JSON string does, "/" escaped as some encoders write it.
            echoed = json.dumps(ESCAPED_KEY).replace("/", "\\/")
            body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = f'{{"k": {echoed} '
            stub.add(Reply(body=body))
            client = None
            provider = OpenAIProvider(
                OpenAIProviderConfig(model="stub-model", base_url=stub.base_url, api_key_env=KEY_ENV),
                environ={KEY_ENV: ESCAPED_KEY},
            )
            expected = OpenAIMalformedReplyError
        try:
            with pytest.raises(expected) as caught:
                await provider.complete(REQUEST, OpContext.with_timeout(30))
        finally:
            await provider.aclose()
            if client is not None:
                await client.close()
    # (openai 3 quotes no body in that message; openai 1 and 2 quote all of it.)
    assert "TAIL0123456789" not in str(caught.value), str(caught.value)
