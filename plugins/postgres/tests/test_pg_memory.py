"""The memory store beyond its contract: concurrent identical writes store once, every row stays in
its tenant under row-level security, and query text is matched literally (R36-R39).
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import psycopg
import pytest

from agentium_harness.plugin_api import AckStatus, MemoryFact, MemoryScope, OpContext
from agentium_postgres import (
    PostgresConfig,
    PostgresMemoryError,
    PostgresMemoryStore,
    PostgresRowTooLargeError,
)

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("acme", "alice")


def _ctx() -> OpContext:
    return OpContext.with_timeout(20)


async def test_concurrent_identical_remembers_store_one_fact(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    stores = [PostgresMemoryStore(app_config) for _ in range(4)]
    acks = []
    try:

        async def one(store: PostgresMemoryStore) -> None:
            acks.append(await store.remember(MemoryFact(ALICE, "the deploy window is Tuesday"), _ctx()))

        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(one, store)
    finally:
        for store in stores:
            await store.aclose()
    assert sorted(a.status.value for a in acks) == ["duplicate"] * 3 + ["stored"]
    assert len({a.fact_id for a in acks}) == 1
    row = admin.execute(f'SELECT count(*) FROM "{schema}".memory_facts').fetchone()
    assert row == (1,)


async def test_query_text_is_matched_literally_never_as_a_pattern(app_config: PostgresConfig) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        plain = await store.remember(MemoryFact(ALICE, "plain words only"), _ctx())
        odd = await store.remember(MemoryFact(ALICE, "100% of '_quoted_' \\ text"), _ctx())
        for query in ("%", "_", "'; DELETE FROM memory_facts; --", "\\", "[a-z]*", ".*"):
            found = await store.lookup(ALICE, query, 10, _ctx())
            assert {f.fact_id for f in found} == {plain.fact_id, odd.fact_id}  # no error, nothing lost
        [first, _] = await store.lookup(ALICE, "quoted", 10, _ctx())
        assert first.fact_id == odd.fact_id
        assert odd.status is AckStatus.STORED
    finally:
        await store.aclose()


# '[[1, 0, ...]]': a session given as a number (a session "1" stored so by hand) was read as naming
# no session, so a session erasure completed and kept the fact; it cannot be told, so it is damaged.
@pytest.mark.parametrize(
    "provenance", ['[{"a": 1}]', "[" * 100_000 + "]" * 100_000, '[[1, 0, "sha256:' + "0" * 64 + '"]]']
)
async def test_a_damaged_provenance_fails_reads_and_a_session_erasure_typed_and_erases_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, provenance: str
) -> None:
    # A provenance of objects raised a bare KeyError on read; one nested 100,000 deep raised
    # RecursionError out of a session erasure, which then never completed.
    from agentium_harness.plugin_api import EraseTarget, GroupRef

    store = PostgresMemoryStore(app_config)
    try:
        cites = await store.remember(
            MemoryFact(ALICE, "cites s1", provenance=[GroupRef("s1", 0, "sha256:" + "0" * 64)]), _ctx()
        )
        other = await store.remember(MemoryFact(ALICE, "damaged later"), _ctx())
        assert cites.fact_id is not None and other.fact_id is not None
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET provenance = %s WHERE fact_id = %s',
            (provenance, other.fact_id),
        )
        with pytest.raises(PostgresMemoryError):
            await store.list_facts(ALICE, 10, _ctx())
        # The damaged fact names no session as stored: whether it came from s1 cannot be told.
        with pytest.raises(PostgresMemoryError, match=f"{other.fact_id}.*cannot be told"):
            await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        row = admin.execute(f'SELECT count(*) FROM "{schema}".memory_facts').fetchone()
        assert row is not None and row[0] >= 2  # nothing erased
    finally:
        await store.aclose()


async def test_a_session_erasure_removes_the_tombstone_of_a_fact_forgotten_earlier(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    """The tombstone keeps the session ids (only) its provenance named, so a session erasure finds it."""
    from agentium_harness.plugin_api import EraseTarget, GroupRef

    store = PostgresMemoryStore(app_config)
    try:
        ref = GroupRef("s1", 0, "sha256:" + "a" * 64)
        ack = await store.remember(MemoryFact(ALICE, "from s1, forgotten", provenance=[ref]), _ctx())
        assert ack.fact_id is not None
        await store.forget(ALICE, ack.fact_id, _ctx())
        history = await store.history(ALICE, ack.fact_id, _ctx())
        assert all(r.fact.provenance == () and r.text == "" for r in history)
        rows = admin.execute(f'SELECT provenance FROM "{schema}".memory_facts ORDER BY revision').fetchall()
        assert rows == [("[]",), ('[["s1"]]',)]
        report = await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        assert {(c.kind, c.count) for c in report.counts} == {("fact", 1), ("revision", 2)}
        assert admin.execute(f'SELECT count(*) FROM "{schema}".memory_facts').fetchone() == (0,)
    finally:
        await store.aclose()


async def test_a_fact_row_grown_past_its_bounds_is_refused_before_it_is_transferred(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # A row changed behind the store's back (the application role may UPDATE it within its
    # tenant) with a text past MAX_FACT_BYTES or a provenance past max_row_bytes was read whole and
    # returned (text) or decoded (provenance, up to 256 MiB): reads must be size capped, typed.
    from agentium_harness.plugin_api import MAX_FACT_BYTES, EraseTarget

    store = PostgresMemoryStore(attrs.evolve(app_config, max_row_bytes=64 * 1024))
    try:
        ack = await store.remember(MemoryFact(ALICE, "the sky is blue"), _ctx())
        assert ack.fact_id is not None
        fact_id = ack.fact_id
        admin.execute(
            f'UPDATE "{schema}".memory_facts SET text = %s WHERE fact_id = %s',
            ("sky " * MAX_FACT_BYTES, fact_id),
        )
        for read in (
            lambda: store.list_facts(ALICE, 10, _ctx()),
            lambda: store.lookup(ALICE, "sky", 10, _ctx()),
            lambda: store.history(ALICE, fact_id, _ctx()),
        ):
            with pytest.raises(PostgresRowTooLargeError, match="not transferred"):
                await read()
        admin.execute(
            f"UPDATE \"{schema}\".memory_facts SET text = 'the sky is blue', provenance = %s "
            "WHERE fact_id = %s",
            ("[" + ",".join(['["s1"]'] * 20_000) + "]", fact_id),
        )
        with pytest.raises(PostgresRowTooLargeError):
            await store.list_facts(ALICE, 10, _ctx())
        with pytest.raises(PostgresMemoryError):
            await store.forget(ALICE, fact_id, _ctx())
        with pytest.raises(PostgresMemoryError, match="cannot be told"):
            await store.erase(EraseTarget.session("acme", "alice", "s1"), _ctx())
        row = admin.execute(f'SELECT count(*), min(status) FROM "{schema}".memory_facts').fetchone()
        assert row == (1, "current")  # nothing forgotten, nothing erased
    finally:
        await store.aclose()


async def test_a_scope_or_context_of_the_wrong_type_is_refused_typed_and_changes_nothing(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str
) -> None:
    # Each raised a bare AttributeError ('NoneType' object has no attribute 'tenant').
    from agentium_harness import InvalidArgumentError

    store = PostgresMemoryStore(app_config)
    try:
        ack = await store.remember(MemoryFact(ALICE, "kept as it is"), _ctx())
        fact_id = str(ack.fact_id)
        before = admin.execute(f'SELECT * FROM "{schema}".memory_facts').fetchall()
        replacement = MemoryFact(ALICE, "changed")
        for call in (
            lambda: store.lookup(None, "kept", 5, _ctx()),  # type: ignore[arg-type]
            lambda: store.list_facts("acme/alice", 5, _ctx()),  # type: ignore[arg-type]
            lambda: store.history(None, fact_id, _ctx()),  # type: ignore[arg-type]
            lambda: store.forget(None, fact_id, _ctx()),  # type: ignore[arg-type]
            lambda: store.correct(None, fact_id, replacement, _ctx()),  # type: ignore[arg-type]
            lambda: store.list_facts(ALICE, 5, None),  # type: ignore[arg-type]
            lambda: store.remember(replacement, None),  # type: ignore[arg-type]
        ):
            with pytest.raises(InvalidArgumentError):
                await call()
        assert admin.execute(f'SELECT * FROM "{schema}".memory_facts').fetchall() == before
    finally:
        await store.aclose()


async def test_concurrent_corrections_and_a_forget_of_one_fact_apply_one_after_another(
    app_config: PostgresConfig, admin: psycopg.Connection[Any], schema: str, pg_server: Any
) -> None:
    # Writers locked the latest revision only: the second of two concurrent writers re-read the
    # revision the first had superseded, wrote the same next revision and failed with a bare
    # "duplicate key" PostgresMemoryError, a forget included.
    from pg_server import APP_USER

    store = PostgresMemoryStore(app_config)
    try:
        ack = await store.remember(MemoryFact(ALICE, "version zero"), _ctx())
        fact_id = str(ack.fact_id)
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
            holder.execute(f'SELECT 1 FROM "{schema}".memory_facts WHERE fact_id = %s FOR UPDATE', (fact_id,))
            async with anyio.create_task_group() as tg:
                calls = (
                    (
                        "first",
                        lambda: store.correct(ALICE, fact_id, MemoryFact(ALICE, "version one"), _ctx()),
                    ),
                    (
                        "second",
                        lambda: store.correct(ALICE, fact_id, MemoryFact(ALICE, "version two"), _ctx()),
                    ),
                    ("forget", lambda: store.forget(ALICE, fact_id, _ctx())),
                )
                for n, (name, call) in enumerate(calls, start=1):
                    tg.start_soon(write, name, call)
                    with anyio.fail_after(30):
                        await waiting(n)
                holder.rollback()
        # By name, not by finishing order: the three commit one after another in the lock's queue
        # order, but their tasks may resume on the loop in any order once the holder lets go.
        named = [results[name] for name in ("first", "second", "forget")]
        assert [(getattr(r, "status", r), getattr(r, "revision", None)) for r in named] == [
            (AckStatus.STORED, 2),
            (AckStatus.STORED, 3),
            (AckStatus.STORED, 4),
        ], results
        history = await store.history(ALICE, fact_id, _ctx())
        assert [h.revision for h in history] == [1, 2, 3, 4]
        assert all(h.text == "" for h in history)  # forgotten, every revision
    finally:
        await store.aclose()


async def test_refusals_name_no_fact_id_in_their_text_and_carry_it_as_fact_id(
    app_config: PostgresConfig,
) -> None:
    # A fact id is content (named in a text only with content capture, which a store cannot see):
    # "no fact 'm-...' in this tenant and user" named it to every log the host writes errors to.
    from agentium_harness import MemoryFactForgottenError, MemoryFactNotFoundError

    store = PostgresMemoryStore(app_config)
    try:
        ack = await store.remember(MemoryFact(ALICE, "the pump is red"), _ctx())
        assert ack.fact_id is not None
        missing = "m-" + "7" * 32
        for fact_id in (ack.fact_id, missing):
            with pytest.raises(MemoryFactNotFoundError) as refused:
                await store.forget(MemoryScope("acme", "mallory"), fact_id, _ctx())
            assert fact_id not in str(refused.value) and refused.value.fact_id == fact_id
        await store.forget(ALICE, ack.fact_id, _ctx())
        with pytest.raises(MemoryFactForgottenError) as forgotten:
            await store.correct(ALICE, ack.fact_id, MemoryFact(ALICE, "the pump is blue"), _ctx())
        assert ack.fact_id not in str(forgotten.value) and forgotten.value.fact_id == ack.fact_id
    finally:
        await store.aclose()
