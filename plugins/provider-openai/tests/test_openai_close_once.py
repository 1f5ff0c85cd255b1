"""``aclose()`` closes once and every caller hears its outcome (``plugin_api.CloseOnce``).

A natively cancelled first caller (``Task.cancel()`` passes anyio's shield)
left the closes running and their failure unheard: nothing logged it, and a
later ``aclose()`` returned as if every client had closed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import anyio
import pytest
from openai_helpers import make_provider
from openai_stub_server import Reply, StubServer

from agentium_harness import Message, Role
from agentium_harness.plugin_api import ModelRequest, OpContext
from agentium_provider_openai import OpenAIProviderError


def test_a_natively_cancelled_first_aclose_leaves_its_failure_logged_and_raised_to_the_next(
    stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))
    finished = asyncio.Event()

    async def main() -> None:
        await provider.complete(
            ModelRequest("You help.", turn=(Message(Role.USER, "hi"),)), OpContext.with_timeout(20)
        )
        client = provider.client
        assert client is not None

        async def failing_close() -> None:
            try:
                await asyncio.sleep(0.05)
                raise OSError("the connection pool refused to close")
            finally:
                finished.set()

        client.close = failing_close  # type: ignore[method-assign]
        first = asyncio.get_running_loop().create_task(provider.aclose())
        await asyncio.sleep(0.01)
        first.cancel()  # native: anyio's shield does not stop it
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(finished.wait(), 5)  # the close went on
        with pytest.raises(OpenAIProviderError, match="refused to close"):
            await provider.aclose()  # the next caller hears it

    with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
        asyncio.run(main())
    assert any(
        "OpenAI provider" in r.getMessage() and "OpenAIProviderError" in r.getMessage()
        for r in caplog.records
    )


def test_a_concurrent_second_aclose_waits_long_enough_to_hear_a_close_that_timed_out(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The later caller waited exactly _CLOSE_S, the close's own bound, from a moment before the close
    # began: it stopped waiting as the close failed, and returned as if the clients had closed.
    from agentium_provider_openai import provider as provider_module

    monkeypatch.setattr(provider_module, "_CLOSE_S", 0.2)
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))

    async def main() -> list[str]:
        await provider.complete(
            ModelRequest("You help.", turn=(Message(Role.USER, "hi"),)), OpContext.with_timeout(20)
        )
        client = provider.client
        assert client is not None

        async def stuck_close() -> None:
            await asyncio.sleep(10)

        client.close = stuck_close  # type: ignore[method-assign]
        heard: list[str] = []

        async def closer() -> None:
            try:
                await provider.aclose()
                heard.append("returned")
            except OpenAIProviderError as exc:
                heard.append(str(exc))

        await asyncio.gather(closer(), closer())
        return heard

    heard = asyncio.run(main())
    assert len(heard) == 2 and all("did not finish within 0.2s" in text for text in heard), heard


def test_an_aclose_cut_off_before_it_began_is_run_by_the_next_aclose(
    stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    # asyncio.run returned just as aclose() began: its close's task was cancelled before its first
    # step and closed nothing, and every later aclose() raised OperationCancelledError: the client of
    # the loop still running in another thread could never be closed.
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))
    made: list[Any] = []
    finish = threading.Event()

    async def keep_loop() -> None:
        await provider.complete(
            ModelRequest("You help.", turn=(Message(Role.USER, "hi"),)), OpContext.with_timeout(20)
        )
        made.append(provider.client)
        await anyio.to_thread.run_sync(finish.wait, 20)

    other = threading.Thread(target=anyio.run, args=(keep_loop,))
    other.start()
    try:
        deadline = time.monotonic() + 20
        while not made and time.monotonic() < deadline:
            time.sleep(0.01)
        [client] = made
        assert client is not None and not client.is_closed()

        async def cut_off() -> None:
            asyncio.get_running_loop().create_task(provider.aclose())  # its loop ends at once

        with caplog.at_level(logging.WARNING, logger="agentium.plugins.provider_openai"):
            asyncio.run(cut_off())
        assert not client.is_closed()
        anyio.run(provider.aclose)  # runs the close: the other loop's client is closed on its loop
        assert client.is_closed()
        assert any("cut off before it began" in r.getMessage() for r in caplog.records)
    finally:
        finish.set()
        other.join(20)
