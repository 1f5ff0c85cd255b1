"""The memory manager re-checks who owns a fact before changing it (defence in depth, issue 29 item 2).

A store whose own ownership check joins ids (tenant ``a`` + user ``b/c`` is
tenant ``a/b`` + user ``c``) would let one tenant correct or forget another's
fact. The manager reads the fact's history first, as the owner, and refuses
revisions of another tenant or user, so nothing changes.
"""

from __future__ import annotations

import pytest

from agentium_harness import ContractViolationError, MemoryManager
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import (
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryScope,
    OpContext,
    StoredFact,
)

pytestmark = pytest.mark.anyio

VICTIM = MemoryScope("acme/b", "c")
INTRUDER = MemoryScope("acme", "b/c")  # joins to the same "acme/b/c"


class JoinedOwnerStore(InMemoryMemoryStore):
    """Checks ownership on ``tenant/user`` joined with '/' (lookup is right)."""

    capabilities = InMemoryMemoryStore.capabilities

    def _latest(self, scope: MemoryScope, fact_id: str) -> StoredFact:
        revisions = self._revisions.get(fact_id)
        last = revisions[-1] if revisions else None
        if last is None or f"{last.scope.tenant}/{last.scope.user}" != f"{scope.tenant}/{scope.user}":
            raise MemoryFactNotFoundError(f"no fact {fact_id!r}")
        return last


async def _victim_fact(store: InMemoryMemoryStore) -> str:
    ack = await store.remember(MemoryFact(VICTIM, "the vault code is 1234"), OpContext.with_timeout(30.0))
    assert ack.fact_id is not None
    return ack.fact_id


async def _unchanged(store: InMemoryMemoryStore, fact_id: str) -> None:
    [fact] = await store.lookup(VICTIM, "vault", 5, OpContext.with_timeout(30.0))
    assert (fact.fact_id, fact.revision, fact.text) == (fact_id, 1, "the vault code is 1234")


async def test_the_planted_store_really_lets_a_joined_id_change_the_fact() -> None:
    store = JoinedOwnerStore()
    fact_id = await _victim_fact(store)
    ack = await store.correct(
        INTRUDER, fact_id, MemoryFact(INTRUDER, "mine now"), OpContext.with_timeout(30.0)
    )
    assert ack.revision == 2  # the store alone does not stop it


async def test_manager_refuses_a_correction_the_store_would_let_through() -> None:
    store = JoinedOwnerStore()
    fact_id = await _victim_fact(store)
    manager = MemoryManager(store)
    with pytest.raises(ContractViolationError, match="another tenant or user; nothing was changed"):
        await manager.correct(INTRUDER, fact_id, MemoryFact(INTRUDER, "mine now"))
    await _unchanged(store, fact_id)


async def test_manager_refuses_a_forget_the_store_would_let_through() -> None:
    store = JoinedOwnerStore()
    fact_id = await _victim_fact(store)
    manager = MemoryManager(store)
    with pytest.raises(ContractViolationError):
        await manager.forget(INTRUDER, fact_id)
    await _unchanged(store, fact_id)
    assert fact_id not in manager.forgotten_ids


async def test_the_owner_still_corrects_and_forgets_through_the_manager() -> None:
    store = JoinedOwnerStore()
    fact_id = await _victim_fact(store)
    manager = MemoryManager(store)
    assert (
        await manager.correct(VICTIM, fact_id, MemoryFact(VICTIM, "the vault code is 4321"))
    ).revision == 2
    assert (await manager.forget(VICTIM, fact_id)).revision == 3
