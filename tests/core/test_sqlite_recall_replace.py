"""A replaced document in the SQLite recall store is found by its new words only, in the index itself.

The FTS5 table is external-content (``recall_texts``): FTS5 cannot see a row
change, so the index forgets a row's words only when it is sent FTS5's
``delete`` command with the exact old values. The store's triggers send it
when a source row goes, which a replace does (old row deleted, new one
inserted, one transaction). These tests look at the index itself (raw
``MATCH`` queries and FTS5's ``integrity-check`` against the content table),
not only through discovery, whose join with ``recall_sources`` could hide a
stale entry, and cover a replace that reuses the row's id (a document alone
in the file) and one that does not. An erasure afterwards still leaves no
word of either version anywhere in the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentium_harness._ports import OpContext
from agentium_harness._ports.erasure import EraseTarget, PhysicalErasure
from agentium_harness._ports.recall import RecallLimits, SourceOwner, SourceRef, document_source_id
from agentium_harness._scope import Scope
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing.sqlite_rows import database_bytes

pytestmark = pytest.mark.anyio

OWNER = SourceOwner("acme", "ana")
SCOPE = Scope("acme", "ana", "s1")
# Words only the old version holds (text and title), only the new one, and both.
OLD_TEXT, OLD_TITLE = "Zanzibar ferry timetable for the quarterly offsite.", "Kilimanjaro notes"
NEW_TEXT, NEW_TITLE = "Yokohama train timetable for the quarterly offsite.", "Everest notes"
OLD_ONLY, NEW_ONLY, BOTH = ("zanzibar", "kilimanjaro"), ("yokohama", "everest"), ("quarterly", "timetable")


def ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentium.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteRecallStore]:
    adapter = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    yield adapter
    await adapter.aclose()


def matches(db: Path, word: str) -> list[int]:
    """The rowids FTS5 itself matches for ``word`` (every column), read beside the store's connection."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT rowid FROM recall_fts WHERE recall_fts MATCH ? ORDER BY rowid", (f'"{word}"',)
        ).fetchall()
    return [int(row[0]) for row in rows]


def check_index_against_content(db: Path) -> None:
    """FTS5's integrity check with rank 1: the index must hold exactly the content table's words."""
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO recall_fts (recall_fts, rank) VALUES ('integrity-check', 1)")


def row_of(db: Path, ref: SourceRef) -> int:
    with sqlite3.connect(db) as conn:
        [(rowid,)] = conn.execute("SELECT id FROM recall_sources WHERE source_id = ?", (ref.source_id,))
    return int(rowid)


async def discovered(store: SQLiteRecallStore, word: str) -> list[SourceRef]:
    session = await store.open(SCOPE, RecallLimits(), ctx())
    try:
        return [c.ref for c in await session.discover(word, 8, ctx())]
    finally:
        await session.close()


@pytest.mark.parametrize("neighbour", [False, True], ids=["same-rowid", "new-rowid"])
async def test_a_replaced_document_is_found_by_its_new_words_only(
    store: SQLiteRecallStore, db: Path, neighbour: bool
) -> None:
    old = await store.index_document(OWNER, "plan", OLD_TEXT, ctx(), title=OLD_TITLE)
    if neighbour:  # a row after it: the replacement cannot take the freed rowid again
        await store.index_document(OWNER, "other", "An unrelated memo about parking.", ctx())
    old_row = row_of(db, old)
    new = await store.index_document(OWNER, "plan", NEW_TEXT, ctx(), title=NEW_TITLE)
    assert new.revision != old.revision
    new_row = row_of(db, new)
    assert (new_row == old_row) is not neighbour
    for word in OLD_ONLY:
        assert matches(db, word) == [], word
        assert await discovered(store, word) == [], word
    for word in NEW_ONLY + BOTH:  # found, and only once: no entry of the old version is left
        assert matches(db, word) == [new_row], word
        assert await discovered(store, word) == [new], word
    check_index_against_content(db)


async def test_many_replacements_leave_one_entry_for_the_current_text(
    store: SQLiteRecallStore, db: Path
) -> None:
    for i in range(12):
        text, title = (OLD_TEXT, OLD_TITLE) if i % 2 == 0 else (NEW_TEXT, NEW_TITLE)
        await store.index_document(OWNER, "plan", f"{text} Revision marker rev{i}.", ctx(), title=title)
        await store.index_document(OWNER, f"memo{i}", f"Parking memo number {i}.", ctx())
    current = row_of(db, SourceRef(document_source_id(OWNER, "plan"), ""))
    assert [matches(db, f"rev{i}") for i in range(11)] == [[]] * 11
    assert matches(db, "rev11") == [current]
    for word in OLD_ONLY:
        assert matches(db, word) == [], word
    for word in NEW_ONLY + BOTH:
        assert matches(db, word) == [current], word
    check_index_against_content(db)


async def test_an_erasure_after_a_replace_leaves_no_word_of_either_version(db: Path) -> None:
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(db)))
    try:
        await store.index_document(OWNER, "plan", OLD_TEXT, ctx(), title=OLD_TITLE)
        assert b"Zanzibar" in database_bytes(db) and b"Kilimanjaro" in database_bytes(db)
        await store.index_document(OWNER, "plan", NEW_TEXT, ctx(), title=NEW_TITLE)
        kept = await store.index_document(SourceOwner("acme", "bob"), "plan", NEW_TEXT, ctx())
        report = await store.erase(EraseTarget.user("acme", "ana"), ctx())
        assert report.count("document") == 1 and report.physical is PhysicalErasure.REMOVED
        for word in OLD_ONLY + NEW_ONLY + BOTH:
            assert await discovered(store, word) == [], word
        # Bob's copy of the new text is not ana's: it stays, found once.
        assert matches(db, "yokohama") == [row_of(db, kept)]
        check_index_against_content(db)
    finally:
        await store.aclose()
    # The file and its log hold no byte of ana's old version.
    data = database_bytes(db)
    for raw in (b"Zanzibar", b"Kilimanjaro", b"zanzibar", b"kilimanjaro"):
        assert raw not in data, raw
