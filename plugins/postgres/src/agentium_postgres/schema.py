"""The versioned schema and its migrations, applied only by an explicit ``migrate``.

The adapters never create or change tables: they read ``schema_meta`` on
their first call and refuse (:class:`~agentium_postgres.errors.PostgresSchemaError`)
a database without the schema or with another version. The owner applies the
schema with ``agentium postgres migrate CONFIG`` (or :func:`migrate`), which
runs every missing step in one transaction under an advisory lock, records
the new version, and optionally grants an application role exactly the
privileges the adapters need.

Every key column holds the scope's injective key segments
(:func:`~agentium_harness.plugin_api.encode_segment`: ASCII, ``COLLATE "C"``),
so keys compare byte for byte whatever the database's collation, and the
tenant set for row-level security is the tenant's segment.

Row-level security: every table but ``schema_meta`` has a policy keyed on
``tenant_key = <schema>.current_tenant()``, the transaction-local setting
``agentium.tenant`` that the adapters set from the verified scope at the
start of every transaction. The policies are ``FORCE``d, so they bind the
tables' owner too; only a superuser or a role with ``BYPASSRLS`` is exempt
(``require_row_security`` refuses such a role).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, LiteralString

import attrs

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

from .schema_discovery import RECALL_DISCOVER, RECALL_DISCOVER_HYBRID
from .schema_v4 import V4, bless_memory_rows

__all__ = [
    "ERASE_PRIVILEGES",
    "PGVECTOR_STEP",
    "SCHEMA_VERSION",
    "TABLE_PRIVILEGES",
    "MigrationReport",
    "VectorFacts",
    "apply_migrations",
    "grant_statements",
    "tenant_guc",
    "vector_facts",
]

#: The schema version this release writes and reads.
SCHEMA_VERSION: Final = 4

#: The transaction-local setting holding the tenant's key segment.
TENANT_SETTING: Final = "agentium.tenant"

#: What the application role needs on each table (granted by ``migrate --grant``).
TABLE_PRIVILEGES: Final[dict[str, tuple[LiteralString, ...]]] = {
    "schema_meta": ("SELECT",),
    "archive_groups": ("SELECT", "INSERT"),
    "session_snapshots": ("SELECT", "INSERT", "UPDATE"),
    "recall_sources": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "memory_facts": ("SELECT", "INSERT", "UPDATE"),
    "recall_vector_model": ("SELECT", "INSERT"),
    "recall_vectors": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    # UPDATE: a create locks the floor's row FOR SHARE (PostgreSQL asks UPDATE for that), an erase
    # raises it. A trigger refuses lowering or deleting it, whoever asks.
    "session_revision_floor": ("SELECT", "UPDATE"),
}

#: Tables under row-level security (all but ``schema_meta``, ``recall_vector_model`` and
#: ``session_revision_floor``, which hold no tenant's data).
TENANT_TABLES: Final = (
    "archive_groups",
    "session_snapshots",
    "recall_sources",
    "memory_facts",
    "recall_vectors",
)

#: The functions the application role may execute (``migrate --grant``), by signature.
GRANTED_FUNCTIONS: Final[tuple[LiteralString, ...]] = (
    "current_tenant()",
    "recall_discover(text[], text, text, text, text, integer, integer)",
    "recall_discover_hybrid(text[], text, text, text, text, integer, integer, integer, real[])",
)

#: Tables and functions that a version after 1 introduced (the grants of an older schema leave them out).
INTRODUCED: Final[dict[str, int]] = {
    "recall_vector_model": 2,
    "recall_vectors": 2,
    GRANTED_FUNCTIONS[2]: 2,
    "session_revision_floor": 3,
}

#: What erasure needs beyond :data:`TABLE_PRIVILEGES`: granted by ``migrate --grant`` too, but not
#: checked on first use, so a host may revoke it from the role serving turns and erase as another.
ERASE_PRIVILEGES: Final[dict[str, tuple[LiteralString, ...]]] = {
    "archive_groups": ("DELETE",),
    "session_snapshots": ("DELETE",),
    "memory_facts": ("DELETE",),
}

# Step 1: the whole schema of version 1. "{schema}" is the (validated,
# double-quoted) schema identifier; nothing else is ever spliced in.
_V1: Final[tuple[LiteralString, ...]] = (
    "CREATE SCHEMA IF NOT EXISTS {schema}",
    """
    CREATE TABLE {schema}.schema_meta (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version integer NOT NULL CHECK (version >= 1),
        migrated_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # The tenant the current transaction acts for: NULL (no row visible) when unset.
    """
    CREATE FUNCTION {schema}.current_tenant() RETURNS text
        LANGUAGE sql STABLE PARALLEL SAFE
        AS $$ SELECT nullif(current_setting('agentium.tenant', true), '') $$
    """,
    # Archived groups are immutable: an UPDATE is refused by the database itself.
    """
    CREATE FUNCTION {schema}.refuse_update() RETURNS trigger
        LANGUAGE plpgsql
        AS $$ BEGIN
            RAISE EXCEPTION 'archived groups are immutable; % refused', TG_OP
                USING ERRCODE = 'integrity_constraint_violation';
        END $$
    """,
    """
    CREATE TABLE {schema}.archive_groups (
        tenant_key text COLLATE "C" NOT NULL,
        user_key text COLLATE "C" NOT NULL,
        session_key text COLLATE "C" NOT NULL,
        seq bigint NOT NULL CHECK (seq >= 0),
        digest text COLLATE "C" NOT NULL,
        data bytea NOT NULL,
        archived_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_key, user_key, session_key, seq)
    )
    """,
    """
    CREATE TRIGGER archive_groups_immutable BEFORE UPDATE ON {schema}.archive_groups
        FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_update()
    """,
    """
    CREATE TABLE {schema}.session_snapshots (
        tenant_key text COLLATE "C" NOT NULL,
        user_key text COLLATE "C" NOT NULL,
        session_key text COLLATE "C" NOT NULL,
        session_id text COLLATE "C" NOT NULL,
        revision bigint NOT NULL CHECK (revision >= 1),
        data bytea NOT NULL,
        saved_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_key, user_key, session_key)
    )
    """,
    # Listing orders by the raw id under "C": byte order of UTF-8 is code point order.
    "CREATE INDEX session_snapshots_listing ON {schema}.session_snapshots (tenant_key, user_key, session_id)",
    # Conflicts are raised by the server, inside the writing transaction, so a write, its
    # check and COMMIT travel in one round trip and a conflict aborts the COMMIT. Each runs as
    # the caller (row-level security applies) and, being VOLATILE, reads with a fresh snapshot:
    # it sees a row another writer committed while this one's INSERT waited for it.
    """
    CREATE FUNCTION {schema}.check_archived(t text, u text, s text, seqs bigint[], digests text[])
        RETURNS void LANGUAGE plpgsql VOLATILE
        AS $$ DECLARE stored text; k integer; BEGIN
            -- One primary-key lookup per group of the batch: the cost follows the batch, never
            -- the session's history (a join may be planned as a scan of every archived group).
            FOR k IN 1 .. coalesce(array_length(seqs, 1), 0) LOOP
                SELECT a.digest INTO stored FROM {schema}.archive_groups AS a
                    WHERE a.tenant_key = t AND a.user_key = u AND a.session_key = s AND a.seq = seqs[k];
                IF stored IS DISTINCT FROM digests[k] THEN
                    RAISE EXCEPTION 'group % is archived with digest %; refusing different content %',
                        seqs[k], stored, digests[k] USING ERRCODE = 'AG001';
                END IF;
            END LOOP;
        END $$
    """,
    """
    CREATE FUNCTION {schema}.check_revision(written bigint, t text, u text, s text, expected bigint)
        RETURNS bigint LANGUAGE plpgsql VOLATILE
        AS $$ DECLARE current bigint; BEGIN
            IF written IS NOT NULL THEN RETURN written; END IF;
            SELECT revision INTO current FROM {schema}.session_snapshots
                WHERE tenant_key = t AND user_key = u AND session_key = s;
            RAISE EXCEPTION 'expected %, found %',
                coalesce('revision ' || expected::text, 'no snapshot'),
                coalesce('revision ' || current::text, 'no snapshot') USING ERRCODE = 'AG002';
        END $$
    """,
    # One row per recall source. NULL owner keys are absent (they do not narrow).
    """
    CREATE TABLE {schema}.recall_sources (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant_key text COLLATE "C" NOT NULL,
        source_id text COLLATE "C" NOT NULL,
        kind text NOT NULL CHECK (kind IN ('document', 'group')),
        user_key text COLLATE "C",
        session_key text COLLATE "C",
        project_key text COLLATE "C",
        repository_key text COLLATE "C",
        revision text COLLATE "C" NOT NULL,
        title text NOT NULL,
        size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
        seq bigint CHECK (seq >= 0),
        body text NOT NULL,
        tsv tsvector NOT NULL,
        CHECK ((kind = 'group') = (seq IS NOT NULL)),
        UNIQUE (tenant_key, source_id)
    )
    """,
    # fastupdate off: entries go straight into the index. With it on, new entries wait in an
    # unsorted pending list that every search scans whole (milliseconds per word after a bulk
    # index, until a vacuum merges it); indexing here happens per eviction, searches per run.
    "CREATE INDEX recall_sources_tsv ON {schema}.recall_sources USING gin (tsv) WITH (fastupdate = off)",
    "CREATE INDEX recall_sources_newest ON {schema}.recall_sources (tenant_key, id)",
    """
    CREATE TABLE {schema}.memory_facts (
        ord bigint GENERATED ALWAYS AS IDENTITY,
        tenant_key text COLLATE "C" NOT NULL,
        fact_id text COLLATE "C" NOT NULL,
        revision integer NOT NULL CHECK (revision >= 1),
        user_key text COLLATE "C" NOT NULL,
        project_key text COLLATE "C",
        repository_key text COLLATE "C",
        status text NOT NULL CHECK (status IN ('current', 'superseded', 'forgotten')),
        text text NOT NULL,
        text_lower text NOT NULL,
        valid_from timestamptz,
        valid_until timestamptz,
        provenance text NOT NULL,
        recorded_at timestamptz NOT NULL,
        content_digest text COLLATE "C" NOT NULL,
        PRIMARY KEY (tenant_key, fact_id, revision)
    )
    """,
    "CREATE INDEX memory_facts_owner ON {schema}.memory_facts (tenant_key, user_key, status, ord)",
)


