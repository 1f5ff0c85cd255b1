"""A recall session whose on-time close fails is a WARNING and a span event, not only a note.

Every recall round opens a session and closes it on every path (shielded,
bounded by ``CLOSE_TIMEOUT_S``). A close that raised, or did not finish in
time, was only a ``recall_note`` diagnostic (severity ``info``) on the
turn: no WARNING, no event of its own. Now it also logs a WARNING on
``agentium.engine.recall`` and is the event ``agentium.recall.close_failed``
(``error.type`` only, as for a late-opened session's close) on the recall
span it ran under: ``retrieval {store}`` at the dispatch fence,
``agentium.recall.validate`` at the commit fence. No query, no document
text, no error message. On asyncio and trio.

Only the close is meant to time out (its own 0.1 s bound, in the hang
case); every other call gets 30 s.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, ScriptedSession, runtime
from _telemetry_support import Telemetered

from agentium_harness import RecallStatus, RuntimeLimits
from agentium_harness.plugin_api import OpContext, RecallLimits, RecallSession, Scope

pytestmark = pytest.mark.anyio

GENEROUS = 30.0
QUERY = "When does the release train leave?"
DOC = ("doc-1", "The release train leaves every Thursday.")
DISPATCH = "retrieval ClosesBadly"
FENCE = "agentium.recall.validate"


class ClosesBadly(Scripted):
    """Discovers, reads and validates its one document; every session it opens fails to close (or hangs)."""

    def __init__(self, *, hang: bool = False) -> None:
        super().__init__([DOC])
        self.hang = hang
        self.closes = 0

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        store = self

        class Bad(ScriptedSession):
            async def close(self) -> None:
                store.closes += 1
                if store.hang:
                    await anyio.sleep(GENEROUS)  # cooperative: the close's own bound cuts it short
                raise OSError("disk gone: the release train leaves at 9")

        return Bad(self)


async def _run(store: ClosesBadly, caplog: pytest.LogCaptureFixture) -> tuple[Telemetered, Any, list[str]]:
    t = Telemetered()
    rt, _, _ = runtime(store, limits=RuntimeLimits(op_timeout_s=GENEROUS), telemetry=t.telemetry())
    try:
        with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"), anyio.fail_after(90):
            result = await rt.run(ANA, "s1", QUERY)
    finally:
        await rt.aclose()
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "agentium.engine.recall" and r.levelno == logging.WARNING and "close" in r.getMessage()
    ]
    return t, result, warnings


def _private(t: Telemetered, warnings: list[str]) -> None:
    """No query text, document text or error message on a span, a metric or the WARNINGs (hex ids masked)."""
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join([*t.carried(), *warnings]))
    for text in ("release train", "Thursday", "disk gone", "leaves at 9"):
        assert text not in carried, text


def _close_events(t: Telemetered) -> list[tuple[str, str, dict[str, Any]]]:
    return t.events("agentium.recall.close_failed")


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_on_time_recall_close_that_fails_warns_and_is_an_event_on_its_recall_span(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ClosesBadly()
    t, result, warnings = await _run(store, caplog)
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    assert store.closes == 2  # the dispatch fence's session and the commit fence's
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    # One note of the kind for the run (the commit fence's is the dispatch fence's kind); a WARNING and
    # an event per close.
    assert sum("recall session close failed: OSError" in n for n in notes) == 1, notes
    assert _close_events(t) == [
        (DISPATCH, "agentium.recall.close_failed", {"error.type": "OSError"}),
        (FENCE, "agentium.recall.close_failed", {"error.type": "OSError"}),
    ]
    assert warnings == ["a recall session could not be closed: OSError"] * 2, warnings
    _private(t, warnings)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_on_time_recall_close_past_its_bound_warns_and_is_an_event_on_its_recall_span(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ClosesBadly(hang=True)
    t, result, warnings = await _run(store, caplog)
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    assert store.closes == 2
    notes = [d.message for d in result.diagnostics if d.code == "recall_note"]
    assert sum("recall session close did not finish within" in n for n in notes) == 1, notes
    assert _close_events(t) == [
        (DISPATCH, "agentium.recall.close_failed", {"error.type": "timeout"}),
        (FENCE, "agentium.recall.close_failed", {"error.type": "timeout"}),
    ]
    assert len(warnings) == 2 and all("did not finish within 0.1s" in w for w in warnings), warnings
    _private(t, warnings)
