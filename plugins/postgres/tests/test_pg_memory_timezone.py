"""Memory facts valid from the first instant or until the last one a fact may name, under any TimeZone.

A validity bound may be any UTC time from year 1 to 9999. PostgreSQL sends a
``timestamptz`` in the session's ``TimeZone`` (the server's default, the
role's or ``PGTZ``): west of UTC ``0001-01-01T00:00Z`` is a BC date, east of
it ``9999-12-31T23:00Z`` falls in year 10000, and psycopg can load neither.
Every read of such a fact failed there, and so did the upgrade to schema
version 4 (it reads every row to digest it). The store and the upgrade read
in UTC for their own transaction, whatever the session's zone.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentium_harness.plugin_api import EraseTarget, GroupRef, MemoryFact, MemoryScope, OpContext
from agentium_postgres import PostgresConfig, PostgresMemoryStore

pytestmark = pytest.mark.anyio

BOB = MemoryScope("globex", "bob")
FIRST = datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
REF = GroupRef("s1", 0, "sha256:" + "1" * 64)


def _ctx() -> OpContext:
    return OpContext.with_timeout(30)


@pytest.mark.parametrize("zone", ["America/New_York", "Pacific/Kiritimati"])
async def test_facts_at_the_validity_bounds_read_back_in_any_session_time_zone(
    app_config: PostgresConfig, monkeypatch: pytest.MonkeyPatch, zone: str
) -> None:
    store = PostgresMemoryStore(app_config)
    try:
        always = MemoryFact(BOB, "always was", valid_from=FIRST, provenance=[REF])
        early = await store.remember(always, _ctx())
        late = await store.remember(MemoryFact(BOB, "until the end", valid_until=LAST), _ctx())
    finally:
        await store.aclose()
    monkeypatch.setenv("PGTZ", zone)  # libpq sets the session's TimeZone from it
    store = PostgresMemoryStore(app_config)
    try:
        listed = await store.list_facts(BOB, 10, _ctx())
        assert {(f.text, f.fact.valid_from, f.fact.valid_until) for f in listed} == {
            ("always was", FIRST, None),
            ("until the end", None, LAST),
        }
        found = await store.lookup(BOB, "always end", 10, _ctx(), at=datetime(2030, 1, 1, tzinfo=UTC))
        assert len(found) == 2
        (revision,) = await store.history(BOB, early.fact_id, _ctx())
        assert revision.fact.valid_from == FIRST
        await store.correct(BOB, late.fact_id, MemoryFact(BOB, "until later", valid_until=LAST), _ctx())
        await store.forget(BOB, early.fact_id, _ctx())
        report = await store.erase(EraseTarget.session("globex", "bob", "s1"), _ctx())
        assert report.count("fact") == 1
        (current,) = await store.list_facts(BOB, 10, _ctx())
        assert (current.text, current.fact.valid_until) == ("until later", LAST)
    finally:
        await store.aclose()
