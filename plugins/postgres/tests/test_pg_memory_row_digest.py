"""Memory rows whose provenance, status, revision or ``recorded_at`` was changed by a raw UPDATE.

``content_digest`` covers scope, text and validity only; the row digest
(schema version 4) covers every stored field. Before it, each change below
went unseen: a provenance edited to name another session let a session
erasure pass the fact over and report complete, a superseded or forgotten
revision set back to current was returned as a current fact, a rewritten
revision or ``recorded_at`` was returned as stored. Every read path must
refuse the row (typed) and change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from agentium_harness.plugin_api import EraseTarget, GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryError, PostgresMemoryStore
from agentium_postgres.memory import content_digest

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")
S1 = GroupRef("s1", 0, "sha256:" + "1" * 64)
OTHER = '[["s2", 0, "sha256:' + "2" * 64 + '"]]'
FACT = MemoryFact(ALICE, "the launch code is private", provenance=[S1])


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


def _rows(admin: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    return admin.execute(f'SELECT * FROM "{schema}".memory_facts ORDER BY fact_id, revision').fetchall()


async def _provenance(store: PostgresMemoryStore, admin: psycopg.Connection[Any], schema: str) -> str:
    """Revision 1 cites s1; its provenance is edited (well formed) to cite s2 instead."""
    fact_id = str((await store.remember(FACT, _ctx())).fact_id)
    admin.execute(f'UPDATE "{schema}".memory_facts SET provenance = %s WHERE fact_id = %s', (OTHER, fact_id))
    return fact_id


async def _superseded_made_current(
    store: PostgresMemoryStore, admin: psycopg.Connection[Any], schema: str
) -> str:
    """A corrected fact's superseded revision 1 is set back to current (two current revisions)."""
    fact_id = str((await store.remember(FACT, _ctx())).fact_id)
    await store.correct(ALICE, fact_id, MemoryFact(ALICE, "the launch code changed", provenance=[S1]), _ctx())
    admin.execute(
        f"UPDATE \"{schema}\".memory_facts SET status = 'current' WHERE fact_id = %s AND revision = 1",
        (fact_id,),
    )
    return fact_id


async def _revision(store: PostgresMemoryStore, admin: psycopg.Connection[Any], schema: str) -> str:
    fact_id = str((await store.remember(FACT, _ctx())).fact_id)
    admin.execute(f'UPDATE "{schema}".memory_facts SET revision = 7 WHERE fact_id = %s', (fact_id,))
    return fact_id


async def _recorded_at(store: PostgresMemoryStore, admin: psycopg.Connection[Any], schema: str) -> str:
    fact_id = str((await store.remember(FACT, _ctx())).fact_id)
    admin.execute(
        f"UPDATE \"{schema}\".memory_facts SET recorded_at = '2001-01-01T00:00:00Z' WHERE fact_id = %s",
        (fact_id,),
    )
    return fact_id


Tamper = Callable[[PostgresMemoryStore, psycopg.Connection[Any], str], Awaitable[str]]


