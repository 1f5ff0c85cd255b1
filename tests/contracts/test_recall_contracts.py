"""The built-in recall stores (SQLite and in-memory) pass the recall suite, corruption hooks included."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import pytest

from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import SessionKey, SourceRef, group_source_id
from agentium_harness.testing import RawStorage, RecallStoreContract, raw_files

pytestmark = pytest.mark.anyio


def rewrite_indexed_group(path: Path, key: SessionKey, seq: int, transform: Callable[[bytes], bytes]) -> None:
    """Rewrite one indexed group's stored bytes with plain sqlite3, behind the store's back."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        row = conn.execute(
            "SELECT t.id, t.data FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
            "WHERE s.kind = 'group' AND s.tenant_id = ? AND s.user_id = ? AND s.session_id = ? AND s.seq = ?",
            (key.tenant, key.user, key.session, seq),
        ).fetchone()
        conn.execute("UPDATE recall_texts SET data = ? WHERE id = ?", (transform(row[1]), row[0]))
    finally:
        conn.close()


def rewrite_indexed_text(path: Path, ref: SourceRef, transform: Callable[[bytes], bytes]) -> None:
    """Rewrite one indexed document's stored text with plain sqlite3, behind the store's back."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        row = conn.execute(
            "SELECT t.id, t.text FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
            "WHERE s.source_id = ?",
            (ref.source_id,),
        ).fetchone()
        text = transform(row[1].encode("utf-8")).decode("utf-8")
        conn.execute("UPDATE recall_texts SET text = ? WHERE id = ?", (text, row[0]))
    finally:
        conn.close()


class TestSQLiteRecallStore(RecallStoreContract):
    @pytest.fixture
    async def recall_store(self, tmp_path: Path) -> AsyncIterator[SQLiteRecallStore]:
        store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
        yield store
        await store.aclose()

    @pytest.fixture
    def corrupt_indexed_group(self, tmp_path: Path) -> Callable[..., None]:
        return lambda key, seq, transform: rewrite_indexed_group(tmp_path / "recall.db", key, seq, transform)

    @pytest.fixture
    def corrupt_indexed_text(self, tmp_path: Path) -> Callable[..., None]:
        return lambda ref, transform: rewrite_indexed_text(tmp_path / "recall.db", ref, transform)

    @pytest.fixture
    def raw_storage(self, tmp_path: Path) -> RawStorage:
        path = str(tmp_path / "recall.db")
        return raw_files(path, path + "-wal", path + "-journal")


class TestInMemoryRecallStore(RecallStoreContract):
    @pytest.fixture
    def recall_store(self) -> InMemoryRecallStore:
        return InMemoryRecallStore()

    @pytest.fixture
    def corrupt_indexed_group(self, recall_store: InMemoryRecallStore) -> Callable[..., None]:
        def corrupt(key: SessionKey, seq: int, transform: Callable[[bytes], bytes]) -> None:
            sid = group_source_id(key, seq)
            source = recall_store._sources[sid]
            assert source.canonical is not None
            recall_store._sources[sid] = attrs.evolve(source, canonical=transform(source.canonical))

        return corrupt

    @pytest.fixture
    def raw_storage(self, recall_store: InMemoryRecallStore) -> RawStorage:
        # The in-process "backend": every source's text and canonical bytes.
        return lambda: b"".join(
            s.text.encode() + (s.canonical or b"") for s in recall_store._sources.values()
        )
