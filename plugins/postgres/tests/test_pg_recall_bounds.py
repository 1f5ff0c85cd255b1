"""A recall source's revision, title or group digest grown behind the store's back is refused unread.

The application role may UPDATE ``recall_sources`` within its tenant. A
source's revision is always a digest (71 bytes: a document's digest of its
title and text, a group's archive digest) and its title at most
``max_row_bytes``; but discovery (lexical and hybrid), ``read`` and
``validate`` fetched both whole, and ``read`` the joined group's archive
digest too: an 8 MiB revision was transferred by every search that matched
the source and handed back as the candidate's or the validation's revision.
Each is now capped on the server and the row refused as damage
(``PostgresRowTooLargeError``, which says it was not transferred), like the
SQLite store's (``checked_rows``).
"""

from __future__ import annotations

from typing import Any

import attrs
import psycopg
import pytest

from agentium_harness.plugin_api import (
    EmbeddingModel,
    OpContext,
    RecallLimits,
    Scope,
    SourceOwner,
    SourceVector,
    Vector,
)
from agentium_postgres import PostgresConfig, PostgresRecallStore, PostgresRowTooLargeError

pytestmark = pytest.mark.anyio

SCOPE = Scope("acme", "ana", "s1")
AXES = EmbeddingModel("test-axes", 4)
HUGE = 8 * 1024 * 1024


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.mark.parametrize(
    "change",
    [f"revision = repeat('r', {HUGE})", f"title = repeat('t', {HUGE})"],
    ids=["revision", "title"],
)
async def test_a_grown_revision_or_title_is_refused_unread_by_discovery_read_and_validate(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, change: str
) -> None:
    # A title is bounded by max_row_bytes (a document's title and text together are): 1 MiB here.
    store = PostgresRecallStore(attrs.evolve(app_config, max_row_bytes=1024 * 1024))
    try:
        ref = await store.index_document(SourceOwner("acme", "ana"), "d1", "hello zebra", _ctx(), title="t")
        vector = Vector.normalized(AXES, [1.0, 0.0, 0.0, 0.0])
        assert await store.index_vectors([SourceVector(ref, vector)], _ctx()) == 1
        admin.execute(f'UPDATE "{schema}".recall_sources SET {change}')
        session = await store.open(SCOPE, RecallLimits(), _ctx())
        calls = [
            lambda: session.discover("zebra", 8, _ctx()),
            lambda: session.discover_hybrid("zebra", vector, 8, _ctx()),
            lambda: session.read([ref], 100, _ctx()),
        ]
        if change.startswith("revision"):  # validate reads the revision alone
            calls.append(lambda: session.validate([ref], _ctx()))
            calls.append(lambda: session.validate_current([ref], _ctx()))
        for call in calls:
            with pytest.raises(PostgresRowTooLargeError, match="not transferred") as raised:
                await call()
            # The id is content (its tenant, user and document id): on the error, never in its text.
            assert "a document source" in str(raised.value)
            assert ref.source_id not in str(raised.value)
            assert raised.value.source_id == ref.source_id
    finally:
        await store.aclose()
