"""``index_vectors`` records the schema's embedding model only when it stores a vector.

It recorded the batch's model before its inserts, so a batch whose every
vector was skipped (a stale revision, a source no store made) stored nothing
yet locked the schema to its model: every later batch of the model really
used was refused with ``EmbeddingModelMismatchError``.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import (
    EmbeddingModel,
    EmbeddingModelMismatchError,
    OpContext,
    SourceOwner,
    SourceRef,
    SourceVector,
    Vector,
)
from agentium_postgres import PostgresConfig, PostgresRecallStore

pytestmark = pytest.mark.anyio

USED = EmbeddingModel("test-used", 4)
WRONG = EmbeddingModel("test-wrong", 4)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _unit(model: EmbeddingModel) -> Vector:
    return Vector.normalized(model, [1.0] + [0.0] * (model.dimension - 1))


def _state(admin: psycopg.Connection[Any], schema: str) -> tuple[list[Any], list[Any]]:
    models = admin.execute(f'SELECT model, dimension FROM "{schema}".recall_vector_model').fetchall()
    vectors = admin.execute(f'SELECT id, embedding FROM "{schema}".recall_vectors ORDER BY id').fetchall()
    return models, vectors


async def test_a_batch_that_stores_no_vector_records_no_model(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    recall = PostgresRecallStore(app_config)
    try:
        ref = await recall.index_document(SourceOwner("acme"), "d0", "some text", _ctx())
        stale = SourceRef(ref.source_id, "sha256:" + "0" * 64)
        nobody = SourceRef("not-a-source-id", ref.revision)
        for batch in ([SourceVector(stale, _unit(WRONG))], [SourceVector(nobody, _unit(WRONG))]):
            assert await recall.index_vectors(batch, _ctx()) == 0
            assert _state(admin, schema) == ([], [])  # nothing stored, no model recorded
        # The model really used is then accepted, and recorded with its vector.
        assert await recall.index_vectors([SourceVector(ref, _unit(USED))], _ctx()) == 1
        models, vectors = _state(admin, schema)
        assert models == [("test-used", 4)] and len(vectors) == 1
        # Once recorded, another model is refused even when nothing would be stored.
        with pytest.raises(EmbeddingModelMismatchError):
            await recall.index_vectors([SourceVector(stale, _unit(WRONG))], _ctx())
        assert _state(admin, schema) == (models, vectors)
    finally:
        await recall.aclose()
