"""Vectors in the SQLite recall store: storage, the model check and hybrid discovery.

Vectors live in ``recall_vectors`` beside the index: one little-endian
float32 blob per source row, unit length, all of one embedding model, named
in ``recall_meta`` (``vector_model``, as ``"<model id>/<dimension>"``). No
SQLite extension is needed: similarity is computed here, over a bounded
candidate set, with NumPy when it is installed and plain Python otherwise.

Hybrid discovery (:func:`hybrid_rows`), in one read transaction:

1. **Lexical pool.** The same ranking as lexical discovery
   (:func:`~._sqlite_recall_sql.ranked_in_transaction`, at the same cost
   bound ``max_ranked``), without the floor, its best ``4 * depth`` rows.
2. **Vector candidates.** The vectors of that pool and of the scope's newest
   ``max_vector_scan`` sources that have one (rowid order, scope filter in the
   statement before the limit). At most ``4 * depth + max_vector_scan``
   vectors are read and scored, whatever the index size: that is the bound,
   and its price is that an old source sharing no word with the query is
   found by its vector only while it is among the newest ``max_vector_scan``.
   Reading a vector costs about as much as ranking a lexical match (a few
   microseconds), so ``max_vector_scan`` is what hybrid discovery costs.
3. **Two rankings.** Lexical: the pool's sources that pass the relevance
   floor (``min_relevance``), by bm25. Vector: the scored sources whose
   cosine similarity is at least ``min_similarity``, most similar first. Each
   is cut to ``depth``.
4. **Fusion.** Reciprocal rank fusion
   (:func:`~agentium_harness._ports.recall.reciprocal_rank_fusion`) with
   ``k = fusion_k`` (default 20) and the vector ranking weighted
   ``vector_weight`` (default 0.5) against the lexical one's 1, both tuned
   on LoCoMo (docs/recall.md); the best ``max_candidates``. A source below both floors is never returned,
   so a question about nothing in the history still finds nothing.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Final

from .._errors import EmbeddingModelMismatchError
from .._ports.embedder import EmbeddingModel, Vector
from .._ports.recall import SourceVector, reciprocal_rank_fusion
from .._scope import Scope
from ._sqlite_bounds import ID_CHARS, VECTOR_BYTES, bounded_select, oversize
from ._sqlite_recall_sql import (
    CANDIDATE_COLUMNS,
    SCOPE_FILTER,
    checked_rows,
    ranked_in_transaction,
    scope_params,
)
from ._vectors import cosine_scores

__all__ = [
    "MODEL_KEY",
    "check_model",
    "cosine_scores",
    "hybrid_rows",
    "stored_model",
    "write_vectors",
]

#: The ``recall_meta`` key naming the model of the stored vectors.
MODEL_KEY: Final = "vector_model"

#: The longest model key (``"<model>/<dimension>"``): an id, a slash, a dimension's digits (fewer).
_MODEL_CHARS: Final = ID_CHARS + 1 + len(str(VECTOR_BYTES))

# Rowids looked up per statement (well under SQLite's variable limit).
_CHUNK: Final = 500


def stored_model(conn: sqlite3.Connection) -> str | None:
    """The model key (``"<model>/<dimension>"``) of the stored vectors, or ``None`` when there are none."""
    if conn.execute("SELECT 1 FROM recall_vectors LIMIT 1").fetchone() is None:
        return None
    # Bounded: a value changed behind the store's back is not read, nor put into a message.
    row = conn.execute(
        f"SELECT {bounded_select((('value', _MODEL_CHARS),))} FROM recall_meta WHERE key = ?",  # noqa: S608
        (MODEL_KEY,),
    ).fetchone()
    if row is not None and row[0] is None:
        raise sqlite3.DataError(oversize("sqlite recall store: the vector model key", row[1]))
    return None if row is None else str(row[0])


def check_model(conn: sqlite3.Connection, model: EmbeddingModel, path: str) -> bool:
    """Raise :class:`EmbeddingModelMismatchError` if the index holds vectors of another model.

    Returns whether the index holds vectors at all (of ``model``, then).
    """
    found = stored_model(conn)
    if found is not None and found != model.key():
        raise EmbeddingModelMismatchError(
            f"sqlite recall store: {path} holds vectors of {found}, not of {model.key()}; vectors of two "
            f"models are never mixed: configure the embedder the index was built with ({found}), or point "
            "the recall store at a new file and run `agentium recall rebuild`"
        )
    return found is not None


def write_vectors(
    conn: sqlite3.Connection, entries: Sequence[SourceVector], path: str, check: Callable[[], None]
) -> int:
    """Store each entry's vector if its source is indexed at the entry's revision; how many were stored.

    Runs inside the caller's transaction. The batch is of one model (checked
    by the caller); a store with vectors of another model raises before
    anything is written. With no vector stored (a new index, or every source
    deleted) the batch's model becomes the index's.
    """
    if not entries:
        return 0
    model = entries[0].vector.model
    if not check_model(conn, model, path):
        conn.execute(
            "INSERT OR REPLACE INTO recall_meta (key, value) VALUES (?, ?)", (MODEL_KEY, model.key())
        )
    stored = 0
    for i, entry in enumerate(entries):
        if i % 256 == 0:
            check()
        row = conn.execute(
            "SELECT id FROM recall_sources WHERE source_id = ? AND revision = ?",
            (entry.ref.source_id, entry.ref.revision),
        ).fetchone()
        if row is None:
            continue  # deleted, or changed since the text was embedded: a stale vector is never kept
        blob = entry.vector.to_bytes()
        conn.execute("INSERT OR REPLACE INTO recall_vectors (id, vector) VALUES (?, ?)", (row[0], blob))
        stored += 1
    return stored


#: A stored vector, bounded, then what is over: a value over the bound comes back NULL, unread.
_VECTOR: Final = bounded_select((("v.vector", VECTOR_BYTES),))

#: The vectors of the scope's newest sources that have one (scope filter before the LIMIT): ids
#: and blobs only; the few rows returned get their other columns afterwards.
_NEWEST_SQL: Final = (
    f"SELECT v.id, {_VECTOR} FROM recall_sources AS s JOIN recall_vectors AS v ON v.id = s.id "  # noqa: S608
    f"WHERE {SCOPE_FILTER} ORDER BY s.id DESC LIMIT :scan"
)

#: How many of the lexical pool's best rows (no floor) have their vectors scored, per ``depth``.
_POOL_PER_DEPTH: Final = 4


def _vectors(rows: Sequence[Sequence[Any]]) -> list[tuple[int, bytes]]:
    """``(rowid, vector)`` of ``(rowid, bounded vector, over)`` rows; one over its bound raises.

    ``sqlite3.DataError``: the store reports it as its own error; the vector was not read.
    """
    for rowid, blob, over in rows:
        if blob is None:  # NOT NULL: longer than any vector the store writes
            raise sqlite3.DataError(oversize(f"sqlite recall store: the vector of source row {rowid}", over))
    return [(int(rowid), blob) for rowid, blob, _ in rows]


def _by_ids(conn: sqlite3.Connection, sql: str, ids: Sequence[int], check: Callable[[], None]) -> list[Any]:
    """Rows of ``sql`` (ending in ``IN ({marks})``) for ``ids``, in chunks under the variable limit."""
    out: list[Any] = []
    for start in range(0, len(ids), _CHUNK):
        check()
        part = list(ids[start : start + _CHUNK])
        out.extend(conn.execute(sql.format(marks=",".join("?" * len(part))), part).fetchall())
    return out


def hybrid_rows(
    conn: sqlite3.Connection,
    scope: Scope,
    terms: Sequence[str],
    query: Vector,
    *,
    path: str,
    max_candidates: int,
    max_ranked: int,
    min_relevance: float,
    min_similarity: float,
    max_vector_scan: int,
    depth: int,
    check: Callable[[], None],
    vector_weight: float = 0.5,
    fusion_k: int = 20,
) -> list[tuple[tuple[Any, ...], float]]:
    """The best ``max_candidates`` sources by fused rank: ``[(row, fused score)]``, best first.

    ``row`` is ``(source_id, revision, title, size_bytes, <5 owner columns>)``.
    See the module docs for the steps. Raises
    :class:`EmbeddingModelMismatchError` when the index holds vectors of
    another model than ``query``'s.
    """
    conn.execute("BEGIN")
    try:
        has_vectors = check_model(conn, query.model, path)
        rows: dict[int, tuple[Any, ...]] = {}
        lexical: list[int] = []  # the pool, best bm25 first
        lexical_pass: set[int] = set()  # those past the relevance floor
        sims: dict[int, float] = {}
        if terms:
            pool_size = max(max_candidates, _POOL_PER_DEPTH * depth)
            pool, total_idf = ranked_in_transaction(conn, scope, terms, pool_size, max_ranked, check, 0.0)
            floor = min_relevance * total_idf * (1 - 1e-9)
            for found in pool:
                rowid = int(found[-1])
                rows[rowid] = tuple(found[:9])
                lexical.append(rowid)
                if float(found[-2]) >= floor:
                    lexical_pass.add(rowid)
        similar: list[int] = []  # every scored source, most similar first
        if has_vectors:
            check()
            found_blobs = conn.execute(
                _NEWEST_SQL, {**scope_params(scope), "scan": max_vector_scan}
            ).fetchall()
            blobs: dict[int, bytes] = dict(_vectors(found_blobs))
            missing = [r for r in lexical if r not in blobs]
            blob_sql = f"SELECT v.id, {_VECTOR} FROM recall_vectors AS v WHERE v.id IN ({{marks}})"  # noqa: S608
            blobs.update(_vectors(_by_ids(conn, blob_sql, missing, check)))
            check()
            ids = list(blobs)
            scored = list(zip(ids, cosine_scores(query, [blobs[i] for i in ids]), strict=True))
            sims.update(scored)
            # Most similar first; the newer source first among equals.
            similar = [r for r, s in sorted(scored, key=lambda x: (-x[1], -x[0])) if math.isfinite(s)]
        # Each ranking holds only what passes its own floor, cut to ``depth``; fusion rewards agreement.
        rankings = [
            [r for r in lexical if r in lexical_pass][:depth],
            [r for r in similar if sims[r] >= min_similarity][:depth],
        ]
        fused = reciprocal_rank_fusion(
            [[str(r) for r in ranking] for ranking in rankings], k=fusion_k, weights=(1.0, vector_weight)
        )
        best = [(int(key), score) for key, score in fused[:max_candidates]]
        # Only the few sources returned need their id, revision, title, size and owner.
        row_sql = f"SELECT {CANDIDATE_COLUMNS} FROM recall_sources AS s WHERE s.id IN ({{marks}})"  # noqa: S608
        unseen = [r for r, _ in best if r not in rows]
        looked_up = checked_rows(_by_ids(conn, row_sql, unseen, check), "a source row discovery found")
        rows.update((int(found[9]), tuple(found[:9])) for found in looked_up)
        return [(rows[r], score) for r, score in best if r in rows]
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
