"""The schema's discovery functions: ``recall_discover`` and ``recall_discover_hybrid``.

Part of the versioned schema (:mod:`agentium_postgres.schema` applies them in
its migrations, versions 1 and 2). ``{schema}`` is the schema's identifier,
filled in when the statement is composed.
"""

from __future__ import annotations

from typing import Final, LiteralString

__all__ = ["RECALL_DISCOVER", "RECALL_DISCOVER_HYBRID"]


# Discovery for the application role. Row-level security keeps PostgreSQL from using the GIN
# index for a role it binds (``@@`` is not leakproof, so it may not run before the policy),
# which would make every search a scan of the tenant's rows. This function runs as the schema's
# owner, whom the policy on recall_sources does not bind, and is a fixed query confined to the
# tenant of the caller's transaction (``current_tenant()``, set from the verified scope): no
# argument names a tenant. Terms are double-quoted \w+ words (plain lexemes to
# websearch_to_tsquery). Each statement is planned with its values (EXECUTE ... USING), so a
# rare word goes through the GIN index and a common one through the newest rows. Bounds and
# ranking: agentium_postgres.recall_sql.
RECALL_DISCOVER: Final[LiteralString] = """
    CREATE FUNCTION {schema}.recall_discover(
        terms text[], uk text, sk text, pk text, rk text, cap integer, lim integer
    ) RETURNS TABLE (source_id text, revision text, title text, size_bytes bigint, score double precision)
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
        AS $$
        #variable_conflict use_column
        DECLARE
            t text := {schema}.current_tenant();
            visible constant text := ' AND s.tenant_key = $1 AND (s.user_key IS NULL OR s.user_key = $3)'
                ' AND (s.session_key IS NULL OR s.session_key = $4)'
                ' AND (s.project_key IS NULL OR s.project_key = $5)'
                ' AND (s.repository_key IS NULL OR s.repository_key = $6)';
            found text[] := ARRAY[]::text[];
            weights double precision[] := ARRAY[]::double precision[];
            ids bigint[] := ARRAY[]::bigint[];
            more bigint[];
            n bigint;
            per_term integer;
            k integer;
        BEGIN
            IF t IS NULL OR coalesce(array_length(terms, 1), 0) = 0 THEN
                RETURN;
            END IF;
            FOR k IN 1 .. array_length(terms, 1) LOOP
                EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM {schema}.recall_sources AS s '
                    'WHERE s.tsv @@ websearch_to_tsquery(''simple'', $2)' || visible || ' LIMIT $7) AS x'
                    INTO n USING t, terms[k], uk, sk, pk, rk, cap;
                IF n > 0 THEN
                    found := found || terms[k];
                    weights := weights || ln(1 + cap::double precision / n);
                END IF;
            END LOOP;
            IF coalesce(array_length(found, 1), 0) = 0 THEN
                RETURN;
            END IF;
            per_term := greatest(lim, ceil(cap::double precision / array_length(found, 1))::integer);
            FOR k IN 1 .. array_length(found, 1) LOOP
                EXECUTE 'SELECT array_agg(id) FROM (SELECT s.id FROM {schema}.recall_sources AS s '
                    'WHERE s.tsv @@ websearch_to_tsquery(''simple'', $2)' || visible
                    || ' ORDER BY s.id DESC LIMIT $7) AS x'
                    INTO more USING t, found[k], uk, sk, pk, rk, per_term;
                ids := ids || coalesce(more, ARRAY[]::bigint[]);
            END LOOP;
            RETURN QUERY
                SELECT s.source_id::text, s.revision::text, s.title, s.size_bytes,
                    (SELECT sum(w.weight) FROM unnest(found, weights) AS w(term, weight)
                        WHERE s.tsv @@ websearch_to_tsquery('simple', w.term))
                    + 0.001 * ts_rank_cd(
                        s.tsv, websearch_to_tsquery('simple', array_to_string(found, ' or ')))
                    AS score
                FROM {schema}.recall_sources AS s
                WHERE s.id = ANY (ids) AND s.tenant_key = t
                ORDER BY score DESC, s.id DESC
                LIMIT lim;
        END $$
"""

