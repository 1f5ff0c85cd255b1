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
the first write that stores a vector and raises SQLSTATE ``AG003`` for another, which aborts the
writing transaction: :class:`~agentium_harness.plugin_api.EmbeddingModelMismatchError`,
nothing written.

**Discovery**, one round trip: the model row and one call of
``recall_discover_hybrid`` (a ``SECURITY DEFINER`` function like
``recall_discover``, confined to the transaction's tenant), which returns
the bounded candidate set: the lexical ranking's best ``4 * hybrid_depth``
sources (``recall_discover`` itself, same bounds) and the scope's newest
``max_vector_scan`` sources that have a vector, each with its lexical rank
and either its similarity to the query or its stored vector.

**Where vectors are scored.** Where the database has pgvector and the
schema its ``embedding_pgv`` column (``migrate`` adds it when the extension
is installed), the adapter writes each vector in both forms and the
function computes each candidate's cosine similarity in the database
(pgvector's ``<=>``): no stored vector travels. Otherwise (Debian 12's
PostgreSQL packages no pgvector), or for a row written before the column
existed, the function returns the stored float32 vector and the adapter
scores it (NumPy when installed, plain Python otherwise): reading 600
stored 384-value vectors as ``bytea`` took about 5 ms here, as ``real[]``
about 49 ms, so the fallback keeps ``bytea``. Then, either way, the
similar candidates (at least ``min_similarity``) are ranked, both rankings
cut to ``hybrid_depth`` and fused with reciprocal rank fusion
(``fusion_k``, ``vector_weight``), as the SQLite store does.
"""

from __future__ import annotations

import functools
import importlib
import math
import operator
import struct
from array import array
from collections.abc import Sequence
from typing import Any, Final, LiteralString

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    EmbeddingModel,
    EmbeddingModelMismatchError,
    SourceRef,
    SourceVector,
    Vector,
    encode_segment,
    reciprocal_rank_fusion,
    source_owner,
)

from .args import checked_text
from .keys import q
from .schema import TENANT_SETTING, VectorFacts

__all__ = ["cosine_scores", "fuse", "pgvector_literal", "vector_batches", "vector_scoring", "write_vectors"]

#: How many of the lexical ranking's best sources have their vectors scored, per ``hybrid_depth``.
POOL_PER_DEPTH: Final = 4


def vector_scoring(facts: VectorFacts) -> str:
    """Where hybrid discovery scores vectors on a database with these :class:`VectorFacts`.

    Said by ``agentium postgres migrate`` and by the recall store's probe
    (``agentium check --probe``), so an operator sees which path runs.
    """
    if facts.scored_in_database:
        return f"vectors: scored in the database by pgvector {facts.pgvector}"
    where = "vectors: float32 in bytea, scored by the adapter"
    if facts.pgvector is None:
        return f"{where} (pgvector not installed)"
    return f"{where} (pgvector {facts.pgvector} installed: run `agentium postgres migrate` to use it)"


def pgvector_literal(values: Sequence[float]) -> str:
    """A vector in pgvector's text form, ``[x,y,...]``: ``repr`` of each float32 value reads back exactly."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def vector_batches(
    vectors: Sequence[SourceVector],
) -> tuple[EmbeddingModel | None, dict[str, dict[str, tuple[str, Vector]]]]:
    """The batch's one model and its vectors by tenant key: ``{tenant: {source_id: (revision, vector)}}``.

    Raises :class:`InvalidArgumentError` for an item that is not a
    ``SourceVector`` or whose revision PostgreSQL text cannot hold (NUL, a
    lone surrogate), and :class:`EmbeddingModelMismatchError` for a batch of
    several models (nothing written either way). A source id no recall store
    could have made is left out (no source has it). A source given twice
    keeps its last vector.
    """
    entries = list(vectors)
    for entry in entries:
        if (
            not isinstance(entry, SourceVector)
            or not isinstance(entry.vector, Vector)
            or not isinstance(entry.ref, SourceRef)
        ):
            raise InvalidArgumentError("index_vectors takes SourceVector items; nothing was written")
        if isinstance(entry.ref.revision, str):
            checked_text(entry.ref.revision, "a SourceVector's revision", "recall index")
    models = {entry.vector.model for entry in entries}
    if len(models) > 1:
        raise EmbeddingModelMismatchError(
            f"index_vectors was given vectors of {len(models)} models "
            f"({', '.join(sorted(m.key() for m in models))}); one batch, one model; nothing was written"
        )
    by_tenant: dict[str, dict[str, tuple[str, Vector]]] = {}
    for entry in entries:
        owner = source_owner(entry.ref.source_id)
        if owner is None or not isinstance(entry.ref.revision, str):
            continue
        tenant = encode_segment(owner.tenant)
        by_tenant.setdefault(tenant, {})[entry.ref.source_id] = (entry.ref.revision, entry.vector)
    return (next(iter(models)) if models else None), by_tenant


