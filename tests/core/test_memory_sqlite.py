"""The SQLite memory store beyond the contract: damaged rows, schema versions, races, inert queries."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from _memory_support import sqlite_store

from agentium_harness import AckStatus, MemoryFact, MemoryScope
from agentium_harness._errors import InvalidArgumentError
from agentium_harness._ports.erasure import EraseTarget
from agentium_harness.adapters import _sqlite_sql, sqlite_memory
from agentium_harness.adapters._sqlite_memory_sql import SQLiteMemoryError
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
#: The deadline of a call that is to end by it while a reader holds the log: room for its own work on
#: a stalled machine.
DEADLINE_S = 1.5
#: How long the checkpoint is retried in that test, far past DEADLINE_S (the library's retry is 2 s).
RETRY_S = 60.0
#: Scheduling slack on a loaded two-core machine: far under RETRY_S.
SLACK_S = 20.0


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


async def test_a_row_changed_outside_the_store_is_reported_not_returned(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    ack = await store.remember(MemoryFact(ALICE, "the safe code is private"), _ctx())
    conn = sqlite3.connect(tmp_path / "memory.db")
    with conn:
        conn.execute(
            "UPDATE memory_facts SET text = 'the safe code is 1234' WHERE fact_id = ?", (ack.fact_id,)
        )
    conn.close()
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.lookup(ALICE, "", 10, _ctx())
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.list_facts(ALICE, 10, _ctx())
    await store.aclose()


@pytest.mark.parametrize("provenance", ["{{{", "[" * 5000 + "]" * 5000, "[1, 2]", '{"a": 1}'])
async def test_a_session_erasure_meeting_a_damaged_provenance_fails_closed(
    tmp_path: Path, provenance: str
) -> None:
    # The damaged fact was passed over and the session erasure reported complete: had the fact
    # come from the session, its text would have been left behind unreported.
    store = sqlite_store(tmp_path)
    await store.remember(MemoryFact(ALICE, "the safe code is private"), _ctx())
    conn = sqlite3.connect(tmp_path / "memory.db")
    with conn:
        conn.execute("UPDATE memory_facts SET provenance = ?", (provenance,))
    target = EraseTarget.session("tenant-a", "alice", "s1")
    with pytest.raises(SQLiteMemoryError, match="damaged"):
        await store.erase(target, _ctx())
    assert conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0] == 1
    report = await store.erase(EraseTarget.user("tenant-a", "alice"), _ctx())
    assert report.count("fact") == 1
    conn.close()
    await store.aclose()


async def test_a_bad_scope_or_context_is_a_typed_error(tmp_path: Path) -> None:
    # Each raised a bare AttributeError (or a misleading "not found" for a str scope).
    store = sqlite_store(tmp_path)
    fact = MemoryFact(ALICE, "the safe code is private")
    ack = await store.remember(fact, _ctx())
    calls = [
        lambda: store.remember(fact, None),
        lambda: store.lookup(None, "safe", 5, _ctx()),
        lambda: store.list_facts("tenant-a/alice", 5, _ctx()),
        lambda: store.history(None, ack.fact_id, _ctx()),
        lambda: store.correct(None, ack.fact_id, fact, _ctx()),
        lambda: store.forget("tenant-a/alice", ack.fact_id, _ctx()),
        lambda: store.erase(EraseTarget.user("tenant-a", "alice"), None),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError):
            await call()
    assert [f.fact.text for f in await store.list_facts(ALICE, 5, _ctx())] == [fact.text]
    await store.aclose()


async def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    await store.lookup(ALICE, "", 1, _ctx())
    await store.aclose()
    conn = sqlite3.connect(tmp_path / "memory.db")
    with conn:
        conn.execute("UPDATE memory_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    again = sqlite_store(tmp_path)
    with pytest.raises(SQLiteMemoryError, match="schema version 99"):
        await again.lookup(ALICE, "", 1, _ctx())
    await again.aclose()


async def test_forget_with_a_reader_holding_the_log_ends_by_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checkpoint after a forget was retried for 2 s whatever the call's deadline. Here it would be
    # retried for RETRY_S, far past the deadline: the call ends by its deadline (long enough for the
    # forget itself on a stalled machine) or it fails by far more than any stall.
    scrubs: list[float | None] = []

    def scrub_log(conn: sqlite3.Connection, *, time_left: float | None = None) -> Any:
        scrubs.append(time_left)
        return _sqlite_sql.scrub_log(conn, budget_s=RETRY_S, time_left=time_left)

    monkeypatch.setattr(sqlite_memory, "scrub_log", scrub_log)
    store = sqlite_store(tmp_path)
    ack = await store.remember(MemoryFact(ALICE, "the safe code is private"), _ctx())
    reader = sqlite3.connect(tmp_path / "memory.db")
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM memory_facts").fetchone()  # holds its snapshot of the log
        started = time.monotonic()
        forgot = await store.forget(ALICE, ack.fact_id, OpContext.with_timeout(DEADLINE_S))
        assert time.monotonic() - started < DEADLINE_S + SLACK_S
    finally:
        reader.close()
    assert forgot.status is AckStatus.STORED
    assert len(scrubs) == 1 and scrubs[0] is not None  # the retry it ran was the long one, under a deadline
    assert await store.lookup(ALICE, "safe", 10, _ctx()) == []
    await store.aclose()


async def test_two_stores_racing_to_remember_the_same_fact_store_it_once(tmp_path: Path) -> None:
    stores = [sqlite_store(tmp_path) for _ in range(4)]
    acks = []

    async def remember(i: int) -> None:
        acks.append(await stores[i].remember(MemoryFact(ALICE, "raced fact"), _ctx()))

    async with anyio.create_task_group() as tg:
        for i in range(len(stores)):
            tg.start_soon(remember, i)
    assert sorted(a.status for a in acks) == [AckStatus.DUPLICATE] * 3 + [AckStatus.STORED]
    assert len({a.fact_id for a in acks}) == 1
    assert [f.text for f in await stores[0].list_facts(ALICE, 10, _ctx())] == ["raced fact"]
    for store in stores:
        await store.aclose()


async def test_query_text_is_never_sql_or_a_pattern(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    await store.remember(MemoryFact(ALICE, "plain fact about tea"), _ctx())
    for query in ("'; DROP TABLE memory_facts; --", "%", "_", "*", '" OR 1=1 --', "x" * 100_000):
        found = await store.lookup(ALICE, query, 10, _ctx())
        # Recency still fills the result; nothing was dropped and nothing else matched.
        assert [f.text for f in found] == ["plain fact about tea"]
    await store.aclose()


async def test_a_cancelled_call_writes_nothing_and_a_closed_store_refuses(tmp_path: Path) -> None:
    store = sqlite_store(tmp_path)
    cancelled = OpContext()
    cancelled.signal.cancel("test")
    from agentium_harness import OperationCancelledError

    with pytest.raises(OperationCancelledError):
        await store.remember(MemoryFact(ALICE, "never"), cancelled)
    assert await store.list_facts(ALICE, 10, _ctx()) == []
    await store.aclose()
    with pytest.raises(SQLiteMemoryError, match="closed"):
        await store.remember(MemoryFact(ALICE, "after close"), _ctx())
