"""A listing that held what it may not, and a memory hook that failed, are span events too.

Every degraded outcome logs a WARNING and becomes a span event, with no
content (docs/observability.md). Two of the memory manager's WARNINGs had
no event: "facts a listing may not hold" (``agentium.engine.memory``), found
after the list's ``search_memory`` span had ended; and a lifecycle hook that
failed (``agentium.engine.hooks``), broadcast after the write's span ended
(the runtime's own hook failures are ``agentium.diagnostic`` events on the
turn's or operation's span already). Now the list's span covers its check
(``agentium.memory.listing_incomplete``, a count only), a write's span its
broadcast, and a drain's broadcast has a span of its own; a hook failure is
an ``agentium.diagnostic`` event as the runtime's are.

Scenarios from tests/core/test_memory_manager.py (a store listing a fact
twice, a forgotten one and a tombstone) and tests/core/test_observability_degraded.py
(a hook that raises quoting what it was given).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _memory_support import hook_registry, sqlite_store
from _telemetry_support import Telemetered

from agentium_harness import MemoryFact, MemoryManager, MemoryScope
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext, StoredFact

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
SECRET = "the-forgotten-secret-7731"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    s = sqlite_store(tmp_path)
    yield s
    await s.aclose()


def _events(t: Telemetered, span: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.name, dict(e.attributes or {}))
        for s in t.named(span)
        for e in s.events
        if e.name.startswith("agentium.")
    ]


async def test_facts_a_listing_may_not_hold_are_an_event_on_its_search_memory_span(
    store: SQLiteMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A fact listed twice, a forgotten one listed as current and its tombstone: one event, a count."""
    kept = await MemoryManager(store).remember(MemoryFact(ALICE, "kept fact"))
    gone = await MemoryManager(store).remember(MemoryFact(ALICE, f"fact {SECRET}"))
    assert kept.fact_id is not None and gone.fact_id is not None
    [stale] = [f for f in await store.list_facts(ALICE, 200, OpContext()) if f.fact_id == gone.fact_id]

    class Repeats(SQLiteMemoryStore):
        async def list_facts(self, scope: MemoryScope, limit: int, ctx: OpContext) -> Sequence[StoredFact]:
            listed = list(await super().list_facts(scope, limit, ctx))
            tombstone = [r for r in await self.history(scope, gone.fact_id, ctx) if r.fact_id == gone.fact_id]
            return [*listed, *listed, stale, tombstone[-1]][:limit]

    repeats = Repeats(store.config)
    t = Telemetered()
    manager = MemoryManager(repeats, telemetry=t.telemetry())
    try:
        await manager.forget(ALICE, gone.fact_id)
        with caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
            listed = await manager.list(ALICE)
    finally:
        await repeats.aclose()
    assert [f.fact_id for f in listed] == [kept.fact_id]
    assert "may not hold" in caplog.text
    assert _events(t, "search_memory") == [
        ("agentium.memory.listing_incomplete", {"agentium.memory.dropped": 3})
    ]
    [span] = t.named("search_memory")  # still one span for the list: the store call opens none of its own
    assert span.attributes is not None and span.attributes["gen_ai.memory.record.count"] == 4
    assert SECRET not in " ".join(t.carried())  # the event is a count: no fact text or id (compared above)


def _hook_failed(t: Telemetered, span: str) -> list[tuple[str, dict[str, Any]]]:
    return [(n, a) for n, a in _events(t, span) if n == "agentium.diagnostic"]


FAILED = (
    "agentium.diagnostic",
    {"agentium.diagnostic.code": "hook_failed", "agentium.diagnostic.severity": "warning"},
)


async def test_a_memory_hook_that_failed_is_an_event_on_the_writes_and_the_drains_span(
    store: SQLiteMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """remember, correct, forget and drain each broadcast to a hook that raises: an event on its span."""
    registry, _ = hook_registry(raising=True)
    t = Telemetered()
    manager = MemoryManager(store, hooks=registry, telemetry=t.telemetry())
    with caplog.at_level(logging.WARNING, logger="agentium.engine.hooks"):
        ack = await manager.remember(MemoryFact(ALICE, f"fact {SECRET}"))
        assert ack.fact_id is not None
        fixed = await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, f"fixed {SECRET}"))
        forgotten = await manager.forget(ALICE, ack.fact_id)
        drained = await manager.drain(30.0)
    assert ack.notes and fixed.notes and forgotten.notes and drained.notes  # the host is still told
    assert [r.getMessage() for r in caplog.records if r.name == "agentium.engine.hooks"] == [
        "hook_failed (warning)"
    ] * 4
    for span in ("create_memory", "update_memory", "delete_memory", "agentium.memory.drained"):
        assert _hook_failed(t, span) == [FAILED], span
    assert len(t.named("delete_memory")) == 1  # the forget is one span, its store call under none of its own
    carried = " ".join(t.carried())
    assert SECRET not in carried and "exploded" not in carried


async def test_with_content_capture_the_hook_failure_event_carries_its_message(
    store: SQLiteMemoryStore,
) -> None:
    """The host opted in: the event says what the hook raised, as a run's diagnostic events do."""
    registry, _ = hook_registry(raising=True)
    t = Telemetered()
    manager = MemoryManager(store, hooks=registry, telemetry=t.telemetry(capture_content=True))
    await manager.remember(MemoryFact(ALICE, "likes tea"))
    [(_, attributes)] = _hook_failed(t, "create_memory")
    assert "memory hook exploded" in str(attributes["agentium.diagnostic.message"])