# Step 2: group lookups by seq (the catch-up's unindexed_groups), and vectors for hybrid recall.
_V2: Final[tuple[LiteralString, ...]] = (
    # unindexed_groups reads a session's indexed seqs in order through this index alone.
    """
    CREATE INDEX recall_sources_groups ON {schema}.recall_sources (tenant_key, user_key, session_key, seq)
        WHERE kind = 'group'
    """,
    # One embedding model per schema (the index): its id and dimension. Not tenant data, so no
    # row-level security; the application role may record it once (INSERT) but never change it.
    """
    CREATE TABLE {schema}.recall_vector_model (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        model text COLLATE "C" NOT NULL,
        dimension integer NOT NULL CHECK (dimension BETWEEN 1 AND 8192),
        recorded_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # The newest-first index made unique, so that a vector's key can name its source's tenant too.
    "DROP INDEX {schema}.recall_sources_newest",
    "ALTER TABLE {schema}.recall_sources ADD CONSTRAINT recall_sources_newest UNIQUE (tenant_key, id)",
    # One unit vector per source row, at the row's revision: a source that changes gets a new row
    # (insert_sources deletes and inserts it), and the cascade drops the old row's vector with it.
    # The foreign key includes the tenant: no vector can hang on another tenant's source.
    # Little-endian float32 (the core's Vector.to_bytes), read raw and scored by the adapter.
    """
    CREATE TABLE {schema}.recall_vectors (
        id bigint PRIMARY KEY,
        tenant_key text COLLATE "C" NOT NULL,
        FOREIGN KEY (tenant_key, id) REFERENCES {schema}.recall_sources (tenant_key, id) ON DELETE CASCADE,
        embedding bytea NOT NULL CHECK (octet_length(embedding) BETWEEN 4 AND 32768)
    )
    """,
    # Records the batch's model when none is recorded; raises SQLSTATE AG003 (the adapter's
    # EmbeddingModelMismatchError) when another one is, which aborts the writing transaction.
    """
    CREATE FUNCTION {schema}.check_vector_model(m text, dim integer)
        RETURNS void LANGUAGE plpgsql VOLATILE
        AS $$ DECLARE stored text; BEGIN
            INSERT INTO {schema}.recall_vector_model (model, dimension) VALUES (m, dim)
                ON CONFLICT (singleton) DO NOTHING;
            SELECT r.model || '/' || r.dimension INTO stored FROM {schema}.recall_vector_model AS r;
            IF stored IS DISTINCT FROM m || '/' || dim THEN
                RAISE EXCEPTION 'the index holds vectors of %, not of %', stored, m || '/' || dim
                    USING ERRCODE = 'AG003';
            END IF;
        END $$
    """,
)


# Step 3: the session store's revision floor. Revisions a store hands out for a session never repeat
# across its erasure: an erase raises the floor to the highest revision it removed (in its own
# transaction), and a create stores floor + 1 instead of 1. Otherwise a writer holding revision N of
# an erased session passed the compare-and-set once a session re-created under the id reached N
# again, writing the erased text back over the new session's turns. One store-wide number: nothing
# of an erased tenant, user or session survives in it but a count. Not tenant data (no row-level
# security). Idempotent: the table and its one row are created only when missing.
_V3: Final[tuple[LiteralString, ...]] = (
    """
    CREATE TABLE IF NOT EXISTS {schema}.session_revision_floor (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        revision bigint NOT NULL DEFAULT 0 CHECK (revision >= 0)
    )
    """,
    "INSERT INTO {schema}.session_revision_floor (singleton, revision) VALUES (true, 0) "
    "ON CONFLICT (singleton) DO NOTHING",
    # The application role holds UPDATE (see TABLE_PRIVILEGES): the database itself keeps the floor
    # from going down or away, which would let revisions repeat again.
    """
    CREATE OR REPLACE FUNCTION {schema}.floor_only_rises() RETURNS trigger
        LANGUAGE plpgsql
        AS $$ BEGIN
            IF TG_OP = 'DELETE' OR NEW.revision < OLD.revision THEN
                RAISE EXCEPTION 'the session revision floor only rises; % refused', TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END $$
    """,
    """
    CREATE OR REPLACE TRIGGER session_revision_floor_only_rises
        BEFORE UPDATE OR DELETE ON {schema}.session_revision_floor
        FOR EACH ROW EXECUTE FUNCTION {schema}.floor_only_rises()
    """,
)


# Not a version: applied by ``migrate`` whenever the database has pgvector and the column is missing
# (the extension may be installed after the schema), so the version says nothing about it. The
# column holds the same unit vector as ``embedding``, in pgvector's type; the adapter writes both,
# and a row without it (written before) is scored by the adapter from ``embedding``. "{vector}" is
# the extension's schema-qualified type.
PGVECTOR_STEP: Final[LiteralString] = "ALTER TABLE {schema}.recall_vectors ADD COLUMN embedding_pgv {vector}"


def _rls(table: LiteralString, *, force: bool = True) -> tuple[LiteralString, ...]:
    """Row-level security on ``table``: enabled, forced on its owner too (``force``), keyed on the tenant."""
    forced: tuple[LiteralString, ...] = (
        ("ALTER TABLE {schema}." + table + " FORCE ROW LEVEL SECURITY",) if force else ()
    )
    return (
        "ALTER TABLE {schema}." + table + " ENABLE ROW LEVEL SECURITY",
        *forced,
        "CREATE POLICY tenant_isolation ON {schema}."
        + table
        + " USING (tenant_key = {schema}.current_tenant())"
        + " WITH CHECK (tenant_key = {schema}.current_tenant())",
    )


#: Every step, by the version it brings the schema to.
MIGRATIONS: Final[dict[int, tuple[LiteralString, ...]]] = {
    1: (
        *_V1,
        *_rls("archive_groups"),
        *_rls("session_snapshots"),
        # Not forced on its owner: the owner's recall_discover (below) must use the GIN index.
        *_rls("recall_sources", force=False),
        RECALL_DISCOVER,
        "REVOKE ALL ON FUNCTION {schema}.recall_discover(text[], text, text, text, text, integer, integer) "
        "FROM PUBLIC",
        *_rls("memory_facts"),
    ),
    2: (
        *_V2,
        *_rls("recall_vectors"),
        RECALL_DISCOVER_HYBRID,
        "REVOKE ALL ON FUNCTION {schema}.recall_discover_hybrid(text[], text, text, text, text, integer, "
        "integer, integer, real[]) FROM PUBLIC",
    ),
    3: _V3,
    # memory_facts.row_digest (schema_v4): its statements, then Python (see _AFTER_STEP).
    4: V4,
}

#: Python run after a step's statements, in the same transaction (a digest SQL cannot compute).
_AFTER_STEP: Final = {4: bless_memory_rows}


def tenant_guc() -> str:
    """The name of the transaction-local tenant setting."""
    return TENANT_SETTING


@attrs.frozen(slots=True)
class MigrationReport:
    """What :func:`migrate` did: the version found (``None``: no schema), the version now, roles granted."""

    schema: str
    from_version: int | None
    to_version: int
    applied: tuple[int, ...]
    granted: tuple[str, ...]
    #: The version of pgvector installed in the database, or ``None`` (see :func:`vector_facts`).
    pgvector: str | None = None
    #: Whether hybrid discovery scores vectors in the database (pgvector and ``embedding_pgv``).
    scored_in_database: bool = False
    #: Whether this run added ``embedding_pgv`` (:data:`PGVECTOR_STEP`).
    added_pgvector_column: bool = False


@attrs.frozen(slots=True)
class VectorFacts:
    """What the database offers hybrid recall: pgvector's version and schema, and ``embedding_pgv``."""

    #: The version of the ``vector`` extension installed in the database, or ``None``.
    pgvector: str | None = None
    #: The schema the extension's type and operators live in, or ``None``.
    extension_schema: str | None = None
    #: Whether ``recall_vectors`` has the ``embedding_pgv`` column (:data:`PGVECTOR_STEP`).
    column: bool = False

    @property
    def scored_in_database(self) -> bool:
        """Whether hybrid discovery scores vectors with pgvector, in the database."""
        return self.pgvector is not None and self.column


def _compose(template: LiteralString, schema: str) -> sql.Composed:
    # Imported here, not at module level: listing the plugin must not load the client library.
    from psycopg import sql

    return sql.SQL(template).format(schema=sql.Identifier(schema))


def grant_statements(schema: str, role: str, version: int = SCHEMA_VERSION) -> list[sql.Composed]:
    """The statements granting ``role`` what the adapters need on ``schema`` at ``version`` (nothing more)."""
    from psycopg import sql

    ident = sql.Identifier(role)
    out = [
        sql.SQL("GRANT USAGE ON SCHEMA {schema} TO {role}").format(schema=sql.Identifier(schema), role=ident)
    ]
    for function in GRANTED_FUNCTIONS:
        if INTRODUCED.get(function, 1) > version:
            continue
        out.append(
            sql.SQL("GRANT EXECUTE ON FUNCTION {schema}." + function + " TO {role}").format(
                schema=sql.Identifier(schema), role=ident
            )
        )
    for table, privileges in (*TABLE_PRIVILEGES.items(), *ERASE_PRIVILEGES.items()):
        if INTRODUCED.get(table, 1) > version:
            continue
        out.append(
            sql.SQL("GRANT {privileges} ON {schema}.{table} TO {role}").format(
                privileges=sql.SQL(", ").join(sql.SQL(p) for p in privileges),
                schema=sql.Identifier(schema),
                table=sql.Identifier(table),
                role=ident,
            )
        )
    return out


async def vector_facts(conn: psycopg.AsyncConnection[Any], schema: str) -> VectorFacts:
    """Whether the database has pgvector (its version and schema) and ``schema`` its ``embedding_pgv`` column.

    Read by ``migrate`` and on each adapter's first use; ``agentium postgres
    migrate`` and ``agentium check --probe`` say which scoring runs.
    """
    row = await (
        await conn.execute(
            "SELECT e.extversion, n.nspname, EXISTS (SELECT 1 FROM pg_attribute AS a "
            "WHERE a.attrelid = to_regclass(format('%%I.recall_vectors', %s::text)) "
            "AND a.attname = 'embedding_pgv' AND NOT a.attisdropped) "
            "FROM pg_extension AS e JOIN pg_namespace AS n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'vector'",
            (schema,),
        )
    ).fetchone()
    return VectorFacts() if row is None else VectorFacts(str(row[0]), str(row[1]), bool(row[2]))


async def current_version(conn: psycopg.AsyncConnection[Any], schema: str) -> int | None:
    """The recorded schema version, or ``None`` when the schema or its ``schema_meta`` table is absent."""
    row = await (
        await conn.execute("SELECT to_regclass(format('%%I.schema_meta', %s::text)) IS NOT NULL", (schema,))
    ).fetchone()
    if row is None or not row[0]:
        return None
    found = await (
        await conn.execute(_compose("SELECT version FROM {schema}.schema_meta", schema))
    ).fetchone()
    return None if found is None else int(found[0])


async def apply_migrations(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    grant_to: Sequence[str] = (),
    to_version: int = SCHEMA_VERSION,
) -> MigrationReport:
    """Bring ``schema`` to ``to_version`` (default :data:`SCHEMA_VERSION`) in the caller's transaction.

    Takes a transaction-level advisory lock first, so two migrators never run
    the same step twice. Refuses a schema newer than this release knows, and
    a ``to_version`` outside 1 to :data:`SCHEMA_VERSION` (nothing changed).
    Where the database has pgvector (``CREATE EXTENSION vector``, by a
    superuser) and the schema is at version 2 or later, adds
    ``recall_vectors.embedding_pgv`` (:data:`PGVECTOR_STEP`) if missing, so
    hybrid discovery scores vectors in the database. Returns what was found
    and done.
    """
    from .errors import PostgresSchemaError  # errors import nothing from here; kept local for clarity

    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtext('agentium-postgres migrate ' || %s))", (schema,)
    )
    found = await current_version(conn, schema)
    if found is not None and found > SCHEMA_VERSION:
        raise PostgresSchemaError(
            f"schema {schema!r} is at version {found}, newer than this agentium-postgres understands "
            f"({SCHEMA_VERSION}); upgrade agentium-postgres. Nothing was changed."
        )
    if (
        isinstance(to_version, bool)
        or not isinstance(to_version, int)
        or not 1 <= to_version <= SCHEMA_VERSION
    ):
        raise PostgresSchemaError(
            f"to_version must be a schema version from 1 to {SCHEMA_VERSION}, got {to_version!r}; "
            "nothing was changed"
        )
    if found is not None and found > to_version:
        raise PostgresSchemaError(
            f"schema {schema!r} is at version {found}, past the version {to_version} asked for; a "
            "migration never goes back. Nothing was changed."
        )
    applied: list[int] = []
    start = 0 if found is None else found
    for version in range(start + 1, to_version + 1):
        for template in MIGRATIONS[version]:
            await conn.execute(_compose(template, schema))
        if version in _AFTER_STEP:
            await _AFTER_STEP[version](conn, schema)
        applied.append(version)
    if applied:
        await conn.execute(
            _compose(
                "INSERT INTO {schema}.schema_meta (singleton, version) VALUES (true, %s) "
                "ON CONFLICT (singleton) DO UPDATE SET version = excluded.version, migrated_at = now()",
                schema,
            ),
            (to_version,),
        )
    vectors = await vector_facts(conn, schema)
    added = False
    if to_version >= 2 and vectors.extension_schema is not None and not vectors.column:
        from psycopg import sql

        await conn.execute(
            sql.SQL(PGVECTOR_STEP).format(
                schema=sql.Identifier(schema), vector=sql.Identifier(vectors.extension_schema, "vector")
            )
        )
        vectors, added = attrs.evolve(vectors, column=True), True
    for role in grant_to:
        for statement in grant_statements(schema, role, to_version):
            await conn.execute(statement)
    return MigrationReport(
        schema=schema,
        from_version=found,
        to_version=to_version,
        applied=tuple(applied),
        granted=tuple(grant_to),
        pgvector=vectors.pgvector,
        scored_in_database=vectors.scored_in_database,
        added_pgvector_column=added,
    )