# Hybrid discovery's candidates, for the application role (SECURITY DEFINER for the GIN index, as
# recall_discover; confined to current_tenant()). Bounded: the lexical ranking's best ``pool``
# (recall_discover itself, so the same bounds) and the scope's newest ``scan`` sources that have a
# vector (scope filter before the LIMIT). Each row carries its lexical rank (NULL: not in the pool)
# and either its similarity to ``q`` computed here by pgvector (when the extension is installed and
# the row has ``embedding_pgv``, see PGVECTOR_STEP) or its stored float32 vector, which the adapter
# scores. pgvector's type and operator are named through the extension's own schema, found at each
# call (the function's search_path is pg_catalog only), in dynamic SQL: without the extension that
# branch is never planned.
RECALL_DISCOVER_HYBRID: Final[LiteralString] = """
    CREATE FUNCTION {schema}.recall_discover_hybrid(
        terms text[], uk text, sk text, pk text, rk text, cap integer, pool integer, scan integer, q real[]
    ) RETURNS TABLE (
        id bigint, source_id text, revision text, title text, size_bytes bigint, lexical_rank integer,
        embedding bytea, similarity double precision
    )
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
        AS $$
        #variable_conflict use_column
        DECLARE
            t text := {schema}.current_tenant();
            lexical bigint[];
            newest bigint[];
            ext text;
        BEGIN
            IF t IS NULL THEN
                RETURN;
            END IF;
            SELECT coalesce(array_agg(s.id ORDER BY d.ord), ARRAY[]::bigint[]) INTO lexical
                FROM {schema}.recall_discover(terms, uk, sk, pk, rk, cap, pool)
                    WITH ORDINALITY AS d(source_id, revision, title, size_bytes, score, ord)
                JOIN {schema}.recall_sources AS s ON s.tenant_key = t AND s.source_id = d.source_id;
            SELECT coalesce(array_agg(n.id), ARRAY[]::bigint[]) INTO newest FROM (
                SELECT s.id FROM {schema}.recall_sources AS s
                WHERE s.tenant_key = t AND (s.user_key IS NULL OR s.user_key = uk)
                    AND (s.session_key IS NULL OR s.session_key = sk)
                    AND (s.project_key IS NULL OR s.project_key = pk)
                    AND (s.repository_key IS NULL OR s.repository_key = rk)
                    AND EXISTS (SELECT 1 FROM {schema}.recall_vectors AS v WHERE v.id = s.id)
                ORDER BY s.id DESC LIMIT scan) AS n;
            IF q IS NOT NULL THEN
                SELECT ns.nspname INTO ext FROM pg_extension AS e
                    JOIN pg_namespace AS ns ON ns.oid = e.extnamespace
                WHERE e.extname = 'vector'
                    AND EXISTS (SELECT 1 FROM pg_attribute AS a
                        WHERE a.attrelid = '{schema}.recall_vectors'::regclass
                            AND a.attname = 'embedding_pgv' AND NOT a.attisdropped);
            END IF;
            IF ext IS NOT NULL THEN
                RETURN QUERY EXECUTE format(
                    'SELECT s.id, s.source_id::text, s.revision::text, s.title, s.size_bytes, '
                    'array_position($1, s.id), CASE WHEN v.embedding_pgv IS NULL THEN v.embedding END, '
                    '1 - (v.embedding_pgv OPERATOR(%1$I.<=>) $3::%1$I.vector)::double precision '
                    'FROM {schema}.recall_sources AS s '
                    'LEFT JOIN {schema}.recall_vectors AS v ON v.id = s.id '
                    'WHERE s.id = ANY ($1 || $2) AND s.tenant_key = $4', ext)
                    USING lexical, newest, q, t;
            ELSE
                RETURN QUERY
                    SELECT s.id, s.source_id::text, s.revision::text, s.title, s.size_bytes,
                        array_position(lexical, s.id), v.embedding, NULL::double precision
                    FROM {schema}.recall_sources AS s
                    LEFT JOIN {schema}.recall_vectors AS v ON v.id = s.id
                    WHERE s.id = ANY (lexical || newest) AND s.tenant_key = t;
            END IF;
        END $$
"""