# One tenant's vectors, stored where their source row is at the given revision (others skipped).
# FOR KEY SHARE: a source row another transaction is deleting (a document replaced, an erasure) is
# waited for and then skipped, as a stale vector is; without it the insert read the row from its
# snapshot and failed on the foreign key once the delete committed.
_WRITE_BYTES: Final[LiteralString] = (
    "INSERT INTO {s}.recall_vectors (id, tenant_key, embedding) "
    "SELECT s.id, s.tenant_key, n.embedding "
    "FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS n(source_id, revision, embedding) "
    "JOIN {s}.recall_sources AS s ON s.tenant_key = %s AND s.source_id = n.source_id "
    "AND s.revision = n.revision FOR KEY SHARE OF s "
    "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding RETURNING id"
)
# The same, with pgvector's form of each vector too ("{vector}": the extension's qualified type).
_WRITE_BOTH: Final[LiteralString] = (
    "INSERT INTO {s}.recall_vectors (id, tenant_key, embedding, embedding_pgv) "
    "SELECT s.id, s.tenant_key, n.embedding, n.pgv::{vector} "
    "FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::text[]) AS n(source_id, revision, embedding, pgv) "
    "JOIN {s}.recall_sources AS s ON s.tenant_key = %s AND s.source_id = n.source_id "
    "AND s.revision = n.revision FOR KEY SHARE OF s "
    "ON CONFLICT (id) DO UPDATE SET embedding = excluded.embedding, embedding_pgv = excluded.embedding_pgv "
    "RETURNING id"
)

#: Checks the model against the one recorded, if any (then it records nothing).
_CHECK_RECORDED: Final[LiteralString] = (
    "SELECT {s}.check_vector_model(%s, %s) WHERE EXISTS (SELECT 1 FROM {s}.recall_vector_model)"
)
#: Records (or checks) the model if one of the tenant's given sources now has a vector (called
#: at most once: LIMIT 1); a batch that stored none records nothing.
_RECORD_IF_STORED: Final[LiteralString] = (
    "SELECT {s}.check_vector_model(%s, %s) FROM {s}.recall_vectors AS v "
    "JOIN {s}.recall_sources AS s ON s.id = v.id "
    "WHERE s.tenant_key = %s AND s.source_id = ANY(%s::text[]) LIMIT 1"
)


async def write_vectors(
    conn: Any,
    schema: str,
    model: EmbeddingModel,
    by_tenant: dict[str, dict[str, tuple[str, Vector]]],
    facts: VectorFacts,
) -> list[Any]:
    """Check the model, insert each tenant's vectors in the caller's transaction; their cursors.

    The schema records ``model`` only if at least one vector is stored; one
    already recorded is checked before anything is written.

    Each insert stores a vector only where its source row is at the given
    revision (a stale vector is skipped) and replaces the row's previous
    vector: as float32 ``bytea``, and in pgvector's type too where ``facts``
    say the database scores vectors. The tenant setting is switched before
    each tenant's insert, so row-level security checks every row against its
    own tenant. Each cursor, read after the commit, yields one row per
    vector stored.
    """
    # Imported here, not at module level: listing the plugin must not load the client library.
    from psycopg import sql

    # In SQL, not decided here: the link pipelines a write's statements. A model already recorded
    # is checked before anything is written (the call records nothing then).
    await conn.execute(q(_CHECK_RECORDED, schema), (model.model, model.dimension))
    pgv = facts.scored_in_database and facts.extension_schema is not None
    statement = sql.SQL(_WRITE_BOTH if pgv else _WRITE_BYTES).format(
        s=sql.Identifier(schema), vector=sql.Identifier(facts.extension_schema or "", "vector")
    )
    cursors = []
    for tenant, rows in sorted(by_tenant.items()):
        ids = sorted(rows)
        params: list[Any] = [ids, [rows[i][0] for i in ids], [rows[i][1].to_bytes() for i in ids]]
        if pgv:
            params.append([pgvector_literal(rows[i][1].values) for i in ids])
        await conn.execute("SELECT set_config(%s, %s, true)", (TENANT_SETTING, tenant))
        cursors.append(await conn.execute(statement, (*params, tenant)))
        # Recorded only once a vector is stored: a batch whose every vector was skipped (stale, or
        # of no indexed source) must not lock the schema to its model. A concurrent first write of
        # another model makes it raise, and the transaction rolls back.
        await conn.execute(q(_RECORD_IF_STORED, schema), (model.model, model.dimension, tenant, ids))
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
    embedding, similarity)``: a row scored in the database has its
    ``similarity``, any other is scored here from its ``embedding``.
    Lexical: the rows with a rank, by rank, the best ``depth``.
    Vector: the rows whose similarity is at least ``min_similarity``, most
    similar first (the newer source first among equals), the best ``depth``.
    A row in neither ranking is never returned.
    """
    by_id = {int(row[0]): row for row in rows}
    lexical = sorted((int(r[0]) for r in rows if r[5] is not None), key=lambda i: int(by_id[i][5]))
    ids = list(by_id)
    computed = cosine_scores(query, [by_id[i][6] if by_id[i][7] is None else None for i in ids])
    sims = [c if by_id[i][7] is None else float(by_id[i][7]) for i, c in zip(ids, computed, strict=True)]
    similar = sorted(
        ((i, s) for i, s in zip(ids, sims, strict=True) if math.isfinite(s) and s >= min_similarity),
        key=lambda pair: (-pair[1], -pair[0]),
    )
    rankings = [[str(i) for i in lexical[:depth]], [str(i) for i, _ in similar[:depth]]]
    fused = reciprocal_rank_fusion(rankings, k=fusion_k, weights=(1.0, vector_weight))
    return [(by_id[int(key)], score) for key, score in fused]
