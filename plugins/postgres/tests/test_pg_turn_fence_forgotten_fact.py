"""The turn fence on PostgreSQL: a memory fact another process forgets while a run carries it.

A run injects memory facts once and every model call of it sends them again.
A plain ``forget`` by another process (its own adapters over the same
database) between two of the run's calls is not an erasure; the next call
sent the forgotten fact again. The fence now reads each carried fact's
history back before each later call. The test body is core's
:func:`~agentium_harness.testing.erasure_races.fact_forgotten_mid_run`.
"""

from __future__ import annotations

from functools import partial

import pytest
from pg_race import pg_runtime

from agentium_harness.testing.erasure_races import fact_forgotten_mid_run
from agentium_postgres import PostgresConfig, PostgresMemoryStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("forgets", [True, False], ids=["forgotten", "another-forgotten"])
async def test_a_fact_another_process_forgot_is_not_sent_again(
    app_config: PostgresConfig, forgets: bool
) -> None:
    build = partial(pg_runtime, config=app_config)
    await fact_forgotten_mid_run(build, partial(PostgresMemoryStore, app_config), forgets=forgets)
