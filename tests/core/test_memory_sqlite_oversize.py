"""SQLite memory rows holding a value far over the store's own bounds are refused before they are read.

A column replaced outside the store by a huge value (SQLite takes up to
1 GB) was fetched whole into Python, then refused by its row digest. Every
read now selects each column's ``length()`` and refuses the row (its value
never transferred) with :class:`SQLiteMemoryError`, changing nothing.
The values here are built by SQLite itself (``printf``), so the only
Python memory they could take is what the store reads: tracemalloc's peak
tells whether it did.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _memory_support import sqlite_store
from _oversize_support import HUGE, NUL_TEXT, PEAK
from _oversize_support import raw_sql as _sql

from agentium_harness import MemoryFact, MemoryScope
from agentium_harness._ports.erasure import EraseStatus, EraseTarget
from agentium_harness._ports.memory import GroupRef
from agentium_harness.adapters._sqlite_memory_sql import SQLiteMemoryError
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("tenant-a", "alice")
DIGEST = "sha256:" + "0" * 64
#: For the columns checked by fewer reads: still twice what a read may take.
LARGE = 16 * 1024 * 1024
FACT = MemoryFact(ALICE, "alice keeps the spare key under the mat", provenance=[GroupRef("s1", 0, DIGEST)])


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


def _fingerprint(path: Path) -> list[tuple[object, ...]]:
    """Every row's small columns and the size of each large one (never a huge value itself)."""
    return _sql(
        path,
        "SELECT rowid, length(fact_id), revision, tenant_id, user_id, status, length(text), "
        "length(text_lower), length(provenance), length(recorded_at), content_digest, row_digest "
        "FROM memory_facts ORDER BY rowid",
    ) + _sql(path, "SELECT key, length(value) FROM memory_meta ORDER BY key")


async def _damaged(tmp_path: Path, column: str, size: int = HUGE) -> tuple[SQLiteMemoryStore, Path, str]:
    """A store holding FACT (revision 2 of a corrected fact) with ``column`` of that row ``size`` long."""
    store = sqlite_store(tmp_path)
    db = tmp_path / "memory.db"
    first = await store.remember(MemoryFact(ALICE, "an earlier wording"), _ctx())
    await store.correct(ALICE, first.fact_id, FACT, _ctx())
    _sql(
        db,
        f"UPDATE memory_facts SET {column} = printf('%.*c', ?, 'x') WHERE revision = 2",
        (size,),
    )
    return store, db, first.fact_id


async def _refused_unread(call: Callable[[], Awaitable[object]], match: str, what: str = "") -> None:
    """``call`` raises SQLiteMemoryError matching ``match`` with a short message, the value never read."""
    tracemalloc.start()
    try:
        with pytest.raises(SQLiteMemoryError, match=match) as info:
            await call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"{what}: {peak} bytes traced, the huge value was read into Python"
    assert len(str(info.value)) < 1000


