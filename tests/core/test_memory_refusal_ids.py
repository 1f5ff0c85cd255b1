"""The built-in memory stores' refusals name no fact id in their text; the error's ``fact_id`` holds it.

A fact id is content: named in a log, a span or an error text only with
content capture (as the engine's own texts do). A store does not see that
setting, and hosts log error texts, so the in-memory and SQLite stores'
``MemoryFactNotFoundError`` and ``MemoryFactForgottenError`` said
``no fact 'm-…' in this tenant and user`` whatever the capture: now the
text says which refusal it is and ``fact_id`` says which fact.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import (
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryFactForgottenError,
    MemoryFactNotFoundError,
    MemoryScope,
)
from agentium_harness.adapters._sqlite_memory_sql import COLUMNS, _row_digest
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryError
from agentium_harness.plugin_api import MemoryStore, OpContext

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
MALLORY = MemoryScope("acme", "mallory")
MISSING = "m-" + "7" * 32


def _ctx() -> OpContext:
    return OpContext.with_timeout(10)


@pytest.fixture(params=["in_memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore:
    made: MemoryStore = InMemoryMemoryStore() if request.param == "in_memory" else sqlite_store(tmp_path)
    yield made  # type: ignore[misc]
    await made.aclose()


async def test_a_missing_or_foreign_fact_is_refused_without_its_id_in_the_text(store: MemoryStore) -> None:
    ack = await store.remember(MemoryFact(ANA, "the pump is red"), _ctx())
    assert ack.fact_id is not None
    calls: list[Callable[[str], Awaitable[object]]] = [
        lambda fid: store.forget(MALLORY, fid, _ctx()),
        lambda fid: store.correct(MALLORY, fid, MemoryFact(MALLORY, "taken over"), _ctx()),
        lambda fid: store.history(MALLORY, fid, _ctx()),
    ]
    for call in calls:
        for fact_id in (ack.fact_id, MISSING):
            with pytest.raises(MemoryFactNotFoundError) as refused:
                await call(fact_id)
            assert fact_id not in str(refused.value), str(refused.value)
            assert refused.value.fact_id == fact_id
            assert "nothing was changed" in str(refused.value)


async def test_a_forgotten_fact_is_refused_a_correction_without_its_id_in_the_text(
    store: MemoryStore,
) -> None:
    ack = await store.remember(MemoryFact(ANA, "the valve is shut"), _ctx())
    assert ack.fact_id is not None
    await store.forget(ANA, ack.fact_id, _ctx())
    with pytest.raises(MemoryFactForgottenError) as refused:
        await store.correct(ANA, ack.fact_id, MemoryFact(ANA, "the valve is open"), _ctx())
    assert ack.fact_id not in str(refused.value), str(refused.value)
    assert refused.value.fact_id == ack.fact_id
    assert "forgotten" in str(refused.value)


async def test_a_session_erasure_refused_by_a_damaged_provenance_names_no_fact_id(tmp_path: Path) -> None:
    # A provenance that is not a list of references, yet matches its row's digest (rewritten with it):
    # the SQLite store's session erasure refuses the fact, and its text named the fact's id.
    store = sqlite_store(tmp_path)
    try:
        ref = GroupRef("s1", 0, "sha256:" + "0" * 64)
        ack = await store.remember(MemoryFact(ANA, "the gate code is 4711", provenance=[ref]), _ctx())
        assert ack.fact_id is not None
        with sqlite3.connect(str(tmp_path / "memory.db")) as conn:
            row = list(conn.execute(f"SELECT {COLUMNS} FROM memory_facts").fetchone())
            row[10] = '{"not": "a list"}'
            conn.execute(
                "UPDATE memory_facts SET provenance = ?, row_digest = ?",
                (row[10], _row_digest(row[:13])),
            )
        with pytest.raises(SQLiteMemoryError, match="damaged provenance") as refused:
            await store.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        assert ack.fact_id not in str(refused.value), str(refused.value)
    finally:
        await store.aclose()
