"""Compressed answers over real HTTP (the stub server): inflated within ``max_reply_bytes``, piece by piece.

A gzip body of spaces inflates about a thousandfold, and one gzip inside
another about a millionfold. Whatever the HTTP library under the ``openai``
client (``httpx`` under openai 1.x and 2.x inflates each 64 KiB read whole),
the provider never holds much more than the cap: the peak of memory traced
while such a body is refused stays far below what one chunk would inflate
to. Bodies that are fine are still decoded and used.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable

import pytest
from openai_helpers import make_provider
from openai_stub_server import Reply, StubServer, recording

from agentium_harness.plugin_api import Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    OpenAIMalformedReplyError,
    OpenAIProvider,
    OpenAIReplyLimitError,
    OpenAIStatusError,
)

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, "hi"),))

#: The cap these tests set (max_reply_bytes), and what a refusal may hold at its peak at most:
#: the cap, one piece, the client's own buffers. One 64 KiB read of a bomb inflates to 64 MiB.
LIMIT = 1024 * 1024
PEAK_BOUND = 24 * 1024 * 1024


def gzip_stream(size: int, wbits: int = zlib.MAX_WBITS | 16) -> bytes:
    """``size`` bytes of spaces (JSON whitespace) compressed, built a MiB at a time (never whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = b" " * (1 << 20)
    return b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()


async def warm(provider: OpenAIProvider, stub: StubServer) -> None:
    """One plain call first: the client library's imports and the client itself are not counted in a peak."""
    stub.add(Reply.recorded("plain_answer"))
    await provider.complete(REQUEST, OpContext.with_timeout(30))


async def peak_of(call: Callable[[], Awaitable[object]]) -> tuple[int, BaseException | None]:
    """The peak of traced memory while ``call`` runs, and what it raised."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        raised: BaseException | None = None
        try:
            await call()
        except Exception as exc:
            raised = exc
        return tracemalloc.get_traced_memory()[1], raised
    finally:
        tracemalloc.stop()


async def test_a_gzip_bomb_is_refused_at_the_cap_without_inflating_a_chunk_whole(stub: StubServer) -> None:
    """256 MiB of spaces in 256 KiB of gzip: refused at the cap, the peak far below one chunk's 64 MiB."""
    provider = make_provider(stub, max_reply_bytes=LIMIT, max_retries=0)
    await warm(provider, stub)
    stub.add(Reply(body=gzip_stream(256 << 20), headers={"Content-Encoding": "gzip"}))
    try:
        peak, raised = await peak_of(lambda: provider.complete(REQUEST, OpContext.with_timeout(30)))
    finally:
        await provider.aclose()
    assert isinstance(raised, OpenAIReplyLimitError) and raised.limit == "max_reply_bytes"
    assert peak < PEAK_BOUND, f"{peak} bytes held while refusing a {LIMIT}-byte cap"


async def test_gzip_inside_gzip_is_refused_unread(stub: StubServer) -> None:
    """A chain of codings (982 bytes that are 512 MiB twice inflated) is a typed refusal, never inflated."""
    provider = make_provider(stub, max_reply_bytes=LIMIT, max_retries=0)
    await warm(provider, stub)
    stub.add(Reply(body=gzip.compress(gzip_stream(512 << 20)), headers={"Content-Encoding": "gzip, gzip"}))
    try:
        peak, raised = await peak_of(lambda: provider.complete(REQUEST, OpContext.with_timeout(30)))
    finally:
        await provider.aclose()
    assert isinstance(raised, OpenAIMalformedReplyError), raised
    assert peak < PEAK_BOUND
    assert (
        len(stub.completions) == 2
    )  # the warm-up and this one: not retried, the same answer would come back


async def test_a_gzip_bomb_in_an_error_answer_is_cut_at_the_cap(stub: StubServer) -> None:
    """A 400 whose body is a gzip bomb: its status decides, its body is read no further than the cap."""
    provider = make_provider(stub, max_reply_bytes=LIMIT, max_retries=0)
    await warm(provider, stub)
    stub.add(Reply(body=gzip_stream(256 << 20), status=400, headers={"Content-Encoding": "gzip"}))
    try:
        peak, raised = await peak_of(lambda: provider.complete(REQUEST, OpContext.with_timeout(30)))
    finally:
        await provider.aclose()
    assert isinstance(raised, OpenAIStatusError) and raised.status == 400
    assert f"max_reply_bytes={LIMIT}" in str(raised)
    assert peak < PEAK_BOUND


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_a_compressed_answer_is_decoded_and_used(stub: StubServer, coding: str) -> None:
    """gzip, deflate (and deflate without its zlib header, as some servers send it) are decoded as before."""
    body = json.dumps(recording("plain_answer")).encode()
    packed = {
        "gzip": gzip.compress(body),
        "deflate": zlib.compress(body),
        "raw-deflate": zlib.compress(body)[2:-4],
    }[coding]
    stub.add(Reply(body=packed, headers={"Content-Encoding": coding.removeprefix("raw-")}))
    provider = make_provider(stub)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert response.message.content == recording("plain_answer")["choices"][0]["message"]["content"]
    assert stub.completions[0].headers["accept-encoding"] == "gzip, deflate"


async def test_a_coding_it_did_not_ask_for_is_refused(stub: StubServer) -> None:
    """A body in a coding the provider cannot inflate within the cap (br) is malformed, not retried."""
    stub.add(Reply(body=b"\x8b\x02\x80hello\x03", headers={"Content-Encoding": "br"}))
    provider = make_provider(stub, max_retries=2)
    try:
        with pytest.raises(OpenAIMalformedReplyError, match="Content-Encoding 'br'"):
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert len(stub.completions) == 1


async def test_a_corrupt_gzip_body_is_a_connection_failure_and_retried(stub: StubServer) -> None:
    """A body whose gzip is corrupt is retried like a body that broke off; the next answer is used."""
    stub.add(
        Reply(body=b"\x1f\x8b\x08\x00garbage-garbage", headers={"Content-Encoding": "gzip"}),
        Reply.recorded("plain_answer"),
    )
    provider = make_provider(stub, max_retries=1)
    try:
        response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()
    assert response.message.content and len(stub.completions) == 2


async def test_the_probe_reads_a_compressed_model_list_within_the_cap(stub: StubServer) -> None:
    """GET /models answered with a gzip bomb: a typed probe failure at the cap, memory bounded."""
    provider = make_provider(stub, max_reply_bytes=LIMIT)
    await warm(provider, stub)
    await provider.health(OpContext.with_timeout(30))  # the models resource too
    stub.model_replies.append(Reply(body=gzip_stream(256 << 20), headers={"Content-Encoding": "gzip"}))
    try:
        peak, raised = await peak_of(lambda: provider.health(OpContext.with_timeout(30)))
    finally:
        await provider.aclose()
    assert isinstance(raised, OpenAIReplyLimitError), raised
    assert peak < PEAK_BOUND
