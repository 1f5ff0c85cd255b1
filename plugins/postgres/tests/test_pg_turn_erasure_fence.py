"""A run never sends the model history another process erased after the run loaded it (PostgreSQL).

Two runtimes over one database stand for two processes. Runtime A's turn
asks for a tool; while the tool runs, runtime B erases the session (or its
user) to completion. Before its next model call, A reads the erasure ledger
in the database again and stops (``ErasedDuringRunError``): the model is
never handed the erased history, and nothing is committed (docs/erasure.md).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_harness import (
    CommitState,
    EffectLevel,
    ErasedDuringRunError,
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "probe")
DEPLOY = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}


class Recording(ScriptedProvider):
    """A scripted model keeping the text of every request's history and turn."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=replies)
        self.sent: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.sent.append("\n".join(m.content for m in (*request.history, *request.turn)))
        return await super().complete(request, ctx)


def _runtime(provider: Any, config: PostgresConfig, tools: ToolRegistry | None = None) -> Any:
    archive, store = PostgresArchive(config), PostgresSessionStore(config)
    extra: dict[str, Any] = {} if tools is None else {"tools": tools}
    return create_harness_runtime(
        provider=provider, archive=archive, session_store=store, owned=(archive, store), **extra
    )


@pytest.mark.parametrize("level", ["session", "user"])
async def test_a_pg_run_stops_before_sending_history_erased_since_its_load(
    level: str, app_config: PostgresConfig
) -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed qzresultq"

    provider = Recording(["noted", DEPLOY, "Deployed."])
    mine = _runtime(provider, app_config, ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]))
    other = _runtime(ScriptedProvider(replies=["ok"], cycle=True), app_config)
    target = (
        EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.user("acme", "ana")
    )
    outcome: list[Any] = []
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")

        async def turn() -> None:
            try:
                outcome.append(await mine.run(ANA, "s1", "deploy it", grants=["deploy"]))
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):
                await entered.wait()
            done = await other.erase(target, reason="dsr", attestation=OPERATOR)
            assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE
            release.set()
        assert len(provider.sent) == 2, provider.sent[2:]  # the priming turn's call, and the tool call's
        (error,) = outcome
        assert isinstance(error, ErasedDuringRunError), error
        assert error.commit_state is CommitState.NOT_COMMITTED
        page = await other.read_history(ANA, "s1", max_groups=100, view=False)
        assert "qz" not in repr(page)
    finally:
        await mine.aclose()
        await other.aclose()
