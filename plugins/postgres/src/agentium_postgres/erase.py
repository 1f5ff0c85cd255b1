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

Keys are compared whole (injective segments, bound parameters): no id matches another's rows.

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
from typing import Any, Final, LiteralString

from psycopg import sql

from agentium_harness.plugin_api import (
    MAX_FACT_REVISIONS,
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
    "SNAPSHOT_BATCH_BYTES",
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


def _vouched(column: LiteralString) -> sql.SQL:
    """``column`` (a stored group digest) if it is ``sha256:`` and 64 lowercase hex digits, else ``''``.

    Checked on the server: a digest of any other form (8 MiB of text, another hash) is neither
    transferred nor reported. The engine keeps a report's digests in the erasure's tombstone and
    refuses one of another form (``ContractViolationError``), which stopped that session's
    erasure for good; ``""`` is the port's form for a digest the store cannot vouch for, and the
    group is erased all the same. The length is checked first (``CASE`` keeps its order), so the
    pattern never runs over a long value.
    """
    return sql.SQL(
        "CASE WHEN octet_length(" + column + ") <> 71 THEN '' "
        "WHEN " + column + " ~ '^sha256:[0-9a-f]{64}$' THEN " + column + " ELSE '' END"
    )


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
            "SELECT user_key, session_key, seq, {digest} FROM {s}.archive_groups WHERE {where} "
            "ORDER BY user_key, session_key, seq LIMIT %s"
        ).format(s=sql.Identifier(schema), where=where, digest=_vouched("digest")),
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


#: Bytes of snapshots one statement of a session erasure fetches at most, unless one snapshot alone
#: is larger (it is then fetched alone, within ``max_row_bytes``): the snapshots are read only for
#: their groups' seqs and digests, and decoded one by one, so an erasure's memory is bounded by one
#: snapshot, not ``max_items`` of them.
SNAPSHOT_BATCH_BYTES: Final = 1024 * 1024


def _first_batch(
    rows: Sequence[tuple[SessionKey, str, str, int]], budget: int
) -> list[tuple[SessionKey, str, str, int]]:
    """The first rows (key, user key, session key, size) of ``rows`` within ``budget`` bytes, at least one."""
    total = 0
    for n, row in enumerate(rows):
        total += row[3]
        if n and total > budget:
            return list(rows[:n])
    return list(rows)


async def _snapshot_groups(
    conn: Conn, schema: str, tenant_key: str, rows: Sequence[tuple[SessionKey, str, str, int]], row_cap: int
) -> tuple[dict[SessionKey, ErasedSession], list[SessionKey]]:
    """What erasing each snapshot of ``rows`` (each within ``row_cap``) removes, fetched in bounded batches.

    Each statement fetches at most :data:`SNAPSHOT_BATCH_BYTES` (or ``row_cap``, if lower) of
    snapshots, or one snapshot, and each is decoded into its groups' seqs and digests before the
    next statement runs. The server enforces the budget too, by a running sum in key order: a
    snapshot over it comes back NULL, unread, and is fetched by a later statement (the first row of
    each always comes back, so every statement makes progress). Also returns the keys of the
    snapshots gone since they were listed, which an erase holding them locked never has
    (:func:`erase_snapshots` says what becomes of them).
    """
    budget = min(SNAPSHOT_BATCH_BYTES, row_cap)
    out: dict[SessionKey, ErasedSession] = {}
    gone: list[SessionKey] = []
    pending = list(rows)
    statement = sql.SQL(
        "SELECT d.ord, CASE WHEN octet_length(a.data) <= %s AND "
        "(row_number() OVER w = 1 OR sum(octet_length(a.data)) OVER w <= %s) THEN a.data END, "
        "octet_length(a.data) <= %s "
        "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS d(u, s, ord) "
        "JOIN {s}.session_snapshots AS a "
        "ON a.tenant_key = %s AND a.user_key = d.u AND a.session_key = d.s "
        "WINDOW w AS (ORDER BY d.ord) ORDER BY d.ord"
    ).format(s=sql.Identifier(schema))
    while pending:
        batch = _first_batch(pending, budget)
        cursor = await conn.execute(
            statement, (row_cap, budget, row_cap, [r[1] for r in batch], [r[2] for r in batch], tenant_key)
        )
        fetched = await cursor.fetchall()
        await cursor.close()  # its result goes now, not when the next batch's statement replaces it
        deferred: set[int] = set()
        for ordinal, data, fits in fetched:
            key = batch[int(ordinal) - 1][0]
            if data is not None:
                out[key] = snapshot_erasure(key, bytes(data))
            elif fits:
                deferred.add(int(ordinal) - 1)  # grown past the batch's budget since it was sized
            else:
                out[key] = ErasedSession(key)  # grown past row_cap since: erased unread
        del fetched  # decoded: this batch's bytes are gone before the next batch is fetched
        gone += [row[0] for ordinal, row in enumerate(batch) if ordinal not in deferred and row[0] not in out]
        pending = [row for ordinal, row in enumerate(batch) if ordinal in deferred] + pending[len(batch) :]
    return out, gone


