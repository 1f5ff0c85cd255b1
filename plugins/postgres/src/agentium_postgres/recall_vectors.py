"""Hybrid recall on PostgreSQL: vectors beside the index, bounded candidates, reciprocal rank fusion.

**Storage.** ``recall_vectors`` holds one vector per ``recall_sources`` row:
the unit vector as little-endian float32 ``bytea`` (the core's
``Vector.to_bytes``, as the SQLite store keeps it), under the same
row-level security as the sources. It references its source row with
``ON DELETE CASCADE``: a source that changes is stored as a new row
(:func:`~agentium_postgres.recall_sql.insert_sources`), so its old vector
goes with the old revision and a vector computed from old text can never
find the new one. ``recall_vector_model`` records the one embedding model of
the schema (model id and dimension); ``check_vector_model`` records it on
the first write and raises SQLSTATE ``AG003`` for another, which aborts the
writing transaction: :class:`~agentium_harness.plugin_api.EmbeddingModelMismatchError`,
nothing written.

**Discovery** (:func:`hybrid_candidates`), one round trip: the model row and
one call of ``recall_discover_hybrid`` (a ``SECURITY DEFINER`` function like
``recall_discover``, confined to the transaction's tenant), which returns
the bounded candidate set: the lexical ranking's best ``4 * hybrid_depth``
sources (``recall_discover`` itself, same bounds) and the scope's newest
``max_vector_scan`` sources that have a vector, each with its lexical rank
and its stored vector. The adapter then scores those vectors (NumPy when it
is installed, plain Python otherwise), ranks the similar ones (at least
``min_similarity``), cuts both rankings to ``hybrid_depth`` and fuses them
with reciprocal rank fusion (``fusion_k``, ``vector_weight``), as the SQLite
store does. Why here and not in the server: reading 700 stored 384-value
vectors as ``bytea`` and scoring them with NumPy takes about 1.5 ms; the
same dot products in SQL over ``real[]`` took about 20 ms (measured on
PostgreSQL 15), and pgvector is not packaged for Debian 12 (see the README).
"""

from __future__ import annotations

import functools
import importlib
import math
import operator
import struct
from array import array
from collections.abc import Sequence
from typing import Any, Final

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    EmbeddingModel,
    EmbeddingModelMismatchError,
    SourceVector,
    Vector,
    encode_segment,
    reciprocal_rank_fusion,
    source_owner,
)

from .keys import q
from .schema import TENANT_SETTING

__all__ = ["cosine_scores", "fuse", "vector_batches", "vector_scoring", "write_vectors"]

#: How many of the lexical ranking's best sources have their vectors scored, per ``hybrid_depth``.
POOL_PER_DEPTH: Final = 4


def vector_scoring(pgvector: str | None) -> str:
    """Where hybrid discovery scores vectors on a database with pgvector at ``pgvector`` (or without it).

    Said by ``agentium postgres migrate`` and by the recall store's probe
    (``agentium check --probe``), so an operator sees which path runs.
    """
    where = "vectors: float32 in bytea, scored by the adapter"
    if pgvector is None:
        return f"{where} (pgvector not installed)"
    return f"{where} (pgvector {pgvector} installed, not used by this release)"


def vector_batches(
    vectors: Sequence[SourceVector],
) -> tuple[EmbeddingModel | None, dict[str, dict[str, tuple[str, bytes]]]]:
    """The batch's one model and its vectors by tenant key: ``{tenant: {source_id: (revision, bytes)}}``.

    Raises :class:`InvalidArgumentError` for an item that is not a
    ``SourceVector`` and :class:`EmbeddingModelMismatchError` for a batch of
    several models (nothing written either way). A source id no recall store
    could have made is left out (no source has it). A source given twice
    keeps its last vector.
    """
    entries = list(vectors)
    for entry in entries:
        if not isinstance(entry, SourceVector) or not isinstance(entry.vector, Vector):
            raise InvalidArgumentError("index_vectors takes SourceVector items; nothing was written")
    models = {entry.vector.model for entry in entries}
    if len(models) > 1:
        raise EmbeddingModelMismatchError(
            f"index_vectors was given vectors of {len(models)} models "
            f"({', '.join(sorted(m.key() for m in models))}); one batch, one model; nothing was written"
        )
    by_tenant: dict[str, dict[str, tuple[str, bytes]]] = {}
    for entry in entries:
        owner = source_owner(entry.ref.source_id)
        if owner is None or not isinstance(entry.ref.revision, str):
            continue
        tenant = encode_segment(owner.tenant)
        by_tenant.setdefault(tenant, {})[entry.ref.source_id] = (entry.ref.revision, entry.vector.to_bytes())
    return (next(iter(models)) if models else None), by_tenant


