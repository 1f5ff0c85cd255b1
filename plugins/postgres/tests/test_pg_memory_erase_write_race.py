"""A session erasure racing a write of the same fact leaves no revision behind (real PostgreSQL).

A memory erase found the facts naming the session, then deleted their rows
by fact id. Under READ COMMITTED the DELETE's snapshot is taken when it
starts: a duplicate ``remember`` (now a merge: the fact's next revision) or a
correction holding the fact's latest row when it began commits a revision
that DELETE never sees. The erasure deleted the old revisions, reported
itself complete, and left the new one, current, with its text, still naming
the erased session. The erase now repeats its DELETE until one finds no row.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from agentium_harness.plugin_api import (
    AckStatus,
    EraseStatus,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    OpContext,
    count_items,
)
from agentium_postgres import PostgresConfig, PostgresMemoryStore

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
TEXT = "Ana deploys on Tuesdays"
_WAITING = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'"


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def _ref(session: str) -> GroupRef:
    return GroupRef(session, 0, "sha256:" + "a" * 64)


@pytest.mark.parametrize("write", ["duplicate remember", "correction"])
async def test_an_erasure_racing_a_write_of_the_fact_leaves_no_revision(
    write: str, app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    from pg_server import APP_USER

    writer, eraser = PostgresMemoryStore(app_config), PostgresMemoryStore(app_config)
    try:
        first = await writer.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s1")]), _ctx())
        results: dict[str, Any] = {}

        async def call(name: str, run: Any) -> None:
            try:
                results[name] = await run()
            except Exception as exc:
                results[name] = exc

        async def waiting(count: int) -> None:
            while True:
                row = admin.execute(_WAITING, (APP_USER,)).fetchone()
                if row is not None and row[0] >= count:
                    return
                await anyio.sleep(0.02)

        fact_id = str(first.fact_id)
        calls = (
            # From session s2, the same fact: revision 2, citing s1 and s2. Or a correction: revision 2.
            (
                "write",
                (lambda: writer.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s2")]), _ctx()))
                if write == "duplicate remember"
                else (
                    lambda: writer.correct(ANA, fact_id, MemoryFact(ANA, "Ana deploys on Fridays"), _ctx())
                ),
            ),
            ("erase", lambda: eraser.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())),
        )
        # The holder keeps the fact's row locked, so the merge and then the erasure's delete queue
        # behind it in that order; released, the merge commits while the delete is under way.
        with psycopg.connect(pg_server.admin_dsn()) as holder:
            holder.execute(
                f'SELECT 1 FROM "{schema}".memory_facts WHERE fact_id = %s FOR UPDATE', (first.fact_id,)
            )
            async with anyio.create_task_group() as tg:
                for n, (name, run) in enumerate(calls, start=1):
                    tg.start_soon(call, name, run)
                    with anyio.fail_after(30):
                        await waiting(n)
                holder.rollback()
        written, report = results["write"], results["erase"]
        assert (getattr(written, "status", None), written.revision) == (AckStatus.STORED, 2), results
        assert report.status is EraseStatus.COMPLETE, results
        left = admin.execute(
            f'SELECT revision, status, text FROM "{schema}".memory_facts WHERE fact_id = %s ORDER BY 1',
            (fact_id,),
        ).fetchall()
        # Erasing s1 takes every revision of the fact s1 produced: the merged one included.
        assert left == [], f"the erasure of s1 left {left} of fact {first.fact_id}"
        assert await eraser.lookup(ANA, "", 10, _ctx()) == []
        assert count_items(fact=1, revision=2) == report.counts, report
    finally:
        await writer.aclose()
        await eraser.aclose()