#: The row lock an erase's listing of snapshots takes, by ``dry_run``: see :func:`erase_snapshots`.
_ROW_LOCK: Final[dict[bool, LiteralString]] = {False: "FOR UPDATE", True: ""}


async def erase_snapshots(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool, row_cap: int = 16 * 1024 * 1024
) -> tuple[EraseReport, list[SessionKey]]:
    """The session store's erase: up to ``bound`` snapshots of the target; also the keys removed.

    The keys and sizes are read first, every row locked ``FOR UPDATE`` until the transaction ends,
    then the snapshots in bounded batches, each decoded into its groups before the next is fetched
    (:func:`_snapshot_groups`), so at most one snapshot's bytes (``row_cap``) are held at once,
    never ``bound`` of them; the locks keep what is read, what is deleted and what is reported one
    and the same. A dry run takes no lock (it must not hold live sessions' saves, and runs on a
    read-only connection too): a snapshot saved over meanwhile is reported as fetched, one deleted
    meanwhile is left out of the report and its counts (an erase would not find it). A snapshot
    over ``row_cap`` bytes (none this store wrote) is erased without being transferred, and
    reported like a damaged one: its session, no groups.
    """
    if target.groups:  # archived groups only: the session store holds none
        return EraseReport(), []
    s = sql.Identifier(schema)
    where, params = target_filter(target, seq=False)
    # The rows are locked as they are listed, in key order, until the transaction ends (not in a
    # dry run: see the docstring): a snapshot cannot be deleted or saved over between its size read, its
    # fetch and the DELETE, so the report gives the groups of exactly the revision the erase
    # removed. A save or another erase racing this one waits for it, then finds the session gone.
    cursor = await conn.execute(
        sql.SQL(
            "SELECT user_key, session_key, octet_length(data) "
            "FROM {s}.session_snapshots WHERE {where} ORDER BY user_key, session_key LIMIT %s "
            + _ROW_LOCK[dry_run]
        ).format(s=s, where=where),
        (*params, bound + 1),
    )
    found = await cursor.fetchall()
    taken = found[:bound]
    # A row whose key no id encodes to is erased unread: the report cannot name its session.
    named = [
        (key, user, session, int(size))
        for key, user, session, size in ((_key(target, u, k), u, k, n) for u, k, n in taken)
        if key
    ]
    fetched, gone = await _snapshot_groups(
        conn, schema, params[0], [r for r in named if r[3] <= row_cap], row_cap
    )
    if gone and not dry_run:  # the lock did not hold: a report naming them erased would be false
        raise PostgresSessionStoreError(
            f"postgres session store: {len(gone)} snapshot(s) of the target (session {gone[0].key()}"
            f"{' and more' if len(gone) > 1 else ''}) went between the erase's reads although it held "
            "them locked; the erasure stopped and nothing was changed. Run it again"
        )
    if not dry_run and taken:
        # The revision floor (schema step 3) is locked only now, after the reads and before the
        # DELETE: it is one row for the whole store, and every create (of any tenant) locks it FOR
        # SHARE while it inserts (sessions.py), so locking it before the reads held every create
        # for the erase's whole read. No deadlock: the rows are locked FOR UPDATE without being
        # changed, which a create's INSERT ... ON CONFLICT DO NOTHING does not wait for, and
        # nothing is deleted before the floor is held, so no create holding it waits on this
        # transaction. Two erases of one tenant lock their rows in the same key order.
        cursor = await conn.execute(
            sql.SQL("SELECT 1 FROM {s}.session_revision_floor WHERE singleton FOR UPDATE").format(s=s)
        )
        if await cursor.fetchone() is None:  # its trigger refuses a DELETE; a TRUNCATE is not refused
            raise PostgresSessionStoreError(
                "postgres session store: the session revision floor's row is missing, so an erased "
                "session's revisions could repeat; the erasure stopped and nothing was changed. Restore "
                "the row as the schema's owner, at a revision no lower than any session's ever was"
            )
        # The floor is raised, in this transaction, to the highest revision the DELETE removed, so
        # a session created under an erased id starts past every revision the erased one had.
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
    keys = [key for key, _, _, _ in named if key not in gone]
    kind, detail = physical(len(taken) - len(gone), dry_run)
    report = EraseReport(
        count_items(snapshot=len(taken) - len(gone)),
        tuple(fetched.get(key, ErasedSession(key)) for key in keys),
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
            "SELECT id, kind, user_key, session_key, seq, {revision} FROM {s}.recall_sources WHERE {where} "
            "ORDER BY id LIMIT %s"
        ).format(s=sql.Identifier(schema), where=where, revision=_vouched("revision")),
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


