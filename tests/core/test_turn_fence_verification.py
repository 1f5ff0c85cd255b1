"""A verification revision's model call never sends history erased while the verifier ran (docs/erasure.md).

The run's first turn answered; the verifier (host code, between model
calls) ran while another runtime erased the session to completion; it
asks for a revision. The revision's model call is one more call of the
run: the turn fence stops it (:class:`ErasedDuringRunError`), nothing is
committed and the erased text does not reach the provider again.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from _erasure_harness import ANA, OPERATOR, history_texts

from agentium_harness import (
    CommitState,
    ErasedDuringRunError,
    EraseTarget,
    ErasureState,
    Verdict,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness._ports.verify import (
    CompletionCandidate,
    CompletionVerifier,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio


class Recording(ScriptedProvider):
    """Answers ``done``; keeps the text of every request's history and turn."""

    def __init__(self) -> None:
        super().__init__(replies=["done"], cycle=True)
        self.sent: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.sent.append("\n".join(m.content for m in (*request.history, *request.turn)))
        return await super().complete(request, ctx)


class ErasingVerifier(CompletionVerifier):
    """Fails the first attempt (a revision is asked for) after ``erase()`` ran to completion."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    def __init__(self) -> None:
        self.erase: Any = None
        self.calls = 0

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        self.calls += 1
        if self.calls == 1 and self.erase is not None:
            await self.erase()
            return VerificationResult(Verdict.FAIL, (), "not yet")
        return VerificationResult(Verdict.PASS, (), "fine")


async def test_a_revision_is_not_asked_of_the_model_once_the_session_was_erased() -> None:
    archive, store = InMemoryArchive(), InMemorySessionStore()
    provider, verifier = Recording(), ErasingVerifier()
    mine = create_harness_runtime(provider=provider, archive=archive, session_store=store, verifier=verifier)
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    policy = verified_completion_policy(on_fail="revise", max_revisions=2)
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")

        async def erase() -> None:
            target = EraseTarget.session("acme", "ana", "s1")
            done = await other.erase(target, reason="dsr", attestation=OPERATOR)
            assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE

        verifier.erase = erase
        calls_before = len(provider.sent)
        with pytest.raises(ErasedDuringRunError) as caught:
            await mine.run(ANA, "s1", "finish it", completion=policy)
        assert verifier.calls == 1
        assert len(provider.sent) == calls_before + 1  # the first attempt only: no revision call
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert not [t for t in await history_texts(mine) if "qz" in t or "finish it" in t]
    finally:
        await mine.aclose()
        await other.aclose()