@pytest.mark.parametrize(
    "tamper",
    [_provenance, _superseded_made_current, _revision, _recorded_at],
    ids=["provenance", "status", "revision", "recorded_at"],
)
async def test_a_row_changed_outside_the_store_is_refused_by_every_read_path_and_nothing_changes(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, tamper: Tamper
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        fact_id = await tamper(store, admin, schema)
        before = _rows(admin, schema)
        for call in (
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.lookup(ALICE, "launch code", 10, _ctx()),
            lambda: store.history(ALICE, fact_id, _ctx()),
            lambda: store.remember(FACT, _ctx()),  # the duplicate check finds the changed row
            lambda: store.forget(ALICE, fact_id, _ctx()),
        ):
            with pytest.raises(PostgresMemoryError, match="row digest"):
                await call()
        erasure = EraseTarget.session("acme", "alice", "s1")
        if tamper is _provenance:
            # It names s2 now: whether it came from s1 cannot be told, so s1's erasure stops.
            for dry_run in (True, False):
                with pytest.raises(PostgresMemoryError, match="row digest"):
                    await store.erase(erasure, _ctx(), dry_run=dry_run)
        else:
            # It still names s1: s1's erasure takes it (test_pg_memory_erase_damage.py); a dry run here.
            report = await store.erase(erasure, _ctx(), dry_run=True)
            assert ("fact", 1) in {(c.kind, c.count) for c in report.counts}
        assert _rows(admin, schema) == before  # nothing forgotten, erased, written or rewritten
    finally:
        await store.aclose()


async def test_a_session_erasure_refuses_a_fact_whose_provenance_now_names_another_session(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # The fact cited s1; its provenance was edited to cite s2. The erasure of s1 passed it over and
    # reported complete (the fact kept). (The erasure of s2 takes it, as stored it names s2: see
    # test_pg_memory_erase_damage.py.)
    store = PostgresMemoryStore(app_config)
    try:
        await _provenance(store, admin, schema)
        untouched = await store.remember(MemoryFact(MemoryScope("acme", "bob"), "bob's own fact"), _ctx())
        before = _rows(admin, schema)
        with pytest.raises(PostgresMemoryError, match="row digest"):
            await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert _rows(admin, schema) == before
        # A user erasure needs no provenance: it still removes the user's facts, damaged or not.
        report = await store.erase(EraseTarget.user("acme", "alice"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 1)}
        assert [r[2] for r in _rows(admin, schema)] == [untouched.fact_id]
    finally:
        await store.aclose()


async def test_a_forgotten_fact_set_back_to_current_with_its_content_is_not_resurrected(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # Status, text, provenance and even content_digest restored (the content digest is public and
    # unkeyed): the old store returned the forgotten fact as current again.
    store = PostgresMemoryStore(app_config)
    try:
        fact_id = str((await store.remember(FACT, _ctx())).fact_id)
        await store.forget(ALICE, fact_id, _ctx())
        admin.execute(
            f"UPDATE \"{schema}\".memory_facts SET status = 'current', text = %s, text_lower = %s, "
            "provenance = %s, content_digest = %s WHERE fact_id = %s AND revision = 1",
            (FACT.text, FACT.text.lower(), f'[["s1", 0, "{S1.digest}"]]', content_digest(FACT), fact_id),
        )
        before = _rows(admin, schema)
        for call in (
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.lookup(ALICE, "launch", 10, _ctx()),
            lambda: store.history(ALICE, fact_id, _ctx()),
            lambda: store.remember(FACT, _ctx()),
        ):
            with pytest.raises(PostgresMemoryError, match="row digest"):
                await call()
        assert _rows(admin, schema) == before
        # It names s1 as stored: s1's erasure takes the whole fact, tombstone and all.
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 2)}
        assert _rows(admin, schema) == []
    finally:
        await store.aclose()


async def test_the_stores_own_writes_keep_every_row_digest_true(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    """remember, correct (superseding), forget (every revision rewritten) and the tombstone all verify."""
    store = PostgresMemoryStore(app_config)
    try:
        fact_id = str((await store.remember(FACT, _ctx())).fact_id)
        await store.correct(ALICE, fact_id, MemoryFact(ALICE, "corrected", provenance=[S1]), _ctx())
        await store.correct(ALICE, fact_id, MemoryFact(ALICE, "corrected again"), _ctx())
        assert [r.status.value for r in await store.history(ALICE, fact_id, _ctx())] == [
            "superseded",
            "superseded",
            "current",
        ]
        await store.forget(ALICE, fact_id, _ctx())
        assert [r.status.value for r in await store.history(ALICE, fact_id, _ctx())] == ["forgotten"] * 4
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 4)}
        assert _rows(admin, schema) == []
    finally:
        await store.aclose()
