"""One provider object serves several event loops at once (issue 22, item 3).

A host shares one runtime, and so one provider, between threads that each
run their own event loop (the OpenAI Agents SDK's concurrent-access
pattern), or calls it from successive ``anyio.run`` calls. The provider's
``AsyncOpenAI`` client holds an ``httpx`` connection pool whose connections
belong to the loop that opened them, so it keeps one client per loop. Before
that, a call from a second loop failed or hung on the first loop's pool.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from openai_helpers import make_provider
from openai_stub_server import Reply, StubServer

from agentium_harness import Message, Role
from agentium_harness.plugin_api import ModelRequest, OpContext
from agentium_harness.testing import run_in_threads, run_in_turn
from agentium_provider_openai import OpenAIProviderError
from agentium_provider_openai import provider as provider_module


def _request(text: str) -> ModelRequest:
    return ModelRequest("You help.", turn=(Message(Role.USER, text),))


def test_one_provider_serves_threads_each_with_its_own_loop(stub: StubServer) -> None:
    provider = make_provider(stub)
    stub.add(*(Reply.recorded("plain_answer") for _ in range(15)))

    async def complete(i: int) -> str:
        answers = []
        for n in range(3):
            response = await provider.complete(_request(f"thread {i} turn {n}"), OpContext.with_timeout(20))
            answers.append(response.message.content)
        return answers[-1]

    first = anyio.run(complete, 99)  # used first on a loop that has ended since
    answers = run_in_threads(complete, threads=4, styles=("asyncio-loop", "trio", "asyncio"), timeout_s=60)
    assert answers == [first] * 4
    assert len(stub.completions) == 15
    anyio.run(provider.aclose)
    assert provider.client is None


def test_calls_from_successive_loops_reuse_nothing_of_an_ended_loop(stub: StubServer) -> None:
    provider = make_provider(stub)
    stub.add(*(Reply.recorded("plain_answer") for _ in range(3)))

    async def one(_i: int) -> str:
        return (await provider.complete(_request("hello"), OpContext.with_timeout(20))).message.content

    answers = run_in_turn(one, calls=3, styles=("asyncio", "trio", "asyncio-loop"))
    assert len(set(answers)) == 1 and len(stub.completions) == 3
    anyio.run(provider.aclose)


def test_aclose_closes_a_client_of_another_live_loop(stub: StubServer) -> None:
    """A client made on a loop that still runs in another thread is closed on that loop."""
    import threading

    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"), Reply.recorded("plain_answer"))
    used = threading.Event()
    finish = threading.Event()

    async def keep_loop() -> None:
        await provider.complete(_request("from the other loop"), OpContext.with_timeout(20))
        used.set()
        await anyio.to_thread.run_sync(finish.wait, 20)
        await anyio.sleep(0.5)

    other = threading.Thread(target=anyio.run, args=(keep_loop,))
    other.start()
    assert used.wait(20)

    async def here() -> None:
        await provider.complete(_request("from here"), OpContext.with_timeout(20))
        threading.Timer(0.2, finish.set).start()
        await provider.aclose()

    anyio.run(here)
    other.join(20)
    assert not other.is_alive() and provider.client is None


def test_aclose_with_clients_of_three_stuck_loops_takes_one_close_bound_not_three(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loops' clients are closed at once: the whole ``aclose()`` takes one ``_CLOSE_S``, not N of them."""
    bound = 0.3
    monkeypatch.setattr(provider_module, "_CLOSE_S", bound)
    provider = make_provider(stub)
    stub.add(*(Reply.recorded("plain_answer") for _ in range(3)))
    used = [threading.Event() for _ in range(3)]
    release = threading.Event()

    async def used_then_stuck(i: int) -> None:
        await provider.complete(_request(f"loop {i}"), OpContext.with_timeout(20))
        used[i].set()
        release.wait(20)  # blocking, on purpose: this loop's thread runs nothing meanwhile

    loops = [threading.Thread(target=anyio.run, args=(used_then_stuck, i), daemon=True) for i in range(3)]
    for thread in loops:
        thread.start()
    try:
        assert all(event.wait(20) for event in used)
        started = time.monotonic()
        with pytest.raises(OpenAIProviderError, match="did not finish within") as caught:
            anyio.run(provider.aclose)
        took = time.monotonic() - started
    finally:
        release.set()
    for thread in loops:
        thread.join(20)
    assert str(caught.value).count("did not finish within") == 3
    assert bound <= took < 2 * bound, took  # one after the other, it took 3 bounds
    assert provider.client is None


