"""The plugin's typed errors, each in its port's own family.

Every error the archive raises is an :class:`~agentium_harness.plugin_api.ArchiveError`,
every error the session store raises a :class:`~agentium_harness.plugin_api.SessionStoreError`,
the memory store's a :class:`~agentium_harness.plugin_api.MemoryStoreError`; the
recall store's derive from :class:`PostgresRecallError`. The causes every
adapter shares (an unreachable server, refused credentials, a missing
privilege, a schema of another version, a statement timeout) are one class
each that derives from all four families, so a host catching any family
catches them. Messages name the server (host, port, database, user) and the
statement's purpose; they never show a password or a row's content.
"""

from __future__ import annotations

from agentium_harness import AgentiumError, OperationCancelledError
from agentium_harness.plugin_api import ArchiveError, MemoryStoreError, SessionStoreError

__all__ = [
    "PostgresArchiveError",
    "PostgresAsyncioRequiredError",
    "PostgresAuthenticationError",
    "PostgresError",
    "PostgresMemoryError",
    "PostgresPrivilegeError",
    "PostgresRecallError",
    "PostgresRowTooLargeError",
    "PostgresSchemaError",
    "PostgresSessionStoreError",
    "PostgresStatementTimeoutError",
    "PostgresUnavailableError",
]


class PostgresError(AgentiumError):
    """Base of every error this plugin raises (each is also in its port's family).

    ``sqlstate`` is PostgreSQL's five-character error code when the server
    sent one (``28P01`` wrong password, ``42501`` missing privilege,
    ``57014`` statement cancelled, ...), else an empty string.
    """

    def __init__(self, message: str, *, sqlstate: str = "") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class PostgresArchiveError(PostgresError, ArchiveError):
    """An archive operation failed on PostgreSQL (a cause not covered by a narrower class)."""


class PostgresSessionStoreError(PostgresError, SessionStoreError):
    """A session store operation failed on PostgreSQL (a cause not covered by a narrower class)."""


class PostgresRecallError(PostgresError):
    """A recall store operation failed on PostgreSQL, or a closed store or session was used.

    No message names a source's id (ids are content, shown only with capture):
    for a damaged or oversized source row, ``source_id`` holds it (else ``""``).
    """

    #: The id of the damaged source the error is about, or ``""``; never part of the message.
    source_id: str = ""


class PostgresMemoryError(PostgresError, MemoryStoreError):
    """A memory store operation failed on PostgreSQL, or a stored fact row is damaged."""


class _EveryFamily(PostgresArchiveError, PostgresSessionStoreError, PostgresRecallError, PostgresMemoryError):
    """Causes every adapter of the plugin shares."""


class PostgresUnavailableError(_EveryFamily):
    """The server could not be reached, dropped the connection, or no pooled connection came in time.

    Nothing the failed call was doing was acknowledged; a write whose commit
    was interrupted is rolled back by the server. Check that the server runs
    and that ``dsn`` names it; raise ``max_pool_size`` if the pool was busy.
    """


class PostgresAuthenticationError(_EveryFamily, PermissionError):
    """The server refused the credentials (wrong password, unknown role, ``pg_hba.conf`` rejection).

    The password is never shown. Check the ``dsn`` (and ``password``) options.
    """


class PostgresPrivilegeError(_EveryFamily, PermissionError):
    """The role lacks a privilege the adapter needs (``USAGE`` on the schema, a table privilege).

    The owner grants them with ``agentium postgres migrate CONFIG --grant ROLE``.
    Nothing was written.
    """


class PostgresSchemaError(_EveryFamily):
    """The database holds no Agentium schema, or one of a version this plugin does not understand.

    Run ``agentium postgres migrate CONFIG`` (as the owner role) to create or
    upgrade it; a newer schema needs a newer ``agentium-postgres``. The
    adapters never create or change tables themselves. Nothing was written.
    """


class PostgresStatementTimeoutError(_EveryFamily, OperationCancelledError):
    """A statement ran past ``statement_timeout_s`` (the server cancelled it); its transaction rolled back.

    When the call's own deadline passed first, the adapters raise
    :class:`~agentium_harness.plugin_api.OperationCancelledError` instead.
    """

    def __init__(self, message: str, *, sqlstate: str = "57014") -> None:
        PostgresError.__init__(self, message, sqlstate=sqlstate)
        self.reason = "statement timeout"


class PostgresRowTooLargeError(_EveryFamily, ValueError):
    """A group, snapshot or document is larger than ``max_row_bytes``: refused before any statement."""


class PostgresAsyncioRequiredError(_EveryFamily, RuntimeError):
    """The adapters run under asyncio only (psycopg's async API); the call came from another event loop.

    Run the host under asyncio (``anyio.run(main)`` uses it by default).
    """
