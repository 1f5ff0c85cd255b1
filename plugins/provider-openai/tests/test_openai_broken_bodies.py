"""A body that breaks off after the headers, against the stub server over real HTTP.

The server declares the whole body's ``Content-Length`` and closes the
connection part way (or sends a body its ``Content-Encoding`` cannot decode).
The call retries it like any connection failure, within ``max_retries`` and
the deadline; the probe, which does not retry, raises the typed
:class:`OpenAIConnectionError`. Never the HTTP library's own exception.
"""

from __future__ import annotations

import pytest
from openai_helpers import KEY_ENV, make_provider
from openai_stub_server import Reply, StubServer

from agentium_harness.plugin_api import Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    OpenAIConnectionError,
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    OpenAIRetriesExhaustedError,
)

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, "hi"),))

BROKEN = {
    "closed mid-body": lambda: Reply.recorded("plain_answer", cut_after=11),
    "corrupt gzip": lambda: Reply.recorded("plain_answer", headers={"Content-Encoding": "gzip"}),
}


@pytest.mark.parametrize("fault", sorted(BROKEN))
async def test_a_broken_body_is_retried_then_used(stub: StubServer, fault: str) -> None:
    stub.add(BROKEN[fault](), Reply.recorded("plain_answer"))
    provider = make_provider(stub, max_retries=1)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert response.message.content
    assert len(stub.completions) == 2 and not stub.violations


@pytest.mark.parametrize("fault", sorted(BROKEN))
async def test_a_broken_body_without_retries_left_is_a_typed_failure(stub: StubServer, fault: str) -> None:
    stub.add(BROKEN[fault](), BROKEN[fault]())
    provider = make_provider(stub, max_retries=1)
    try:
        with pytest.raises(OpenAIRetriesExhaustedError, match="connection failed") as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.attempts == 2 and caught.value.status is None
    assert stub.api_key and stub.api_key not in str(caught.value)


async def test_a_broken_model_list_is_a_typed_probe_failure(stub: StubServer) -> None:
    stub.model_replies.append(Reply(body={"object": "list", "data": [{"id": "stub-model"}]}, cut_after=6))
    provider = make_provider(stub)
    try:
        with pytest.raises(OpenAIConnectionError, match="broke off a model list"):
            await provider.health(OpContext.with_timeout(30))
    finally:
        await provider.aclose()


async def test_a_broken_embeddings_body_is_retried(stub: StubServer) -> None:
    stub.embedding_script.append(Reply(body={"data": [{"index": 0, "embedding": [1, 2, 3]}]}, cut_after=6))
    stub.embedding_script.append(Reply(body={"data": [{"index": 0, "embedding": [1, 2, 3]}]}))
    config = OpenAIEmbedderConfig(
        model="stub-embed", dimension=3, base_url=stub.base_url, api_key_env=KEY_ENV, retry_backoff_s=0.01
    )
    embedder = OpenAIEmbedder(config, environ={KEY_ENV: stub.api_key or ""})
    try:
        vectors = await embedder.embed(["a"], OpContext.with_timeout(30))
    finally:
        await embedder.aclose()
    assert [list(v) for v in vectors] == [[1.0, 2.0, 3.0]]
    assert len([r for r in stub.requests if r.path.endswith("/embeddings")]) == 2


_ERROR_BODY = b'{"error": {"message": "' + b"x" * 4000 + b'"}}'

BROKEN_ERRORS = {
    "500 closed mid-body": lambda: Reply(body=_ERROR_BODY, status=500, cut_after=40),
    "400 closed mid-body": lambda: Reply(body=_ERROR_BODY, status=400, cut_after=40),
    "500 corrupt gzip": lambda: Reply(body=_ERROR_BODY, status=500, headers={"Content-Encoding": "gzip"}),
}


@pytest.mark.parametrize("fault", sorted(BROKEN_ERRORS))
async def test_a_broken_error_answer_is_retried_not_a_raw_http_error(stub: StubServer, fault: str) -> None:
    # The client reads an error answer's body itself; its HTTP library's exception once escaped raw.
    stub.add(BROKEN_ERRORS[fault](), Reply.recorded("plain_answer"))
    stub.add(BROKEN_ERRORS[fault](), BROKEN_ERRORS[fault]())
    provider = make_provider(stub, max_retries=1)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
        assert response.message.content
        with pytest.raises(OpenAIRetriesExhaustedError, match="connection failed") as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.attempts == 2 and caught.value.status is None
    assert stub.api_key and stub.api_key not in str(caught.value)


async def test_a_broken_error_answer_to_the_probe_is_a_typed_probe_failure(stub: StubServer) -> None:
    stub.model_replies.append(Reply(body=_ERROR_BODY, status=500, cut_after=40))
    provider = make_provider(stub)
    try:
        with pytest.raises(OpenAIConnectionError, match="broke off its error answer"):
            await provider.health(OpContext.with_timeout(30))
    finally:
        await provider.aclose()
