"""Fixtures: one real PostgreSQL per test session, a freshly migrated schema per test, on asyncio.

The server fixture FAILS when no PostgreSQL binaries are found; it never skips
(see ``pg_server``). Adapters run as the application role (no superuser, no
BYPASSRLS), so row-level security applies to them as it would in production;
the admin connection looks behind their back (as superuser it bypasses RLS).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pg_server import APP_USER, PostgresServer, ServerNotFound, new_schema_name

from agentium_postgres import PostgresConfig, migrate


@pytest.fixture
def anyio_backend() -> str:
    """psycopg's async API runs on asyncio only; every test here does too (one test checks trio's refusal)."""
    return "asyncio"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One server for the whole test session, with the test database and the application role."""
    try:
        server = PostgresServer()
    except ServerNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        server.start().prepare()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def schema(pg_server: PostgresServer) -> str:
    """A fresh schema, migrated by the superuser and granted to the application role."""
    name = new_schema_name()
    config = PostgresConfig(dsn=pg_server.admin_dsn(), schema=name)
    anyio.run(lambda: migrate(config, grant_to=[APP_USER]))
    return name


@pytest.fixture
def app_config(pg_server: PostgresServer, schema: str) -> PostgresConfig:
    """Options for adapters connecting as the application role to the test's schema."""
    return PostgresConfig(dsn=pg_server.app_dsn(), schema=schema, min_pool_size=0, max_pool_size=4)


@pytest.fixture
def admin_config(pg_server: PostgresServer, schema: str) -> PostgresConfig:
    """Options for the superuser on the test's schema (migrations, looking behind the adapters)."""
    return PostgresConfig(dsn=pg_server.admin_dsn(), schema=schema, min_pool_size=0, max_pool_size=2)


@pytest.fixture
def admin(pg_server: PostgresServer) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A plain autocommit connection as superuser (bypasses row-level security)."""
    with psycopg.connect(pg_server.admin_dsn(), autocommit=True) as conn:
        yield conn


@pytest.fixture
async def app_conn(pg_server: PostgresServer) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """A plain async connection as the application role, for raw SQL under row-level security."""
    conn = await psycopg.AsyncConnection.connect(pg_server.app_dsn(), autocommit=True)
    yield conn
    await conn.close()
