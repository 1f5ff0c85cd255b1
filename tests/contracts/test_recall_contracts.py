"""The built-in recall stores (SQLite and in-memory) pass the recall contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing import RecallStoreContract

pytestmark = pytest.mark.anyio


class TestSQLiteRecallStore(RecallStoreContract):
    @pytest.fixture
    async def recall_store(self, tmp_path: Path) -> AsyncIterator[SQLiteRecallStore]:
        store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
        yield store
        await store.aclose()


class TestInMemoryRecallStore(RecallStoreContract):
    @pytest.fixture
    def recall_store(self) -> InMemoryRecallStore:
        return InMemoryRecallStore()