def test_a_second_aclose_while_the_first_is_closing_returns_only_once_the_first_has(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It saw the provider closed and returned at once, while the first still waited for a client.

    The first waited for a stuck loop's client: the second's caller was told the provider was closed
    with that client still open.
    """
    bound = 0.3
    monkeypatch.setattr(provider_module, "_CLOSE_S", bound)
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))
    used, release = threading.Event(), threading.Event()

    async def used_then_stuck() -> None:
        await provider.complete(_request("stuck loop"), OpContext.with_timeout(20))
        used.set()
        release.wait(20)  # blocking, on purpose: this loop's thread runs nothing meanwhile

    stuck = threading.Thread(target=anyio.run, args=(used_then_stuck,), daemon=True)
    stuck.start()
    ended: list[str] = []

    async def both() -> None:
        async def first() -> None:
            with pytest.raises(OpenAIProviderError, match="did not finish within"):
                await provider.aclose()
            ended.append("first")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            await anyio.sleep(0.05)
            assert provider.client is None and ended == []  # the premise: the first has begun, not ended
            # The second hears the first's outcome too (it raised nothing, as if all had closed).
            with pytest.raises(OpenAIProviderError, match="did not finish within"):
                await provider.aclose()
            ended.append("second")

    try:
        assert used.wait(20)
        started = time.monotonic()
        anyio.run(both)
        took = time.monotonic() - started
    finally:
        release.set()
    stuck.join(20)
    assert ended == ["first", "second"]
    assert bound <= took < 2 * bound, took


def test_a_call_racing_aclose_on_another_thread_builds_no_client_nobody_closes(stub: StubServer) -> None:
    """A call past the provider's "closed?" check as another thread's aclose() ran built a new client.

    That aclose() had already closed (and forgotten) the clients it held, so the new one, stored
    after it, was never closed; the call went on to use it. Now the client is built only while the
    provider is open, decided under the lock aclose() takes to collect the clients.
    """
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))
    clients = provider._clients

    class ClosedMeanwhile:
        """The provider's clients, with another thread's whole aclose() run just before a client is got."""

        def get(self) -> object:
            closer = threading.Thread(target=anyio.run, args=(provider.aclose,))
            closer.start()
            closer.join(5)
            return clients.get()

        def __getattr__(self, name: str) -> object:
            return getattr(clients, name)

    provider._clients = ClosedMeanwhile()  # type: ignore[assignment]

    async def call() -> None:
        with pytest.raises(OpenAIProviderError, match="closed"):
            await provider.complete(_request("racing the close"), OpContext.with_timeout(5))

    anyio.run(call)
    assert clients.items() == [], "a client was built after aclose() and never closed"


def test_a_second_aclose_after_the_first_was_cancelled_natively_waits_for_its_closes(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A native asyncio ``Task.cancel()`` of the first aclose() passes anyio's shield.

    It cut the first's closes short and ended the close at once: the second aclose() returned
    while the stuck loop's client was still being closed (its caller told the provider was closed).
    """
    bound = 0.3
    monkeypatch.setattr(provider_module, "_CLOSE_S", bound)
    provider = make_provider(stub)
    stub.add(Reply.recorded("plain_answer"))
    used, release = threading.Event(), threading.Event()

    async def used_then_stuck() -> None:
        await provider.complete(_request("stuck loop"), OpContext.with_timeout(20))
        used.set()
        release.wait(20)  # blocking, on purpose: this loop's thread runs nothing meanwhile

    stuck = threading.Thread(target=anyio.run, args=(used_then_stuck,), daemon=True)
    stuck.start()

    async def cancelled_then_second() -> float:
        import asyncio

        started = time.monotonic()
        first = asyncio.get_running_loop().create_task(provider.aclose())
        await anyio.sleep(0.05)
        assert provider.client is None and not first.done()  # the premise: the first has begun
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        # The second waits for the first's closes to end, and hears what did not close.
        with pytest.raises(OpenAIProviderError, match="did not finish within"):
            await provider.aclose()
        return time.monotonic() - started

    try:
        assert used.wait(20)
        took = anyio.run(cancelled_then_second)
    finally:
        release.set()
    stuck.join(20)
    assert bound * 0.9 <= took < 2 * bound, took
