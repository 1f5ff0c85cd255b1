"""The built-in adapters run the same contract suites that third-party adapters run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.ports.archive import HistoryArchive
from agentium_harness.ports.sessions import SessionStore
from agentium_harness.testing import ArchiveContract, SessionStoreContract


class TestInMemoryArchive(ArchiveContract):
    @pytest.fixture
    def archive(self) -> HistoryArchive:
        return InMemoryArchive()


class TestInMemorySessionStore(SessionStoreContract):
    @pytest.fixture
    def session_store(self) -> SessionStore:
        return InMemorySessionStore()


@pytest.fixture
def db_config(tmp_path: Path) -> SQLiteConfig:
    return SQLiteConfig(path=str(tmp_path / "contract.db"), busy_timeout_ms=10_000)


class TestSQLiteArchive(ArchiveContract):
    @pytest.fixture
    async def archive(self, db_config: SQLiteConfig) -> AsyncIterator[HistoryArchive]:
        adapter = SQLiteArchive(db_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_archive(self, db_config: SQLiteConfig) -> Callable[[], HistoryArchive]:
        return lambda: SQLiteArchive(db_config)


class TestSQLiteSessionStore(SessionStoreContract):
    @pytest.fixture
    async def session_store(self, db_config: SQLiteConfig) -> AsyncIterator[SessionStore]:
        adapter = SQLiteSessionStore(db_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_session_store(self, db_config: SQLiteConfig) -> Callable[[], SessionStore]:
        return lambda: SQLiteSessionStore(db_config)
