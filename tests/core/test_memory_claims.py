"""One owner of extraction per session: a release frees only the releaser's own claim (R37).

``Agent.close`` released whatever claim its session had, so an agent that
never claimed the session (extraction off) freed the harness's claim, and an
extracting agent was then admitted on a harness-owned session. The harness's
claims were never released (one per session ever run, for the life of the
manager).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentium_harness import (
    Agent,
    ExtractionConflictError,
    InvalidArgumentError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.memory.claims import HarnessClaims
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import Message, OpContext, SessionKey

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SCOPE = MemoryScope("acme", "ana")


class Extractor:
    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return []


def _provider() -> ScriptedProvider:
    return ScriptedProvider(replies=["ok"], cycle=True)


async def test_an_agent_that_never_claimed_leaves_the_harness_claim_in_place() -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=Extractor())
    rt = create_harness_runtime(
        provider=_provider(), archive=InMemoryArchive(), session_store=InMemorySessionStore(), memory=manager
    )
    await rt.run(ANA, "s", "hello")
    bystander = Agent(_provider(), manager, SCOPE, session="s", extraction=False)
    await bystander.close()
    with pytest.raises(ExtractionConflictError):
        Agent(_provider(), manager, SCOPE, session="s")
    await rt.run(ANA, "s", "again")  # still the harness's
    await rt.aclose()
    # The runtime closed: it released its claims, so the session may now go to an agent.
    agent = Agent(_provider(), manager, SCOPE, session="s")
    await agent.close()


async def test_claims_of_one_owner_are_counted_and_released_one_by_one() -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=Extractor())
    key = SessionKey("acme", "ana", "s")
    first = Agent(_provider(), manager, SCOPE, session="s")
    second = Agent(_provider(), manager, SCOPE, session="s")
    await first.close()
    await first.close()  # closing again releases nothing more
    with pytest.raises(ExtractionConflictError):
        manager.claim_history(key, "harness")
    assert manager.release_history(key, "harness") is False  # not the harness's claim: left alone
    await second.close()
    manager.claim_history(key, "harness")
    assert manager.release_history(key, "harness") is True
    with pytest.raises(InvalidArgumentError):
        manager.release_history(key, "someone")  # type: ignore[arg-type]


async def test_the_harness_holds_one_claim_per_session_bounded() -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=Extractor())
    claims = HarnessClaims(limit=2)
    keys = [SessionKey("acme", "ana", f"s{i}") for i in range(3)]
    for key in (keys[0], keys[0], keys[1], keys[0], keys[2]):  # s1 is the least recently run
        claims.claim(manager, key)
    assert len(claims) == 2
    Agent(_provider(), manager, SCOPE, session="s1")  # released by the bound: free for an agent
    with pytest.raises(ExtractionConflictError):
        claims.claim(manager, keys[1])  # and the harness's next run there is refused, not doubled
    for key in (keys[0], keys[2]):
        with pytest.raises(ExtractionConflictError):
            Agent(_provider(), manager, SCOPE, session=key.session)
    claims.release_all()
    assert len(claims) == 0
    # One claim each, however many runs: a single release frees them.
    Agent(_provider(), manager, SCOPE, session="s0")


async def test_a_runtime_releases_its_claims_when_it_closes() -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=Extractor())
    rt = create_harness_runtime(
        provider=_provider(), archive=InMemoryArchive(), session_store=InMemorySessionStore(), memory=manager
    )
    for i in range(5):
        await rt.run(ANA, f"t{i}", "hi")
        await rt.run(ANA, f"t{i}", "hi again")
    assert len(rt.parts.claims) == 5
    await rt.aclose()
    assert len(rt.parts.claims) == 0
    for i in range(5):
        await Agent(_provider(), manager, SCOPE, session=f"t{i}").close()
