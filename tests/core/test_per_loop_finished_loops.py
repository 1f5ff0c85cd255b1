"""``plugin_api.PerLoop.aclose``: a value whose event loop finished is released, never a problem.

A value of another thread's loop that finished while its close ran there was
released but reported as a close problem; an adapter raising it from its
``CloseOnce`` close then raised it on every later ``aclose()``, so the host's
retries never closed it. Now it is given to ``discard``, one WARNING says so
(count and classes: a close begun and cut short), and ``aclose()`` returns no
problem for it. A value whose loop finished before its close is given to
``discard`` silently, as ``get()`` drops such values (the values of a host's
earlier ``asyncio.run`` calls).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import pytest
from _telemetry_support import Telemetered

from agentium_harness import create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import CloseOnce, PerLoop, runtime_span

_WARNING = (
    "per-loop values released without being closed (their event loop finished under their close): 1: _Client"
)


class _Client:
    """A loop-bound value (a client whose connections belong to the loop that made it)."""


class _Adapter:
    """An adapter as the plugins write them: a CloseOnce close raising PerLoop.aclose's problems."""

    def __init__(self, released: list[_Client]) -> None:
        self.values: PerLoop[_Client] = PerLoop(_Client, discard=released.append)
        self.once = CloseOnce("test adapter", wait_s=2)
        self.closing = threading.Event()  # a close runs on the value's loop
        self.target_loop: list[asyncio.AbstractEventLoop] = []

    async def aclose(self) -> None:
        await self.once.run(self._close)

    async def _close(self) -> None:
        problems = await self.values.aclose(self._close_value, 1.5)
        if problems:
            raise RuntimeError("; ".join(problems))

    async def _close_value(self, value: _Client) -> None:
        self.closing.set()
        await asyncio.sleep(10)  # cut short there: its loop finishes under it


@pytest.mark.parametrize("when", ["during its close", "before its close"])
def test_a_value_whose_loop_finished_is_released_with_no_problem_said_once_if_its_close_was_cut(
    when: str, caplog: pytest.LogCaptureFixture
) -> None:
    released: list[_Client] = []
    adapter = _Adapter(released)
    made: list[_Client] = []
    ready = threading.Event()

    async def target() -> None:
        made.append(adapter.values.get())
        if when == "during its close":
            ready.set()
            # asyncio.run returns (cancelling the close pending here) once the close has begun.
            while not adapter.closing.is_set():  # noqa: ASYNC110 - set from this very loop
                await asyncio.sleep(0.005)

    thread = threading.Thread(target=asyncio.run, args=(target(),))
    thread.start()
    if when == "during its close":
        assert ready.wait(5)
    else:
        thread.join(5)
    with caplog.at_level(logging.WARNING, logger="agentium.engine"):
        anyio.run(adapter.aclose)  # was: RuntimeError "... that loop finished first"
        anyio.run(adapter.aclose)  # a retry: was the same RuntimeError again, every time
    thread.join(5)
    assert not thread.is_alive()
    assert adapter.closing.is_set() is (when == "during its close")
    assert released == made  # given to discard, once
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # Once, its count and class only, for a close begun and cut short; a value whose loop had
    # finished before is dropped as get() drops such values (a host's earlier asyncio.run calls).
    assert warnings == ([_WARNING] if when == "during its close" else [])


def test_the_release_is_an_event_on_the_span_current_in_the_close() -> None:
    # Observable by default: next to its WARNING, an event (its count only) on the closing call's span.
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    values: PerLoop[_Client] = PerLoop(_Client)
    ready, closing = threading.Event(), threading.Event()

    async def target() -> None:
        values.get()
        ready.set()
        while not closing.is_set():  # noqa: ASYNC110 - set from this very loop
            await asyncio.sleep(0.005)  # then asyncio.run returns, cutting the close short

    thread = threading.Thread(target=asyncio.run, args=(target(),))
    thread.start()
    assert ready.wait(5)

    async def close_values(value: _Client) -> None:
        closing.set()
        await asyncio.sleep(10)

    async def main() -> list[str]:
        with runtime_span(runtime, "host.close"):
            return await values.aclose(close_values, 1.5)

    assert asyncio.run(main()) == []
    thread.join(5)
    [span] = t.named("host.close")
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("agentium.per_loop.released", {"agentium.per_loop.released": 1})
    ]


def test_a_value_whose_loop_finished_before_its_close_is_dropped_as_get_drops_it() -> None:
    # The sync-host pattern (asyncio.run per request, then a close at shutdown): no event, no problem.
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    released: list[_Client] = []
    values: PerLoop[_Client] = PerLoop(_Client, discard=released.append)
    thread = threading.Thread(target=asyncio.run, args=(_get(values),))
    thread.start()
    thread.join(5)

    async def close_values(value: _Client) -> None:
        raise AssertionError("not closed: its loop has finished")

    async def main() -> list[str]:
        with runtime_span(runtime, "host.close"):
            return await values.aclose(close_values, 1.5)

    assert asyncio.run(main()) == []
    assert len(released) == 1
    [span] = t.named("host.close")
    assert list(span.events) == []


async def _get(values: PerLoop[_Client]) -> None:
    values.get()


def _raises(value: _Client) -> None:
    raise OSError("a discard broke its contract")


def test_a_discard_that_raises_is_a_warning_never_a_problem_a_retry_meets_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # discard must not raise. One that did, for a value released at aclose(), made a problem the
    # adapter's CloseOnce close raised on every later aclose(); at get() it was passed over silently.
    values: PerLoop[_Client] = PerLoop(_Client, discard=_raises)
    once = CloseOnce("test adapter", wait_s=2)

    async def close_values(value: _Client) -> None:
        raise AssertionError("not closed: its loop has finished")

    async def close() -> None:
        problems = await values.aclose(close_values, 1.5)
        if problems:
            raise RuntimeError("; ".join(problems))

    async def aclose() -> None:
        await once.run(close)

    for _ in range(2):  # once released by a later get(), once by aclose()
        thread = threading.Thread(target=asyncio.run, args=(_get(values),))
        thread.start()
        thread.join(5)
    with caplog.at_level(logging.WARNING, logger="agentium.engine"):
        asyncio.run(_get(values))  # drops the first finished loop's value
        anyio.run(aclose)  # was: OSError out of aclose(), and again at every retry
        anyio.run(aclose)
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.engine"]
    failed = "discarding a per-loop value of a finished event loop failed: _Client (OSError)"
    assert said.count(failed) >= 2, said  # the get() drop and the aclose() release each said
    assert all("a discard broke its contract" not in m for m in said)  # its class, not its text