async def write_vectors(
    conn: Any, schema: str, model: EmbeddingModel, by_tenant: dict[str, dict[str, tuple[str, bytes]]]
) -> list[Any]:
    """Queue the model check and one insert per tenant in the caller's transaction; their cursors.

    Each insert stores a vector only where its source row is at the given
    revision (a stale vector is skipped) and replaces the row's previous
    vector. The tenant setting is switched before each tenant's insert, so
    row-level security checks every row against its own tenant. Each
    cursor, read after the commit, yields one row per vector stored.
    """
    await conn.execute(q("SELECT {s}.check_vector_model(%s, %s)", schema), (model.model, model.dimension))
    cursors = []
    for tenant, rows in sorted(by_tenant.items()):
        ids = sorted(rows)
        await conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
        cursors.append(
            await conn.execute(
                q(
                    "INSERT INTO {s}.recall_vectors (id, tenant_key, embedding) "
                    "SELECT s.id, s.tenant_key, n.embedding "
                    "FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS n(source_id, revision, embedding) "
                    "JOIN {s}.recall_sources AS s ON s.tenant_key = %s AND s.source_id = n.source_id "
                    "AND s.revision = n.revision "
                    "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding RETURNING id",
                    schema,
                ),
                (ids, [rows[i][0] for i in ids], [rows[i][1] for i in ids], tenant),
            )
        )
    return cursors


@functools.cache
def _numpy() -> Any:
    """NumPy if it is installed (the offline embedder brings it), else ``None``: scoring falls back."""
    try:
        return importlib.import_module("numpy")
    except ImportError:  # pragma: no cover - exercised where NumPy is absent
        return None


def cosine_scores(query: Vector, blobs: Sequence[bytes | None], *, use_numpy: bool = True) -> list[float]:
    """The dot product of ``query`` with each stored unit vector (their cosine similarity).

    A missing vector or one of the wrong size (a damaged row) scores
    ``-inf`` and so is never returned. ``use_numpy=False`` forces the plain
    Python path (what runs where NumPy is absent).
    """
    size = 4 * query.model.dimension
    good = [i for i, b in enumerate(blobs) if isinstance(b, bytes) and len(b) == size]
    scores = [-math.inf] * len(blobs)
    if not good:
        return scores
    np = _numpy() if use_numpy else None
    if np is not None:
        joined = b"".join(blobs[i] for i in good)  # type: ignore[misc]
        matrix = np.frombuffer(joined, dtype="<f4").reshape(len(good), -1)
        values = (matrix @ np.asarray(query.values, dtype=np.float32)).tolist()
    else:
        q_values = array("f", query.values)
        values = []
        for i in good:
            row = struct.unpack(f"<{query.model.dimension}f", blobs[i])  # type: ignore[arg-type]
            values.append(sum(map(operator.mul, q_values, row)))
    for i, value in zip(good, values, strict=True):
        scores[i] = float(value) if math.isfinite(value) else -math.inf
    return scores


def fuse(
    rows: Sequence[tuple[Any, ...]],
    query: Vector,
    *,
    depth: int,
    min_similarity: float,
    vector_weight: float,
    fusion_k: int,
) -> list[tuple[tuple[Any, ...], float]]:
    """The candidates of ``recall_discover_hybrid`` fused into one ranking: ``[(row, score)]``, best first.

    ``row`` is ``(id, source_id, revision, title, size_bytes, lexical_rank,
    embedding)``. Lexical: the rows with a rank, by rank, the best ``depth``.
    Vector: the rows whose similarity is at least ``min_similarity``, most
    similar first (the newer source first among equals), the best ``depth``.
    A row in neither ranking is never returned.
    """
    by_id = {int(row[0]): row for row in rows}
    lexical = sorted((int(r[0]) for r in rows if r[5] is not None), key=lambda i: int(by_id[i][5]))
    ids = list(by_id)
    sims = cosine_scores(query, [by_id[i][6] for i in ids])
    similar = sorted(
        ((i, s) for i, s in zip(ids, sims, strict=True) if math.isfinite(s) and s >= min_similarity),
        key=lambda pair: (-pair[1], -pair[0]),
    )
    rankings = [[str(i) for i in lexical[:depth]], [str(i) for i, _ in similar[:depth]]]
    fused = reciprocal_rank_fusion(rankings, k=fusion_k, weights=(1.0, vector_weight))
    return [(by_id[int(key)], score) for key, score in fused]
