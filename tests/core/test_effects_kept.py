"""An effect that ran is never dropped (issue 21, item 1).

A tool that ran changed the world. When the turn then stops — the provider
fails on a later step, or the recall policy stops the turn at the commit
fence — the tool calls and their results are committed as the session's
group, without an answer, with the reason in the retained record; and
whatever the outcome, the run reports every tool call and the usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _effects_support import DEPLOY, AlwaysFails

from agentium_harness import (
    CommitState,
    ContractViolationError,
    EffectLevel,
    InterruptionCause,
    ProviderError,
    RunStatus,
    SessionKey,
    SourceOwner,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness._engine.turn import MAX_TOOL_CALLS
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import (
    ModelRequest,
    ModelResponse,
    OpContext,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
MINE = SourceOwner("acme", "ana", "s1")


class FailsOnCall(ScriptedProvider):
    """The scripted provider, raising a connection error on model call number ``fail_on`` (1-based)."""

    def __init__(self, replies: list[Any], fail_on: int) -> None:
        super().__init__(replies=replies)
        self.fail_on = fail_on
        self.made = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == self.fail_on:
            raise ConnectionError("upstream reset the connection")
        return await super().complete(request, ctx)


def _deploy_tool(log: list[str]) -> ToolRegistry:
    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        return "deployed v2 to prod"

    return ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])


def _runtime(provider: Any, tools: ToolRegistry, store: Any = None, **kw: Any) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store or InMemorySessionStore(),
        tools=tools,
        **kw,
    )


async def _stored(runtime: Any) -> Any:
    return await runtime.session_store.load(KEY, OpContext())


async def test_a_provider_failure_after_a_write_tool_ran_commits_what_ran() -> None:
    log: list[str] = []
    provider = FailsOnCall([DEPLOY, "Deployed."], fail_on=2)
    runtime = _runtime(provider, _deploy_tool(log))
    with pytest.raises(ProviderError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    error = caught.value
    assert log == ["deployed to prod"]
    assert error.commit_state is CommitState.COMMITTED
    assert "committed" in str(error) and "not changed" not in str(error)
    report = error.run_result
    assert report is not None and report.status is RunStatus.INTERRUPTED and report.committed
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert report.usage.input_tokens and report.usage.output_tokens  # the first model call counts
    assert report.group_seq == 0 and report.retained.interruption is not None
    assert report.retained.interruption.cause is InterruptionCause.PROVIDER_FAILED
    assert "upstream reset the connection" in report.retained.interruption.detail
    # Read back through the session store: the group holds the call and its result, no answer.
    stored = await _stored(runtime)
    group = stored.snapshot.resident[0]
    assert group.is_complete and group.retained == report.retained
    assert [m.role.value for m in group.messages] == ["user", "assistant", "tool"]
    assert group.messages[-1].content == "deployed v2 to prod"
    view = await runtime.inspect_session(ANA, "s1")
    assert view.interrupted == ((0, report.retained.interruption),)
    # The next turn's model sees that the deploy already ran, so a retry does not deploy blindly.
    again = ScriptedProvider(replies=["It is already deployed."])
    runtime.provider = again
    result = await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    assert result.group_seq == 1 and log == ["deployed to prod"]
    assert "deployed v2 to prod" in [m.content for m in again.calls[0].history]


async def test_a_provider_failure_before_any_tool_ran_commits_nothing_and_reports_usage() -> None:
    refused = {"content": "", "tool_calls": [{"id": "c1", "name": "rm_rf"}]}
    provider = FailsOnCall([refused, "Done."], fail_on=2)
    runtime = _runtime(provider, _deploy_tool([]))
    with pytest.raises(ProviderError) as caught:
        await runtime.run(ANA, "s1", "clean up", grants=["deploy"])
    error = caught.value
    assert error.commit_state is CommitState.NOT_COMMITTED
    report = error.run_result
    assert report is not None and not report.committed and report.group_seq is None
    # A refused call never ran (no effect), but it is still reported, and so is the usage.
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("rm_rf", ToolStatus.REFUSED_UNKNOWN)]
    assert report.usage.input_tokens and report.usage.output_tokens
    assert await _stored(runtime) is None


async def test_a_contract_violating_second_reply_keeps_the_first_tools_effect() -> None:
    log: list[str] = []
    # Over MAX_TOOL_CALLS (an id named twice in one reply was the violation here; such a call
    # now runs under an id of its own, test_run_call_id_reuse.py).
    calls = [{"id": f"d{n}", "name": "deploy"} for n in range(MAX_TOOL_CALLS + 1)]
    too_many = {"content": "", "tool_calls": calls}
    runtime = _runtime(ScriptedProvider(replies=[DEPLOY, too_many]), _deploy_tool(log))
    with pytest.raises(ContractViolationError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    assert log == ["deployed to prod"]  # the bad reply ran nothing; the first call did run
    assert caught.value.commit_state is CommitState.COMMITTED
    stored = await _stored(runtime)
    assert [m.role.value for m in stored.snapshot.resident[0].messages] == ["user", "assistant", "tool"]


async def test_a_provider_failure_in_a_revision_keeps_the_turns_tools() -> None:
    log: list[str] = []
    provider = FailsOnCall([DEPLOY, "Deployed.", "Revised."], fail_on=3)
    runtime = _runtime(provider, _deploy_tool(log), verifier=AlwaysFails())
    policy = verified_completion_policy(on_fail="revise", max_revisions=2)
    with pytest.raises(ProviderError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"], completion=policy)
    assert caught.value.commit_state is CommitState.COMMITTED
    report = caught.value.run_result
    assert report is not None and [o.name for o in report.tool_outcomes] == ["deploy"]
    group = (await _stored(runtime)).snapshot.resident[0]
    # Cut after the last tool result: the unaccepted answer and the revision request are not history.
    assert [m.role.value for m in group.messages] == ["user", "assistant", "tool"]


async def test_a_commit_fence_stop_after_a_write_tool_ran_commits_what_ran(tmp_path: Path) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await recall.index_document(MINE, "runbook", "The release train leaves every Thursday.", OpContext())
    edits: list[str] = []

    async def move_train(args: Any) -> str:
        # The write changes the very source the turn recalled: the commit fence finds it changed.
        await recall.index_document(MINE, "runbook", "The release train leaves every Friday.", OpContext())
        edits.append("moved")
        return "runbook updated"

    tools = ToolRegistry([Tool("move_train", move_train, EffectLevel.WRITE)])
    script = [{"content": "", "tool_calls": [{"id": "m1", "name": "move_train"}]}, "Moved to Thursday."]
    runtime = _runtime(ScriptedProvider(replies=script), tools, recall=recall)
    try:
        result = await runtime.run(ANA, "s1", "move the release train", grants=["move_train"])
        assert edits == ["moved"]
        assert result.status is RunStatus.STOPPED and result.has("recall_source_changed")
        assert result.commit_state is CommitState.COMMITTED and result.group_seq == 0
        assert result.output == ""  # the answer rests on a changed source and is withheld
        assert [(o.name, o.status) for o in result.tool_outcomes] == [("move_train", ToolStatus.OK)]
        assert result.usage.input_tokens and result.usage.output_tokens
        interruption = result.retained.interruption
        assert interruption is not None and interruption.cause is InterruptionCause.RECALL_STOPPED
        group = (await _stored(runtime)).snapshot.resident[0]
        assert [m.role.value for m in group.messages] == ["user", "assistant", "tool"]
        assert "Moved to Thursday." not in [m.content for m in group.messages]
        assert group.retained == result.retained and result.has("turn_interrupted_committed")
    finally:
        await recall.aclose()


async def test_a_commit_fence_stop_without_tools_commits_nothing_but_reports_usage(tmp_path: Path) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await recall.index_document(MINE, "runbook", "The release train leaves every Thursday.", OpContext())

    class EditsWhileAnswering(ScriptedProvider):
        async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
            await recall.index_document(MINE, "runbook", "The release train leaves every Friday.", ctx)
            return await super().complete(request, ctx)

    runtime = _runtime(EditsWhileAnswering(replies=["Thursday."]), ToolRegistry(), recall=recall)
    try:
        result = await runtime.run(ANA, "s1", "when does the release train leave")
        assert result.status is RunStatus.STOPPED and result.commit_state is CommitState.NOT_COMMITTED
        assert result.group_seq is None and result.tool_outcomes == ()
        assert result.usage.input_tokens and result.usage.output_tokens  # the model call happened
        assert await _stored(runtime) is None
    finally:
        await recall.aclose()
