"""Erasure in PostgreSQL: a target's rows deleted in bounded batches, reported without content.

Every adapter's ``erase`` (docs/erasure.md) runs here, one transaction per
call under the target's tenant (row-level security confines every statement
to it), and removes at most ``max_items`` items:

- the archive: ``archive_groups`` rows of the target (a groups target: only
  its seq ranges);
- the session store: ``session_snapshots`` rows (not for a groups target),
  raising the store's revision floor to the highest revision removed;
- the recall store: ``recall_sources`` rows — archived groups and the host
  documents the target owns (``SourceOwner`` fields equal, never a prefix) —
  their vectors (a foreign key cascades), and the canonical copy of each
  erased group it keeps in ``archive_groups`` for ``seek_groups``;
- the memory store: every revision of each covered fact.

Keys are compared whole (injective key segments, bound parameters): no id
can match another's rows, and nothing of another tenant is read.

**How physical.** A ``DELETE`` makes the rows invisible to every reader at
once, but PostgreSQL keeps the dead row versions in the table's pages until
``VACUUM`` reclaims the space, and in its write-ahead log (and any WAL
archive, replica or backup) until those are recycled. The application role
cannot vacuum (only the tables' owner can), so a report that removed rows
says ``unreferenced`` and what to run.

**Privileges.** ``DELETE`` on the tables is granted by ``agentium postgres
migrate CONFIG --grant ROLE`` (:data:`~agentium_postgres.schema.ERASE_PRIVILEGES`)
but not checked on first use: a host may revoke it from the role that serves
turns and erase as another. An erase by a role without it raises
:class:`~agentium_postgres.errors.PostgresPrivilegeError` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from psycopg import sql

from agentium_harness.plugin_api import (
    ErasedSession,
    EraseReport,
    EraseStatus,
    EraseTarget,
    InvalidJSONError,
    PhysicalErasure,
    SessionKey,
    count_items,
    decode_json,
    decode_segment,
    encode_segment,
    group_sessions,
    snapshot_erasure,
)

from .errors import PostgresMemoryError, PostgresSessionStoreError
from .link import Conn
from .memory_rows import COLUMNS, read_bounds, verified_row

__all__ = [
    "UNVACUUMED",
    "erase_archive",
    "erase_memory",
    "erase_recall",
    "erase_snapshots",
    "physical",
    "target_filter",
]

#: What a report that removed rows says is left, and how to remove it.
UNVACUUMED: Final = (
    "PostgreSQL keeps deleted row versions in the table's pages until VACUUM reclaims them, and in its "
    "write-ahead log (WAL archives, replicas and backups too) until those are recycled; run VACUUM "
    "(FULL rewrites the table's files) as the schema's owner to reclaim the pages"
)


def physical(removed: int, dry_run: bool) -> tuple[PhysicalErasure, str]:
    """``unreferenced`` with :data:`UNVACUUMED` when rows were (or would be) removed, else ``removed``."""
    del dry_run  # a dry run says what the erase would leave, like the erase itself
    if removed:
        return PhysicalErasure.UNREFERENCED, UNVACUUMED
    return PhysicalErasure.REMOVED, ""


def target_filter(target: EraseTarget, *, seq: bool = True) -> tuple[sql.Composable, list[Any]]:
    """The ``WHERE`` condition selecting the target's rows of a table keyed by tenant, user, session.

    ``seq`` says the table has a ``seq`` column the groups ranges apply to
    (a table without one is not filtered by them: callers skip it for a
    groups target). Values are parameters; the column names are constants.
    """
    parts: list[sql.Composable] = [sql.SQL("tenant_key = %s")]
    params: list[Any] = [encode_segment(target.tenant_id)]
    if target.user_id is not None:
        parts.append(sql.SQL("user_key = %s"))
        params.append(encode_segment(target.user_id))
    if target.session_id is not None:
        parts.append(sql.SQL("session_key = %s"))
        params.append(encode_segment(target.session_id))
    if target.groups and seq:
        parts.append(
            sql.SQL(
                "EXISTS (SELECT 1 FROM unnest(%s::bigint[], %s::bigint[]) AS r(a, b) "
                "WHERE seq >= r.a AND seq < r.b)"
            )
        )
        params += [[r.start for r in target.groups], [r.stop for r in target.groups]]
    return sql.SQL(" AND ").join(parts), params


def _key(target: EraseTarget, user_key: object, session_key: object) -> SessionKey | None:
    """The session a row's key columns name, or ``None`` when they no key segment could be.

    A row written behind the adapters' back may hold key text no id encodes
    to. The target's filter matched it by key equality, so it is the
    target's and is erased all the same; the report counts it but cannot
    name its session (a ``ValueError`` here stopped the erasure for good).
    """
    if not isinstance(user_key, str) or not isinstance(session_key, str):
        return None
    try:
        return SessionKey(target.tenant_id, decode_segment(user_key), decode_segment(session_key))
    except ValueError:  # a bad escape, or an id no key holds (InvalidIdError is a ValueError)
        return None


def _named(rows: Iterable[tuple[SessionKey | None, int, str]]) -> list[tuple[SessionKey, int, str]]:
    """The rows whose session could be named (see :func:`_key`)."""
    return [(key, seq, digest) for key, seq, digest in rows if key is not None]


def _status(found: int, bound: int) -> EraseStatus:
    return EraseStatus.PARTIAL if found > bound else EraseStatus.COMPLETE


async def _delete_groups(
    conn: Conn, schema: str, tenant_key: str, rows: Sequence[tuple[Any, Any, Any]]
) -> None:
    """Delete ``archive_groups`` rows by (user key, session key, seq) of one tenant."""
    if not rows:
        return
    await conn.execute(
        sql.SQL(
            "DELETE FROM {s}.archive_groups AS a "
            "USING unnest(%s::text[], %s::text[], %s::bigint[]) AS d(u, s, seq) "
            "WHERE a.tenant_key = %s AND a.user_key = d.u AND a.session_key = d.s AND a.seq = d.seq"
        ).format(s=sql.Identifier(schema)),
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], tenant_key),
    )


async def erase_archive(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool
) -> EraseReport:
    """The archive's erase: up to ``bound`` archived groups of the target, in key order."""
    where, params = target_filter(target)
    cursor = await conn.execute(
        sql.SQL(
            "SELECT user_key, session_key, seq, digest FROM {s}.archive_groups WHERE {where} "
            "ORDER BY user_key, session_key, seq LIMIT %s"
        ).format(s=sql.Identifier(schema), where=where),
        (*params, bound + 1),
    )
    found = await cursor.fetchall()
    taken = found[:bound]
    if not dry_run:
        await _delete_groups(conn, schema, params[0], [(u, s, seq) for u, s, seq, _ in taken])
    kind, detail = physical(len(taken), dry_run)
    return EraseReport(
        count_items(group=len(taken)),
        group_sessions(_named((_key(target, u, s), int(seq), str(d)) for u, s, seq, d in taken)),
        _status(len(found), bound),
        kind,
        detail,
    )


