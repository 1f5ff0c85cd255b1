"""A refused memory fact leaves its place to the next eligible one, within a documented bound.

The selection limit (``MemoryLimits.max_injected_facts``, 8 by default)
counts the facts actually injected: the memory stage asks the selection for
``CANDIDATES_PER_FACT`` (4) candidates per place and examines them in rank
order, reporting each refused one (``memory_refused``), until the places are
filled or the candidates are spent. So facts drawn from a retracted group,
ranked above the eligible ones, no longer crowd them out of the request; and
however many refused facts a store holds, a turn examines at most 32.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from _memory_support import OkProvider, memory_texts

from agentium_harness import (
    HarnessRuntime,
    MemoryFact,
    MemoryLimits,
    MemoryScope,
    SelectionRequest,
    VerifiedIdentity,
    create_harness_runtime,
    recent_and_relevant,
)
from agentium_harness._ports.memory import GroupRef, StoredFact
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SCOPE = MemoryScope("acme", "ana")
QUESTION = "What is my badge PIN?"
# Eligible facts matching 2, 1 and 0 of the question's words: their rank order is fixed by the
# store's lookup, below every fact of the retracted group (which match all five words).
ELIGIBLE = ("Ana's badge is blue.", "Ana is left-handed.", "Ana prefers tea.")


async def _retracted_facts_above_eligible(hidden: int) -> tuple[OkProvider, HarnessRuntime, set[str]]:
    """``hidden`` facts drawn from group s1#0, then retracted, ranked above the ELIGIBLE ones."""
    provider = OkProvider()
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
    )
    await rt.run(ANA, "s1", "My badge PIN is 4417.")
    group = (await rt.read_history(ANA, "s1", max_groups=5)).groups[0].group
    source = (GroupRef("s1", 0, group.digest),)
    for text in ELIGIBLE:
        await rt.memory.remember(MemoryFact(SCOPE, text))
    hidden_ids: set[str] = set()
    for i in range(hidden):
        ack = await rt.memory.remember(
            MemoryFact(SCOPE, f"What is my badge PIN? Note {i}: 4417.", provenance=source)
        )
        assert ack.fact_id is not None
        hidden_ids.add(ack.fact_id)
    await rt.retract(ANA, "s1", count=2, reason="pop")  # the PIN turn: user message and answer
    return provider, rt, hidden_ids


def refused_ids(diagnostics: Sequence[object]) -> list[str]:
    """The fact ids the ``memory_refused`` warnings name (``?`` for a note about the answer)."""
    out = []
    for d in diagnostics:
        if getattr(d, "code", None) == "memory_refused":
            out.append(d.message.split()[2])  # type: ignore[attr-defined]
    return out


async def test_refused_facts_leave_their_places_to_eligible_ones_in_rank_order() -> None:
    provider, rt, hidden = await _retracted_facts_above_eligible(10)  # more than the 8 places
    result = await rt.run(ANA, "s1", QUESTION)
    request = provider.requests[-1]
    assert memory_texts(request) == list(ELIGIBLE)
    assert "4417" not in repr(request)
    # The refused facts are reported as before, each once, naming the retracted group.
    refused = [d.message for d in result.diagnostics if d.code == "memory_refused"]
    assert sorted(refused_ids(result.diagnostics)) == sorted(hidden)
    assert all("s1#0" in m and "retracted or cleared" in m for m in refused)
    # Another session's view hides nothing: there the top 8 are the group's facts, as ranked.
    await rt.run(ANA, "s2", QUESTION)
    assert len(memory_texts(provider.requests[-1])) == 8
    assert not set(memory_texts(provider.requests[-1])) & set(ELIGIBLE)
    await rt.aclose()


async def test_however_many_facts_are_refused_a_turn_examines_at_most_4_per_place() -> None:
    provider, rt, hidden = await _retracted_facts_above_eligible(40)
    asked: list[tuple[int, int, int]] = []

    async def recording(request: SelectionRequest) -> Sequence[StoredFact]:
        answer = await recent_and_relevant(request)
        asked.append((request.limit, request.candidates, len(answer)))
        return answer

    rt.memory.selection = recording
    result = await rt.run(ANA, "s1", QUESTION)
    # 8 places, 32 candidates: all 32 are refused, and the eligible facts ranked 41st to 43rd
    # are not reached (nothing is injected), but the turn did not examine the store whole.
    assert asked == [(8, 32, 32)]
    assert memory_texts(provider.requests[-1]) == []
    examined = refused_ids(result.diagnostics)
    assert len(examined) == 32 and set(examined) <= hidden
    await rt.aclose()


async def test_a_selection_returning_more_than_its_candidates_is_read_only_to_the_bound() -> None:
    provider, rt, hidden = await _retracted_facts_above_eligible(40)

    async def everything(request: SelectionRequest) -> Sequence[StoredFact]:
        # A host selection that ignores ``candidates``: what it returns past 32 is not read.
        return await request.store.lookup(request.scope, request.query, 200, request.ctx, at=request.at)

    rt.memory.selection = everything
    result = await rt.run(ANA, "s1", QUESTION)
    assert memory_texts(provider.requests[-1]) == []
    examined = refused_ids(result.diagnostics)
    assert examined[0] == "?" and len(examined) == 1 + 32 and set(examined[1:]) <= hidden
    assert any("returned more than 32 facts; the rest was not read" in d.message for d in result.diagnostics)
    await rt.aclose()


async def test_a_smaller_limit_examines_4_candidates_per_place() -> None:
    provider, rt, hidden = await _retracted_facts_above_eligible(6)
    rt.memory.limits = MemoryLimits(max_injected_facts=2)
    result = await rt.run(ANA, "s1", QUESTION)
    # 2 places, 8 candidates: the 6 refused ones, then the 2 best eligible ones.
    assert memory_texts(provider.requests[-1]) == list(ELIGIBLE[:2])
    assert sorted(refused_ids(result.diagnostics)) == sorted(hidden)
    await rt.aclose()
