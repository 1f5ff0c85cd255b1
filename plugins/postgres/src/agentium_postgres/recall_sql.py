r"""The recall store's statements and how discovery ranks (the search itself: ``recall_discover``).

Queries never reach PostgreSQL as syntax. A query becomes at most 32 words
(:func:`~agentium_harness.plugin_api.query_terms`: lower-cased ``\w+``
tokens), each sent as a bound parameter, double-quoted, to
``websearch_to_tsquery('simple', ...)``: a quoted word is a plain lexeme to
it, so ``OR``, ``-``, ``"``, ``*``, ``:`` or ``<->`` in a user's text are
matched as words or dropped, never obeyed.

Discovery is one call of the schema's ``recall_discover`` function
(:mod:`agentium_postgres.schema`), which runs as the schema's owner, confined
to the tenant of the caller's transaction, so that PostgreSQL may use the GIN
index (row-level security would forbid it for the application role, ``@@``
not being leakproof). Each of its statements is planned with its values, so
a rare word goes through the GIN index and a common one through the newest
rows; planning needs the table's statistics (``ANALYZE``, which autovacuum
runs; after a bulk index, run it at once).

Ranking is bounded by ``max_ranked_matches``, not by the index's size:

1. **probe**: for each term, count its visible matches up to the cap (a
   ``LIMIT`` inside; the GIN index finds them);
2. **weights**: a term with ``n`` matches weighs ``ln(1 + cap / n)``: a rare
   word (the one that finds evidence) weighs several times a common one,
   a term with no match is dropped;
3. **candidates**: for each term its newest ``cap / terms`` visible matches
   (at least ``max_candidates``), so a rare word's matches are always all
   ranked however many newer sources a common word matches;
4. **score**: the sum of the weights of the terms a source contains, plus
   ``ts_rank_cd`` scaled down as a tie-breaker (term frequency, proximity).

The scope filter (tenant, and each owner key NULL or equal to the scope's)
is inside every statement, before every ``LIMIT``, so a foreign source can
neither be returned nor take a place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, LiteralString

import attrs

from agentium_harness.plugin_api import Scope, encode_segment

if TYPE_CHECKING:
    from psycopg import sql

__all__ = [
    "UNINDEXED_WINDOW",
    "SourceRow",
    "insert_sources",
    "scope_params",
    "search_words",
    "term_query",
    "unindexed_sql",
]

#: Characters of a source's text that are indexed for search (a tsvector holds at most 1 MB).
INDEXED_CHARS: Final = 262_144

_WORD: Final = re.compile(r"\w+")

#: How many of a session's newest indexed seqs below ``end_seq`` one ``unindexed_groups`` reads
#: (written out in the statement below, which is constant text).
UNINDEXED_WINDOW: Final = 4096

# The lowest gaps among a session's newest indexed seqs from %(start)s below %(end)s: the window's seqs
# and %(end)s as edges; each edge's gap runs from the previous edge + 1 (from %(start)s for the lowest
# edge when the window reaches back to it, i.e. holds fewer seqs than its size; none otherwise) to
# itself - 1. %(start)s is where the session's groups begin (after retention erased the oldest).
# At most %(max)s gaps, each cut to %(max)s seqs, are expanded: bounded whatever the gaps' sizes.
_UNINDEXED: Final[LiteralString] = (
    "WITH w AS (SELECT seq FROM {s}.recall_sources WHERE tenant_key = %(t)s AND user_key = %(u)s "
    "AND session_key = %(s)s AND kind = 'group' AND seq >= %(start)s AND seq < %(end)s "
    "ORDER BY seq DESC LIMIT 4096), "
    "reach AS (SELECT CASE WHEN count(*) < 4096 THEN %(start)s - 1 END AS floor FROM w), "
    "edges AS (SELECT x.seq, lag(x.seq) OVER (ORDER BY x.seq) AS prev "
    "FROM (SELECT seq FROM w UNION ALL SELECT %(end)s::bigint) AS x), "
    "gaps AS (SELECT g.a, g.b FROM (SELECT coalesce(e.prev, r.floor, e.seq - 1) + 1 AS a, e.seq - 1 AS b "
    "FROM edges AS e CROSS JOIN reach AS r) AS g WHERE g.a <= g.b ORDER BY g.a LIMIT %(max)s) "
    "SELECT n FROM gaps, generate_series(gaps.a, least(gaps.b, gaps.a + %(max)s - 1)) AS n "
    "ORDER BY n LIMIT %(max)s"
)


def unindexed_sql(schema: str) -> sql.Composed:
    """The statement behind ``unindexed_groups`` (named: ``t``, ``u``, ``s``, ``start``, ``end``, ``max``)."""
    # Imported here, not at module level: listing the plugin must not load the client library.
    from psycopg import sql

    return sql.SQL(_UNINDEXED).format(s=sql.Identifier(schema))


def search_words(text: str) -> str:
    r"""The text PostgreSQL indexes for ``text``: its lower-cased ``\w+`` words, space-separated.

    The same tokenization as :func:`~agentium_harness.plugin_api.query_terms`,
    so a word a query can name is a word the index holds (PostgreSQL's own
    parser would read ``notes.md.plum`` as one file name, not three words).
    """
    return " ".join(_WORD.findall(text[: INDEXED_CHARS * 2].lower()))[:INDEXED_CHARS]


def term_query(term: str) -> str:
    """The ``websearch_to_tsquery`` text of one term: the word, double-quoted (a plain lexeme)."""
    # A term is a \\w+ token: it holds no quote, so quoting it cannot be escaped from.
    return f'"{term}"'


def scope_params(scope: Scope) -> dict[str, Any]:
    """The named parameters of the visibility filter: the scope's key segments (``None`` when absent)."""
    return {
        "tenant": encode_segment(scope.tenant),
        "user": encode_segment(scope.user),
        "session": encode_segment(scope.session),
        "project": None if scope.project is None else encode_segment(scope.project),
        "repository": None if scope.repository is None else encode_segment(scope.repository),
    }


