"""The core's contract suites, unchanged, against a real PostgreSQL (as the application role)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentium_harness.plugin_api import SessionKey, SourceRef
from agentium_harness.testing import (
    ArchiveContract,
    CorruptStored,
    MemoryStoreContract,
    RawStorage,
    RecallStoreContract,
    SessionStoreContract,
)
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresRecallStore,
    PostgresSessionStore,
)

Transform = Callable[[bytes], bytes]
Admin = psycopg.Connection[Any]


def _rewrite(
    admin: Admin, schema: str, table: str, where: str, args: tuple[Any, ...], transform: Transform
) -> None:
    """Replace one row's ``data`` behind the adapters' back (superuser, triggers off for this transaction)."""
    with admin.transaction():
        # The archive's immutability trigger refuses every UPDATE; replica mode skips triggers.
        admin.execute("SET LOCAL session_replication_role = replica")
        row = admin.execute(f'SELECT data FROM "{schema}".{table} WHERE {where}', args).fetchone()
        if row is None:
            raise LookupError(f"no row in {table} for {args!r}")
        admin.execute(
            f'UPDATE "{schema}".{table} SET data = %s WHERE {where}', (transform(bytes(row[0])), *args)
        )


_SESSION = "tenant_key = %s AND user_key = %s AND session_key = %s"


def raw_rows(admin: Admin, schema: str) -> RawStorage:
    """Every value of every row of every table of ``schema``, as the superuser sees it (no row security).

    What any SQL reader of the database can reach: the erasure tests find
    none of the erased text here. Dead row versions a ``DELETE`` leaves until
    ``VACUUM`` are not rows; the erase reports them (``unreferenced``).
    """

    def read() -> bytes:
        out = bytearray()
        tables = admin.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(str(table)))
            for row in admin.execute(query).fetchall():
                for value in row:
                    out += value if isinstance(value, bytes) else str(value).encode()
        return bytes(out)

    return read


class TestPostgresArchive(ArchiveContract):
    @pytest.fixture
    def raw_storage(self, admin: Admin, schema: str) -> RawStorage:
        return raw_rows(admin, schema)

    @pytest.fixture
    async def archive(self, app_config: PostgresConfig) -> AsyncIterator[PostgresArchive]:
        adapter = PostgresArchive(app_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_archive(self, app_config: PostgresConfig) -> Callable[[], PostgresArchive]:
        return lambda: PostgresArchive(app_config)

    @pytest.fixture
    def corrupt_archived_group(self, admin: Admin, schema: str) -> CorruptStored:
        def corrupt(key: SessionKey, seq: int, transform: Transform) -> None:
            _rewrite(
                admin,
                schema,
                "archive_groups",
                _SESSION + " AND seq = %s",
                (*key.key_segments(), seq),
                transform,
            )

        return corrupt


class TestPostgresSessionStore(SessionStoreContract):
    @pytest.fixture
    def raw_storage(self, admin: Admin, schema: str) -> RawStorage:
        return raw_rows(admin, schema)

    @pytest.fixture
    async def session_store(self, app_config: PostgresConfig) -> AsyncIterator[PostgresSessionStore]:
        adapter = PostgresSessionStore(app_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_session_store(self, app_config: PostgresConfig) -> Callable[[], PostgresSessionStore]:
        return lambda: PostgresSessionStore(app_config)

    @pytest.fixture
    def corrupt_snapshot(self, admin: Admin, schema: str) -> CorruptStored:
        def corrupt(key: SessionKey, transform: Transform) -> None:
            _rewrite(admin, schema, "session_snapshots", _SESSION, key.key_segments(), transform)

        return corrupt


class TestPostgresRecallStore(RecallStoreContract):
    @pytest.fixture
    def raw_storage(self, admin: Admin, schema: str) -> RawStorage:
        return raw_rows(admin, schema)

    @pytest.fixture
    async def recall_store(self, app_config: PostgresConfig) -> AsyncIterator[PostgresRecallStore]:
        adapter = PostgresRecallStore(app_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def corrupt_indexed_group(self, admin: Admin, schema: str) -> CorruptStored:
        """Seeks read the archive's own rows: the indexed group's bytes are its archive row's."""

        def corrupt(key: SessionKey, seq: int, transform: Transform) -> None:
            _rewrite(
                admin,
                schema,
                "archive_groups",
                _SESSION + " AND seq = %s",
                (*key.key_segments(), seq),
                transform,
            )

        return corrupt

    @pytest.fixture
    def corrupt_indexed_text(self, admin: Admin, schema: str) -> CorruptStored:
        """Rewrites a document's ``body`` (its revision and ``tsv`` stay), as the application role may."""

        def corrupt(ref: SourceRef, transform: Transform) -> None:
            row = admin.execute(
                f'SELECT body FROM "{schema}".recall_sources WHERE source_id = %s', (ref.source_id,)
            ).fetchone()
            if row is None:
                raise LookupError(f"{ref.source_id} is not indexed")
            body = transform(str(row[0]).encode("utf-8")).decode("utf-8")
            admin.execute(
                f'UPDATE "{schema}".recall_sources SET body = %s WHERE source_id = %s', (body, ref.source_id)
            )

        return corrupt


class TestPostgresMemoryStore(MemoryStoreContract):
    @pytest.fixture
    def raw_storage(self, admin: Admin, schema: str) -> RawStorage:
        return raw_rows(admin, schema)

    @pytest.fixture
    async def memory_store(self, app_config: PostgresConfig) -> AsyncIterator[PostgresMemoryStore]:
        adapter = PostgresMemoryStore(app_config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_memory_store(self, app_config: PostgresConfig) -> Callable[[], PostgresMemoryStore]:
        return lambda: PostgresMemoryStore(app_config)
