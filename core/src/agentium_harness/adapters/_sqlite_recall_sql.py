"""The SQL of the SQLite recall store: schema and the discovery statement.

Kept apart from :mod:`agentium_harness.adapters.sqlite_recall` (sessions,
threads, validation, decoding); the row writes, the v1 migration and erasure
are in :mod:`._sqlite_recall_writes`. Every function here runs in a worker thread,
inside the caller's connection. Identifiers, query terms and limits are always
bound as SQL parameters; the only text built at run time is the discovery
statement's shape (one fixed sub-select per query term), never its values.

Schema version 2 (version 1 is migrated in place, see :func:`migrate_v1`):
the index stems words (FTS5's ``porter`` tokenizer over ``unicode61``) and
has a third column, ``context``: for an archived group, the last message line
of the group before it and the first of the group after it in the same
session (each cut to :data:`CONTEXT_LINE_BYTES`), so a turn such as "Yes, last
week!" is found by the question it answers. The context is indexed only:
reads return the group's own text, and revisions do not depend on it.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

from .._scope import Scope, SessionKey
from ._sqlite_bounds import (
    DIGEST_CHARS,
    ID_CHARS,
    INT_CHARS,
    JSON_BYTES,
    SOURCE_ID_CHARS,
    bounded_select,
    oversize,
)

__all__ = [
    "CANDIDATE_COLUMNS",
    "CONTEXT_LINE_BYTES",
    "OWNER_COLUMNS",
    "ROWID_SPAN_SQL",
    "SCHEMA",
    "SCOPE_FILTER",
    "SEEK_SQL",
    "checked_rows",
    "erased_groups",
    "TERM_PROBE_SQL",
    "common_term_weight",
    "discovery_sql",
    "discovery_params",
    "fts_phrase",
    "probe_phrase",
    "ranked_sources",
    "scope_params",
    "term_idf",
    "term_matches",
]

#: Owner columns of ``recall_sources``, in :class:`SourceOwner` field order.
OWNER_COLUMNS: Final = "tenant_id, user_id, session_id, project_id, repository_id"


def candidate_columns(*extra: str) -> str:
    """The select list of a discovery row: the bounded candidate columns, ``extra``, the over column.

    The candidate columns are ``source_id, revision, title, size_bytes`` and
    the five owner columns, each bounded (:mod:`._sqlite_bounds`): a value
    longer than any the store writes comes back NULL, unread, and the last
    column names it (see :func:`checked_rows`).
    """
    return bounded_select(
        (
            ("s.source_id", SOURCE_ID_CHARS),
            ("s.revision", DIGEST_CHARS),
            ("s.title", JSON_BYTES),
            ("s.size_bytes", INT_CHARS),
            *((f"s.{column}", ID_CHARS) for column in OWNER_COLUMNS.split(", ")),
            *((column, None) for column in extra),
        )
    )


#: :func:`candidate_columns` with the source's rowid, for a lookup of sources by id.
CANDIDATE_COLUMNS: Final = candidate_columns("s.id")

_SEEK_BOUNDS: Final = (("s.seq", INT_CHARS), ("s.receipt_digest", DIGEST_CHARS), ("t.data", JSON_BYTES))
#: An indexed group's seq, receipt digest and canonical bytes, bounded, then the over column.
SEEK_SQL: Final = (
    f"SELECT {bounded_select(_SEEK_BOUNDS)} "  # noqa: S608
    "FROM recall_sources AS s JOIN recall_texts AS t ON t.id = s.id "
    "WHERE s.kind = 'group' AND s.tenant_id = ? AND s.user_id = ? AND s.session_id = ? "
    "AND s.seq >= ? ORDER BY s.seq LIMIT ?"
)


def checked_rows(
    rows: Sequence[Sequence[Any]], what: str, error: Callable[[str], Exception] = sqlite3.DataError
) -> list[tuple[Any, ...]]:
    """``rows`` without their last column (the over column), once none names a value over its bound.

    A row that does raises ``error`` (the store's typed error; a
    ``sqlite3.DataError`` becomes its ``storage_error``, ``SQLiteRecallError``):
    the value was not read. ``what`` names the rows in the message.
    """
    for row in rows:
        if row[-1] is not None:
            raise error(oversize(f"sqlite recall store: {what}", row[-1]))
    return [tuple(row[:-1]) for row in rows]


def erased_groups(taken: Sequence[tuple[Any, ...]]) -> tuple[list[tuple[SessionKey, int, str]], int]:
    """The groups of erase_sources rows as ``(key, seq, digest)``, and how many are damaged.

    A revision not of a digest's exact form was not read (it came back ``""``) and is reported as
    ``""``. A group whose owner ids or seq were over theirs (not read) cannot be named: it is
    counted as damaged (see ``_sqlite_recall_writes._ERASED_COLUMNS``).
    """
    groups = [
        (SessionKey(t, u, s), seq, rev or "")
        for kind, t, u, s, seq, rev, bad in taken
        if kind == "group" and not bad
    ]
    return groups, sum(1 for row in taken if row[0] == "group" and row[6])


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
    # The text (and, for groups, the canonical bytes) of each source, same id,
    # and the neighbouring context indexed with a group (empty for documents).
    """
    CREATE TABLE IF NOT EXISTS recall_texts (
        id INTEGER PRIMARY KEY REFERENCES recall_sources (id) ON DELETE CASCADE,
        title TEXT NOT NULL,
        text TEXT NOT NULL,
        data BLOB,
        context TEXT NOT NULL DEFAULT ''
    )
    """,
    # External content: the text is stored once, in recall_texts; the
    # triggers keep the index in step with every insert, update and delete.
    # Words are stemmed (porter), so "lives" finds "live" and "living".
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(
        title, text, context, content = 'recall_texts', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_ai AFTER INSERT ON recall_texts BEGIN
        INSERT INTO recall_fts (rowid, title, text, context)
            VALUES (new.id, new.title, new.text, new.context);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_ad AFTER DELETE ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text, context)
            VALUES ('delete', old.id, old.title, old.text, old.context);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_texts_au AFTER UPDATE OF title, text, context ON recall_texts BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, title, text, context)
            VALUES ('delete', old.id, old.title, old.text, old.context);
        INSERT INTO recall_fts (rowid, title, text, context)
            VALUES (new.id, new.title, new.text, new.context);
    END
    """,
    # Deleting a source deletes its text (and so its index entry) in the same
    # statement, whether or not foreign keys are enforced on the connection.
    """
    CREATE TRIGGER IF NOT EXISTS recall_sources_ad AFTER DELETE ON recall_sources BEGIN
        DELETE FROM recall_texts WHERE id = old.id;
    END
    """,
    # Hybrid recall: one vector per source (little-endian float32, unit length),
    # of the one embedding model recall_meta names ('vector_model'). Keyed by the
    # source row, so a changed source (a new row) or a deleted one loses its old
    # vector in the same statement. Added without a version bump: a file from
    # before simply has no vectors yet.
    """
    CREATE TABLE IF NOT EXISTS recall_vectors (
        id INTEGER PRIMARY KEY REFERENCES recall_sources (id) ON DELETE CASCADE,
        vector BLOB NOT NULL
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS recall_sources_ad_vectors AFTER DELETE ON recall_sources BEGIN
        DELETE FROM recall_vectors WHERE id = old.id;
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

#: The scope filter of every statement that lists sources (``s`` is ``recall_sources``).
SCOPE_FILTER: Final = _SCOPE_FILTER

# Title matches weigh twice as much as body matches, neighbouring context half.
_BM25: Final = "bm25(recall_fts, 2.0, 1.0, 0.5)"

#: How much of a neighbouring group's line goes into a group's context (UTF-8 bytes).
CONTEXT_LINE_BYTES: Final = 512

# FTS5 floors a term's idf here (a word in most rows still counts a little).
_MIN_IDF: Final = 1e-6


def fts_phrase(term: str) -> str:
    """``term`` as one quoted FTS5 string: inside quotes nothing is syntax (quotes are doubled)."""
    return '"' + term.replace('"', '""') + '"'


def probe_phrase(term: str) -> str:
    """``term`` as a quoted FTS5 string restricted to the ``title`` and ``text`` columns."""
    return "{title text} : " + fts_phrase(term)


#: Probe of one term's frequency: how many of its newest matches (up to the
#: limit) there are and the smallest rowid among them. FTS5 stops after the
#: limit, so the probe costs at most that many matches, whatever the index size.
#: Each term is probed twice: in every column, which decides whether its
#: bm25 is cheap (bm25 counts every match of the phrase), and in the title
#: and text only (:func:`probe_phrase`), for its weight in the relevance
#: floor: a group's words also sit in its neighbours' context, and counting
#: those would make every word look three times as common as it is.
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
    bm25 would count every one of its matches to find its idf), and the
    term's idf ``:q<i>``. The scope filter is inside every sub-select, before
    its LIMIT, so foreign sources never take a place. Summing the
    contributions per source gives its bm25 for the whole OR query (bm25 is a
    sum over phrases; exact when no term is common); summing the idfs gives
    the query weight the source matches, and a source below
    ``:min_matched`` is dropped before the LIMIT (the relevance floor). Only
    ids, revisions, titles, sizes and owners are read, never the text.
    """
    if not weights:
        raise ValueError("discovery needs at least one term")
    parts = []
    for i, weight in enumerate(weights):
        score = _BM25 if weight is None else f":w{i}"
        # Only constant text and the loop index go into the statement; values are parameters.
        parts.append(
            "SELECT * FROM ("  # noqa: S608
            f"SELECT recall_fts.rowid AS rid, {score} AS score, :q{i} AS weight "
            "FROM recall_fts JOIN recall_sources AS s ON s.id = recall_fts.rowid "
            f"WHERE recall_fts MATCH :t{i} AND {_SCOPE_FILTER} "
            "ORDER BY recall_fts.rowid DESC LIMIT :per_term)"
        )
    union = " UNION ALL ".join(parts)
    return (
        f"SELECT {candidate_columns('m.total', 'm.matched', 's.id')} "  # noqa: S608
        f"FROM (SELECT rid, sum(score) AS total, sum(weight) AS matched FROM ({union}) GROUP BY rid "
        "HAVING sum(weight) >= :min_matched) AS m "
        "JOIN recall_sources AS s ON s.id = m.rid "
        "ORDER BY m.total, s.id DESC LIMIT :max_candidates"
    )


