"""What ran is kept whatever else stops the turn after a tool started (``step_failed``).

The causes with names of their own — the provider failing, the recall
policy's stop, a conflict, a refused publication, a cancellation — are
covered in test_effects_kept.py and test_effects_durable.py. These tests
stop the turn after its tool ran in every other way ``run()`` can end with
an exception: an engine bug on a later step (the verification), the turn's
own commit refused before its save (a snapshot over its size bound, a store
read failing at the commit's erasure fence), the save itself failing, and
the commit of what ran failing in turn — after a provider failure, or after
the host cancelled the run. Each checks what the session holds, read back,
against the error's ``commit_state``, and what is logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY

from agentium_harness import (
    AgentiumError,
    BlockingRuntime,
    CommitState,
    EffectLevel,
    EncodingError,
    InterruptionCause,
    ProviderError,
    Role,
    RunStatus,
    RuntimeLimits,
    SessionKey,
    SourceOwner,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import commit as commit_module
from agentium_harness._engine import effects, last_look, verification
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
MINE = SourceOwner("acme", "ana", "s1")
#: In an injected exception's text: it may be content, so no log record may carry it.
SECRET = "the secret plan"


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"engine bug near {SECRET}")


def _runtime(
    log: list[str], replies: list[Any] | None = None, store: Any = None, provider: Any = None, **kw: Any
) -> Any:
    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        return "deployed v2 to prod"

    return create_harness_runtime(
        provider=provider or ScriptedProvider(replies=replies or [DEPLOY, "Deployed."]),
        archive=InMemoryArchive(),
        session_store=store or InMemorySessionStore(),
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        **kw,
    )


async def _kept(runtime: Any) -> Any:
    """The session's one group, read back with everything the view hides."""
    [kept] = (await runtime.read_history(ANA, "s1", max_groups=10, view=False)).groups
    return kept.group


def _assert_kept(error: AgentiumError, group: Any, named: str) -> None:
    """``error`` says what ran was committed as ``group``: the call and its result, no answer."""
    assert error.commit_state is CommitState.COMMITTED
    assert "were committed as group 0" in str(error) and "interruption step_failed" in str(error)
    assert "nothing was committed" not in str(error)
    report = error.run_result
    assert report is not None and report.status is RunStatus.INTERRUPTED and report.committed
    assert report.group_seq == 0 and report.has("turn_interrupted_committed")
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert [m.role for m in group.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL] and group.is_complete
    assert group.messages[-1].content == "deployed v2 to prod"
    stopped = group.retained.interruption
    assert stopped is not None and stopped.cause is InterruptionCause.STEP_FAILED
    assert named in stopped.detail and group.retained == report.retained


