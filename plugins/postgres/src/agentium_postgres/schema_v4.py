"""Schema step 4: ``memory_facts.row_digest``, the memory store's digest over every stored field.

Before version 4 a fact row's ``content_digest`` covered scope, text and
validity only: a provenance, status, revision or ``recorded_at`` changed by a
plain ``UPDATE`` outside the store went unseen (a provenance edited to name
another session let a session erasure pass the fact over and report
complete; a status flipped from forgotten to current brought the fact back).
The step adds the column, computes each existing row's digest from its
values as they are at migration time (the migration blesses the rows as
they are then: a row changed before the upgrade is not told apart), and
makes the column ``NOT NULL``, so code of an older release, whose
``INSERT`` does not name it, cannot write a row without one (it also refuses
the version on its first call).

The digest is canonical JSON hashed in Python
(:func:`~agentium_postgres.memory_rows.row_digest`), so this step runs
Python between its statements. ``memory_facts``' row-level security is
forced on its owner: the step lifts the ``FORCE`` for its own transaction so
the migrating owner reads every tenant's rows, and restores it before the
transaction commits (a failure rolls both back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, LiteralString

from .memory_rows import row_digest

if TYPE_CHECKING:
    import psycopg

__all__ = ["V4", "bless_memory_rows"]

#: The statements run before :func:`bless_memory_rows` ("{schema}": the quoted schema name).
V4: Final[tuple[LiteralString, ...]] = (
    'ALTER TABLE {schema}.memory_facts ADD COLUMN row_digest text COLLATE "C"',
    "ALTER TABLE {schema}.memory_facts NO FORCE ROW LEVEL SECURITY",
)

#: Rows read and updated per round trip while blessing.
_BATCH: Final = 500


async def bless_memory_rows(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    """Give every ``memory_facts`` row the row digest of its current values; then force RLS, ``NOT NULL``.

    Runs in the migration's transaction, after :data:`V4`. Returns how many
    rows were blessed.
    """
    from psycopg import sql  # not at module level: listing the plugin must not load the client

    s = sql.Identifier(schema)
    read = sql.SQL(
        "SELECT tenant_key, fact_id, revision, user_key, project_key, repository_key, status, text, "
        "valid_from, valid_until, provenance, recorded_at, content_digest FROM {s}.memory_facts "
        "WHERE (tenant_key, fact_id, revision) > (%s, %s, %s) ORDER BY tenant_key, fact_id, revision LIMIT %s"
    ).format(s=s)
    write = sql.SQL(
        "UPDATE {s}.memory_facts AS m SET row_digest = d.digest "
        "FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[]) AS d(t, f, r, digest) "
        "WHERE m.tenant_key = d.t AND m.fact_id = d.f AND m.revision = d.r"
    ).format(s=s)
    # Times read in UTC for this transaction: in the session's own zone a validity bound of
    # 0001-01-01 UTC (west of it) or late 9999-12-31 UTC (east of it) is BC or in year 10000,
    # which psycopg cannot load, and the upgrade failed on the first such fact.
    await conn.execute("SELECT set_config('TimeZone', 'UTC', true)")
    after: tuple[str, str, int] = ("", "", 0)
    blessed = 0
    while True:
        rows = await (await conn.execute(read, (*after, _BATCH))).fetchall()
        if not rows:
            break
        digests = [
            row_digest(r[1], r[2], (r[0], r[3], r[4], r[5]), r[6], r[7], (r[8], r[9]), r[10], r[11], r[12])
            for r in rows
        ]
        await conn.execute(write, ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], digests))
        blessed += len(rows)
        after = (rows[-1][0], rows[-1][1], rows[-1][2])
    for statement in (
        "ALTER TABLE {s}.memory_facts FORCE ROW LEVEL SECURITY",
        "ALTER TABLE {s}.memory_facts ALTER COLUMN row_digest SET NOT NULL",
    ):
        await conn.execute(sql.SQL(statement).format(s=s))
    return blessed