@attrs.frozen(slots=True)
class SourceRow:
    """One ``recall_sources`` row to write: owner key segments, text, and a group's ``seq``."""

    source_id: str
    kind: str
    tenant_key: str
    user_key: str | None
    session_key: str | None
    project_key: str | None
    repository_key: str | None
    revision: str
    title: str
    body: str
    seq: int | None = None


_COLUMNS: Final[tuple[LiteralString, ...]] = (
    "source_id",
    "kind",
    "tenant_key",
    "user_key",
    "session_key",
    "project_key",
    "repository_key",
    "revision",
    "title",
    "size_bytes",
    "seq",
    "body",
)


async def insert_sources(conn: Any, schema: str, rows: Sequence[SourceRow]) -> int:
    """Write ``rows`` (one tenant) inside the caller's transaction; return how many were new or changed.

    A row stored at the same revision is left alone; one at another revision
    is deleted and inserted again, so a changed source gets a new (larger) id
    and counts as the newest for discovery's newest-first cap.
    """
    if not rows:
        return 0
    from psycopg import sql

    s = sql.Identifier(schema)
    ids = [r.source_id for r in rows]
    revisions = [r.revision for r in rows]
    await conn.execute(
        sql.SQL(
            "DELETE FROM {s}.recall_sources AS s "
            "USING unnest(%s::text[], %s::text[]) AS n(source_id, revision) "
            "WHERE s.tenant_key = %s AND s.source_id = n.source_id AND s.revision <> n.revision"
        ).format(s=s),
        (ids, revisions, rows[0].tenant_key),
    )
    columns = [[getattr(r, c) if c != "size_bytes" else len(r.body.encode()) for r in rows] for c in _COLUMNS]
    titles = [search_words(r.title) for r in rows]
    bodies = [search_words(r.body) for r in rows]
    names = sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS)
    cursor = await conn.execute(
        sql.SQL(
            "INSERT INTO {s}.recall_sources ({columns}, tsv) "
            "SELECT {picked}, setweight(to_tsvector('simple', n.title_words), 'A') "
            "|| to_tsvector('simple', n.body_words) "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::text[]) "
            "AS n({columns}, title_words, body_words) "
            "ON CONFLICT (tenant_key, source_id) DO NOTHING RETURNING id"
        ).format(s=s, columns=names, picked=sql.SQL(", ").join(sql.Identifier("n", c) for c in _COLUMNS)),
        (*columns, titles, bodies),
    )
    return len(await cursor.fetchall())
