"""The turn fence on PostgreSQL: a host document another process deletes while a run carries its excerpt.

Recall puts document excerpts into a run's request once and every model call
sends them again. A ``delete_document`` by another process (its own
adapters over the same database) between two of the run's calls is not an
erasure; the next call sent the deleted text again. The fence now validates
the carried documents again before each later call. The test body is
core's :func:`~agentium_harness.testing.erasure_races.document_deleted_mid_run`.
"""

from __future__ import annotations

from functools import partial

import pytest
from pg_race import pg_runtime

from agentium_harness.testing.erasure_races import document_deleted_mid_run
from agentium_postgres import PostgresConfig, PostgresRecallStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("deletes", [True, False], ids=["deleted", "another-deleted"])
async def test_a_document_another_process_deleted_is_not_sent_again(
    app_config: PostgresConfig, deletes: bool
) -> None:
    build = partial(pg_runtime, config=app_config)
    await document_deleted_mid_run(build, partial(PostgresRecallStore, app_config), deletes=deletes)
