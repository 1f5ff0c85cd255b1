"""Error answers (4xx/5xx) are read within ``max_reply_bytes`` too, against the stub server over real HTTP.

The ``openai`` client reads an error answer's body whole before raising; the
provider's own client reads it first, capped, so a server that floods (or
hangs after flooding, or sends a compression bomb) with a 500 costs at most
``max_reply_bytes`` and the status still decides: retried or refused.
"""

from __future__ import annotations

import gc
import gzip
import logging
import time

import openai
import pytest
from openai_helpers import make_provider
from openai_stub_server import Reply, StubServer

from agentium_harness.plugin_api import Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    OpenAIProvider,
    OpenAIProviderConfig,
    OpenAIProviderError,
    OpenAIRetriesExhaustedError,
    OpenAIStatusError,
)

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, "hi"),))

#: An error body far past the cap the tests set, echoing what looks like the conversation.
FLOOD = b'{"error": {"message": "' + b"hi " * 100_000 + b'"}}'


def _flood(status: int, how: str) -> Reply:
    if how == "stalls after flooding":
        # Without the cap the client waits for the rest of the body until timeout_s.
        return Reply(body=FLOOD, status=status, chunked=True, stall_after=200_000)
    if how == "content-length":
        return Reply(body=FLOOD, status=status)
    # A compression bomb: 20 MB of zeros in about 20 KB.
    return Reply(body=gzip.compress(b"0" * 20_000_000), status=status, headers={"Content-Encoding": "gzip"})


HOWS = ["stalls after flooding", "content-length", "gzip bomb"]


@pytest.mark.parametrize("how", HOWS)
async def test_a_flooding_retryable_error_is_cut_at_the_cap_and_retried(
    stub: StubServer, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    stub.add(_flood(503, how), _flood(503, how))
    # timeout_s far past the bound below: a body read past the cap stalls until it (20 s an attempt).
    provider = make_provider(stub, max_reply_bytes=64 * 1024, max_retries=1, timeout_s=20)
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
            with pytest.raises(OpenAIRetriesExhaustedError, match="passed max_reply_bytes=65536") as caught:
                await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert time.monotonic() - started < 10, "the error body was read past the cap (until timeout_s)"
    assert caught.value.status == 503 and caught.value.attempts == 2
    assert "hi hi" not in str(caught.value)
    cut = [r for r in caplog.records if "error body past max_reply_bytes" in r.getMessage()]
    assert len(cut) == 2 and all("hi hi" not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("how", HOWS)
async def test_a_flooding_refusal_is_cut_at_the_cap_and_keeps_its_status(stub: StubServer, how: str) -> None:
    stub.add(_flood(401, how))
    provider = make_provider(stub, max_reply_bytes=64 * 1024, max_retries=2, timeout_s=30)
    try:
        with pytest.raises(OpenAIStatusError, match=r"HTTP 401.*passed max_reply_bytes") as caught:
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert caught.value.status == 401 and len(stub.completions) == 1


async def test_a_flooding_error_to_the_probe_is_cut_at_the_cap(stub: StubServer) -> None:
    stub.model_replies.append(_flood(500, "stalls after flooding"))
    provider = make_provider(stub, max_reply_bytes=64 * 1024, probe_timeout_s=20)  # far past the bound below
    started = time.monotonic()
    try:
        with pytest.raises(OpenAIStatusError, match=r"HTTP 500.*passed max_reply_bytes"):
            await provider.health(OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert time.monotonic() - started < 10  # reading past the cap would stall until probe_timeout_s (20 s)


async def test_an_error_answer_within_the_cap_still_quotes_the_servers_message(stub: StubServer) -> None:
    stub.add(Reply.error(400, "unknown field 'seed'"))
    provider = make_provider(stub, max_reply_bytes=1024)
    try:
        with pytest.raises(OpenAIStatusError, match="HTTP 400: unknown field 'seed'"):
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and every exception it holds as a cause or context, hidden or not."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


@pytest.mark.parametrize(("status", "kind"), [(400, OpenAIStatusError), (503, OpenAIRetriesExhaustedError)])
async def test_a_lent_clients_error_body_is_not_kept_by_the_typed_error(
    stub: StubServer, status: int, kind: type[OpenAIProviderError], caplog: pytest.LogCaptureFixture
) -> None:
    """A lent client reads an error body whole; the provider's error keeps 500 characters of it, nothing more.

    Before, the client's ``APIStatusError`` (the whole body, its response) stayed reachable as the
    hidden ``__context__`` of the typed error, for as long as the host kept that error.
    """
    marker = "lent-flood-" + str(status)
    flood = (marker + " ") * 50_000  # about 800 KB, far past what any message quotes
    stub.add(Reply.error(status, flood), Reply.error(status, flood))
    lent = openai.AsyncOpenAI(api_key=stub.api_key, base_url=stub.base_url)
    config = OpenAIProviderConfig(model="stub-model", max_retries=1, retry_backoff_s=0.01)
    provider = OpenAIProvider(config, client=lent)
    try:
        with caplog.at_level(logging.DEBUG, logger="agentium.plugins.provider_openai"):
            with pytest.raises(kind) as caught:
                await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await lent.close()
    error = caught.value
    assert error.status == status and marker in str(error) and len(str(error)) < 1000
    assert all(not isinstance(e, openai.APIError) for e in _chain(error)), _chain(error)
    gc.collect()
    # Nothing else holds the client's exception either (its traceback's frames included).
    alive = [o for o in gc.get_objects() if isinstance(o, openai.APIStatusError) and marker in o.message]
    assert alive == []
    assert all(marker not in r.getMessage() for r in caplog.records)
