"""A session erased whole and used again: a Redis store that missed the erasure shows nothing of it.

The store here is the real Redis recall store on a real server, but its
``erase`` never reaches the server (as when it was down during the
erasure), so the erased session's index rows stay. The session id is then
used again; its groups start at seq 0 under the same source ids. The
engine hides every excerpt of the session the archive does not vouch for,
because the tenant's erasure index says the session was erased whole.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    DEFAULT_ERASE_BATCH,
    EraseReport,
    ModelRequest,
    ModelResponse,
    OpContext,
)
from agentium_recall_redis import RedisRecallConfig, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), statement="DSR-1")
SECRET = "My quince account password is tangerine-42."
FRESH = "My quince locker code is blueberry-7."


class Recording(ScriptedProvider):
    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(request, ctx)


class MissedErasure(RedisRecallStore):
    """The real store, whose erase never reached the server: it reports nothing held, nothing removed."""

    async def erase(
        self,
        target: EraseTarget,
        ctx: OpContext,
        *,
        dry_run: bool = False,
        max_items: int = DEFAULT_ERASE_BATCH,
    ) -> EraseReport:
        return EraseReport()


async def test_an_erased_sessions_excerpt_never_reaches_the_model_when_the_id_is_used_again(
    server: ServerProcess,
) -> None:
    recall = MissedErasure(RedisRecallConfig(url=server.url, key_prefix=new_prefix()))
    provider = Recording()
    runtime: Any = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        with anyio.fail_after(30):
            for i in range(6):
                await runtime.run(ANA, "s1", SECRET if i == 4 else f"Unrelated chatter number {i}.")
            target = EraseTarget.session("acme", "ana", "s1")
            erased = await runtime.erase(target, reason="data-subject request", attestation=OPERATOR)
            assert erased.tombstone is not None and erased.tombstone.state is ErasureState.COMPLETE
            for text in (FRESH, "More chatter.", "Still more chatter."):
                await runtime.run(ANA, "s1", text)
            run = await runtime.run(ANA, "s1", "What is my quince account password or locker code?")
    finally:
        await runtime.aclose()
        await recall.aclose()
    assert run.status is RunStatus.COMPLETED
    request = provider.requests[-1]
    assert "tangerine" not in repr(request)
    blocks = {b.source_id: b.content for b in request.sources}
    # The new session's own group is recalled, rendered with its roles; the erased one's is not there.
    assert blocks.get("group/acme/ana/s1/0", "").startswith("user: " + FRESH), blocks
    assert "group/acme/ana/s1/4" not in blocks
    notes = [d.message for d in run.diagnostics if d.code == "recall_note"]
    assert any("erased whole before" in n and "group/acme/ana/s1/4" in n for n in notes), notes
