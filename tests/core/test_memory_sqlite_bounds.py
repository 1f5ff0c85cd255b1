"""The SQLite memory store's read bounds hold every row it writes, and it writes no row past them.

Reads refuse a value longer than any row the store writes (see
test_memory_sqlite_oversize.py). These tests write the longest rows the
store's own checks let through (ids of 256 characters that canonical JSON
escapes, the largest seq, a text whose lower-case form grows) and read them
back, and check that ``forget`` refuses to write a tombstone no read would
accept (only a fact holding more revisions than the cap can need one).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _memory_support import sqlite_store

from agentium_harness import MemoryFact, MemoryScope
from agentium_harness._ports.memory import MAX_FACT_REVISIONS, MAX_PROVENANCE, FactStatus, GroupRef
from agentium_harness.adapters._sqlite_memory_sql import INSERT, SQLiteMemoryError, encode_row
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
DIGEST = "sha256:" + "f" * 64
MAX_SEQ = 2**63 - 1


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


def _session(n: int) -> str:
    """The ``n``-th of many distinct 256-character ids that canonical JSON doubles (every one escaped)."""
    return "".join('"\\'[(n >> bit) & 1] for bit in range(256))


def _refs(first: int) -> list[GroupRef]:
    return [GroupRef(_session(first + i), MAX_SEQ, DIGEST) for i in range(MAX_PROVENANCE)]


def _legacy_fact(path: Path, fact_id: str, revisions: int) -> None:
    """``revisions`` revisions of one fact, each citing MAX_PROVENANCE sessions of its own."""
    now = datetime.now(UTC)
    conn = sqlite3.connect(path)
    with conn:
        for n in range(1, revisions + 1):
            status = FactStatus.CURRENT if n == revisions else FactStatus.SUPERSEDED
            fact = MemoryFact(ALICE, f"wording {n}", provenance=_refs(n * MAX_PROVENANCE))
            conn.execute(INSERT, encode_row(fact_id, n, status, fact, now))
    conn.close()


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM memory_facts ORDER BY fact_id, revision").fetchall()
    finally:
        conn.close()


async def test_the_longest_fact_the_store_accepts_reads_back(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    # 4096 bytes of U+0130, whose lower-case form is two characters: text_lower is the longest it gets.
    fact = MemoryFact(ALICE, "\u0130" * 2048, provenance=_refs(0))
    ack = await store.remember(fact, _ctx())
    [listed] = await store.list_facts(ALICE, 10, _ctx())
    assert listed.fact == fact
    assert [f.fact for f in await store.lookup(ALICE, "", 10, _ctx())] == [fact]
    assert [f.fact for f in await store.history(ALICE, ack.fact_id, _ctx())] == [fact]
    await store.aclose()


async def test_the_largest_tombstone_forget_writes_within_the_cap_reads_back(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    await store.list_facts(ALICE, 1, _ctx())  # creates the tables
    fact_id = "m-" + "b" * 32
    _legacy_fact(tmp_path / "memory.db", fact_id, MAX_FACT_REVISIONS)
    ack = await store.forget(ALICE, fact_id, _ctx())
    history = await store.history(ALICE, fact_id, _ctx())
    assert [f.status for f in history] == [FactStatus.FORGOTTEN] * (MAX_FACT_REVISIONS + 1)
    assert history[-1].revision == ack.revision == MAX_FACT_REVISIONS + 1
    await store.aclose()


async def test_forget_refuses_a_tombstone_longer_than_reads_accept(tmp_path: Path) -> None:
    # A fact written past the revision cap (an older version) can name more sessions than a
    # tombstone read accepts: the tombstone would be written, then refused by every read.
    store = sqlite_store(tmp_path)
    await store.list_facts(ALICE, 1, _ctx())
    fact_id = "m-" + "c" * 32
    db = tmp_path / "memory.db"
    _legacy_fact(db, fact_id, MAX_FACT_REVISIONS + 1)
    before = _rows(db)
    with pytest.raises(SQLiteMemoryError, match="more than a tombstone may hold; nothing was forgotten"):
        await store.forget(ALICE, fact_id, _ctx())
    assert _rows(db) == before
    [current] = await store.list_facts(ALICE, 10, _ctx())
    assert current.revision == MAX_FACT_REVISIONS + 1
    await store.aclose()
