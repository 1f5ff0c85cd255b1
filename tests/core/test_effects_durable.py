"""What ran is durable even when the turn's own commit cannot land (issue 21, item 1).

A turn whose tool ran used to commit nothing when its commit then failed for
a reason that has nothing to do with the tool: another writer committed the
session first (compare-and-set conflict), ``aclose()`` cancelled the run, or
the host's publication hook refused the answer. The error carried what ran,
but nothing durable did. Now the tool calls and their results are committed
as the session's next group on top of whatever is there, with the reason in
the retained record's ``interruption``; and when even that cannot land, the
error says truthfully that nothing was committed and still carries them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY

from agentium_harness import (
    CommitState,
    EffectLevel,
    InterruptionCause,
    Message,
    ProviderError,
    PublicationRefusedError,
    RecallView,
    Role,
    RunStatus,
    RuntimeClosedError,
    RuntimeLimits,
    SessionConflictError,
    SessionKey,
    SourceOwner,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
MINE = SourceOwner("acme", "ana", "s1")
#: Generous: two cores shared by several test runs.
SLACK_S = 5.0
#: ``close_timeout_s`` where what ran is to be committed after a cancellation (the commit gets
#: ``CLOSE_SHARE`` of it) or the cancelled run is to stop: success paths, so generous; only the
#: settle (the run hangs) is to run out.
ROOMY_CLOSE_S = 30.0


def _sqlite_runtime(db: Path, provider: Any, tools: ToolRegistry | None = None, **kw: Any) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=SQLiteArchive(SQLiteConfig(path=str(db))),
        session_store=SQLiteSessionStore(SQLiteConfig(path=str(db))),
        tools=tools,
        **kw,
    )


def _deploy(log: list[str], also: Callable[[], Awaitable[None]] | None = None) -> ToolRegistry:
    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        if also is not None:
            await also()
        return "deployed v2 to prod"

    return ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])


def _roles(group: Any) -> list[str]:
    return [m.role.value for m in group.messages]


async def test_a_conflict_after_a_tool_ran_commits_what_ran_on_the_other_writers_head(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    other = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))
    note = [Message(Role.USER, "note: freeze at 5pm"), Message(Role.ASSISTANT, "Noted.")]

    async def concurrent_append() -> None:
        # Another host appends to the same session while this turn's tool runs: the turn's
        # compare-and-set save must then fail, and the deploy must not be lost with it.
        await other.append(ANA, "s1", note)

    log: list[str] = []
    tools = _deploy(log, concurrent_append)
    runtime = _sqlite_runtime(db, ScriptedProvider(replies=[DEPLOY, "Deployed."]), tools)
    async with runtime, other:
        with pytest.raises(SessionConflictError) as caught:
            await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
        error = caught.value
        assert log == ["deployed to prod"]
        assert error.commit_state is CommitState.COMMITTED
        assert "nothing was committed" not in str(error)
        report = error.run_result
        assert report is not None and report.status is RunStatus.INTERRUPTED and report.committed
        assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
        assert report.usage.input_tokens and report.usage.output_tokens
        assert report.group_seq == 1  # on top of the other writer's group 0
        interruption = report.retained.interruption
        assert interruption is not None and interruption.cause is InterruptionCause.COMMIT_CONFLICT
        assert report.has("turn_interrupted_committed")
        # Read back by the other host: its note, then the deploy's call and result, no answer.
        page = await other.read_history(ANA, "s1", max_groups=10, view=False)
        assert [g.seq for g in page.groups] == [0, 1]
        assert [m.content for m in page.groups[0].group.messages] == [m.content for m in note]
        kept = page.groups[1].group
        assert _roles(kept) == ["user", "assistant", "tool"] and kept.is_complete
        assert kept.messages[1].tool_calls[0].name == "deploy"
        assert kept.messages[2].content == "deployed v2 to prod"
        assert "Deployed." not in [m.content for m in kept.messages]
        assert kept.retained is not None and kept.retained.interruption == interruption


async def test_a_conflict_without_any_tool_run_still_commits_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    other = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))

    class AppendsWhileAnswering(ScriptedProvider):
        async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
            await other.append(ANA, "s1", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")])
            return await super().complete(request, ctx)

    runtime = _sqlite_runtime(db, AppendsWhileAnswering(replies=["Paris."]))
    async with runtime, other:
        with pytest.raises(SessionConflictError) as caught:
            await runtime.run(ANA, "s1", "capital of France?")
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        page = await other.read_history(ANA, "s1", max_groups=10, view=False)
        assert [g.seq for g in page.groups] == [0]


class SavesFailAfterAConflict(InMemorySessionStore):
    """An in-memory store that goes down for writes once a save has conflicted (reads still work)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if self.down:
            raise ConnectionError("session store unreachable")
        try:
            return await super().save(key, snapshot, expected_revision, ctx)
        except SessionConflictError:
            self.down = True
            raise


