"""Erasing a session removes the facts that came from it, a fact forgotten earlier included (docs/memory.md).

Forgetting clears a fact's provenance, so its tombstone could no longer be
tied to the session and a later session erasure kept it. The tombstone now
keeps the ids (only) of the sessions the provenance named.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryManager,
    MemoryScope,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import MemoryStore, OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
REF = GroupRef("s1", 0, "sha256:" + "a" * 64)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_session_erasure_removes_the_tombstone_of_a_fact_forgotten_earlier(
    tmp_path: Path, kind: str
) -> None:
    store: MemoryStore = InMemoryMemoryStore() if kind == "memory" else sqlite_store(tmp_path)
    manager = MemoryManager(store)
    kept = await manager.remember(
        MemoryFact(ANA, "from s2, kept", provenance=[GroupRef("s2", 0, REF.digest)])
    )
    other = await manager.remember(
        MemoryFact(ANA, "from s2, forgotten", provenance=[GroupRef("s2", 1, REF.digest)])
    )
    gone = await manager.remember(MemoryFact(ANA, "from s1, forgotten", provenance=[REF]))
    assert kept.fact_id and other.fact_id and gone.fact_id
    await manager.correct(ANA, gone.fact_id, MemoryFact(ANA, "from s1, corrected"))
    await manager.forget(ANA, gone.fact_id)
    await manager.forget(ANA, other.fact_id)
    [tombstone] = [r for r in await manager.history(ANA, gone.fact_id) if r.revision == 3]
    assert tombstone.fact.provenance == () and tombstone.text == ""  # nothing of it is returned
    report = await store.erase(EraseTarget.session("acme", "ana", "s1"), OpContext.with_timeout(30.0))
    assert dict((c.kind, c.count) for c in report.counts) == {"fact": 1, "revision": 3}
    with pytest.raises(MemoryFactNotFoundError):
        await manager.history(ANA, gone.fact_id)
    # Another session's facts, forgotten or not, stay.
    assert len(await manager.history(ANA, other.fact_id)) == 2
    assert [f.fact_id for f in await manager.list(ANA)] == [kept.fact_id]
    if kind == "sqlite":
        conn = sqlite3.connect(tmp_path / "memory.db")
        rows = conn.execute("SELECT provenance FROM memory_facts WHERE status = 'forgotten'").fetchall()
        conn.close()
        assert sorted(rows) == [('[["s2"]]',), ("[]",)]  # ids only: no seq, digest or text
    await store.aclose()
