"""SQLite memory rows changed behind the store's back: every use of a row checks its digest first.

Reads already refused a row that did not match its digest; a remember that
found its duplicate and a session erasure that matched provenance read
columns of a row without that check.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import MemoryFact, MemoryScope
from agentium_harness._ports.erasure import EraseTarget
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters._sqlite_memory_sql import SQLiteMemoryError
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
DIGEST = "sha256:" + "0" * 64


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM memory_facts ORDER BY fact_id, revision").fetchall()
    finally:
        conn.close()


def _update(path: Path, statement: str, params: tuple[object, ...]) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(statement, params)
    finally:
        conn.close()


async def test_a_session_erasure_refuses_a_provenance_changed_to_name_another_session(
    tmp_path: Path,
) -> None:
    # The changed provenance (valid JSON, naming s9) was read without the row's digest: the fact
    # from s1 was passed over and the erasure of s1 reported complete with the fact left behind.
    store = sqlite_store(tmp_path)
    db = tmp_path / "memory.db"
    ack = await store.remember(
        MemoryFact(ALICE, "from session s1", provenance=[GroupRef("s1", 0, DIGEST)]), _ctx()
    )
    _update(
        db,
        "UPDATE memory_facts SET provenance = replace(provenance, '\"s1\"', '\"s9\"') WHERE fact_id = ?",
        (ack.fact_id,),
    )
    before = _rows(db)
    assert '"s9"' in str(before[0])
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.erase(EraseTarget.session("tenant-a", "alice", "s1"), _ctx())
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.erase(EraseTarget.session("tenant-a", "alice", "s1"), _ctx(), dry_run=True)
    assert _rows(db) == before
    await store.aclose()


async def test_remember_refuses_to_acknowledge_a_damaged_row_as_its_duplicate(tmp_path: Path) -> None:
    # The duplicate was found by its content_digest column alone: a row whose text was changed
    # (the column left as it was) acknowledged the fact as stored, while every read refuses it.
    store = sqlite_store(tmp_path)
    db = tmp_path / "memory.db"
    fact = MemoryFact(ALICE, "the safe code is private")
    ack = await store.remember(fact, _ctx())
    _update(db, "UPDATE memory_facts SET text = 'the safe code is 1234' WHERE fact_id = ?", (ack.fact_id,))
    before = _rows(db)
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.remember(fact, _ctx())
    assert _rows(db) == before  # nothing written over or next to it
    await store.aclose()
