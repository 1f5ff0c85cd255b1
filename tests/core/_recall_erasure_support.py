"""Shared parts of the tests of recall after an erasure: a recording model, a store that missed the erasure.

The erased-incarnation, erased-groups and erasure-check-bounds tests each
run a real runtime over in-memory storage whose recall store still answers
with erased text, and check what reached the model. Everything here is real
but the one call a test names: a store's ``erase`` that never reached it.
"""

from __future__ import annotations

from typing import Any

from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.recall_groups import UNATTRIBUTED
from agentium_harness._ports.erasure import DEFAULT_ERASE_BATCH, EraseReport
from agentium_harness._ports.erasure import EraseTarget as Target
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), statement="DSR-1")
SECRET = "My quince account password is tangerine-42."
QUESTION = "when does the vpn certificate expire"


class Recording(ScriptedProvider):
    """A scripted model answering "noted", keeping every request it was sent."""

    capabilities = ScriptedProvider.capabilities

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.requests: list[object] = []

    async def complete(self, request: object, ctx: OpContext) -> object:
        self.requests.append(request)
        return await super().complete(request, ctx)  # type: ignore[arg-type]


class SourceRecording(ScriptedProvider):
    """Answers ``noted``; keeps every source block it is handed, rendered."""

    def __init__(self) -> None:
        super().__init__(replies=["noted"], cycle=True)
        self.sources: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.sources.extend(block.render() for block in request.sources)
        return await super().complete(request, ctx)


class MissedErasure:
    """Mixed into a real built-in recall store: its ``erase`` never reaches it (the store was down).

    Every other call is the real store's. Its erase reports nothing held and
    nothing removed, as a replica that missed the erasure would, so the
    erasure completes and its index entries stay.
    """

    async def erase(
        self, target: Target, ctx: OpContext, *, dry_run: bool = False, max_items: int = DEFAULT_ERASE_BATCH
    ) -> EraseReport:
        return EraseReport()


def recall_runtime(provider: Any, recall: Any, *, session_store: Any = None, **kw: Any) -> Any:
    """A runtime over an in-memory archive with ``recall``, one group resident (``kw`` overrides)."""
    kw.setdefault("archive", InMemoryArchive())
    kw.setdefault("limits", RuntimeLimits(resident=ResidentLimits(max_groups=1)))
    return create_harness_runtime(
        provider=provider,
        session_store=InMemorySessionStore() if session_store is None else session_store,
        recall=recall,
        **kw,
    )


async def chatter(runtime: Any, turns: int, secret_at: int) -> None:
    """``turns`` runs of ana's session s1, turn ``secret_at`` saying :data:`SECRET`, the others chatter."""
    for i in range(turns):
        await runtime.run(ANA, "s1", SECRET if i == secret_at else f"Unrelated chatter number {i}.")


async def erase_completely(runtime: Any, target: EraseTarget) -> None:
    """The operator erases ``target``; the erasure completes (the store that missed it says nothing held)."""
    erased = await runtime.erase(target, reason="data-subject request", attestation=OPERATOR)
    assert erased.tombstone is not None and erased.tombstone.state is ErasureState.COMPLETE


def hidden_with_a_note(run: Any, provider: Recording, source_id: str) -> dict[str, str]:
    """Check the model's last request: no erased text, no ``source_id``, nothing on one line; a note says so.

    Returns the request's source blocks (id to content) for the test's own checks.
    """
    request = provider.requests[-1]
    assert "tangerine" not in repr(request)
    blocks: dict[str, str] = {b.source_id: b.content for b in request.sources}  # type: ignore[attr-defined]
    assert source_id not in blocks
    assert not any(c.startswith(UNATTRIBUTED) for c in blocks.values())
    notes = [d.message for d in run.diagnostics if d.code == "recall_note"]
    assert any("erased" in n and source_id in n for n in notes), notes
    return blocks