async def erase_snapshots(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool, row_cap: int = 16 * 1024 * 1024
) -> tuple[EraseReport, list[SessionKey]]:
    """The session store's erase: up to ``bound`` snapshots of the target; also the keys removed.

    A snapshot over ``row_cap`` bytes (none this store wrote) is erased without being transferred,
    and reported like a damaged one: its session, no groups.
    """
    if target.groups:  # archived groups only: the session store holds none
        return EraseReport(), []
    where, params = target_filter(target, seq=False)
    cursor = await conn.execute(
        sql.SQL(
            "SELECT user_key, session_key, CASE WHEN octet_length(data) <= {cap} THEN data END "
            "FROM {s}.session_snapshots WHERE {where} ORDER BY user_key, session_key LIMIT %s"
        ).format(s=sql.Identifier(schema), where=where, cap=sql.Literal(int(row_cap))),
        (*params, bound + 1),
    )
    found = await cursor.fetchall()
    taken = found[:bound]
    if not dry_run and taken:
        s = sql.Identifier(schema)
        # The revision floor (schema step 3) is locked before any snapshot is deleted: a create
        # holds it FOR SHARE while it inserts (sessions.py), so taking it after the DELETE could
        # deadlock with a create waiting on a deleted row. It is raised, in this transaction, to the
        # highest revision the DELETE actually removed (RETURNING: a save that committed after the
        # SELECT above is deleted at its newer revision), so a session created under an erased id
        # starts past every revision the erased one had.
        floor = await conn.execute(
            sql.SQL("SELECT 1 FROM {s}.session_revision_floor WHERE singleton FOR UPDATE").format(s=s)
        )
        if await floor.fetchone() is None:  # its trigger refuses a DELETE; a TRUNCATE is not refused
            raise PostgresSessionStoreError(
                "postgres session store: the session revision floor's row is missing, so an erased "
                "session's revisions could repeat; the erasure stopped and nothing was changed. Restore "
                "the row as the schema's owner, at a revision no lower than any session's ever was"
            )
        await conn.execute(
            sql.SQL(
                "WITH gone AS (DELETE FROM {s}.session_snapshots AS a "
                "USING unnest(%s::text[], %s::text[]) AS d(u, s) "
                "WHERE a.tenant_key = %s AND a.user_key = d.u AND a.session_key = d.s RETURNING a.revision) "
                "UPDATE {s}.session_revision_floor "
                "SET revision = GREATEST(revision, (SELECT max(revision) FROM gone)) WHERE singleton"
            ).format(s=s),
            ([r[0] for r in taken], [r[1] for r in taken], params[0]),
        )
    named = [(key, data) for key, data in ((_key(target, u, s), data) for u, s, data in taken) if key]
    keys = [key for key, _ in named]
    kind, detail = physical(len(taken), dry_run)
    report = EraseReport(
        count_items(snapshot=len(taken)),
        tuple(
            ErasedSession(key) if data is None else snapshot_erasure(key, bytes(data)) for key, data in named
        ),
        _status(len(found), bound),
        kind,
        detail,
    )
    return report, keys


