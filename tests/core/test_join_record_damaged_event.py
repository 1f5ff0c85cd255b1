"""A damaged join record is a WARNING and an event on the span current where a fence read it.

The join record (``j-<erasure id>``) is read by the commit fence (a turn's,
an append's commit) and the erasure fence around memory and document
writes, never under an ``agentium.erasure`` span. Damaged, it is read as
absent (the fence assumes the worst) and a WARNING names the erasure; the
event ``agentium.erasure.join_record_damaged`` goes on the span current
there (a turn's ``agentium.commit``), with no attributes: no ids, no content.
Before, the WARNING was all.
"""

from __future__ import annotations

import logging

import pytest
from _erasure_harness import ANA, OPERATOR, HeldOnce, turn_while_held
from _telemetry_support import Telemetered
from test_commit_fence_exact import BOB, TURN, _damage_join_record

from agentium_harness import EraseTarget, ErasureState, SessionConflictError, create_harness_runtime
from agentium_harness._engine.erasure import new_record
from agentium_harness._engine.erasure_ledger import (
    header,
    joined_key,
    joined_since,
    load_ledger,
    save_joined,
    save_ledger,
)
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._observe import spans as observe
from agentium_harness._ports.erasure import ErasureKind, ErasureLedger, ErasureRecord
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

EVENT = "agentium.erasure.join_record_damaged"


async def test_a_damaged_join_record_read_by_the_commit_fence_is_an_event_on_the_commit_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As test_commit_fence_exact: s1's old erasure's join record damaged, bob erased meanwhile."""
    t = Telemetered()
    provider = HeldOnce()
    archive, store = InMemoryArchive(), InMemorySessionStore()
    slow = create_harness_runtime(
        provider=provider, archive=archive, session_store=store, telemetry=t.telemetry()
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    try:
        await slow.run(ANA, "s1", "before the erasure")
        await other.run(BOB, "b1", "bob's session")
        old = await other.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
        _damage_join_record(store, old.record.erasure_id)

        async def meanwhile() -> None:
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)

        caplog.set_level(logging.WARNING)
        error = await turn_while_held(slow, provider, "s1", TURN, meanwhile)
        assert isinstance(error, SessionConflictError), error
        assert [r for r in caplog.records if "join record" in r.getMessage() and "damaged" in r.getMessage()]
        found = [(s.name, dict(e.attributes or {})) for s in t.spans for e in s.events if e.name == EVENT]
        assert found == [("agentium.commit", {})]
    finally:
        await slow.aclose()
        await other.aclose()


@pytest.mark.parametrize("damage", ["bytes", "another-header"])
async def test_the_event_goes_on_the_span_current_where_the_join_record_is_read(
    damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Read under a stage's span (a write's fence inside a turn, say): that span gets it; outside, none."""
    t = Telemetered()
    store, ticket = InMemorySessionStore(), Ticket(None, "test", 30.0)
    one, two = _record("s1"), _record("s2")
    await save_joined(ticket, store, one, 3)
    if damage == "bytes":
        _damage_join_record(store, one.erasure_id)
    else:  # decodes, but holds another erasure's header (tests/core/test_join_record_of_another.py)
        key = joined_key("acme", one.erasure_id)
        revision, _ = await load_ledger(ticket, store, key)
        await save_ledger(ticket, store, key, ErasureLedger((header(two),), joined_after=3), revision)
    caplog.set_level(logging.WARNING)
    assert await joined_since(ticket, store, one, 5) is None  # outside any operation: nothing records
    with observe.using(t.telemetry().resolve()), observe.stage("commit") as span:
        assert span.recording
        assert await joined_since(ticket, store, one, 5) is None
    found = [(s.name, dict(e.attributes or {})) for s in t.spans for e in s.events if e.name == EVENT]
    assert found == [("agentium.commit", {})]
    warned = [r for r in caplog.records if "join record" in r.getMessage() and "damaged" in r.getMessage()]
    assert len(warned) == 2, warned


def _record(session: str) -> ErasureRecord:
    target = EraseTarget.session("acme", "ana", session)
    return new_record(target, "dsr", OPERATOR, ErasureKind.ERASURE, ErasureState.PENDING)
