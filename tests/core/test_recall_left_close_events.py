"""A recall session's close left to finish past its caller's deadline that then fails is a span event too.

When its caller's deadline leaves the close less than its own bound, the
caller waits only what is left and the close runs on, detached. A close that
then raised, or ran past its own bound, was a WARNING on
``agentium.engine.recall`` only: no span event, its caller's recall span
possibly ended. Now it is also the event ``agentium.recall.close_failed``
(``error.type`` only: the close's class name, or ``timeout``) on an
``agentium.recall.late_close`` span of its own that ends ERROR, as a
late-opened session's close is; no query, no error message. On asyncio and trio.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import anyio
import anyio.to_thread
import pytest
from _recall_support import KEY, MINE, Scripted, ScriptedSession, sid
from _telemetry_support import SpanEnded, Telemetered, outcome_events
from opentelemetry.trace import StatusCode

from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.recall import RecallUsage, revalidate
from agentium_harness._observe.spans import internal_span, using
from agentium_harness.plugin_api import OpContext, RecallLimits, RecallSession, Scope, SourceRef, Validation

pytestmark = pytest.mark.anyio

LATE = "agentium.recall.late_close"
SCOPE = Scope("acme", "ana", "s1")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class ClosesBadlyLate(Scripted):
    """Its sessions' ``validate_current`` hangs (the caller's deadline cuts it); their close fails later.

    ``hang``: the close never returns (its own 0.1 s bound cuts it); else it raises after 0.05 s.
    """

    def __init__(self, *, hang: bool) -> None:
        super().__init__([("doc-1", "The release train leaves every Thursday.")])
        self.hang = hang
        self.failed = anyio.Event()

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        store = self

        class Stuck(ScriptedSession):
            async def validate_current(
                self, refs: Sequence[SourceRef], ctx: OpContext
            ) -> Sequence[Validation]:
                await anyio.sleep_forever()
                raise AssertionError("unreachable")

            async def close(self) -> None:
                try:
                    await anyio.sleep(30.0 if store.hang else 0.05)
                    raise OSError("disk gone: the release train leaves at 9")
                finally:
                    store.failed.set()

        return Stuck(self)


@pytest.mark.parametrize(
    ("hang", "kind"), [(False, "OSError"), (True, "timeout")], ids=["raises", "overruns"]
)
async def test_a_close_left_past_its_callers_deadline_that_fails_is_an_event_on_a_span_of_its_own(
    hang: bool, kind: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    ended = SpanEnded(LATE)
    t = Telemetered(ended)
    store = ClosesBadlyLate(hang=hang)
    refs = [SourceRef(sid("doc-1", MINE), "r1")]
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"), anyio.fail_after(5):
        with using(t.telemetry().resolve()), internal_span("caller"):
            with anyio.move_on_after(0.01) as scope:
                ticket = Ticket(KEY, "run", 30.0, 30.0)
                await revalidate(ticket, store, SCOPE, RecallLimits(max_latency_s=30.0), refs, RecallUsage())
        assert scope.cancelled_caught
        assert not store.failed.is_set()  # the premise: its caller left it running
        await store.failed.wait()
        # Said just after the close ends, in its own task: waited for a second at most.
        await anyio.to_thread.run_sync(ended.ended.wait, 1.0)
    [late] = t.named(LATE)
    assert outcome_events(late) == [("agentium.recall.close_failed", {"error.type": kind})]
    assert late.status.status_code is StatusCode.ERROR
    assert (late.attributes or {}).get("error.type") == kind
    assert (late.attributes or {}).get("agentium.operation") == "recall close"
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.recall"]
    assert f"a recall session close left to finish past its caller's deadline failed: {kind}" in said, said
    # The caller, still there when it left the close running, said that on its own span.
    assert t.events("agentium.recall.close_failed")[0] == (
        "caller",
        "agentium.recall.close_failed",
        {"error.type": "timeout"},
    )
    carried = re.sub(r"[0-9a-f]{16,}", "<id>", " ".join([*t.carried(), *said]))
    for text in ("release train", "Thursday", "disk gone", "leaves at 9"):
        assert text not in carried, text


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_close_left_past_its_callers_deadline_cut_short_as_its_loop_ends_is_said_too(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A request's loop ended (asyncio.run returning, a trio run ending) while the close its recall
    # left running still ran: the close was cancelled there, and nothing said so (no WARNING, no
    # event), while a late-opened session's close cut short is both (close_late).
    t = Telemetered()
    store = ClosesBadlyLate(hang=True)
    refs = [SourceRef(sid("doc-1", MINE), "r1")]

    async def request() -> None:
        with using(t.telemetry().resolve()), internal_span("caller"):
            with anyio.move_on_after(0.01):
                ticket = Ticket(KEY, "run", 30.0, 30.0)
                await revalidate(ticket, store, SCOPE, RecallLimits(max_latency_s=30.0), refs, RecallUsage())
        assert not store.failed.is_set()  # the premise: its caller left it running; the loop ends now

    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        anyio.run(request, backend=backend)
    assert store.failed.is_set()  # cut short by its loop's end
    [late] = t.named(LATE)
    assert outcome_events(late) == [("agentium.recall.close_failed", {"error.type": "cancelled"})]
    assert late.status.status_code is StatusCode.ERROR
    said = [r.getMessage() for r in caplog.records if r.name == "agentium.engine.recall"]
    assert "a recall session close left to finish past its caller's deadline failed: cancelled" in said, said
