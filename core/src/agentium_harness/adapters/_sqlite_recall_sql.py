"""The SQL of the SQLite recall store: schema, the discovery statement and row writes.

Kept apart from :mod:`agentium_harness.adapters.sqlite_recall` (sessions,
threads, validation, decoding). Every function here runs in a worker thread,
inside the caller's connection. Identifiers, query terms and limits are always
bound as SQL parameters; the only text built at run time is the discovery
statement's shape (one fixed sub-select per query term), never its values.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from .._ports.recall import SourceOwner
from .._scope import Scope

__all__ = [
    "OWNER_COLUMNS",
    "ROWID_SPAN_SQL",
    "SCHEMA",
    "TERM_PROBE_SQL",
    "SourceRow",
    "common_term_weight",
    "discovery_sql",
    "discovery_params",
    "fts_phrase",
    "insert_source",
    "ranked_sources",
    "scope_params",
]

#: Owner columns of ``recall_sources``, in :class:`SourceOwner` field order.
OWNER_COLUMNS: Final = "tenant_id, user_id, session_id, project_id, repository_id"

#: Every recall table is prefixed ``recall_``, so the store can share a file
#: with the SQLite archive and session store (each creates only its own tables).
SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS recall_meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    )
    """,
    # One narrow row per source: what discovery, validation and the scope
    # filter read. NULL owner fields are absent (they do not narrow). The
    # bulky text and canonical bytes live in recall_texts, so ranking many
    # matches touches few pages.
    """
    CREATE TABLE IF NOT EXISTS recall_sources (
        id INTEGER PRIMARY KEY,
        source_id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('document', 'group')),
        tenant_id TEXT NOT NULL,
        user_id TEXT,
        session_id TEXT,
        project_id TEXT,
        repository_id TEXT,
        revision TEXT NOT NULL,
        title TEXT NOT NULL,
        size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
        seq INTEGER CHECK (seq >= 0),
        receipt_digest TEXT,
        CHECK ((kind = 'group') = (seq IS NOT NULL AND receipt_digest IS NOT NULL))
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS recall_sources_groups
        ON recall_sources (tenant_id, user_id, session_id, seq) WHERE kind = 'group'
    """,
    # The text (and, for groups, the canonical bytes) of each source, same id.
    """
    CREATE TABLE IF NOT EXISTS recall_texts (
        id INTEGER PRIMARY KEY REFERENCES recall_sources (id) ON DELETE CASCADE,
        title TEXT NOT NULL,
        text TEXT NOT NULL,
        data BLOB
    )
    """,
    # External content: the text is stored once, in recall_texts; the
    # triggers keep the index in step with every insert, update and delete.
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(
        title, text, content = 'recall_texts', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_ai AFTER INSERT ON recall_texts BEGIN
        INSERT INTO recall_fts (rowid, title, text) VALUES (new.id, new.title, new.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_ad AFTER DELETE ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_au AFTER UPDATE OF title, text ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text)
            VALUES ('delete', old.id, old.title, old.text);
        INSERT INTO recall_fts (rowid, title, text) VALUES (new.id, new.title, new.text);
    END
    """,
    # Deleting a source deletes its text (and so its index entry) in the same
    # statement, whether or not foreign keys are enforced on the connection.
    """
    CREATE TRIGGER IF NOT EXISTS recall_sources_ad AFTER DELETE ON recall_sources BEGIN
        DELETE FROM recall_texts WHERE id = old.id;
    END
    """,
)

# Visibility (SourceOwner.visible_to) as SQL: tenant equal, every other owner
# field NULL or equal to the scope's. A scope field that is None binds NULL,
# and "column = NULL" is never true, so only NULL columns pass for it.
_SCOPE_FILTER: Final = (
    "s.tenant_id = :tenant"
    " AND (s.user_id IS NULL OR s.user_id = :user)"
    " AND (s.session_id IS NULL OR s.session_id = :session)"
    " AND (s.project_id IS NULL OR s.project_id = :project)"
    " AND (s.repository_id IS NULL OR s.repository_id = :repository)"
)

# Title matches weigh twice as much as body matches.
_BM25: Final = "bm25(recall_fts, 2.0, 1.0)"


def fts_phrase(term: str) -> str:
    """``term`` as one quoted FTS5 string: inside quotes nothing is syntax (quotes are doubled)."""
    return '"' + term.replace('"', '""') + '"'


#: Probe of one term's frequency: how many of its newest matches (up to the
#: limit) there are and the smallest rowid among them. FTS5 stops after the
#: limit, so the probe costs at most that many matches, whatever the index size.
TERM_PROBE_SQL: Final = (
    "SELECT count(*), min(rid) FROM ("
    "SELECT rowid AS rid FROM recall_fts WHERE recall_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
)

#: The rowid span of the index, an O(log n) stand-in for the number of rows,
#: and the largest rowid. Each min/max is its own sub-select: SQLite answers a
#: lone min() or max() from the end of the b-tree, but scans every row when
#: one query holds both.
ROWID_SPAN_SQL: Final = (
    "SELECT coalesce(hi - lo + 1, 0), coalesce(hi, 0) FROM ("
    "SELECT (SELECT max(id) FROM recall_sources) AS hi, (SELECT min(id) FROM recall_sources) AS lo)"
)


def discovery_sql(weights: Sequence[float | None]) -> str:
    """The discovery statement for one term per item of ``weights`` (at least one).

    Each term gets its own sub-select: the term's newest visible matches
    (rowid descending, so FTS5 stops early), at most ``:per_term`` of them,
    each with the term's score contribution: its bm25 part when its weight is
    ``None`` (a rare term), else the constant ``:w<i>`` (a common term, whose
    bm25 would count every one of its matches to find its idf). The scope
    filter is inside every sub-select, before its LIMIT, so foreign sources
    never take a place. Summing the contributions per source gives its bm25
    for the whole OR query (bm25 is a sum over phrases); it is exact when no
    term is common. Only ids, revisions, titles, sizes and owners are read,
    never the text.
    """
    if not weights:
        raise ValueError("discovery needs at least one term")
    parts = []
    for i, weight in enumerate(weights):
        score = _BM25 if weight is None else f":w{i}"
        # Only constant text and the loop index go into the statement; values are parameters.
        parts.append(
            "SELECT * FROM ("  # noqa: S608
            f"SELECT recall_fts.rowid AS rid, {score} AS score "
            "FROM recall_fts JOIN recall_sources AS s ON s.id = recall_fts.rowid "
            f"WHERE recall_fts MATCH :t{i} AND {_SCOPE_FILTER} "
            "ORDER BY recall_fts.rowid DESC LIMIT :per_term)"
        )
    union = " UNION ALL ".join(parts)
    return (
        f"SELECT s.source_id, s.revision, s.title, s.size_bytes, {OWNER_COLUMNS}, m.total "  # noqa: S608
        f"FROM (SELECT rid, sum(score) AS total FROM ({union}) GROUP BY rid) AS m "
        "JOIN recall_sources AS s ON s.id = m.rid "
        "ORDER BY m.total, s.id DESC LIMIT :max_candidates"
    )


def common_term_weight(probe: int, probed: int, min_rowid: int, max_rowid: int, span: int) -> float | None:
    """``None`` for a rare term (fewer than ``probe`` matches: bm25 is cheap), else its score weight.

    For a common term the number of matching rows is estimated from how
    densely its newest ``probe`` matches fill the rowid range, and the weight
    is bm25's contribution of one occurrence in a row of average length:
    minus the idf, ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6 as FTS5
    floors it (bm25 scores are negative, lower is better).
    """
    if probed < probe:
        return None
    density = probed / max(1, max_rowid - min_rowid + 1)
    n = min(float(span), density * span)
    idf = math.log((span - n + 0.5) / (n + 0.5)) if span > 0 else 0.0
    return -max(idf, 1e-6)


def ranked_sources(
    conn: sqlite3.Connection,
    scope: Scope,
    terms: Sequence[str],
    max_candidates: int,
    max_ranked: int,
    check: Callable[[], None],
) -> list[tuple[Any, ...]]:
    """The best ``max_candidates`` visible sources for ``terms``, ranked as the store's docs describe.

    Rows are ``(source_id, revision, title, size_bytes, <5 owner columns>,
    bm25 total)``, best (lowest total) first. ``check`` runs between steps
    (it raises to stop). The frequency probes and the ranking statement run
    in one read transaction, so they see the same index.
    """
    per_term = max(max_candidates, -(-max_ranked // len(terms)))
    conn.execute("BEGIN")
    try:
        span, max_rowid = conn.execute(ROWID_SPAN_SQL).fetchone()
        weights: list[float | None] = []
        for term in terms:
            check()
            probed, min_rowid = conn.execute(TERM_PROBE_SQL, (fts_phrase(term), max_ranked)).fetchone()
            weights.append(common_term_weight(max_ranked, probed, min_rowid or 0, max_rowid, span))
        check()
        params = discovery_params(scope, terms, weights, per_term, max_candidates)
        return conn.execute(discovery_sql(weights), params).fetchall()
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def scope_params(scope: Scope) -> dict[str, str | None]:
    """The named parameters of the scope filter."""
    return {
        "tenant": scope.tenant,
        "user": scope.user,
        "session": scope.session,
        "project": scope.project,
        "repository": scope.repository,
    }


def discovery_params(
    scope: Scope, terms: Sequence[str], weights: Sequence[float | None], per_term: int, max_candidates: int
) -> dict[str, str | int | float | None]:
    """Every parameter of :func:`discovery_sql`: scope, one quoted phrase per term, weights, limits."""
    params: dict[str, str | int | float | None] = dict(scope_params(scope))
    params.update({f"t{i}": fts_phrase(term) for i, term in enumerate(terms)})
    params.update({f"w{i}": w for i, w in enumerate(weights) if w is not None})
    params["per_term"] = per_term
    params["max_candidates"] = max_candidates
    return params


@attrs.frozen(slots=True)
class SourceRow:
    """One ``recall_sources`` row to write (groups fill the last three fields)."""

    source_id: str
    kind: str
    owner: SourceOwner
    revision: str
    title: str
    text: str
    seq: int | None = None
    data: bytes | None = None
    receipt_digest: str | None = None


def insert_source(conn: sqlite3.Connection, row: SourceRow) -> bool:
    """Write ``row`` inside the caller's transaction unless an equal revision is stored; True if written.

    A stored row at another revision is deleted and the new one inserted with
    a new (larger) rowid, so a changed source counts as the newest for
    discovery's newest-first cap.
    """
    found = conn.execute("SELECT id, revision FROM recall_sources WHERE source_id = ?", (row.source_id,))
    existing = found.fetchone()
    if existing is not None:
        if existing[1] == row.revision:
            return False
        conn.execute("DELETE FROM recall_sources WHERE id = ?", (existing[0],))
    owner = row.owner
    cursor = conn.execute(
        # OWNER_COLUMNS is a constant; every value is a parameter.
        f"INSERT INTO recall_sources (source_id, kind, {OWNER_COLUMNS}, revision, title, size_bytes, "  # noqa: S608
        "seq, receipt_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.source_id,
            row.kind,
            owner.tenant,
            owner.user,
            owner.session,
            owner.project,
            owner.repository,
            row.revision,
            row.title,
            len(row.text.encode("utf-8")),
            row.seq,
            row.receipt_digest,
        ),
    )
    conn.execute(
        "INSERT INTO recall_texts (id, title, text, data) VALUES (?, ?, ?, ?)",
        (cursor.lastrowid, row.title, row.text, row.data),
    )
    return True
