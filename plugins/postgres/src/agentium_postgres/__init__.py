"""``agentium-postgres``: PostgreSQL adapters for Agentium.

A history archive, a session store (archive and boundary in one transaction),
a recall store and a memory store, with tenant isolation the database
enforces through row-level security. Select them in a config file with
``plugin = "postgres"`` (options: :class:`PostgresConfig`), or build them
directly, optionally lending them a ``psycopg_pool.AsyncConnectionPool``.
Apply the schema first with ``agentium postgres migrate CONFIG`` (or
:func:`migrate`). See the distribution's README.
"""

from __future__ import annotations

from .archive import PostgresArchive
from .config import PostgresConfig, redact_dsn
from .errors import (
    PostgresArchiveError,
    PostgresAsyncioRequiredError,
    PostgresAuthenticationError,
    PostgresError,
    PostgresMemoryError,
    PostgresPrivilegeError,
    PostgresRecallError,
    PostgresRowTooLargeError,
    PostgresSchemaError,
    PostgresSessionStoreError,
    PostgresStatementTimeoutError,
    PostgresUnavailableError,
)
from .memory import PostgresMemoryStore
from .migrate import migrate
from .recall import PostgresRecallSession, PostgresRecallStore
from .schema import SCHEMA_VERSION, MigrationReport
from .sessions import PostgresSessionStore

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "MigrationReport",
    "PostgresArchive",
    "PostgresArchiveError",
    "PostgresAsyncioRequiredError",
    "PostgresAuthenticationError",
    "PostgresConfig",
    "PostgresError",
    "PostgresMemoryError",
    "PostgresMemoryStore",
    "PostgresPrivilegeError",
    "PostgresRecallError",
    "PostgresRecallSession",
    "PostgresRecallStore",
    "PostgresRowTooLargeError",
    "PostgresSchemaError",
    "PostgresSessionStoreError",
    "PostgresStatementTimeoutError",
    "PostgresUnavailableError",
    "PostgresSessionStore",
    "__version__",
    "migrate",
    "redact_dsn",
]