#: Rows of a user's facts one session erasure reads at a time (each row bounded: ``COLUMNS``).
_MEMORY_PAGE: Final = 256
#: Damaged facts a stopped session erasure names (the rest are counted).
_NAMED_DAMAGED: Final = 10


def _cited_sessions(provenance: object) -> list[str] | None:
    """The sessions a stored provenance names, or ``None`` when it cannot be read.

    Decoded strictly (depth and size capped): canonical JSON ``[[session,
    ...], ...]``. ``None`` for NULL (over ``max_row_bytes``, not transferred)
    or anything else that is not that list.
    """
    if not isinstance(provenance, str):
        return None
    try:
        refs = decode_json(provenance.encode("utf-8"))
    except (ValueError, InvalidJSONError):
        return None
    if not isinstance(refs, list) or not all(
        isinstance(r, list) and r and isinstance(r[0], str) for r in refs
    ):
        return None
    return [r[0] for r in refs]


def _intact(row: Sequence[Any]) -> bool:
    """Whether a row (``COLUMNS``) is within every bound and matches its row digest."""
    try:
        verified_row(row)
    except PostgresMemoryError:  # PostgresRowTooLargeError too
        return False
    return True


class _SessionScan:
    """Which facts of a user a session erasure takes, from their rows in (fact id, revision) order.

    A fact is **covered** when a revision's provenance, read within its
    bound and decoded strictly, names the session: its revisions are erased
    whatever else about them is damaged (as stored, it cites the session;
    and a damaged row is refused by every read, so erasing it loses nothing
    the store could still serve). A fact none of whose revisions names the
    session but one of whose revisions is damaged (its row digest fails, a
    column is over its bound, its provenance does not decode) is
    **undecided**: its provenance may have been edited away from the
    session, which is exactly what the row digest exists to catch, so it is
    never passed over, even when it plainly names another session.
    """

    def __init__(self, session: str, bound: int) -> None:
        self.session, self.bound = session, bound
        self.covered: list[str] = []
        self.undecided: list[str] = []
        self._fact: str | None = None
        self._cites = self._damaged = False

    @property
    def full(self) -> bool:
        """One fact more than the bound is covered: the call reports ``partial``."""
        return len(self.covered) > self.bound

    def add(self, row: Sequence[Any]) -> None:
        """Take one row; the previous fact is settled when a new fact id starts."""
        if row[0] != self._fact:
            self.settle()
            self._fact = str(row[0])
        sessions = _cited_sessions(row[10])
        self._cites = self._cites or (sessions is not None and self.session in sessions)
        self._damaged = self._damaged or sessions is None or not _intact(row)

    def settle(self) -> None:
        """Settle the fact whose rows were last taken."""
        if self._fact is not None:
            if self._cites:
                self.covered.append(self._fact)
            elif self._damaged:
                self.undecided.append(self._fact)
        self._fact, self._cites, self._damaged = None, False, False

    def refuse_undecided(self) -> None:
        """Raise :class:`PostgresMemoryError` naming the undecided facts, if any."""
        if not self.undecided:
            return
        named = ", ".join(repr(f) for f in self.undecided[:_NAMED_DAMAGED])
        more = len(self.undecided) - _NAMED_DAMAGED
        raise PostgresMemoryError(
            f"postgres memory store: {len(self.undecided)} fact(s) of the user ({named}"
            f"{f' and {more} more' if more > 0 else ''}) hold a damaged row (a provenance that is "
            "damaged, or a row that does not match its row digest or is over a bound) and no revision "
            "naming the session as stored: whether they came from it cannot be told, so the erasure "
            "stopped and nothing was erased. Restore the rows as they were written, or erase the user"
        )


