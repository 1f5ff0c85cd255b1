"""A fact holds at most MAX_FACT_REVISIONS revisions, and one written past it is still forgotten whole.

Forgetting must remove the text of every revision: a fact corrected more
times than one history read returns (MAX_LOOKUP_LIMIT) kept the text of its
later revisions, which came back after a restart. Stores now refuse a
correction past the cap, the manager refuses it whatever the store does,
SQLite's ``forget`` rewrites every row however many there are, and
``runtime.forget`` refuses a history that may be truncated.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    GroupRef,
    MemoryFact,
    MemoryManager,
    MemoryRejectedError,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters._sqlite_memory_sql import INSERT, encode_row
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    MAX_FACT_REVISIONS,
    MAX_LOOKUP_LIMIT,
    AckStatus,
    FactStatus,
    MemoryAck,
    OpContext,
    StoredFact,
)

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
ANA = VerifiedIdentity("acme", "ana", "test-auth")
ANA_SCOPE = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


def test_the_cap_leaves_room_for_the_tombstone_in_one_read() -> None:
    assert MAX_FACT_REVISIONS + 1 == MAX_LOOKUP_LIMIT


def _legacy_rows(path: Path, fact_id: str, count: int) -> None:
    """``count`` revisions of one fact, written as an older version (no cap) would have."""
    now = datetime.now(UTC)
    conn = sqlite3.connect(path)
    with conn:
        for n in range(1, count + 1):
            status = FactStatus.CURRENT if n == count else FactStatus.SUPERSEDED
            conn.execute(INSERT, encode_row(fact_id, n, status, MemoryFact(ALICE, f"secret v{n}"), now))
    conn.close()


async def test_sqlite_forget_removes_the_text_of_every_revision_past_one_read(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    await store.lookup(ALICE, "", 1, _ctx())  # creates the tables
    fact_id = "m-" + "a" * 32
    _legacy_rows(tmp_path / "memory.db", fact_id, MAX_LOOKUP_LIMIT + 5)
    ack = await store.forget(ALICE, fact_id, _ctx())
    assert ack.status is AckStatus.STORED and ack.revision == MAX_LOOKUP_LIMIT + 6
    await store.aclose()
    reopened = sqlite_store(tmp_path)
    assert await reopened.lookup(ALICE, "secret", 10, _ctx()) == []
    assert await reopened.list_facts(ALICE, 10, _ctx()) == []
    await reopened.aclose()
    conn = sqlite3.connect(tmp_path / "memory.db")
    kept = conn.execute(
        "SELECT count(*) FROM memory_facts WHERE text != '' OR status != 'forgotten'"
    ).fetchone()
    conn.close()
    assert kept == (0,)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_every_store_refuses_a_correction_past_the_cap(tmp_path: Path, kind: str) -> None:
    store = InMemoryMemoryStore() if kind == "memory" else sqlite_store(tmp_path)
    ack = await store.remember(MemoryFact(ALICE, "v1"), _ctx())
    assert ack.fact_id is not None
    for n in range(2, MAX_FACT_REVISIONS + 1):
        await store.correct(ALICE, ack.fact_id, MemoryFact(ALICE, f"v{n}"), _ctx())
    with pytest.raises(MemoryRejectedError, match="remember a new fact and forget this one"):
        await store.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "one too many"), _ctx())
    # The same content again is still a duplicate (nothing to write).
    same = await store.correct(ALICE, ack.fact_id, MemoryFact(ALICE, f"v{MAX_FACT_REVISIONS}"), _ctx())
    assert same.status is AckStatus.DUPLICATE
    history = await store.history(ALICE, ack.fact_id, _ctx())
    assert len(history) == MAX_FACT_REVISIONS and history[-1].text == f"v{MAX_FACT_REVISIONS}"
    await store.aclose()


class NoCap(InMemoryMemoryStore):
    """A store that lets a fact grow past the cap (a third-party store's bug)."""

    capabilities = InMemoryMemoryStore.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.corrections = 0

    async def correct(
        self, scope: MemoryScope, fact_id: str, replacement: MemoryFact, ctx: OpContext
    ) -> MemoryAck:
        self.corrections += 1
        revisions = self._revisions[fact_id]
        latest = revisions[-1]
        revisions[-1] = attrs.evolve(latest, status=FactStatus.SUPERSEDED)
        revisions.append(
            StoredFact(fact_id, latest.revision + 1, FactStatus.CURRENT, replacement, latest.recorded_at)
        )
        return MemoryAck(AckStatus.STORED, fact_id, latest.revision + 1)


def _grow(store: InMemoryMemoryStore, fact_id: str, first: StoredFact, count: int) -> None:
    """Give ``fact_id`` ``count`` revisions directly (as a store without the cap would)."""
    revisions = [
        attrs.evolve(
            first,
            revision=n,
            status=FactStatus.CURRENT if n == count else FactStatus.SUPERSEDED,
            fact=attrs.evolve(first.fact, text=f"v{n}"),
        )
        for n in range(1, count + 1)
    ]
    store._revisions[fact_id] = revisions


async def test_the_manager_refuses_a_correction_past_the_cap_whatever_the_store_does() -> None:
    store = NoCap()
    manager = MemoryManager(store)
    ack = await manager.remember(MemoryFact(ALICE, "v1"))
    assert ack.fact_id is not None
    [first] = store._revisions[ack.fact_id]
    _grow(store, ack.fact_id, first, MAX_FACT_REVISIONS)
    with pytest.raises(MemoryRejectedError, match="remember a new fact"):
        await manager.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "one too many"))
    assert store.corrections == 0, "the store was asked to write past the cap"
    assert len(store._revisions[ack.fact_id]) == MAX_FACT_REVISIONS


