"""A session row whose listed id was changed behind the store's back is refused, not listed.

``session_snapshots.session_id`` (the id ``list_sessions`` returns) sits
beside the key column ``session_key`` (its injective segment, which loads,
saves and erasures use). The application role may UPDATE the table within
its tenant. The listing returned ``session_id`` as stored: an id changed to
another session's listed a session that does not load (or listed one twice),
and one grown to 100,000 characters was transferred whole and handed to the
host, though no id is longer than 256 characters. Each is now refused as a
damaged row (``SnapshotCorruptError``; an oversized id is not transferred),
as the SQLite store refuses its oversized ids, and nothing is changed.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import OpContext, SessionKey, SnapshotCorruptError
from agentium_harness.testing import scoped_snapshot
from agentium_postgres import PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.mark.parametrize(
    ("value", "message"),
    [("'s2'", "does not match its key"), ("repeat('x', 100000)", "not transferred")],
    ids=["another-id", "oversized"],
)
async def test_a_listed_id_changed_behind_the_store_is_refused(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, value: str, message: str
) -> None:
    store = PostgresSessionStore(app_config)
    try:
        for session in ("s1", "s3"):
            key = SessionKey("acme", "ana", session)
            await store.save(key, scoped_snapshot(key, " kept"), None, _ctx())
        assert await store.list_sessions("acme", "ana", 10, _ctx()) == ["s1", "s3"]
        admin.execute(
            f"UPDATE \"{schema}\".session_snapshots SET session_id = {value} WHERE session_key = 's1'"
        )
        before = admin.execute(f'SELECT * FROM "{schema}".session_snapshots ORDER BY session_key').fetchall()
        with pytest.raises(SnapshotCorruptError, match=message):
            await store.list_sessions("acme", "ana", 10, _ctx())
        after = admin.execute(f'SELECT * FROM "{schema}".session_snapshots ORDER BY session_key').fetchall()
        assert after == before
    finally:
        await store.aclose()
