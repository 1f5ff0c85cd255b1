"""A background summary update's diagnostic is said once: by the update as it ends, not again by the next run.

The update logs each diagnostic, adds it to its ``agentium.summary`` span
as an event and counts it in ``agentium.diagnostics`` as it ends (no later
run may come). The next run of the session still carries it in its result
(the host's to act on) but does not log, event or count it a second time:
one degraded outcome is one WARNING for an alert and one count in a metric.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import attrs
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    ResidentLimits,
    RuntimeLimits,
    SummaryLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import Citation, ExtractiveSummarizer
from agentium_harness.plugin_api import Message, MessageGroup, OpContext, Role, TaskSummary

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme-tenant", "ana-user", "test-auth")
CODE = "summarizer_contract_violation"


class CitesNoGroup(ExtractiveSummarizer):
    """A summarizer whose answer also cites a group it was not given: each update drops it (a WARNING)."""

    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        summary = await super().summarize(previous, groups, ctx)
        return attrs.evolve(summary, citations=(*summary.citations, Citation(999, "sha256:" + "1" * 64)))


def _counted(t: Telemetered, code: str) -> int:
    points = t.metrics().get("agentium.diagnostics", [])
    return sum(int(p.value) for p in points if dict(p.attributes).get("agentium.diagnostic.code") == code)


async def test_a_background_updates_warning_is_logged_evented_and_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = Telemetered()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=CitesNoGroup(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        summary_limits=SummaryLimits(background=True),
        telemetry=t.telemetry(),
    )
    results = []
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
        async with runtime:
            for i in range(4):
                results.append(await runtime.run(ANA, "s1", f"turn {i}"))
            # A history write carries the last update's too, as a run does.
            appended = await runtime.append(
                ANA, "s1", [Message(Role.USER, "more"), Message(Role.ASSISTANT, "noted")]
            )
    # Each update that dropped the citation said so on its own span.
    updates = [
        s
        for s in t.named("agentium.summary")
        if any(dict(e.attributes or {}).get("agentium.diagnostic.code") == CODE for e in s.events)
    ]
    assert len(updates) >= 2
    # The runs that came after an update still carry its diagnostic in their results.
    carried = [r for r in (*results, appended) if any(d.code == CODE for d in r.diagnostics)]
    assert len(carried) >= 2 and carried[-1] is appended
    # But each outcome is said once: one record, one event, one count per update.
    records = [r for r in caplog.records if getattr(r, "agentium_code", None) == CODE]
    assert len(records) == len(updates)
    assert all(r.agentium_operation == "summary update" for r in records)
    events = [e for e in t.events("agentium.diagnostic") if e[2].get("agentium.diagnostic.code") == CODE]
    assert len(events) == len(updates)
    assert _counted(t, CODE) == len(updates)
