"""An adapter's ``erase`` refuses a ``dry_run`` that is not exactly ``True`` or ``False``, erasing nothing.

Hosts may call the adapters directly, not only through the engine (whose
``erase`` checks it). ``dry_run`` was taken for its truth: ``0`` (a host's
"no" from a config flag) erased for real, ``"no"`` ran a dry run the host
did not ask for. The core's adapters refuse both (``InvalidArgumentError``);
so do these now, before any statement.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import (
    ArchiveReceipt,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    OpContext,
    SessionKey,
)
from agentium_harness.testing import plain_group, scoped_snapshot
from agentium_postgres import (
    PostgresArchive,
    PostgresConfig,
    PostgresMemoryStore,
    PostgresRecallStore,
    PostgresSessionStore,
)

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "s1")
TABLES = ("archive_groups", "session_snapshots", "recall_sources", "memory_facts")


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _counts(admin: psycopg.Connection[Any], schema: str) -> dict[str, int]:
    out = {}
    for table in TABLES:
        row = admin.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
        out[table] = -1 if row is None else int(row[0])
    return out


@pytest.mark.parametrize("dry_run", [0, 1, "no", None, 0.0])
async def test_a_dry_run_that_is_no_bool_is_refused_and_nothing_is_erased(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, dry_run: Any
) -> None:
    archive, sessions = PostgresArchive(app_config), PostgresSessionStore(app_config)
    recall, memory = PostgresRecallStore(app_config), PostgresMemoryStore(app_config)
    try:
        group = plain_group(0)
        await archive.append(KEY, [group], _ctx())
        await sessions.save(KEY, scoped_snapshot(KEY, " kept"), None, _ctx())
        await recall.index_groups(KEY, [group], [ArchiveReceipt(0, group.digest, "test/0")], _ctx())
        fact = MemoryFact(MemoryScope("acme", "ana"), "kept", provenance=[GroupRef("s1", 0, group.digest)])
        await memory.remember(fact, _ctx())
        before = _counts(admin, schema)
        assert all(n >= 1 for n in before.values())
        for adapter in (archive, sessions, recall, memory):
            for target in (EraseTarget.session("acme", "ana", "s1"), EraseTarget.user("acme", "ana")):
                with pytest.raises(InvalidArgumentError, match="dry_run"):
                    await adapter.erase(target, _ctx(), dry_run=dry_run)
        assert _counts(admin, schema) == before
    finally:
        for adapter in (archive, sessions, recall, memory):
            await adapter.aclose()
