"""A link's first use: the schema exists at this release's version and the role has what it needs.

:meth:`~agentium_postgres.link.PgLink` runs :func:`check_schema` once per
link, before its first transaction, and keeps the :class:`ServerFacts` it
returns (whether the role bypasses row-level security, pgvector).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs
import psycopg
from psycopg import sql

from .config import PostgresConfig
from .errors import PostgresPrivilegeError, PostgresSchemaError
from .schema import SCHEMA_VERSION, TABLE_PRIVILEGES, TENANT_TABLES, VectorFacts, vector_facts

__all__ = ["ServerFacts", "check_schema"]


@attrs.frozen(slots=True)
class ServerFacts:
    """What a link learnt on its first call: the server's version, the role, and whether it bypasses RLS."""

    server_version: str
    role: str
    bypasses_row_security: bool
    schema_version: int
    #: pgvector in the database and the schema's ``embedding_pgv`` column (reported, not required).
    vectors: VectorFacts = attrs.field(factory=VectorFacts)


async def check_schema(
    conn: psycopg.AsyncConnection[Any],
    name: str,
    config: PostgresConfig,
    needs: Iterable[str],
    timeout_ms: int | None = None,
) -> ServerFacts:
    """Check the schema version and ``needs``' table privileges; read the role and the server's version.

    Raises :class:`~agentium_postgres.errors.PostgresSchemaError` (no schema,
    another version) or :class:`~agentium_postgres.errors.PostgresPrivilegeError`
    (a missing privilege, or a role that bypasses row-level security while
    ``require_row_security`` is set); nothing is written either way. Each
    statement is bounded by ``timeout_ms`` (default: ``statement_timeout_s``).
    """
    schema = config.schema
    if timeout_ms is None:
        timeout_ms = max(1, math.ceil(1000 * config.statement_timeout_s))
    async with conn.transaction():
        # Every statement under the ceiling (or the call's deadline), as a call's own: reading
        # schema_meta waits for a lock another session holds on it (LOCK TABLE, VACUUM FULL, an
        # ALTER), and without it a call with no deadline waited as long as that lock was held.
        await conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
        found = await (
            await conn.execute(
                "SELECT to_regclass(format('%%I.schema_meta', %s::text)) IS NOT NULL", (schema,)
            )
        ).fetchone()
        if found is None or not found[0]:
            raise PostgresSchemaError(
                f"{name}: {config.server()} has no Agentium schema {schema!r}; run "
                "`agentium postgres migrate CONFIG` as the schema's owner. Nothing was written."
            )
        row = await (
            await conn.execute(sql.SQL("SELECT version FROM {}.schema_meta").format(sql.Identifier(schema)))
        ).fetchone()
        version = None if row is None else int(row[0])
        if version != SCHEMA_VERSION:
            advice = (
                "upgrade agentium-postgres"
                if version is not None and version > SCHEMA_VERSION
                else "run `agentium postgres migrate CONFIG` as the schema's owner"
            )
            raise PostgresSchemaError(
                f"{name}: schema {schema!r} on {config.server()} is at version "
                f"{version}, "
                f"this agentium-postgres understands version {SCHEMA_VERSION}; {advice}. "
                "Nothing was written."
            )
        missing = []
        for table in needs:
            for privilege in TABLE_PRIVILEGES[table]:
                ok = await (
                    await conn.execute(
                        "SELECT has_table_privilege(format('%%I.%%I', %s::text, %s::text), %s)",
                        (schema, table, privilege),
                    )
                ).fetchone()
                if ok is None or not ok[0]:
                    missing.append(f"{privilege} on {schema}.{table}")
        facts = await (
            await conn.execute(
                "SELECT current_user, current_setting('server_version'), "
                "coalesce((SELECT rolsuper OR rolbypassrls FROM pg_roles "
                "WHERE rolname = current_user), false), "
                # Tables of tenant data the policy does not bind this role on: row-level security off,
                # or not forced while the role holds its owner's rights (recall_sources is not forced).
                "ARRAY(SELECT c.relname::text FROM pg_class AS c JOIN pg_namespace AS n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = ANY(%s::text[]) "
                "AND (NOT c.relrowsecurity "
                "OR (NOT c.relforcerowsecurity AND pg_has_role(c.relowner, 'USAGE'))) "
                "ORDER BY c.relname)",
                (schema, list(TENANT_TABLES)),
            )
        ).fetchone()
        vectors = await vector_facts(conn, schema)
    assert facts is not None
    if missing:
        raise PostgresPrivilegeError(
            f"{name}: role {facts[0]!r} lacks {', '.join(missing)}; the schema's owner grants "
            f"them with `agentium postgres migrate CONFIG --grant {facts[0]}`. Nothing was written.",
            sqlstate="42501",
        )
    unbound = [str(table) for table in facts[3]]
    if (facts[2] or unbound) and config.require_row_security:
        why = (
            "superuser or BYPASSRLS"
            if facts[2]
            else f"not bound on {', '.join(f'{schema}.{t}' for t in unbound)}: it owns the table (or holds "
            "its owner's rights) where the policy is not forced on the owner, or row-level security is off"
        )
        raise PostgresPrivilegeError(
            f"{name}: role {facts[0]!r} bypasses row-level security ({why}) "
            "and require_row_security is set; connect as an ordinary application role. "
            "Nothing was written.",
            sqlstate="42501",
        )
    bypasses = bool(facts[2]) or bool(unbound)
    return ServerFacts(str(facts[1]), str(facts[0]), bypasses, SCHEMA_VERSION, vectors)
