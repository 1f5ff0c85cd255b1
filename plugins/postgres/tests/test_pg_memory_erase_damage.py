"""A session erasure over memory rows changed behind the store's back: what it erases, what stops it.

The rule (README, "Memory"): a revision whose provenance, read within its
bound and decoded strictly, names the session covers its fact, whatever
else about the row is damaged: the fact is erased. A fact none of whose
revisions names the session but one of whose revisions is damaged may have
had its provenance edited away from the session: it is never passed over;
the erasure stops, typed, naming the fact, and nothing is erased.

Before, any damaged row among the user's facts stopped every session
erasure, even a row naming the erased session (which the erasure must take),
and the refusal did not say which fact to look at.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import EraseStatus, EraseTarget, GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryError, PostgresMemoryStore

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")


def _ref(session: str) -> GroupRef:
    return GroupRef(session, 0, "sha256:" + "1" * 64)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _ids(admin: psycopg.Connection[Any], schema: str) -> list[str]:
    rows = admin.execute(f'SELECT DISTINCT fact_id FROM "{schema}".memory_facts ORDER BY fact_id').fetchall()
    return [str(r[0]) for r in rows]


def _rows(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return admin.execute(f'SELECT * FROM "{schema}".memory_facts ORDER BY fact_id, revision').fetchall()


async def _fact(store: PostgresMemoryStore, text: str, *sessions: str) -> str:
    ack = await store.remember(MemoryFact(ALICE, text, provenance=[_ref(s) for s in sessions]), _ctx())
    return str(ack.fact_id)


@pytest.mark.parametrize(
    "change",
    [
        "status = 'superseded'",
        "recorded_at = '2001-01-01T00:00:00Z'",
        "content_digest = repeat('x', 8388608)",  # over its bound: erased without being transferred
    ],
    ids=["status", "recorded_at", "oversized-digest"],
)
async def test_a_damaged_row_naming_the_session_is_erased_with_it(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, change: str
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        damaged = await _fact(store, "from s1, then damaged", "s1")
        clean = await _fact(store, "from s1 and s3", "s3", "s1")
        other = await _fact(store, "from s2 only", "s2")
        admin.execute(f'UPDATE "{schema}".memory_facts SET {change} WHERE fact_id = %s', (damaged,))
        dry = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx(), dry_run=True)
        assert {(c.kind, c.count) for c in dry.counts} == {("fact", 2), ("revision", 2)}
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert report.status is EraseStatus.COMPLETE
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 2), ("revision", 2)}
        assert damaged != clean and _ids(admin, schema) == [other]
    finally:
        await store.aclose()


async def test_a_damaged_fact_naming_only_another_session_stops_the_erasure_and_is_named(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # The fact cited s1; its provenance was edited (well formed) to cite s2. Passing it over would
    # keep s1's fact and report the erasure complete: it stops, naming the fact, nothing erased.
    store = PostgresMemoryStore(app_config)
    try:
        edited = await _fact(store, "from s1, provenance edited", "s1")
        await _fact(store, "from s1, intact", "s1")
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET provenance = %s WHERE fact_id = %s',
            ('[["s2", 0, "sha256:' + "1" * 64 + '"]]', edited),
        )
        before = _rows(admin, schema)
        for dry_run in (True, False):
            with pytest.raises(PostgresMemoryError, match=f"1 fact.*{edited}.*nothing was erased"):
                await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx(), dry_run=dry_run)
        assert _rows(admin, schema) == before
        # As stored it names s2: the erasure of s2 takes it (a damaged row, no read serves it).
        report = await store.erase(EraseTarget.session("acme", "alice", "s2"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 1)}
        assert edited not in _ids(admin, schema)
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 1)}
        assert _ids(admin, schema) == []
    finally:
        await store.aclose()


async def test_a_fact_with_one_damaged_revision_and_another_naming_the_session_is_erased(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        fact_id = await _fact(store, "first, from s2", "s2")
        await store.correct(
            ALICE, fact_id, MemoryFact(ALICE, "second, from s1", provenance=[_ref("s1")]), _ctx()
        )
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET provenance = %s WHERE fact_id = %s AND revision = 1',
            ("not json", fact_id),
        )
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 2)}
        assert _ids(admin, schema) == []
    finally:
        await store.aclose()


async def test_a_session_erasure_reads_many_facts_in_pages_and_keeps_its_bound(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # More rows than one page (256), the covered facts spread through them, with max_items below
    # their number: each call erases max_items facts, partial until the last.
    store = PostgresMemoryStore(app_config)
    try:
        for i in range(600):
            await _fact(store, f"fact number {i}", "s1" if i % 3 == 0 else "s2")
        total, calls = 0, 0
        while True:
            report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx(), max_items=150)
            total += dict((c.kind, c.count) for c in report.counts).get("fact", 0)
            calls += 1
            if report.status is EraseStatus.COMPLETE:
                break
        assert (total, calls) == (200, 2)
        assert len(_ids(admin, schema)) == 400
    finally:
        await store.aclose()