async def test_what_ran_that_cannot_be_committed_is_reported_truthfully_with_the_run() -> None:
    store = SavesFailAfterAConflict()
    archive = InMemoryArchive()
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]), archive=archive, session_store=store
    )

    async def concurrent_append() -> None:
        await other.append(ANA, "s1", [Message(Role.USER, "note"), Message(Role.ASSISTANT, "ok")])

    log: list[str] = []
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[DEPLOY, "Deployed."]),
        archive=archive,
        session_store=store,
        tools=_deploy(log, concurrent_append),
    )
    with pytest.raises(SessionConflictError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    error = caught.value
    assert log == ["deployed to prod"]
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "nothing was committed" in str(error) and "could not be committed" in str(error)
    report = error.run_result
    assert report is not None and not report.committed and report.group_seq is None
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert report.usage.input_tokens and report.usage.output_tokens
    assert report.has("effects_commit_failed")
    stored = await store.load(SessionKey("acme", "ana", "s1"), OpContext())
    assert [g.seq for g in stored.snapshot.resident] == [0]  # the other writer's group only


class BlocksOnSecondCall(ScriptedProvider):
    """Answers the first model call from the script; the second waits until it is cancelled."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=replies)
        self.made = 0
        self.waiting = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == 2:
            self.waiting.set()
            await anyio.sleep_forever()
        return await super().complete(request, ctx)


async def test_aclose_cancelling_a_turn_after_its_tool_ran_commits_what_ran(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    log: list[str] = []
    provider = BlocksOnSecondCall([DEPLOY, "Deployed."])
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=ROOMY_CLOSE_S)
    runtime = _sqlite_runtime(db, provider, _deploy(log), limits=limits)
    caught: list[BaseException] = []

    async def run() -> None:
        try:
            await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
        except RuntimeClosedError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.waiting.wait()  # the deploy ran; the model is answering
        started = time.monotonic()
        await runtime.aclose()
        closed_in = time.monotonic() - started
    # The settle ran out; then the cancelled run committed what ran and stopped, at once.
    assert closed_in < limits.settle_timeout_s + SLACK_S
    assert log == ["deployed to prod"]
    [error] = caught
    assert isinstance(error, RuntimeClosedError)
    assert error.commit_state is CommitState.COMMITTED
    assert "nothing was committed" not in str(error) and "committed as group 0" in str(error)
    report = error.run_result
    assert report is not None and report.committed and report.group_seq == 0
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    interruption = report.retained.interruption
    assert interruption is not None and interruption.cause is InterruptionCause.CANCELLED
    # A new runtime on the same file reads the deploy back.
    again = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))
    async with again:
        page = await again.read_history(ANA, "s1", max_groups=10, view=False)
        [kept] = page.groups
        assert _roles(kept.group) == ["user", "assistant", "tool"] and kept.group.is_complete
        assert kept.group.messages[2].content == "deployed v2 to prod"
        assert kept.group.retained is not None and kept.group.retained.interruption == interruption


async def test_aclose_while_a_tool_runs_commits_the_call_as_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    started = anyio.Event()

    async def deploy(args: Any) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    tools = ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=ROOMY_CLOSE_S)
    runtime = _sqlite_runtime(db, ScriptedProvider(replies=[DEPLOY, "Deployed."]), tools, limits=limits)
    caught: list[BaseException] = []

    async def run() -> None:
        try:
            await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
        except RuntimeClosedError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        await runtime.aclose()
    [error] = caught
    assert error.commit_state is CommitState.COMMITTED
    report = error.run_result
    assert report is not None and [(o.name, o.status) for o in report.tool_outcomes] == [
        ("deploy", ToolStatus.CANCELLED)
    ]
    again = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))
    async with again:
        [kept] = (await again.read_history(ANA, "s1", max_groups=10, view=False)).groups
        assert _roles(kept.group) == ["user", "assistant", "tool"] and kept.group.is_complete
        assert "cancelled" in kept.group.messages[2].content


async def test_aclose_before_any_tool_ran_commits_nothing(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    provider = BlocksOnSecondCall(["(never used)"])
    provider.made = 1  # the first call already blocks
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=ROOMY_CLOSE_S)
    runtime = _sqlite_runtime(db, provider, limits=limits)
    caught: list[BaseException] = []

    async def run() -> None:
        try:
            await runtime.run(ANA, "s1", "hello")
        except RuntimeClosedError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.waiting.wait()
        await runtime.aclose()
    [error] = caught
    assert error.commit_state is CommitState.NOT_COMMITTED and "nothing was committed" in str(error)
    again = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))
    async with again:
        assert (await again.read_history(ANA, "s1", max_groups=10, view=False)).groups == ()


class Refuses:
    """A publication hook that refuses every answer (its sources moved under the host's lock)."""

    def __init__(self) -> None:
        self.views: list[RecallView] = []

    async def publish(self, view: RecallView, commit: Callable[[], Awaitable[None]]) -> None:
        self.views.append(view)
        raise RuntimeError("the runbook changed under the publication lock")


async def test_a_publication_refusal_after_a_tool_ran_commits_what_ran(tmp_path: Path) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await recall.index_document(MINE, "runbook", "Deploys go to prod on Thursdays.", OpContext())
    log: list[str] = []
    hook = Refuses()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[DEPLOY, "Deployed, as the runbook says."]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=_deploy(log),
        recall=recall,
        publication=hook,
    )
    try:
        with pytest.raises(PublicationRefusedError) as caught:
            await runtime.run(ANA, "s1", "when do deploys go to prod per the runbook", grants=["deploy"])
        assert hook.views and log == ["deployed to prod"]
        error = caught.value
        assert error.commit_state is CommitState.COMMITTED
        assert "not changed" not in str(error) and "nothing was committed" not in str(error)
        report = error.run_result
        assert report is not None and report.committed and report.group_seq == 0
        assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
        interruption = report.retained.interruption
        assert interruption is not None and interruption.cause is InterruptionCause.PUBLICATION_REFUSED
        assert "runbook changed" in interruption.detail
        page = await runtime.read_history(ANA, "s1", max_groups=10, view=False)
        [kept] = page.groups
        assert _roles(kept.group) == ["user", "assistant", "tool"]
        assert "Deployed, as the runbook says." not in [m.content for m in kept.group.messages]
    finally:
        await runtime.aclose()
        await recall.aclose()


async def test_a_publication_refusal_without_tools_still_commits_nothing(tmp_path: Path) -> None:
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await recall.index_document(MINE, "runbook", "Deploys go to prod on Thursdays.", OpContext())
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["Thursdays."]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=recall,
        publication=Refuses(),
    )
    try:
        with pytest.raises(PublicationRefusedError) as caught:
            await runtime.run(ANA, "s1", "when do deploys go to prod per the runbook")
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert (await runtime.read_history(ANA, "s1", max_groups=10, view=False)).groups == ()
    finally:
        await runtime.aclose()
        await recall.aclose()


