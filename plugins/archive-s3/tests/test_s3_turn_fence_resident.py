"""The turn fence on S3 (moto, Ceph RGW): resident history another process archived, then retention erased.

A run sends the resident history its load found on every model call. Another
process's turn on the same session archives that history, and retention can
then erase it, all between two of the run's calls; the next call sent the
erased text again. The fence now reads the snapshot's erased ranges (which
the groups erasure writes before it finishes) when the ledger moved. Two
runtimes over one bucket stand for two processes; the test body is core's
:func:`~agentium_harness.testing.erasure_races.resident_history_erased_mid_run`.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import HarnessRuntime, create_harness_runtime
from agentium_harness.plugin_api import ModelProvider
from agentium_harness.testing.erasure_races import resident_history_erased_mid_run

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("stops", [True, False], ids=["resident-erased", "older-erased"])
async def test_resident_history_another_process_archived_and_retention_erased(
    config: S3Config, stops: bool
) -> None:
    def build(provider: ModelProvider, **options: Any) -> HarnessRuntime:
        archive, store = S3Archive(config), S3SessionStore(config)
        return create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store), **options
        )

    await resident_history_erased_mid_run(build, stops=stops)
