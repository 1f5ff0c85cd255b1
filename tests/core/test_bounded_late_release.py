"""What escapes the release of a late result is a WARNING, not silence.

``bounded`` releases a result that lands after its caller walked away
(``on_late``: a late-opened recall session closed, a late write's erasure
take-back) and dropped whatever that release raised without a word. Each
release now says its own outcomes (tests/core/test_recall_late_close_events.py,
test_document_late_take_back_events.py, test_memory_fence_span_events.py);
what escapes one all the same is an engine fault, and is logged as a WARNING
on ``agentium.engine`` with the error's type only, and a span of its own
(``agentium.late_release``: the call's span has ended) with an event.
"""

from __future__ import annotations

import logging
import threading

import anyio
import anyio.to_thread
import pytest
from _telemetry_support import Telemetered

from agentium_harness._engine.bounded import Overrun, bounded
from agentium_harness._observe.spans import using

pytestmark = pytest.mark.anyio

GENEROUS = 30.0


class _Said(logging.Handler):
    """Set once ``agentium.engine`` logged a WARNING (the release logs it in its own task)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.said.set()


async def test_a_late_release_that_raises_is_a_warning_with_its_type_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate, released = threading.Event(), threading.Event()

    async def work() -> bool:
        return await anyio.to_thread.run_sync(gate.wait, GENEROUS)  # not abandonable: it lands late

    async def on_late(value: bool) -> None:
        released.set()
        raise RuntimeError("the pin is 4321")

    said_it, log = _Said(), logging.getLogger("agentium.engine")
    log.addHandler(said_it)
    try:
        with caplog.at_level(logging.WARNING, logger="agentium.engine"):
            with pytest.raises(Overrun) as info:
                await bounded(work, 0.3, on_late=on_late)  # the one call meant to time out
            assert info.value.abandoned
            gate.set()
            assert await anyio.to_thread.run_sync(released.wait, GENEROUS)
            assert await anyio.to_thread.run_sync(said_it.said.wait, GENEROUS), "the release said nothing"
    finally:
        gate.set()
        log.removeHandler(said_it)
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.engine"]
    assert said == ["the release of a late result failed: RuntimeError"], said
    assert "4321" not in caplog.text


async def test_a_late_release_that_raises_is_a_span_event_under_the_callers_telemetry() -> None:
    # The call's own span has ended when its result lands: the failure had no span to go on.
    t = Telemetered()
    gate, released = threading.Event(), threading.Event()

    async def work() -> bool:
        return await anyio.to_thread.run_sync(gate.wait, GENEROUS)

    async def on_late(value: bool) -> None:
        released.set()
        raise RuntimeError("the pin is 4321")

    said_it, log = _Said(), logging.getLogger("agentium.engine")
    log.addHandler(said_it)
    try:
        # The telemetry of the operation that made the call (a runtime's), copied into the call's task.
        with using(t.telemetry().resolve()):
            with pytest.raises(Overrun):
                await bounded(work, 0.3, on_late=on_late)  # the one call meant to time out
        gate.set()
        assert await anyio.to_thread.run_sync(released.wait, GENEROUS)
        assert await anyio.to_thread.run_sync(said_it.said.wait, GENEROUS), "the release said nothing"
    finally:
        gate.set()
        log.removeHandler(said_it)
    span = t.one("agentium.late_release")
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("agentium.late_release.failed", {"error.type": "RuntimeError"}),
        ("exception", {"exception.type": "RuntimeError"}),  # no message: no content capture
    ]
    assert dict(span.attributes or {}) == {"error.type": "RuntimeError"}
    assert "4321" not in str([(s.attributes, [e.attributes for e in s.events]) for s in t.spans])