async def test_runtime_forget_refuses_a_history_that_may_be_truncated() -> None:
    archive = InMemoryArchive()
    memory = InMemoryMemoryStore()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        memory=memory,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    for text in ("my pin is 4471", "weather", "more"):
        await rt.run(ANA, "s1", text)
    key = SessionKey("acme", "ana", "s1")
    (group,) = await archive.read_groups(key, 0, 1, OpContext())
    ack = await rt.memory.remember(MemoryFact(ANA_SCOPE, "pin v1"))
    assert ack.fact_id is not None
    [first] = memory._revisions[ack.fact_id]
    _grow(memory, ack.fact_id, first, MAX_LOOKUP_LIMIT + 1)
    # The newest revision (past one read) cites the source.
    last = memory._revisions[ack.fact_id][-1]
    cited = attrs.evolve(last.fact, provenance=(GroupRef("s1", 0, group.digest),))
    memory._revisions[ack.fact_id][-1] = attrs.evolve(last, fact=cited)
    with pytest.raises(MemoryRejectedError, match="nothing was changed"):
        await rt.forget(ANA_SCOPE, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert memory._revisions[ack.fact_id][-1].status is FactStatus.CURRENT, "the fact was forgotten anyway"
    assert [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())] == [0, 1]
    # Within the cap the whole history, tombstone included, is read: nothing is refused.
    ok = await rt.memory.remember(MemoryFact(ANA_SCOPE, "pin", provenance=[GroupRef("s1", 0, group.digest)]))
    assert ok.fact_id is not None
    [start] = memory._revisions[ok.fact_id]
    _grow(memory, ok.fact_id, start, MAX_FACT_REVISIONS)
    last = memory._revisions[ok.fact_id][-1]
    memory._revisions[ok.fact_id][-1] = attrs.evolve(
        last, fact=attrs.evolve(last.fact, provenance=(GroupRef("s1", 0, group.digest),))
    )
    result = await rt.forget(ANA_SCOPE, ok.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    assert [(h.seq, h.state.value) for h in result.sources] == [(0, "erased")]
    await rt.aclose()