async def _session_facts(
    conn: Conn, s: sql.Composable, where: sql.Composable, params: list[Any], scan: _SessionScan, row_cap: int
) -> None:
    """Feed ``scan`` the user's fact rows, a bounded page at a time, until the bound is passed."""
    after: tuple[str, int] | None = None
    while not scan.full:
        keyset = sql.SQL("") if after is None else sql.SQL(" AND (fact_id, revision) > (%s, %s)")
        cursor = await conn.execute(
            sql.SQL(
                "SELECT " + COLUMNS + " FROM {s}.memory_facts WHERE {where}{keyset} "  # noqa: S608
                "ORDER BY fact_id, revision LIMIT {page}"
            ).format(s=s, where=where, keyset=keyset, page=sql.Literal(_MEMORY_PAGE), **read_bounds(row_cap)),
            (*params, *(() if after is None else after)),
        )
        rows = await cursor.fetchall()
        for row in rows:
            if row[0] is None:  # a fact id over its bound: the row cannot even be named to delete it
                verified_row(row)  # raises PostgresRowTooLargeError, naming the column
            scan.add(row)
            if scan.full:
                break
        if len(rows) < _MEMORY_PAGE:
            break
        after = (str(rows[-1][0]), int(rows[-1][1]))
    if not scan.full:  # past the bound the fact being read was seen in part: left to the next call
        scan.settle()


#: Most DELETE rounds one memory erase runs (each but the last took a revision committed meanwhile).
_DELETE_ROUNDS: Final = MAX_FACT_REVISIONS + 2


async def erase_memory(
    conn: Conn, schema: str, target: EraseTarget, bound: int, dry_run: bool, row_cap: int = 16 * 1024 * 1024
) -> EraseReport:
    """The memory store's erase: every revision of up to ``bound`` covered facts.

    Tenant and user targets take every fact of their tenant or user; a
    session target the facts of its user whose provenance, in any revision,
    names the session (``EraseTarget.covers_fact``); a groups target none.
    A session target reads the user's rows a bounded page at a time, every
    column capped (a provenance over ``row_cap`` bytes is not transferred:
    it reads as damaged), and checks each against its row digest
    (:func:`~agentium_postgres.memory_rows.verified_row`): a damaged
    revision whose provenance names the session is erased with its fact; a
    fact with a damaged revision and none naming the session stops the
    erasure, typed, naming the fact, with nothing erased (:class:`_SessionScan`).
    Tenant and user targets need no provenance. The delete is repeated until
    it finds no row, so a revision a writer of the fact commits meanwhile is
    deleted too (see the comment below).
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
        # The provenance is JSON text: read row by row and matched here, never as a SQL pattern (the
        # session's id is stored raw in it). Every row is bounded, and checked against its row
        # digest: see _SessionScan for which damaged rows are erased and which stop the erasure.
        scan = _SessionScan(target.session_id, bound)
        await _session_facts(conn, s, where, params, scan, row_cap)
        scan.refuse_undecided()
        ids = scan.covered
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
        # Until a DELETE finds no row: a revision a writer of the fact (correct, forget, a merge)
        # committed while a DELETE waited for the row it held is outside that statement's snapshot
        # (it stayed, current, naming the erased session); the next one sees it. A writer blocked on
        # a row deleted here finds the fact gone once this commits, so an empty round ends it.
        for _ in range(1 if dry_run else _DELETE_ROUNDS):
            row = await (await conn.execute(count.format(s=s), (params[0], taken))).fetchone()
            deleted = 0 if row is None else int(row[0])
            revisions += deleted
            if dry_run or not deleted:
                break
        else:
            raise PostgresMemoryError(
                f"memory erase: the facts kept gaining revisions over {_DELETE_ROUNDS} rounds of deletes; "
                "nothing was erased (try again)"
            )
    kind, detail = physical(len(taken), dry_run)
    return EraseReport(
        count_items(fact=len(taken), revision=revisions), (), _status(len(ids), bound), kind, detail
    )