def term_matches(probe: int, probed: int, min_rowid: int, max_rowid: int, span: int) -> float:
    """How many rows a term matches: exact below ``probe``, else estimated.

    A rare term's count is exact (fewer than ``probe`` matches, all counted);
    a common one's is estimated from how densely its newest ``probe``
    matches fill the rowid range, out of ``span`` (the index's rowid span).
    """
    if probed < probe:
        return float(probed)
    density = probed / max(1, max_rowid - min_rowid + 1)
    return min(float(span), density * span)


def term_idf(matches: float, span: int) -> float:
    """A term's weight in the relevance floor: ``ln(1 + (N - n + 0.5) / (n + 0.5))``, always positive.

    The smoothed idf (as Lucene's BM25 has it), so a word found in every row
    still weighs a little and no weight is negative. A word the index has
    never seen weighs as a word found once: it counts against a source that
    lacks it, but a typo does not outweigh every other word.
    """
    n = max(1.0, matches)
    total = max(float(span), n)
    return math.log(1.0 + (total - n + 0.5) / (n + 0.5))


def common_term_weight(probe: int, probed: int, min_rowid: int, max_rowid: int, span: int) -> float | None:
    """``None`` for a rare term (fewer than ``probe`` matches: bm25 is cheap), else its score weight.

    For a common term the weight is bm25's contribution of one occurrence in
    a row of average length: minus the idf as FTS5 computes it,
    ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6 (bm25 scores are
    negative, lower is better), with ``n`` from :func:`term_matches`.
    """
    if probed < probe:
        return None
    n = term_matches(probe, probed, min_rowid, max_rowid, span)
    idf = math.log((span - n + 0.5) / (n + 0.5)) if span > 0 else 0.0
    return -max(idf, _MIN_IDF)


