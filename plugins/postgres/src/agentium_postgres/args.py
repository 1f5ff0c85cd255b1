"""Argument checks the adapters' public methods share: bad input is a typed error, never a crash.

Hosts may call the adapters directly, not only through the engine. A wrong
type must give :class:`~agentium_harness.InvalidArgumentError` and change
nothing, instead of whatever bare ``TypeError`` or ``AttributeError`` the
adapters' internals would raise, or a value PostgreSQL would coerce (``"1"``
compared as a revision) or refuse untyped. The type, count and sequence
checks are the plugin API's own (counts and seqs are clamped to
``MAX_ARGUMENT_INT``, within a ``bigint``, so no bound can overflow into a
server error); this module adds what PostgreSQL needs beyond them: text
bound for a ``text`` parameter must be encodable and hold no NUL.
"""

from __future__ import annotations

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    MessageGroup,
    checked_argument,
    checked_count,
    checked_ctx,
    checked_key,
    checked_refs,
    checked_sequence,
)

__all__ = [
    "checked_argument",
    "checked_count",
    "checked_ctx",
    "checked_expected_revision",
    "checked_groups",
    "checked_key",
    "checked_lending",
    "checked_refs",
    "checked_sequence",
    "checked_text",
]


def checked_text(value: object, what: str, operation: str) -> str:
    """``value`` if it is a ``str`` PostgreSQL ``text`` can hold (valid UTF-8, no NUL)."""
    text = checked_argument(value, str, what, operation)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{operation}: {what} is not valid Unicode text (a lone surrogate); nothing was changed"
        ) from None
    if "\x00" in text:
        raise InvalidArgumentError(
            f"{operation}: {what} contains NUL, which PostgreSQL text cannot hold; nothing was changed"
        )
    return text


def checked_groups(groups: object, operation: str) -> list[MessageGroup]:
    """``groups`` as a list, if it is a sequence of :class:`~agentium_harness.plugin_api.MessageGroup`."""
    return [
        checked_argument(g, MessageGroup, "each of groups", operation)
        for g in checked_sequence(groups, "groups", operation)
    ]


def checked_expected_revision(expected: object, operation: str) -> int | None:
    """A compare-and-set's ``expected_revision``: ``None`` or an ``int`` (not a ``bool``), clamped.

    Anything else was bound as whatever PostgreSQL made of it: ``"1"`` matched
    revision 1, ``True`` was reported as a damaged schema. A revision no row
    holds (0, negative, huge) stays a :class:`SessionConflictError` at the
    server, as the port says.
    """
    return None if expected is None else checked_count(expected, "expected_revision", operation)


def checked_lending(config: object, pool: object, connection: object) -> None:
    """Refuse a ``config`` that is no ``PostgresConfig``, and a lent pool or connection of another kind.

    Each was taken and failed only at the first call, with a bare ``AttributeError``
    (a dict of options, a DSN string, an object that is no pool); lending a pool and a
    connection together raised a bare ``ValueError``.
    """
    # Imported here: listing the plugin must not load the client library.
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from .config import PostgresConfig

    if not isinstance(config, PostgresConfig):
        raise InvalidArgumentError(f"config must be a PostgresConfig, got {type(config).__name__}")
    if pool is not None and connection is not None:
        raise InvalidArgumentError("lend a pool or a connection, not both")
    if pool is not None and not isinstance(pool, AsyncConnectionPool):
        raise InvalidArgumentError(
            f"pool must be a psycopg_pool.AsyncConnectionPool, got {type(pool).__name__}"
        )
    if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
        raise InvalidArgumentError(
            f"connection must be a psycopg.AsyncConnection, got {type(connection).__name__}"
        )
