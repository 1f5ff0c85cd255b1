"""A duplicate ``remember`` keeps the groups it adds in PostgreSQL too, racing writers included.

A duplicate was acknowledged ``duplicate`` and its provenance dropped, so
erasing a session named only by it left a fact that session also produced.
It is now written as the fact's next revision, under the fact's lock, so
concurrent duplicates and a correction of the same fact each apply in turn.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from agentium_harness.plugin_api import (
    AckStatus,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    OpContext,
    encode_segment,
)
from agentium_postgres import PostgresConfig, PostgresMemoryStore

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
TEXT = "Ana deploys on Tuesdays"
#: How many of the store's connections wait for a lock.
_WAITING = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'"


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


def _ref(session: str) -> GroupRef:
    return GroupRef(session, 0, "sha256:" + "a" * 64)


async def test_concurrent_duplicates_from_four_sessions_keep_every_session(
    app_config: PostgresConfig,
) -> None:
    stores = [PostgresMemoryStore(app_config) for _ in range(4)]
    acks = []
    try:

        async def one(n: int) -> None:
            fact = MemoryFact(ANA, TEXT, provenance=[_ref(f"s{n}")])
            acks.append(await stores[n].remember(fact, _ctx()))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(one, n)
        # One stored the fact, each other wrote its next revision with its session: none was dropped.
        assert {a.status for a in acks} == {AckStatus.STORED} and len({a.fact_id for a in acks}) == 1
        assert sorted(a.revision or 0 for a in acks) == [1, 2, 3, 4]
        [current] = await stores[0].lookup(ANA, "", 10, _ctx())
        assert sorted(r.session for r in current.fact.provenance) == ["s0", "s1", "s2", "s3"]
        await stores[0].erase(EraseTarget.session("acme", "ana", "s3"), _ctx())
        assert await stores[0].lookup(ANA, "", 10, _ctx()) == []
    finally:
        for store in stores:
            await store.aclose()


async def test_a_duplicate_whose_fact_is_corrected_meanwhile_stores_a_new_fact(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    # The duplicate is found, then the fact's lock waited for behind a correction that changes its
    # text: merged into the corrected fact it would name a session that fact did not come from.
    from pg_server import APP_USER

    store = PostgresMemoryStore(app_config)
    try:
        first = await store.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s1")]), _ctx())
        fact_id = str(first.fact_id)
        results: dict[str, Any] = {}

        async def write(name: str, call: Any) -> None:
            try:
                results[name] = await call()
            except Exception as exc:
                results[name] = exc

        async def waiting(count: int) -> None:
            while True:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'",
                    (APP_USER,),
                ).fetchone()
                if row is not None and row[0] >= count:
                    return
                await anyio.sleep(0.02)

        with psycopg.connect(pg_server.admin_dsn()) as holder:
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"memory fact {encode_segment(ANA.tenant)} {fact_id}",),
            )
            calls = (
                (
                    "correct",
                    lambda: store.correct(ANA, fact_id, MemoryFact(ANA, "Ana deploys on Fridays"), _ctx()),
                ),
                ("remember", lambda: store.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s2")]), _ctx())),
            )
            async with anyio.create_task_group() as tg:
                for n, (name, call) in enumerate(calls, start=1):
                    tg.start_soon(write, name, call)
                    with anyio.fail_after(30):
                        await waiting(n)
                holder.rollback()
        corrected, remembered = results["correct"], results["remember"]
        assert (corrected.status, corrected.revision) == (AckStatus.STORED, 2), results
        assert remembered.status is AckStatus.STORED and remembered.fact_id != fact_id, results
        assert remembered.revision == 1
        facts = {f.fact_id: f for f in await store.lookup(ANA, "", 10, _ctx())}
        assert facts[fact_id].text == "Ana deploys on Fridays"
        assert facts[fact_id].fact.provenance == ()  # the correction's own (it cited none)
        assert facts[str(remembered.fact_id)].fact.provenance == (_ref("s2"),)
        rows = admin.execute(f'SELECT count(*) FROM "{schema}".memory_facts').fetchone()
        assert rows == (3,)
    finally:
        await store.aclose()


async def test_a_duplicate_whose_fact_is_erased_meanwhile_stores_a_new_fact(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    # The duplicate is found, then its row lock waited for behind a deletion (an erasure's) that
    # commits: the fact is gone, so the remember stores its own instead of failing "not found".
    from pg_server import APP_USER

    store = PostgresMemoryStore(app_config)
    try:
        first = await store.remember(MemoryFact(ANA, TEXT, provenance=[_ref("s1")]), _ctx())
        results: dict[str, Any] = {}

        async def remember() -> None:
            try:
                results["remember"] = await store.remember(
                    MemoryFact(ANA, TEXT, provenance=[_ref("s2")]), _ctx()
                )
            except Exception as exc:
                results["remember"] = exc

        with psycopg.connect(pg_server.admin_dsn()) as holder:
            holder.execute(f'DELETE FROM "{schema}".memory_facts WHERE fact_id = %s', (first.fact_id,))
            async with anyio.create_task_group() as tg:
                tg.start_soon(remember)
                with anyio.fail_after(30):
                    while True:
                        row = admin.execute(_WAITING, (APP_USER,)).fetchone()
                        if row is not None and row[0] >= 1:
                            break
                        await anyio.sleep(0.02)
                holder.commit()
        ack = results["remember"]
        assert getattr(ack, "status", ack) is AckStatus.STORED and ack.fact_id != first.fact_id, results
        [fact] = await store.lookup(ANA, "", 10, _ctx())
        assert (fact.fact_id, fact.revision, fact.fact.provenance) == (ack.fact_id, 1, (_ref("s2"),))
    finally:
        await store.aclose()
