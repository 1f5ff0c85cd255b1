"""The verification span of a run stopped in a revision says the verdicts the run commits.

A run whose revision's model call fails (or that is cancelled in it) commits
the verification as it stood: the failing verdict, then an ``unknown``
attempt for the revision (tests/core/test_verification_interrupted.py). Its
``agentium.verification`` span ended with the exception and none of that: no
verdict, no counts, nothing saying a revision was cut short. Now it carries
the committed record's verdict and counts and an
``agentium.verification.interrupted`` event; the verifier's reason (content)
only with content capture.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _telemetry_support import Telemetered
from test_verification_interrupted import ANA, Fails, Script, _write

from agentium_harness import (
    AgentiumError,
    EffectLevel,
    Tool,
    ToolRegistry,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore

pytestmark = pytest.mark.anyio

#: What the verifier's reason says (``Fails``): content, on a span only with capture.
REASON = "out.txt differs"


def _runtime(provider: Script, t: Telemetered, capture: bool = False) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=Fails(),
        tools=ToolRegistry([Tool("write", _write, EffectLevel.WRITE)]),
        completion_policy=verified_completion_policy(on_fail="revise", max_revisions=2),
        telemetry=t.telemetry(capture_content=capture),
    )


def _assert_interrupted(t: Telemetered, error_type: str) -> dict[str, Any]:
    span = t.one("agentium.verification")
    attributes = dict(span.attributes or {})
    assert attributes["agentium.verification.verdict"] == "unknown"
    assert attributes["agentium.verification.revisions"] == 1
    assert attributes["agentium.verification.attempts"] == 2  # the failing verdict, the cut revision
    assert attributes["error.type"] == error_type
    events = [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith("agentium.")]
    assert events == [("agentium.verification.interrupted", {"agentium.verification.revision": 1})]
    return attributes


async def test_a_revision_whose_model_call_fails_leaves_its_verdicts_on_the_span() -> None:
    t = Telemetered()
    async with _runtime(Script("fail"), t) as runtime:
        with pytest.raises(AgentiumError):
            await runtime.run(ANA, "task-1", "Write out.txt", grants=["write"], completion=True)
    attributes = _assert_interrupted(t, "TurnInterrupted")
    assert "agentium.verification.reason" not in attributes
    assert not [s for s in t.spans for v in (s.attributes or {}).values() if REASON in str(v)]
    assert not [
        s for s in t.spans for e in s.events for v in (e.attributes or {}).values() if REASON in str(v)
    ]


async def test_a_run_cancelled_in_a_revision_leaves_its_verdicts_on_the_span() -> None:
    t = Telemetered()
    provider = Script("hang")
    async with _runtime(provider, t) as runtime:
        async with anyio.create_task_group() as tasks:

            async def run() -> None:
                await runtime.run(ANA, "task-1", "Write out.txt", grants=["write"], completion=True)

            tasks.start_soon(run)
            with anyio.fail_after(30):
                await provider.waiting.wait()  # the revision's model call is under way
            tasks.cancel_scope.cancel()
    _assert_interrupted(t, "cancelled")


async def test_with_content_capture_the_span_has_the_reason_of_the_committed_record() -> None:
    t = Telemetered()
    async with _runtime(Script("fail"), t, capture=True) as runtime:
        with pytest.raises(AgentiumError):
            await runtime.run(ANA, "task-1", "Write out.txt", grants=["write"], completion=True)
    attributes = _assert_interrupted(t, "TurnInterrupted")
    # The last attempt's reason: the engine's own note on the revision the run stopped in.
    reason = attributes["agentium.verification.reason"]
    assert "revision 1" in reason and "not verified" in reason