def _reads(store: SQLiteMemoryStore, fact_id: str) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every operation that reads the damaged row (the latest revision of ``fact_id``)."""
    return {
        "list": lambda: store.list_facts(ALICE, 10, _ctx()),
        "lookup": lambda: store.lookup(ALICE, "spare key", 10, _ctx()),
        "history": lambda: store.history(ALICE, fact_id, _ctx()),
        "remember duplicate": lambda: store.remember(FACT, _ctx()),
        "correct": lambda: store.correct(ALICE, fact_id, MemoryFact(ALICE, "a third wording"), _ctx()),
        "forget": lambda: store.forget(ALICE, fact_id, _ctx()),
        "session erasure": lambda: store.erase(EraseTarget.session("tenant-a", "alice", "s1"), _ctx()),
        "session erasure plan": lambda: store.erase(
            EraseTarget.session("tenant-a", "alice", "s1"), _ctx(), dry_run=True
        ),
    }


async def test_a_huge_text_is_refused_by_every_read_before_it_is_fetched(tmp_path: Path) -> None:
    store, db, fact_id = await _damaged(tmp_path, "text")
    before = _fingerprint(db)
    for name, call in _reads(store, fact_id).items():
        await _refused_unread(call, rf"text of length {HUGE} characters.*at most 4096", name)
    assert _fingerprint(db) == before
    await store.aclose()


async def test_a_huge_provenance_is_refused_by_every_read_before_it_is_fetched(tmp_path: Path) -> None:
    store, db, fact_id = await _damaged(tmp_path, "provenance")
    before = _fingerprint(db)
    for name, call in _reads(store, fact_id).items():
        await _refused_unread(call, rf"provenance of length {HUGE} characters", name)
    assert _fingerprint(db) == before
    await store.aclose()


@pytest.mark.parametrize(
    "column",
    ["revision", "project_id", "recorded_at", "valid_from", "content_digest", "row_digest", "text_lower"],
)
async def test_any_other_huge_column_is_refused_before_it_is_fetched(tmp_path: Path, column: str) -> None:
    store, db, fact_id = await _damaged(tmp_path, column, LARGE)
    before = _fingerprint(db)
    message = rf"{column} of length {LARGE} characters"
    await _refused_unread(lambda: store.list_facts(ALICE, 10, _ctx()), message, "list")
    await _refused_unread(lambda: store.history(ALICE, fact_id, _ctx()), message, "history")
    assert _fingerprint(db) == before
    await store.aclose()


async def test_a_huge_fact_id_is_refused_by_a_user_erasure_before_it_is_fetched(tmp_path: Path) -> None:
    # A user erasure reads only the fact ids it covers; a huge one was fetched whole.
    store, db, _ = await _damaged(tmp_path, "fact_id", LARGE)
    before = _fingerprint(db)
    user = EraseTarget.user("tenant-a", "alice")
    message = rf"fact_id of length {LARGE} characters \(at most 256\)"
    await _refused_unread(lambda: store.erase(user, _ctx()), message, "erasure")
    await _refused_unread(lambda: store.erase(user, _ctx(), dry_run=True), message, "erasure plan")
    await _refused_unread(lambda: store.list_facts(ALICE, 10, _ctx()), message, "list")
    assert _fingerprint(db) == before
    await store.aclose()


async def test_a_huge_text_under_a_user_is_erased_without_being_read(tmp_path: Path) -> None:
    # A user erasure does not read the text: the damaged fact is deleted with the rest, unread.
    store, db, _ = await _damaged(tmp_path, "text")
    tracemalloc.start()
    try:
        report = await store.erase(EraseTarget.user("tenant-a", "alice"), _ctx())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK
    assert report.status is EraseStatus.COMPLETE
    assert _sql(db, "SELECT count(*) FROM memory_facts") == [(0,)]
    await store.aclose()


async def test_a_huge_schema_version_is_refused_when_the_store_opens(tmp_path: Path) -> None:
    # The version was read whole twice (the check, then the write transaction's) and put whole
    # into the error message.
    store = sqlite_store(tmp_path)
    db = tmp_path / "memory.db"
    await store.remember(FACT, _ctx())
    await store.aclose()
    _sql(db, "UPDATE memory_meta SET value = printf('%.*c', ?, '1') WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(db)
    reopened = sqlite_store(tmp_path)
    await _refused_unread(
        lambda: reopened.list_facts(ALICE, 10, _ctx()), rf"schema version of {HUGE} characters"
    )
    assert _fingerprint(db) == before
    await reopened.aclose()


async def test_a_huge_text_behind_a_nul_is_refused_by_every_read_before_it_is_fetched(
    tmp_path: Path,
) -> None:
    store, db, fact_id = await _damaged(tmp_path, "text", 1)
    _sql(db, f"UPDATE memory_facts SET text = {NUL_TEXT} WHERE revision = 2", (HUGE,))
    before = _fingerprint(db)
    for name, call in _reads(store, fact_id).items():
        await _refused_unread(call, rf"text of length {HUGE + 2} bytes", name)
    assert _fingerprint(db) == before
    await store.aclose()


async def test_a_huge_fact_id_or_version_behind_a_nul_is_refused_before_it_is_fetched(
    tmp_path: Path,
) -> None:
    store, db, _ = await _damaged(tmp_path, "fact_id", 1)
    _sql(db, f"UPDATE memory_facts SET fact_id = {NUL_TEXT} WHERE revision = 2", (LARGE,))
    before = _fingerprint(db)
    user = EraseTarget.user("tenant-a", "alice")
    message = rf"fact_id of length {LARGE + 2} bytes"
    await _refused_unread(lambda: store.erase(user, _ctx(), dry_run=True), message, "erasure plan")
    await _refused_unread(lambda: store.list_facts(ALICE, 10, _ctx()), message, "list")
    assert _fingerprint(db) == before
    await store.aclose()
    version = "'1' || char(0) || printf('%.*c', ?, '1')"
    _sql(db, f"UPDATE memory_meta SET value = {version} WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(db)
    reopened = sqlite_store(tmp_path)
    await _refused_unread(
        lambda: reopened.list_facts(ALICE, 10, _ctx()),
        rf"schema version of 1 characters \({HUGE + 2} bytes\)",
    )
    assert _fingerprint(db) == before
    await reopened.aclose()