async def erase_recall(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool
) -> EraseReport:
    """The recall store's erase: up to ``bound`` sources (groups and documents) of the target.

    A document is the target's when its owner lies within it field by field
    (``EraseTarget.covers_owner``: a user target takes the documents owned
    by the user in any session, project or repository, never the tenant's);
    a groups target takes only group entries in its ranges. Each erased
    group's canonical copy in ``archive_groups`` goes with it.
    """
    where, params = target_filter(target)
    if target.groups:
        where = sql.SQL("kind = 'group' AND ") + where
    cursor = await conn.execute(
        sql.SQL(
            "SELECT id, kind, user_key, session_key, seq, revision FROM {s}.recall_sources WHERE {where} "
            "ORDER BY id LIMIT %s"
        ).format(s=sql.Identifier(schema), where=where),
        (*params, bound + 1),
    )
    found = await cursor.fetchall()
    taken = found[:bound]
    groups = [(u, s, seq, rev) for _, kind, u, s, seq, rev in taken if kind == "group"]
    if not dry_run and taken:
        await conn.execute(
            sql.SQL("DELETE FROM {s}.recall_sources WHERE tenant_key = %s AND id = ANY(%s::bigint[])").format(
                s=sql.Identifier(schema)
            ),
            (params[0], [r[0] for r in taken]),
        )
        await _delete_groups(conn, schema, params[0], [(u, s, seq) for u, s, seq, _ in groups])
    kind, detail = physical(len(taken), dry_run)
    if groups:
        # Said, not counted: the copies are the same groups, and a PostgreSQL archive on this schema
        # shares the rows (its own erase then finds them gone).
        detail += "; the erased groups' canonical copies in archive_groups went with them"
    return EraseReport(
        count_items(group=len(groups), document=len(taken) - len(groups)),
        group_sessions(_named((_key(target, u, s), int(seq), str(rev)) for u, s, seq, rev in groups)),
        _status(len(found), bound),
        kind,
        detail,
    )


