"""A recall session opened past the budget whose late close fails is a WARNING and a span event.

A recall store's ``open`` blocked in a worker thread is abandoned at the
recall latency budget; the session it opens late is closed when it lands
(``bounded``'s release of a late result). A close that raised there, or
ran past the release's bound, was swallowed: no WARNING, no event, a
session possibly left open with nothing said. Now it logs a WARNING on
``agentium.engine.recall`` and is the event ``agentium.recall.close_failed``
(``error.type`` only) on an ``agentium.recall.late_close`` span that ends
ERROR; no query, no error message.

Only the recall open (under the recall latency budget) is meant to time
out, and for the cut-short case the release's bound; every other call
gets 30 s.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _telemetry_support import SpanEnded, Telemetered
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from test_blocked_threads import ANA, BlockingRecall, BlockingSession, blocking

from agentium_harness import (
    RecallLimits,
    RecallStatus,
    RuntimeLimits,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness._engine import bounded
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, RecallSession

pytestmark = pytest.mark.anyio

GENEROUS = 30.0
QUERY = "when does the release train leave?"
LATE = "agentium.recall.late_close"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at the end of the test so a blocked thread returns instead of waiting it out."""
    event = threading.Event()
    yield event
    event.set()


class ClosesBadly(BlockingRecall):
    """Its ``open`` blocks its thread; the session it opens late fails to close (or hangs: ``hang``)."""

    def __init__(self, gate: threading.Event, *, hang: bool = False) -> None:
        super().__init__(gate)
        self.hang = hang
        self.close_asked = threading.Event()

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        await anyio.to_thread.run_sync(blocking, self.gate)
        store = self

        class Late(BlockingSession):
            async def close(self) -> None:
                store.close_asked.set()
                if store.hang:
                    await anyio.sleep(GENEROUS)  # cooperative: the release's bound cuts it short
                raise OSError("disk gone: the release train leaves at 9")

        return Late(self)


async def _opened_late(
    store: ClosesBadly, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> tuple[Telemetered, ReadableSpan, list[str]]:
    """A run whose recall open is abandoned; then the open lands: the late close's span and WARNINGs."""
    ended = SpanEnded(LATE)
    t = Telemetered(ended)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        limits=RuntimeLimits(op_timeout_s=GENEROUS),
        recall_limits=RecallLimits(max_latency_s=0.3),
        recall_policy=current_session_recall_policy(on_failed="continue"),
        telemetry=t.telemetry(),
    )
    try:
        with anyio.fail_after(90):
            result = await rt.run(ANA, "s1", QUERY)
            assert result.recall is not None and result.recall.status is RecallStatus.FAILED
            with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
                gate.set()
                assert await anyio.to_thread.run_sync(ended.ended.wait, GENEROUS), "no late close span"
    finally:
        gate.set()
        await rt.aclose()
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentium.engine.recall" and "past its deadline" in r.getMessage()
    ]
    return t, t.one(LATE), warnings


def _private(t: Telemetered, warnings: list[str]) -> None:
    """No query text and no error message on a span, a metric or the WARNINGs (hex ids masked)."""
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join([*t.carried(), *warnings]))
    for text in ("release train", "disk gone", "leaves at 9"):
        assert text not in carried, text


def _outcomes(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith("agentium.")]


async def test_a_late_opened_recall_session_that_fails_to_close_warns_and_is_an_event(
    gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    store = ClosesBadly(gate)
    t, late, warnings = await _opened_late(store, gate, caplog)
    assert store.close_asked.is_set()
    assert _outcomes(late) == [("agentium.recall.close_failed", {"error.type": "OSError"})]
    assert late.status.status_code is StatusCode.ERROR
    assert (late.attributes or {}).get("error.type") == "OSError"
    said = [dict(e.attributes or {}) for e in late.events if e.name == "exception"]
    assert said == [{"exception.type": "OSError"}], said  # no message: content capture is off
    assert len(warnings) == 1 and "could not be closed: OSError" in warnings[0], warnings
    _private(t, warnings)


async def test_a_late_opened_recall_session_whose_close_is_cut_short_warns_and_is_an_event(
    gate: threading.Event, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of a late result is bounded (shortened here: the close is meant to run out of time)."""
    monkeypatch.setattr(bounded, "LATE_CLEANUP_S", 2.0)
    store = ClosesBadly(gate, hang=True)
    t, late, warnings = await _opened_late(store, gate, caplog)
    assert store.close_asked.is_set()
    assert _outcomes(late) == [("agentium.recall.close_failed", {"error.type": "cancelled"})]
    assert late.status.status_code is StatusCode.ERROR
    assert (late.attributes or {}).get("error.type") == "cancelled"
    assert len(warnings) == 1 and "was not closed: cut short" in warnings[0], warnings
    _private(t, warnings)
