"""Driver and pool failures as the plugin's typed errors, with any password scrubbed.

:meth:`~agentium_postgres.link.PgLink.translate` is the entry point. Only
the server's primary message is kept (its DETAIL may quote row values), and
every password of the config is replaced by ``***``.
"""

from __future__ import annotations

from typing import Final

import psycopg
import psycopg.errors
from psycopg_pool import PoolTimeout

from agentium_harness.plugin_api import (
    ArchiveConflictError,
    EmbeddingModelMismatchError,
    OpContext,
    OperationCancelledError,
    SessionConflictError,
)

from .config import PostgresConfig
from .errors import (
    PostgresAuthenticationError,
    PostgresError,
    PostgresPrivilegeError,
    PostgresSchemaError,
    PostgresStatementTimeoutError,
    PostgresUnavailableError,
)

__all__ = ["translate_error"]

_AUTH_STATES: Final = frozenset({"28P01", "28000"})
_AUTH_WORDS: Final = ("password authentication failed", "no password supplied", "authentication failed")
_SCHEMA_STATES: Final = frozenset({"42P01", "3F000", "42883"})
#: The SQLSTATEs the schema's check functions raise (``check_archived``, ``check_revision``).
_ARCHIVE_CONFLICT: Final = "AG001"
_SESSION_CONFLICT: Final = "AG002"
#: The SQLSTATE of ``check_vector_model``: the schema holds vectors of another embedding model.
_MODEL_MISMATCH: Final = "AG003"
#: SQLSTATE classes of a server or connection that is not available: connection exception,
#: insufficient resources, operator intervention (shutdown; 57014 is handled first), system error.
_UNAVAILABLE_CLASSES: Final = frozenset({"08", "53", "57", "58"})
#: Program limit exceeded: a value too large for the schema (psycopg: an OperationalError).
_LIMIT_CLASS: Final = "54"
#: Classes psycopg maps to OperationalError that say nothing about the connection.
_SERVER_CLASSES: Final = frozenset({"54", "55", "F0", "HV", "P0"})


def translate_error(
    exc: BaseException, operation: str, ctx: OpContext, config: PostgresConfig, family: type[PostgresError]
) -> Exception:
    """The plugin's typed error for a driver or pool failure (never echoing a password).

    ``operation`` names the adapter and the call (``"postgres archive: append"``);
    an error of no more specific kind is of ``family``, the adapter's own class.
    """
    where = f"{operation} on {config.server()}"
    state = getattr(exc, "sqlstate", None) or ""
    detail = _scrub(_primary(exc), config)
    if state == _ARCHIVE_CONFLICT:
        return ArchiveConflictError(
            f"{where}: {detail}. Archived groups are never overwritten; nothing of the batch was written."
        )
    if state == _MODEL_MISMATCH:
        return EmbeddingModelMismatchError(
            f"{where}: {detail}. Vectors of two models are never mixed; nothing was written. Configure "
            "the embedder the index was built with, or use a new schema and run `agentium recall rebuild`"
        )
    if state == _SESSION_CONFLICT:
        return SessionConflictError(
            f"{where}: {detail}; another writer committed first. Reload and retry; nothing was written."
        )
    if isinstance(exc, PoolTimeout):
        return PostgresUnavailableError(
            f"{where}: no connection became available in time (the server may be down or the pool of "
            f"{config.max_pool_size} busy); nothing was written"
        )
    if isinstance(exc, TimeoutError):
        return PostgresUnavailableError(f"{where}: the server did not answer in time; nothing was written")
    if state in _AUTH_STATES or any(w in detail.lower() for w in _AUTH_WORDS):
        return PostgresAuthenticationError(
            f"{where}: the server refused the credentials (the password is not shown); check dsn and "
            "password",
            sqlstate=state,
        )
    if isinstance(exc, psycopg.errors.QueryCanceled) or state == "57014":
        if ctx.expired:
            return OperationCancelledError(
                f"{where}: stopped at its deadline; the transaction was rolled back and nothing was "
                "committed",
                "deadline passed",
            )
        return PostgresStatementTimeoutError(
            f"{where}: a statement ran past statement_timeout_s={config.statement_timeout_s:g}; "
            "the transaction was rolled back"
        )
    if state == "42501":
        return PostgresPrivilegeError(
            f"{where}: {detail}; the schema's owner grants what the adapters need with "
            "`agentium postgres migrate CONFIG --grant ROLE`",
            sqlstate=state,
        )
    if state in _SCHEMA_STATES:
        return PostgresSchemaError(
            f"{where}: {detail}; the schema is missing or damaged: run `agentium postgres migrate CONFIG`",
            sqlstate=state,
        )
    if state[:2] == _LIMIT_CLASS:
        # psycopg files these under OperationalError, but the server is there and the connection
        # sound: a value this schema cannot hold (an index row over its size limit: ids whose key
        # segments together pass ~2.7 KB). Refused, nothing written, the pool kept.
        return family(
            f"{where}: {detail}; PostgreSQL cannot hold this value (typically ids whose key segments "
            "together are too long for the table's index); nothing was written",
            sqlstate=state,
        )
    connection = isinstance(exc, psycopg.OperationalError | OSError) and state[:2] not in _SERVER_CLASSES
    if connection or state[:2] in _UNAVAILABLE_CLASSES:
        return PostgresUnavailableError(
            f"{where}: the connection failed ({detail or type(exc).__name__}); nothing was acknowledged",
            sqlstate=state,
        )
    return family(f"{where} failed: {detail or type(exc).__name__}", sqlstate=state)


def _scrub(text: str, config: PostgresConfig) -> str:
    """``text`` with any password of the config replaced by ``***``."""
    for secret in (config.password, _dsn_password(config.dsn)):
        if secret:
            text = text.replace(secret, "***")
    return text


def _primary(exc: BaseException) -> str:
    """The server's primary message (never its DETAIL, which may quote row values) or the client's."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or str(exc).splitlines()[0] if (primary or str(exc)) else ""
    return str(text).strip()


def _dsn_password(dsn: str) -> str | None:
    try:
        value = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(value) if value else None
