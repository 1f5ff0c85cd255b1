"""The turn fence on S3 (moto, Ceph RGW): resident history another process archived, then retention erased.

A run sends the resident history its load found on every model call. Another
process's turn on the same session archives that history, and retention can
then erase it, all between two of the run's calls; the next call sent the
erased text again. The fence now reads the snapshot's erased ranges (which
the groups erasure writes before it finishes) when the ledger moved. Two
runtimes over one bucket stand for two processes.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import (
    CommitState,
    EffectLevel,
    ErasedDuringRunError,
    EraseTarget,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "dsr")
DEPLOY = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}
SECRET = "the vault code is qzvaultq"


class Recording(ScriptedProvider):
    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=replies)
        self.sent: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.sent.append("\n".join(m.content for m in (*request.history, *request.turn)))
        return await super().complete(request, ctx)


def _runtime(config: S3Config, provider: Any, **extra: Any) -> Any:
    archive, store = S3Archive(config), S3SessionStore(config)
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        **extra,
    )


@pytest.mark.parametrize("stops", [True, False], ids=["resident-erased", "older-erased"])
async def test_resident_history_another_process_archived_and_retention_erased(
    config: S3Config, stops: bool
) -> None:
    provider = Recording(["ok"] * 4 + [DEPLOY, "Deployed."])
    entered, release = anyio.Event(), anyio.Event()

    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed"

    mine = _runtime(config, provider, tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]))
    other = _runtime(
        config,
        ScriptedProvider(replies=["ok"], cycle=True),
        retention=RetentionPolicy(max_archived_groups=1 if stops else 3),
    )
    outcome: list[Any] = []
    try:
        for i in range(4):
            await mine.run(ANA, "s1", f"Remember this: {SECRET}." if i == 2 else f"Chatter {i}.")

        async def turn() -> None:
            try:
                outcome.append(await mine.run(ANA, "s1", "Deploy it.", grants=["deploy"]))
            except Exception as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):
                await entered.wait()
            # Two turns of another process archive groups 2 and 3 (the run's resident history);
            # retention then keeps one archived group (groups 0 to 2 go) or three (group 0 goes).
            await other.run(ANA, "s1", "Chatter four.")
            await other.run(ANA, "s1", "Chatter five.")
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result
            release.set()
        (got,) = outcome
        assert "qzvaultq" in provider.sent[4]  # the premise: the call asking for the tool had it
        if stops:
            assert isinstance(got, ErasedDuringRunError), repr(got)
            assert got.commit_state is CommitState.NOT_COMMITTED
            assert len(provider.sent) == 5, provider.sent[5:]
        else:
            assert not isinstance(got, ErasedDuringRunError), repr(got)
            assert len(provider.sent) == 6
    finally:
        await mine.aclose()
        await other.aclose()
