"""A run that stops inside a verification revision commits the verdicts it reached (R26, R27).

The first verdict failed and the model was asked to revise; the revision's
model call then fails (or the host cancels the run while it waits). The tools
that ran are committed, and with them the verification as it stood: the
failing verdict and its evidence, then an ``unknown`` attempt for the
revision that never finished. Before, the group was committed with no
verification record at all, as if the completion had never been judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import pytest

from agentium_harness import (
    AgentiumError,
    CommitState,
    EffectLevel,
    Message,
    Role,
    Scope,
    Tool,
    ToolCall,
    ToolRegistry,
    Verdict,
    VerificationRecord,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    ProviderError,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
EVIDENCE = EvidenceEntry("artifact", "out.txt", "fail: sha256 differs from the task's")


class Script(ModelProvider):
    """A tool call, the claim, then per revision call: fail (``"fail"``) or wait forever (``"hang"``)."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True, deterministic=True)

    def __init__(self, then: str) -> None:
        self.replies: list[Message] = [
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("w1", "write", {"text": "draft"}),)),
            Message(Role.ASSISTANT, "Done: out.txt is final."),
        ]
        self.then = then
        self.waiting = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if self.replies:
            return ModelResponse(self.replies.pop(0))
        if self.then == "hang":
            self.waiting.set()
            await anyio.sleep_forever()
        raise ProviderError("the model endpoint went away")


class Fails(CompletionVerifier):
    """Every verdict is ``fail``, on the same evidence."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        return VerificationResult(Verdict.FAIL, [EVIDENCE], "out.txt differs")


async def _write(args: dict[str, Any]) -> str:
    return "written"


def _runtime(provider: Script, store: InMemorySessionStore) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        verifier=Fails(),
        tools=ToolRegistry([Tool("write", _write, EffectLevel.WRITE)]),
        completion_policy=verified_completion_policy(on_fail="revise", max_revisions=2),
    )


async def _committed(store: InMemorySessionStore) -> Sequence[Any]:
    stored = await store.load(Scope("acme", "ana", "task-1").session_key, OpContext.with_timeout(30))
    assert stored is not None
    return stored.snapshot.resident


def _assert_judged(record: VerificationRecord | None) -> None:
    """The failing verdict with its evidence, then the revision the run stopped in, unknown."""
    assert record is not None, "the completion was judged, but the committed record says it never was"
    assert [a.verdict for a in record.attempts] == [Verdict.FAIL, Verdict.UNKNOWN]
    assert record.attempts[0].evidence == (EVIDENCE,)
    assert record.attempts[0].reason == "out.txt differs"
    assert record.attempts[1].revision == 1
    assert "revision 1" in record.attempts[1].reason and "not verified" in record.attempts[1].reason
    assert record.verdict is Verdict.UNKNOWN and not record.accepted
    assert record.revisions == 1 and record.policy == "revise(max=2, effects=no)"


async def test_a_revision_whose_model_call_fails_commits_the_verdicts_so_far() -> None:
    store = InMemorySessionStore()
    async with _runtime(Script("fail"), store) as runtime:
        with pytest.raises(AgentiumError) as raised:
            await runtime.run(ANA, "task-1", "Write out.txt", grants=["write"], completion=True)
    assert raised.value.commit_state is CommitState.COMMITTED
    [group] = await _committed(store)
    assert group.retained.interruption is not None
    _assert_judged(group.retained.verification)
    run_result = raised.value.run_result
    assert run_result is not None and run_result.verification == group.retained.verification


async def test_a_run_cancelled_in_a_revision_commits_the_verdicts_so_far() -> None:
    store = InMemorySessionStore()
    provider = Script("hang")
    async with _runtime(provider, store) as runtime:
        async with anyio.create_task_group() as tasks:

            async def run() -> None:
                await runtime.run(ANA, "task-1", "Write out.txt", grants=["write"], completion=True)

            tasks.start_soon(run)
            with anyio.fail_after(30):
                await provider.waiting.wait()  # the revision's model call is under way
            tasks.cancel_scope.cancel()
    [group] = await _committed(store)
    _assert_judged(group.retained.verification)
