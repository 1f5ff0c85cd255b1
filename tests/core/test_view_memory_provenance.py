"""Memory facts drawn from a group the session's view hides stay out of the run's request.

A fact's provenance names the groups it came from. When a retraction
touched one of those groups, or a reset cleared it, the fact could restate
what the host took out of the view, exactly as that group's recall excerpt
could; recall leaves such a group out, so the memory stage leaves the fact
out of that session's requests too (``memory_refused``). Other sessions of
the user, whose views the retraction did not move, still get it.
"""

from __future__ import annotations

import pytest
from _memory_support import OkProvider, memory_texts

from agentium_harness import MemoryFact, MemoryScope, VerifiedIdentity, create_harness_runtime
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
PIN_FACT = "Ana's badge PIN is 4417."


async def _fact_from_first_turn(session: str = "s1") -> tuple[OkProvider, object]:
    """A runtime whose session's group 0 said the PIN, and a fact remembered from that group."""
    provider = OkProvider()
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
    )
    await rt.run(ANA, session, "My badge PIN is 4417.")
    group = (await rt.read_history(ANA, session, max_groups=5)).groups[0].group
    fact = MemoryFact(MemoryScope("acme", "ana"), PIN_FACT, provenance=(GroupRef(session, 0, group.digest),))
    await rt.memory.remember(fact)
    # The fact reaches the request while its group is in view (so the checks below can fail).
    await rt.run(ANA, session, "What is my badge PIN?")
    assert memory_texts(provider.requests[-1]) == [PIN_FACT]
    return provider, rt


async def test_a_fact_from_a_retracted_group_is_not_sent_in_that_session() -> None:
    provider, rt = await _fact_from_first_turn()
    await rt.retract(ANA, "s1", count=4, reason="pop")  # both turns: the PIN turn is the oldest
    result = await rt.run(ANA, "s1", "What is my badge PIN?")
    request = provider.requests[-1]
    assert memory_texts(request) == []
    assert "4417" not in repr(request)
    refused = [d.message for d in result.diagnostics if d.code == "memory_refused"]
    assert len(refused) == 1 and "s1#0" in refused[0] and "retracted or cleared" in refused[0]
    # Another session of the user has its own view: the host-owned fact still applies there.
    await rt.run(ANA, "s2", "What is my badge PIN?")
    assert memory_texts(provider.requests[-1]) == [PIN_FACT]
    await rt.aclose()


async def test_a_fact_from_a_group_a_reset_cleared_is_not_sent() -> None:
    provider, rt = await _fact_from_first_turn()
    await rt.reset_view(ANA, "s1", reason="clear")
    result = await rt.run(ANA, "s1", "What is my badge PIN?")
    assert memory_texts(provider.requests[-1]) == []
    assert "4417" not in repr(provider.requests[-1])
    assert any(d.code == "memory_refused" for d in result.diagnostics)
    await rt.aclose()


async def test_a_retraction_of_a_later_group_leaves_the_fact_in() -> None:
    provider, rt = await _fact_from_first_turn()
    await rt.retract(ANA, "s1", count=1, reason="pop")  # only the second turn's answer
    result = await rt.run(ANA, "s1", "What is my badge PIN?")
    assert memory_texts(provider.requests[-1]) == [PIN_FACT]
    assert not any(d.code == "memory_refused" for d in result.diagnostics)
    await rt.aclose()