async def test_an_engine_bug_in_the_verification_after_a_tool_ran_commits_what_ran(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from _effects_support import AlwaysFails

    log: list[str] = []
    runtime = _runtime(log, verifier=AlwaysFails())
    monkeypatch.setattr(verification, "verify_turn", _boom)  # the step after the tool loop
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(AgentiumError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"], completion=True)
    error = caught.value
    assert log == ["deployed to prod"]
    # Not swallowed: the root error type, caused by the bug, saying what was committed.
    assert type(error) is AgentiumError and isinstance(error.__cause__, RuntimeError)
    assert "unexpected error" in str(error)
    monkeypatch.undo()
    kept = await _kept(runtime)
    _assert_kept(error, kept, "RuntimeError")
    assert SECRET not in kept.retained.interruption.detail  # the exception by its class alone
    # One WARNING, with the state the run ended in, never the exception's text.
    warned = [r for r in caplog.records if "unexpected RuntimeError" in r.getMessage()]
    assert len(warned) == 1 and warned[0].agentium_commit_state == "committed"  # type: ignore[attr-defined]
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)


async def test_the_blocking_runtime_says_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from _effects_support import AlwaysFails

    log: list[str] = []
    monkeypatch.setattr(verification, "verify_turn", _boom)
    with BlockingRuntime(_runtime(log, verifier=AlwaysFails())) as blocking:
        with pytest.raises(AgentiumError) as caught:
            await anyio.to_thread.run_sync(
                lambda: blocking.run(ANA, "s1", "deploy v2", grants=["deploy"], completion=True)
            )
        assert caught.value.commit_state is CommitState.COMMITTED
        group = await anyio.to_thread.run_sync(
            lambda: blocking.read_history(ANA, "s1", max_groups=10, view=False).groups[0].group
        )
    _assert_kept(caught.value, group, "RuntimeError")


async def test_a_turn_too_large_to_commit_keeps_what_ran_without_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    # The answer takes the snapshot over the bound a store reads back; the call and its result do not.
    runtime = _runtime(log, replies=[DEPLOY, "x" * 200_000])
    monkeypatch.setattr(commit_module, "MAX_JSON_BYTES", 100_000)
    with pytest.raises(EncodingError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    assert log == ["deployed to prod"]
    assert "nothing was written" not in str(caught.value)  # the answer's snapshot was not; what ran was
    monkeypatch.undo()
    _assert_kept(caught.value, await _kept(runtime), "EncodingError")


class FailsOnce(InMemorySessionStore):
    """An in-memory store failing one call: the turn's save, or its second read of the erasure fence."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.fence_reads = 0

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if key != KEY and self.what == "fence":
            self.fence_reads += 1
            # The run's load, the look before each of its two model calls (docs/erasure.md), then
            # the commit's check.
            if self.fence_reads == 4:
                raise ConnectionError("the store dropped the connection")
        return await super().load(key, ctx)

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if key == KEY and self.what == "save":
            self.what = ""
            raise ConnectionError("the store dropped the connection")
        return await super().save(key, snapshot, expected_revision, ctx)


@pytest.mark.parametrize("what", ["save", "fence"])
async def test_a_store_failing_the_turns_commit_once_keeps_what_ran(what: str) -> None:
    log: list[str] = []
    store = FailsOnce(what)
    runtime = _runtime(log, store=store)
    with pytest.raises(AgentiumError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    assert log == ["deployed to prod"]
    assert "ConnectionError" in str(caught.value)
    assert "the store dropped the connection" in str(caught.value)  # the host's error: the store's words
    kept = await _kept(runtime)
    _assert_kept(caught.value, kept, "ConnectionError")
    # Committed by its class alone: a store's text may name another tenant's rows.
    assert "the store dropped the connection" not in kept.retained.interruption.detail


class FailsOnCall(ScriptedProvider):
    """The scripted provider, raising a connection error on its second model call."""

    made = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == 2:
            raise ConnectionError("upstream reset the connection")
        return await super().complete(request, ctx)


async def test_an_engine_bug_committing_what_ran_after_a_provider_failure_is_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    runtime = _runtime(log, provider=FailsOnCall(replies=[DEPLOY, "Deployed."]))
    monkeypatch.setattr(effects, "commit_turn", _boom)
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(ProviderError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    error = caught.value  # the provider's error goes on: the bug does not take its place
    assert log == ["deployed to prod"]
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "could not be committed either" in str(error) and "RuntimeError" in str(error)
    report = error.run_result
    assert report is not None and report.has("effects_commit_failed") and not report.committed
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    warned = [r for r in caplog.records if "unexpected RuntimeError" in r.getMessage()]
    assert len(warned) == 1 and warned[0].agentium_commit_state == "not_committed"  # type: ignore[attr-defined]
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)
    monkeypatch.undo()
    assert not (await runtime.inspect_session(ANA, "s1")).exists


class BlocksOnSecondCall(ScriptedProvider):
    """Answers the first model call from the script; the second waits until it is cancelled."""

    made = 0

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=replies)
        self.waiting = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        if self.made == 2:
            self.waiting.set()
            await anyio.sleep_forever()
        return await super().complete(request, ctx)


async def test_an_engine_bug_committing_what_ran_after_a_cancellation_lets_it_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    provider = BlocksOnSecondCall([DEPLOY, "Deployed."])
    runtime = _runtime(log, provider=provider)
    monkeypatch.setattr(effects, "commit_turn", _boom)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.move_on_after(30) as outer:
        async with anyio.create_task_group() as tg:  # an error out of the run would fail the group

            async def run() -> None:
                await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])

            tg.start_soon(run)
            await provider.waiting.wait()
            tg.cancel_scope.cancel()  # the host gives up on the answer
    assert not outer.cancelled_caught and log == ["deployed to prod"]
    # The cancellation carries no result: the log says that what ran was not committed.
    assert any("unexpected RuntimeError" in r.getMessage() for r in caplog.records)
    [warned] = [r for r in caplog.records if r.getMessage().startswith("run cancelled after a tool started")]
    assert warned.levelno == logging.WARNING and warned.agentium_commit_state == "not_committed"  # type: ignore[attr-defined]
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)
    monkeypatch.undo()
    assert not (await runtime.inspect_session(ANA, "s1")).exists


class SavesFail(InMemorySessionStore):
    """An in-memory store whose saves of the session fail, each read back as not landed."""

    saves = 0

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if key == KEY:
            self.saves += 1
            raise ConnectionError("the store dropped the connection")
        return await super().save(key, snapshot, expected_revision, ctx)


async def _recall_run(tmp_path: Path, store: Any = None) -> tuple[Any, Any, list[str]]:
    """A run whose write tool changes the very source it recalled (the commit fence finds it changed)."""
    recall = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db")))
    await recall.index_document(MINE, "runbook", "The release train leaves every Thursday.", OpContext())
    edits: list[str] = []

    async def move_train(args: Any) -> str:
        await recall.index_document(MINE, "runbook", "The release train leaves every Friday.", OpContext())
        edits.append("moved")
        return "runbook updated"

    script = [{"content": "", "tool_calls": [{"id": "m1", "name": "move_train"}]}, "Moved to Thursday."]
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=script),
        archive=InMemoryArchive(),
        session_store=store or InMemorySessionStore(),
        tools=ToolRegistry([Tool("move_train", move_train, EffectLevel.WRITE)]),
        recall=recall,
    )
    return runtime, recall, edits


async def test_an_engine_bug_at_the_recall_commit_fence_after_a_tool_ran_commits_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, recall, edits = await _recall_run(tmp_path)
    monkeypatch.setattr(last_look, "recall_before_commit", _boom)
    try:
        with pytest.raises(AgentiumError) as caught:
            await runtime.run(ANA, "s1", "move the release train", grants=["move_train"])
        assert edits == ["moved"] and isinstance(caught.value.__cause__, RuntimeError)
        error = caught.value
        assert error.commit_state is CommitState.COMMITTED and "interruption step_failed" in str(error)
        group = await _kept(runtime)
        assert [m.role for m in group.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
        assert group.retained.interruption.cause is InterruptionCause.STEP_FAILED
    finally:
        await recall.aclose()


async def test_a_recall_stop_whose_commit_fails_says_so_and_is_not_tried_twice(tmp_path: Path) -> None:
    store = SavesFail()
    runtime, recall, edits = await _recall_run(tmp_path, store)
    try:
        with pytest.raises(AgentiumError) as caught:
            await runtime.run(ANA, "s1", "move the release train", grants=["move_train"])
        error = caught.value
        assert edits == ["moved"] and store.saves == 1  # that commit was of what ran: not made again
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert "its tool calls and results could not be committed" in str(error)
        report = error.run_result
        assert report is not None and report.has("effects_commit_failed") and not report.committed
        assert [o.name for o in report.tool_outcomes] == ["move_train"]
        assert not (await runtime.inspect_session(ANA, "s1")).exists
    finally:
        await recall.aclose()


class HoldsTheKeeping(InMemorySessionStore):
    """An in-memory store whose call in the commit of what ran (``what``) waits until it is cancelled."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        self.fence_reads = self.saves = 0
        self.waiting = anyio.Event()

    async def _hold(self) -> None:
        self.waiting.set()
        await anyio.sleep_forever()

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if key != KEY and self.what == "fence":
            self.fence_reads += 1
            # The run's load, the look before each of its two model calls, then the check of the
            # commit of what ran.
            if self.fence_reads == 4:
                await self._hold()
        return await super().load(key, ctx)

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if key == KEY and self.what == "save":
            self.saves += 1
            if self.saves == 1:
                await self._hold()
        return await super().save(key, snapshot, expected_revision, ctx)


@pytest.mark.parametrize(("what", "state"), [("fence", "committed"), ("save", "unknown")])
async def test_an_engine_bug_whose_keeping_is_cancelled_is_still_logged(
    what: str, state: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from _effects_support import AlwaysFails

    log: list[str] = []
    store = HoldsTheKeeping(what)
    runtime = _runtime(log, store=store, verifier=AlwaysFails())
    monkeypatch.setattr(verification, "verify_turn", _boom)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.move_on_after(30) as outer:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"], completion=True)

            tg.start_soon(run)
            await store.waiting.wait()  # the bug's commit of what ran is under way
            tg.cancel_scope.cancel()  # the host gives up on the run
    assert not outer.cancelled_caught and log == ["deployed to prod"]
    # The bug is not lost with its commit: one WARNING, with the state the cancellation left.
    warned = [r for r in caplog.records if "unexpected RuntimeError" in r.getMessage()]
    assert len(warned) == 1 and warned[0].agentium_commit_state == state  # type: ignore[attr-defined]
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)
    monkeypatch.undo()
    if state == "committed":  # the cancellation's own commit of what ran, after the bug's was cut off
        group = await _kept(runtime)
        assert group.retained.interruption.cause is InterruptionCause.CANCELLED


class HoldsTheSave(InMemorySessionStore):
    """An in-memory store whose first save of the session (the turn's own) waits until it is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0
        self.waiting = anyio.Event()

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if key == KEY:
            self.saves += 1
            if self.saves == 1:
                self.waiting.set()
                await anyio.sleep_forever()
        return await super().save(key, snapshot, expected_revision, ctx)


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("how", ["host", "aclose"])
async def test_a_cancellation_while_the_turns_save_is_in_flight_is_logged(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The cancellation carries no result: a WARNING says the commit state is unknown."""
    log: list[str] = []
    store = HoldsTheSave()
    # aclose() gives the run settle_timeout_s (the one meant to run out) before it cancels it.
    limits = RuntimeLimits(settle_timeout_s=0.2, close_timeout_s=30.0)
    runtime = _runtime(log, replies=[DEPLOY, f"Deployed {SECRET}."], store=store, limits=limits)
    closed: list[AgentiumError] = []
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.move_on_after(60) as outer:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await runtime.run(ANA, "s1", f"deploy v2, {SECRET}", grants=["deploy"])
                except AgentiumError as exc:  # aclose(): RuntimeClosedError, commit_state unknown
                    closed.append(exc)

            tg.start_soon(run)
            await store.waiting.wait()  # the tool ran; the turn's own save is in flight
            if how == "host":
                tg.cancel_scope.cancel()  # the host gives up on the run
            else:
                await runtime.aclose()
    if how == "aclose":
        [error] = closed
        assert error.commit_state is CommitState.UNKNOWN
    assert not outer.cancelled_caught and log == ["deployed to prod"] and store.saves == 1
    warned = [
        r for r in caplog.records if r.getMessage().startswith("run cancelled while its commit was in flight")
    ]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    [record] = warned
    assert record.levelno == logging.WARNING and record.name == "agentium.engine"
    assert record.agentium_operation == "run"  # type: ignore[attr-defined]
    assert record.agentium_commit_state == "unknown"  # type: ignore[attr-defined]
    assert "commit state is unknown" in record.getMessage()
    # No second commit of what ran was tried (it could duplicate the turn), nor said to have failed.
    assert not any(r.getMessage().startswith("run cancelled after a tool started") for r in caplog.records)
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)
    await runtime.aclose()


class SavesHang(InMemorySessionStore):
    """An in-memory store whose saves of the session wait until they are cancelled."""

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: OpContext) -> int:
        if key == KEY:
            await anyio.sleep_forever()
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_a_keeping_cut_off_mid_save_is_not_said_to_be_uncommitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The host cancels after a tool ran; the shielded commit of what ran is cut off mid-save.

    Whether it landed is unknown: the WARNING (a host's cancellation carries no result) said the
    tool calls and results "were not committed", beside ``commit_state unknown``.
    """
    log: list[str] = []
    provider = BlocksOnSecondCall([DEPLOY, "Deployed."])
    limits = RuntimeLimits(close_timeout_s=0.2)
    runtime = _runtime(log, provider=provider, store=SavesHang(), limits=limits)
    with caplog.at_level(logging.WARNING, logger="agentium"), anyio.move_on_after(30) as outer:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])

            tg.start_soon(run)
            await provider.waiting.wait()  # the tool ran; the next model call is under way
            tg.cancel_scope.cancel()  # the host gives up on the run
    assert not outer.cancelled_caught and log == ["deployed to prod"]
    [warned] = [r for r in caplog.records if r.getMessage().startswith("run cancelled after a tool started")]
    assert warned.agentium_commit_state == "unknown"  # type: ignore[attr-defined]
    assert "not committed" not in warned.getMessage() and "may or may not" in warned.getMessage()
    await runtime.aclose()


async def test_a_refusal_before_the_save_loses_its_claim_whole_and_keeps_its_quoted_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[str] = []
    runtime = _runtime(log)
    sealed = commit_module._sealed
    quoted = "(the store said: row too big; nothing was written)"

    def refuse_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(commit_module, "_sealed", sealed)  # what ran is committed after it
        error = EncodingError(f"the answer's snapshot was refused {quoted}. Nothing was written")
        error.commit_state = CommitState.NOT_COMMITTED
        raise error

    monkeypatch.setattr(commit_module, "_sealed", refuse_once)
    with pytest.raises(EncodingError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    said = str(caught.value)
    assert quoted in said  # the cause's own call's claim is left in its quote
    assert "Nothing was written" not in said  # the sentence form leaves too: what ran was written
    monkeypatch.undo()
    _assert_kept(caught.value, await _kept(runtime), "EncodingError")
