"""``aclose()`` is a span, ``agentium.runtime.close``, and an incomplete close an event on it.

An incomplete close (owned work still running at the close bound, an owned
adapter whose close failed) logged a WARNING on ``agentium.engine.lifecycle``
and put nothing on any span: its drain's ``agentium.drain`` span says what
the drain settled, not that the runtime stayed ``closing``. Each attempt is
now a span under the runtime's telemetry, the parent of its drain, and one
that leaves problems ends failed (``RuntimeCloseError``) with the event
``agentium.runtime.close_incomplete``: how many problems, of which kinds,
never their texts (which may quote an adapter's error).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import attrs
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    MemoryManager,
    RuntimeCloseError,
    RuntimeLimits,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

SECRET = "QZV-secret-7731"
SHORT = RuntimeLimits(op_timeout_s=0.3, settle_timeout_s=0.3, close_timeout_s=0.3)


class FailingClose(InMemoryArchive):
    """An owned adapter whose close fails, quoting what it held."""

    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    async def aclose(self) -> None:
        if self.fail:
            raise OSError(f"disk gone while flushing {SECRET}")


async def test_an_incomplete_close_is_an_event_on_its_span_without_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = Telemetered()
    release, ended = anyio.Event(), anyio.Event()

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):  # ignores the close's cancellation
            await release.wait()
        ended.set()

    manager = MemoryManager(InMemoryMemoryStore())
    archive = FailingClose()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=archive,
        session_store=InMemorySessionStore(),
        memory=manager,
        owned=[archive],
        limits=SHORT,
        telemetry=t.telemetry(),
    )
    manager.start_work("final-write fact-1", "final-write", stubborn)
    try:
        await _close_incomplete(rt, t, caplog)
    finally:
        release.set()  # a failed assertion must not leave the shielded work holding the test's loop
    # Once the work ended and the adapter closes, a retry is a span of its own, with nothing left.
    with anyio.fail_after(30):
        await ended.wait()
    archive.fail = False
    rt.limits = attrs.evolve(SHORT, settle_timeout_s=30.0, close_timeout_s=30.0)
    await rt.aclose()
    assert rt.state.value == "closed"
    [_first, retry] = t.named("agentium.runtime.close")
    assert not retry.events and "error.type" not in (retry.attributes or {})


async def _close_incomplete(rt: Any, t: Telemetered, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentium.engine.lifecycle")
    with pytest.raises(RuntimeCloseError) as info:
        await rt.aclose()  # the one call meant to run out of time
    assert len(info.value.failures) == 2 and rt.state.value == "closing"
    [close] = t.named("agentium.runtime.close")
    events = [(e.name, dict(e.attributes or {})) for e in close.events if e.name.startswith("agentium.")]
    assert events == [
        (
            "agentium.runtime.close_incomplete",
            {
                "agentium.close.failures": 2,
                "agentium.close.work_running": 1,
                "agentium.close.closes_failed": 1,
            },
        )
    ]
    assert dict(close.attributes or {})["error.type"] == "RuntimeCloseError"
    assert t.child_of("agentium.drain", close)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "drain incomplete: 0 completed, 0 failed, 1 cancelled",
        "runtime close incomplete: 2 problem(s); it stays closing",
    ]
    carried = [str(v) for s in t.spans for v in (s.attributes or {}).values()]
    carried += [str(v) for s in t.spans for e in s.events for v in (e.attributes or {}).values()]
    assert not [text for text in carried if SECRET in text]


async def test_a_clean_close_is_a_span_with_its_drain_under_it() -> None:
    t = Telemetered()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=t.telemetry(),
    )
    await rt.aclose()
    close = t.one("agentium.runtime.close")
    assert not close.events and t.child_of("agentium.drain", close)
    await rt.aclose()  # already closed: no second attempt, no second span
    assert len(t.named("agentium.runtime.close")) == 1
