"""A duplicate ``remember`` keeps the groups it adds: erasing the session only it named takes the fact.

A second ``remember`` of the same text (and validity) was acknowledged
``duplicate`` and its provenance dropped, so erasing a session named only by
that second remember left a fact the session had also produced. The store
now writes the next revision of the fact, its provenance the current one's
and then the new groups (at most ``MAX_PROVENANCE``: past it the remember is
refused and nothing is written).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    AckStatus,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryManager,
    MemoryRejectedError,
    MemoryScope,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import MAX_FACT_REVISIONS, MAX_PROVENANCE, FactStatus, MemoryStore, OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
TEXT = "Ana deploys on Tuesdays"


def _ref(session: str, seq: int = 0) -> GroupRef:
    return GroupRef(session, seq, "sha256:" + f"{seq:064x}")


def _store(kind: str, tmp_path: Path) -> MemoryStore:
    return InMemoryMemoryStore() if kind == "memory" else sqlite_store(tmp_path)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_erasing_the_session_only_a_duplicate_named_removes_the_fact(tmp_path: Path, kind: str) -> None:
    store = _store(kind, tmp_path)
    manager = MemoryManager(store)
    first = await manager.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s1")]))
    again = await manager.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s2", 3), _ref("s1")]))
    assert first.fact_id is not None
    assert (again.status, again.fact_id, again.revision) == (AckStatus.STORED, first.fact_id, 2)
    history = await manager.history(ANA, first.fact_id)
    assert [(r.revision, r.status, r.fact.provenance) for r in history] == [
        (1, FactStatus.SUPERSEDED, (_ref("s1"),)),
        (2, FactStatus.CURRENT, (_ref("s1"), _ref("s2", 3))),
    ]
    [listed] = await manager.list(ANA)
    assert (listed.fact_id, listed.text) == (first.fact_id, TEXT)
    # A third remember citing nothing new writes nothing: a duplicate, as before.
    same = await manager.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s2", 3)]))
    assert (same.status, same.revision) == (AckStatus.DUPLICATE, 2)
    assert len(await manager.history(ANA, first.fact_id)) == 2
    report = await store.erase(EraseTarget.session("acme", "ana", "s2"), OpContext.with_timeout(30.0))
    assert dict((c.kind, c.count) for c in report.counts) == {"fact": 1, "revision": 2}
    with pytest.raises(MemoryFactNotFoundError):
        await manager.history(ANA, first.fact_id)
    assert await manager.list(ANA) == ()
    await store.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_duplicate_past_max_provenance_is_refused_and_nothing_is_written(
    tmp_path: Path, kind: str
) -> None:
    store = _store(kind, tmp_path)
    manager = MemoryManager(store)
    full = [_ref("s1", seq) for seq in range(MAX_PROVENANCE)]
    first = await manager.remember(MemoryFact(ANA, TEXT, provenance=full))
    assert first.fact_id is not None
    ack = await manager.remember_with_result(MemoryFact(ANA, TEXT, provenance=[_ref("s2")]))
    assert ack.status is AckStatus.REJECTED and f"over the limit of {MAX_PROVENANCE}" in ack.reason
    with pytest.raises(MemoryRejectedError):
        await store.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s2")]), OpContext.with_timeout(30.0))
    [kept] = await manager.history(ANA, first.fact_id)
    assert (kept.revision, kept.status, kept.fact.provenance) == (1, FactStatus.CURRENT, tuple(full))
    await store.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_correction_to_the_same_text_keeps_the_groups_it_adds(tmp_path: Path, kind: str) -> None:
    # A correction identical to the current revision but for its provenance was a duplicate, its
    # groups dropped: erasing the session only it cited left the fact. It is a duplicate like a
    # remember's now: its new groups are kept as the next revision.
    store = _store(kind, tmp_path)
    manager = MemoryManager(store)
    first = await manager.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s1")]))
    assert first.fact_id is not None
    fixed = await manager.correct(ANA, first.fact_id, MemoryFact(ANA, TEXT, provenance=[_ref("s2")]))
    assert (fixed.status, fixed.fact_id, fixed.revision) == (AckStatus.STORED, first.fact_id, 2)
    same = await manager.correct(ANA, first.fact_id, MemoryFact(ANA, TEXT, provenance=[_ref("s1")]))
    assert (same.status, same.revision) == (AckStatus.DUPLICATE, 2)
    history = await manager.history(ANA, first.fact_id)
    assert [r.fact.provenance for r in history] == [(_ref("s1"),), (_ref("s1"), _ref("s2"))]
    await store.erase(EraseTarget.session("acme", "ana", "s2"), OpContext.with_timeout(30.0))
    assert await manager.list(ANA) == ()
    await store.aclose()


async def test_a_same_text_correction_adding_groups_at_the_revision_cap_is_refused_by_the_engine() -> None:
    # The engine enforces the cap whatever the store does: a store that would write the merge
    # past MAX_FACT_REVISIONS is never asked.
    store = InMemoryMemoryStore()
    manager = MemoryManager(store)
    first = await manager.remember(MemoryFact(ANA, "revision 1"))
    assert first.fact_id is not None
    for n in range(2, MAX_FACT_REVISIONS + 1):
        await store.correct(
            ANA, first.fact_id, MemoryFact(ANA, f"revision {n}"), OpContext.with_timeout(30.0)
        )
    last = f"revision {MAX_FACT_REVISIONS}"
    with pytest.raises(MemoryRejectedError, match="remember a new fact"):
        await manager.correct(ANA, first.fact_id, MemoryFact(ANA, last, provenance=[_ref("s2")]))
    assert (await manager.correct(ANA, first.fact_id, MemoryFact(ANA, last))).status is AckStatus.DUPLICATE
    assert len(await manager.history(ANA, first.fact_id)) == MAX_FACT_REVISIONS