async def test_a_host_cancelling_run_after_a_tool_ran_finds_what_ran_committed(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    log: list[str] = []
    provider = BlocksOnSecondCall([DEPLOY, "Deployed."])
    limits = RuntimeLimits(close_timeout_s=ROOMY_CLOSE_S)
    runtime = _sqlite_runtime(db, provider, _deploy(log), limits=limits)
    async with runtime:
        with anyio.move_on_after(30) as outer:
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])

                tg.start_soon(run)
                await provider.waiting.wait()
                started = time.monotonic()
                tg.cancel_scope.cancel()  # the host gives up on the answer
        assert not outer.cancelled_caught
        assert time.monotonic() - started < SLACK_S  # the shielded commit of what ran is quick
        assert log == ["deployed to prod"]
        [kept] = (await runtime.read_history(ANA, "s1", max_groups=10, view=False)).groups
        assert _roles(kept.group) == ["user", "assistant", "tool"] and kept.group.is_complete
        interruption = kept.group.retained.interruption if kept.group.retained else None
        assert interruption is not None and interruption.cause is InterruptionCause.CANCELLED
        # The session is free again and the next turn sees that the deploy ran.
        runtime.provider = ScriptedProvider(replies=["v2 is already live."])
        assert (await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])).group_seq == 1
        assert log == ["deployed to prod"]


