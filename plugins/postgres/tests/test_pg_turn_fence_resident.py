"""The turn fence on PostgreSQL: resident history another process archived, then retention erased.

A run sends the resident history its load found on every model call. Another
process's turn on the same session archives that history, and retention can
then erase it, all between two of the run's calls; the next call sent the
erased text again. The fence now reads the snapshot's erased ranges (which
the groups erasure writes before it finishes) when the ledger moved. Two
runtimes over one database stand for two processes; the test body is
core's :func:`~agentium_harness.testing.erasure_races.resident_history_erased_mid_run`.
"""

from __future__ import annotations

from functools import partial

import pytest
from pg_race import pg_runtime

from agentium_harness.testing.erasure_races import resident_history_erased_mid_run
from agentium_postgres import PostgresConfig

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("stops", [True, False], ids=["resident-erased", "older-erased"])
async def test_resident_history_another_process_archived_and_retention_erased(
    app_config: PostgresConfig, stops: bool
) -> None:
    await resident_history_erased_mid_run(partial(pg_runtime, config=app_config), stops=stops)