def ranked_sources(
    conn: sqlite3.Connection,
    scope: Scope,
    terms: Sequence[str],
    max_candidates: int,
    max_ranked: int,
    check: Callable[[], None],
    min_relevance: float = 0.0,
) -> list[tuple[Any, ...]]:
    """The best ``max_candidates`` visible sources for ``terms``, ranked as the store's docs describe.

    Rows are ``(source_id, revision, title, size_bytes, <5 owner columns>,
    bm25 total, matched idf, rowid)``, best (lowest total) first. A source
    must match terms holding at least ``min_relevance`` of the query's idf
    (the relevance floor; 0 keeps every match). ``check`` runs between steps
    (it raises to stop). The frequency probes and the ranking statement run
    in one read transaction, so they see the same index.
    """
    conn.execute("BEGIN")
    try:
        return ranked_in_transaction(conn, scope, terms, max_candidates, max_ranked, check, min_relevance)[0]
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def ranked_in_transaction(
    conn: sqlite3.Connection,
    scope: Scope,
    terms: Sequence[str],
    max_candidates: int,
    max_ranked: int,
    check: Callable[[], None],
    min_relevance: float = 0.0,
) -> tuple[list[tuple[Any, ...]], float]:
    """:func:`ranked_sources` inside the caller's transaction, with the query's total idf.

    The total lets a caller that ranked with no floor apply it itself: a row
    passes ``min_relevance`` when its matched idf is at least that share of it.
    """
    span, max_rowid = conn.execute(ROWID_SPAN_SQL).fetchone()
    present: list[tuple[str, float | None, float]] = []
    total_idf = 0.0
    for term in terms:
        check()
        # Two bounded probes: in title and text, for the term's weight in the floor;
        # in every column, for whether bm25 (which counts every match) stays cheap.
        own, own_min = conn.execute(TERM_PROBE_SQL, (probe_phrase(term), max_ranked)).fetchone()
        idf = term_idf(term_matches(max_ranked, own, own_min or 0, max_rowid, span), span)
        total_idf += idf
        probed, min_rowid = conn.execute(TERM_PROBE_SQL, (fts_phrase(term), max_ranked)).fetchone()
        if probed:  # a term with no match anywhere only weighs in the floor
            weight = common_term_weight(max_ranked, probed, min_rowid or 0, max_rowid, span)
            present.append((term, weight, idf))
    if not present:
        return [], total_idf
    check()
    per_term = max(max_candidates, -(-max_ranked // len(present)))
    # A hair under the exact share, so a source matching every term passes at 1.0.
    min_matched = min_relevance * total_idf * (1 - 1e-9)
    params = discovery_params(scope, present, per_term, max_candidates, min_matched)
    rows = conn.execute(discovery_sql([w for _, w, _ in present]), params).fetchall()
    return checked_rows(rows, "a source row discovery found"), total_idf


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
    scope: Scope,
    terms: Sequence[tuple[str, float | None, float]],
    per_term: int,
    max_candidates: int,
    min_matched: float,
) -> dict[str, str | int | float | None]:
    """Every parameter of :func:`discovery_sql`: scope, per term (phrase, weight, idf), limits, floor."""
    params: dict[str, str | int | float | None] = dict(scope_params(scope))
    for i, (term, weight, idf) in enumerate(terms):
        params[f"t{i}"] = fts_phrase(term)
        params[f"q{i}"] = idf
        if weight is not None:
            params[f"w{i}"] = weight
    params["per_term"] = per_term
    params["max_candidates"] = max_candidates
    params["min_matched"] = min_matched
    return params