class HangsWhenTold(InMemorySessionStore):
    """An in-memory store whose reads and writes hang once ``hang`` is set (a store gone dark)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if self.hang:
            await anyio.sleep_forever()
        return await super().load(key, ctx)

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if self.hang:
            await anyio.sleep_forever()
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_aclose_with_the_store_gone_dark_says_nothing_was_committed_and_keeps_what_ran() -> None:
    store = HangsWhenTold()
    log: list[str] = []
    provider = BlocksOnSecondCall([DEPLOY, "Deployed."])
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=1.0)
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        tools=_deploy(log),
        limits=limits,
    )
    caught: list[RuntimeClosedError] = []

    async def run() -> None:
        try:
            await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
        except RuntimeClosedError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.waiting.wait()
        # Dark once the turn waits on its second model call (the erasure fence before that call has
        # read the store: docs/erasure.md), so the commit of what ran meets it.
        store.hang = True
        started = time.monotonic()
        await runtime.aclose()
        closed_in = time.monotonic() - started
    assert closed_in < limits.settle_timeout_s + 2 * limits.close_timeout_s + SLACK_S
    [error] = caught
    assert error.commit_state is CommitState.NOT_COMMITTED and "nothing was committed" in str(error)
    assert "could not be committed" in str(error)
    report = error.run_result
    assert report is not None and not report.committed and report.group_seq is None
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert report.usage.input_tokens and report.usage.output_tokens
    assert report.has("effects_commit_failed")
    store.hang = False
    assert await store.load(SessionKey("acme", "ana", "s1"), OpContext()) is None


class FailsSecondCallAfterAnAppend(ScriptedProvider):
    """The second model call: another host appends to the session, then the provider fails."""

    def __init__(self, replies: list[Any], other: Any) -> None:
        super().__init__(replies=replies)
        self.other = other
        self.made = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == 2:
            await self.other.append(ANA, "s1", [Message(Role.USER, "note"), Message(Role.ASSISTANT, "ok")])
            raise ConnectionError("upstream reset the connection")
        return await super().complete(request, ctx)


async def test_a_provider_failure_then_a_conflict_commits_what_ran_on_the_new_head(tmp_path: Path) -> None:
    db = tmp_path / "agentium.db"
    other = _sqlite_runtime(db, ScriptedProvider(replies=["(not called)"]))
    log: list[str] = []
    runtime = _sqlite_runtime(db, FailsSecondCallAfterAnAppend([DEPLOY], other), _deploy(log))
    async with runtime, other:
        with pytest.raises(ProviderError) as caught:
            await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
        assert caught.value.commit_state is CommitState.COMMITTED
        report = caught.value.run_result
        assert report is not None and report.group_seq == 1
        interruption = report.retained.interruption
        assert interruption is not None and interruption.cause is InterruptionCause.PROVIDER_FAILED
        page = await other.read_history(ANA, "s1", max_groups=10, view=False)
        assert [g.seq for g in page.groups] == [0, 1]
        assert _roles(page.groups[1].group) == ["user", "assistant", "tool"]
