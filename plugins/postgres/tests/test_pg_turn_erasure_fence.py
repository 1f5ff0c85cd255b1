"""A run never sends the model history another process erased after the run loaded it (PostgreSQL).

Two runtimes over one database stand for two processes. Runtime A's turn
asks for a tool; while the tool runs, runtime B erases the session (or its
user) to completion. Before its next model call, A reads the erasure ledger
in the database again and stops (``ErasedDuringRunError``): the model is
never handed the erased history, and nothing is committed (docs/erasure.md).
"""

from __future__ import annotations

import pytest
from pg_race import pg_runtime

from agentium_harness import (
    CommitState,
    ErasedDuringRunError,
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    VerifiedIdentity,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing.erasure_races import HeldTool, RecordingProvider, tool_turn_while
from agentium_postgres import PostgresConfig

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")
DEPLOY = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}


@pytest.mark.parametrize("level", ["session", "user"])
async def test_a_pg_run_stops_before_sending_history_erased_since_its_load(
    level: str, app_config: PostgresConfig
) -> None:
    held = HeldTool(result="deployed qzresultq")
    provider = RecordingProvider(["noted", DEPLOY, "Deployed."])
    mine = pg_runtime(provider, app_config, tools=held.registry())
    other = pg_runtime(ScriptedProvider(replies=["ok"], cycle=True), app_config)
    target = (
        EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.user("acme", "ana")
    )
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")

        async def erase() -> None:
            done = await other.erase(target, reason="dsr", attestation=OPERATOR)
            assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE

        error = await tool_turn_while(mine, ANA, "s1", "deploy it", held, erase)
        assert len(provider.sent) == 2, provider.sent[2:]  # the priming turn's call, and the tool call's
        assert isinstance(error, ErasedDuringRunError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        page = await other.read_history(ANA, "s1", max_groups=100, view=False)
        assert "qz" not in repr(page)
    finally:
        await mine.aclose()
        await other.aclose()
