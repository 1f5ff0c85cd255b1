"""Applying the schema: :func:`migrate` (what ``agentium postgres migrate CONFIG`` runs).

The adapters never create or change tables. The schema's owner (a role
allowed to create a schema in the database) applies it explicitly, once per
release that changes it; the application role may be another, granted
exactly what the adapters need with ``grant_to``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import OpContext

from .config import PostgresConfig
from .errors import PostgresError, PostgresUnavailableError
from .schema import SCHEMA_VERSION, MigrationReport, apply_migrations

if TYPE_CHECKING:
    import psycopg

    from .calls import Outcome

__all__ = ["migrate"]

logger = logging.getLogger("agentium.plugins.postgres")


#: Role names PostgreSQL reads as every role or as whoever is connected: never a grantee.
_NOT_A_ROLE: Final = frozenset({"public", "current_user", "current_role", "session_user", "user"})
#: The longest identifier PostgreSQL keeps whole (NAMEDATALEN - 1); a longer one is cut.
_MAX_ROLE_BYTES: Final = 63


def check_grantees(roles: Sequence[str]) -> None:
    """Refuse (typed, before anything is sent) a grantee that is not one application role.

    ``GRANT … TO "public"`` grants to every role, present and future (the
    quoted identifier is still the PUBLIC pseudo-role), and the names of the
    current role or PostgreSQL's predefined ``pg_*`` roles would reach far
    past the application's own role.
    """
    if isinstance(roles, str | bytes):  # its characters would each be taken for a role
        raise InvalidArgumentError(
            f"grant_to must be a sequence of role names, got the string {roles!r}; nothing was changed"
        )
    # None or a number escaped as a bare TypeError; a generator was used up by this check, and the
    # migration then granted nothing while its report said what it was given.
    if not isinstance(roles, Sequence):
        raise InvalidArgumentError(
            f"grant_to must be a sequence of role names (a list or tuple), got {type(roles).__name__}; "
            "nothing was changed"
        )
    for role in roles:
        if not isinstance(role, str) or not role:
            raise InvalidArgumentError(f"a grantee must be a role name, got {role!r}; nothing was changed")
        # The identifier reaches the server quoted, but not as written: libpq's escaping stops at a
        # NUL ("app\x00x" named role "app") and PostgreSQL cuts a name past 63 bytes, so either
        # would grant to another role than the one named; a lone surrogate cannot be sent at all.
        try:
            size = len(role.encode("utf-8"))
        except UnicodeEncodeError:
            size = -1
        if "\x00" in role or not 0 < size <= _MAX_ROLE_BYTES:
            raise InvalidArgumentError(
                f"refusing to grant to {role!r}: not a role name PostgreSQL can be sent as written (NUL, "
                f"a lone surrogate, or more than {_MAX_ROLE_BYTES} bytes); nothing was changed"
            )
        if role.lower() in _NOT_A_ROLE or role.lower().startswith("pg_"):
            raise InvalidArgumentError(
                f"refusing to grant to {role!r}: PostgreSQL reads it as every role, the connected role or "
                "a predefined role, not the application's own role; name that role; nothing was changed"
            )


async def migrate(
    config: PostgresConfig,
    *,
    grant_to: Sequence[str] = (),
    connection: psycopg.AsyncConnection[Any] | None = None,
    timeout_s: float = 120.0,
    to_version: int = SCHEMA_VERSION,
) -> MigrationReport:
    """Create or upgrade ``config.schema`` to this release's version, in one transaction.

    ``grant_to`` names roles to grant what the adapters need (``USAGE`` on
    the schema, the table privileges listed in the README). A lent
    ``connection`` is used and left open (it must be idle: one inside a
    transaction is refused, :class:`~agentium_postgres.errors.PostgresError`,
    nothing sent, and so is one whose adapters' calls run on another event
    loop still open; a call of an adapter lent it finishes first, and waits
    for the migration); otherwise one is opened with ``config`` and closed.
    Running it again at the current version changes nothing (grants are
    re-applied). ``to_version`` stops at an older version
    (staged upgrades, and tests of an upgrade); a migration never goes back.

    A ``COMMIT`` not confirmed within ``timeout_s`` raises
    :class:`~agentium_postgres.errors.PostgresUnavailableError` saying the
    outcome is unknown (run it again); on a lent connection it is finished in a
    task of its own and the next call there waits for its answer.

    Raises :class:`~agentium_postgres.errors.PostgresSchemaError` for a schema
    newer than this release understands (nothing changed),
    :class:`~agentium_postgres.errors.PostgresPrivilegeError` when the role may
    not create the schema, and the connection errors of the adapters.
    """
    check_grantees(grant_to)
    # Imported here, not at module level: listing the plugin (whose package names this function) must
    # not load the client library.
    import psycopg

    from .calls import Outcome
    from .lent import lent_turn
    from .link import PgLink, require_asyncio

    operation = "migrate"
    require_asyncio(operation)
    if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
        raise InvalidArgumentError(
            f"connection must be a psycopg.AsyncConnection, got {type(connection).__name__}; nothing "
            "was changed"
        )
    link = PgLink(config, family=PostgresError, name="postgres migrate", needs=())
    ctx = OpContext.with_timeout(timeout_s)
    outcome = Outcome()
    try:
        with anyio.fail_after(timeout_s):
            if connection is not None:
                # The lock the adapters lent this connection share: without it, an adapter's call
                # that had passed its idle check and this migration ran inside each other's
                # transactions, both failed, and the connection was left inside one.
                # Inside the host's transaction (refused), the migration's was a savepoint: the
                # report said every step applied, and the host's rollback took the schema back.
                async with lent_turn(connection, "postgres migrate", operation, PostgresError, timeout_s):
                    return await _applied(connection, config, grant_to, to_version, ctx, outcome, lent=True)
            conn = await psycopg.AsyncConnection.connect(
                config.conninfo(), connect_timeout=max(1, math.ceil(config.connect_timeout_s))
            )
            try:
                return await _applied(conn, config, grant_to, to_version, ctx, outcome, lent=False)
            finally:
                await conn.close()
    except (psycopg.Error, OSError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError) and outcome.commit_sent:
            raise _unknown(config) from None
        raise link.translate(exc, operation, ctx) from None


async def _applied(
    conn: psycopg.AsyncConnection[Any],
    config: PostgresConfig,
    grant_to: Sequence[str],
    to_version: int,
    ctx: OpContext,
    outcome: Outcome,
    *,
    lent: bool,
) -> MigrationReport:
    """Apply the migrations in one transaction on ``conn``; ``outcome.commit_sent`` once its COMMIT is.

    A COMMIT cut off by ``timeout_s`` may still land: it was reported as "nothing was written"
    while the server, once it went on, applied the migration. On a lent connection it runs in a
    task of its own (:func:`~agentium_postgres.lent.commit_lent`): cut off, psycopg closed the
    host's connection.
    """
    from .calls import commit_wait
    from .lent import LentCommitUnconfirmed, commit_lent

    if not lent:
        async with conn.transaction():
            report = await apply_migrations(conn, config.schema, grant_to, to_version)
            outcome.commit_sent = True  # the block's end sends it
        return report
    tx = conn.transaction()
    await tx.__aenter__()
    try:
        report = await apply_migrations(conn, config.schema, grant_to, to_version)
    except BaseException as exc:
        await tx.__aexit__(type(exc), exc, exc.__traceback__)  # rolls back, as `async with` does
        raise
    outcome.commit_sent = True

    async def finish() -> None:
        await tx.__aexit__(None, None, None)

    try:
        await commit_lent(conn, finish, commit_wait(ctx), "migrate")
    except LentCommitUnconfirmed:
        raise _unknown(config) from None
    return report


def _unknown(config: PostgresConfig) -> PostgresUnavailableError:
    """The error of a migration whose COMMIT was sent but not confirmed by ``timeout_s`` (logged)."""
    logger.warning(
        "migrate: COMMIT sent but not confirmed within timeout_s; outcome unknown",
        extra={"agentium_operation": "migrate"},
    )
    return PostgresUnavailableError(
        f"postgres migrate: migrate on {config.server()}: its COMMIT was sent but not confirmed within "
        "timeout_s; the outcome is unknown (the server applies the migration whole or not at all). "
        "Run migrate again: at the version reached it changes nothing"
    )