def _names_session(provenance: object, session: str) -> bool:
    """True if a stored provenance (canonical JSON ``[[session, seq, digest], ...]``) names ``session``.

    Decoded strictly (depth and size capped). A provenance that does not
    decode as that list cannot say whether the fact cites the session, so
    the erasure stops there, typed, rather than keep a fact that may.
    """
    try:
        if not isinstance(provenance, str):  # NULL: larger than max_row_bytes, not transferred
            raise ValueError("missing, or larger than max_row_bytes")
        refs = decode_json(provenance.encode("utf-8"))
        if not isinstance(refs, list) or not all(
            isinstance(r, list) and r and isinstance(r[0], str) for r in refs
        ):
            raise ValueError("not a list of [session, seq, digest]")
    except (ValueError, InvalidJSONError) as exc:
        raise PostgresMemoryError(
            "postgres memory store: a stored fact's provenance is damaged, so whether it cites the "
            f"session cannot be told ({type(exc).__name__}); the erasure stopped there. Erase the "
            "user, or repair the row, then resume"
        ) from None
    return any(r[0] == session for r in refs)


async def erase_memory(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool, row_cap: int = 16 * 1024 * 1024
) -> EraseReport:
    """The memory store's erase: every revision of up to ``bound`` covered facts.

    Tenant and user targets take every fact of their tenant or user; a
    session target the facts of its user whose provenance, in any revision,
    names the session (``EraseTarget.covers_fact``); a groups target none.
    A provenance over ``row_cap`` bytes is not transferred: it reads as damaged.
    A session target checks every row it reads against its row digest
    (:func:`~agentium_postgres.memory_rows.verified_row`) before trusting
    its match: a row changed outside the store stops the erasure, typed,
    with nothing erased (tenant and user targets need no provenance).
    """
    if target.groups:
        return EraseReport()
    where, params = target_filter(EraseTarget(target.tenant_id, target.user_id), seq=False)
    s = sql.Identifier(schema)
    if target.session_id is None:
        cursor = await conn.execute(
            sql.SQL(
                "SELECT DISTINCT fact_id FROM {s}.memory_facts WHERE {where} ORDER BY fact_id LIMIT %s"
            ).format(s=s, where=where),
            (*params, bound + 1),
        )
        ids = [str(r[0]) for r in await cursor.fetchall()]
    else:
        # The provenance is JSON text: read row by row and matched here, never as a SQL pattern.
        # The session's id is stored raw in it; the memo keeps one scan per call, however many facts.
        # Every row is checked against its row digest before its match is trusted: a provenance
        # edited outside the store to name another session would otherwise be passed over, and the
        # erasure reported complete with the fact kept.
        ids = []
        cursor = await conn.execute(
            sql.SQL(
                "SELECT " + COLUMNS + " FROM {s}.memory_facts WHERE {where} ORDER BY fact_id, revision"  # noqa: S608
            ).format(s=s, where=where, **read_bounds(row_cap)),
            params,
        )
        async for row in cursor:
            fact_id, cites = row[0], _names_session(row[10], target.session_id)
            verified_row(row)
            if (not ids or ids[-1] != fact_id) and cites:
                ids.append(str(fact_id))
                if len(ids) > bound:
                    break
    taken = ids[:bound]
    revisions = 0
    if taken:
        count: sql.SQL = (
            sql.SQL(
                "SELECT count(*) FROM {s}.memory_facts WHERE tenant_key = %s AND fact_id = ANY(%s::text[])"
            )
            if dry_run
            else sql.SQL(
                "WITH d AS (DELETE FROM {s}.memory_facts WHERE tenant_key = %s AND fact_id = ANY(%s::text[]) "
                "RETURNING 1) SELECT count(*) FROM d"
            )
        )
        row = await (await conn.execute(count.format(s=s), (params[0], taken))).fetchone()
        revisions = 0 if row is None else int(row[0])
    kind, detail = physical(len(taken), dry_run)
    return EraseReport(
        count_items(fact=len(taken), revision=revisions), (), _status(len(ids), bound), kind, detail
    )
