"""A fact forgotten (or a document deleted) during a model call that then fails: no tool round is kept.

A run whose model call fails mid-turn commits the tool rounds that ran
before it, without the answer (``provider_failed``). The run fences' last
look (tests/core/test_turn_fence_last_call.py) ran only on the answer's
path: a memory fact its request carries forgotten during that failing call
(or a host document deleted during it) was seen by nothing, and the tool
rounds made from it were committed. Now the failure path looks once more
too, before it commits what ran: the same stop as before the answer's
commit (``before_commit``, nothing committed, ``erased_during_run``, a
WARNING without content), the provider's failure its cause. Without a
forget, what ran is committed as before.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA
from _fence_support import closing, fence_pair, two_processes
from test_turn_fence_forgotten_fact import BlocksHistory
from test_turn_fence_last_call import (
    DOC,
    FACT,
    KEY,
    SCOPE,
    HeldCall,
    _memories,
    _recall_pair,
    _resident,
    _run_while_held,
    _stopped_and_said,
)

from agentium_harness import (
    AgentiumError,
    CommitState,
    DocumentDeletedDuringRunError,
    FactForgottenDuringRunError,
    MemoryFact,
    ProviderError,
    ProviderTimeoutError,
    RuntimeClosedError,
    RuntimeLimits,
    SourceOwner,
)
from agentium_harness._engine.fact_fence import FactFence
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio


class FailsHeldCall(HeldCall):
    """:class:`HeldCall` whose held call, once released, fails (the provider went away)."""

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        response = await super().complete(request, ctx)
        if len(self.sent) == self.hold:
            raise ProviderError("the model service is unavailable")
        return response


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("forgotten", [True, False], ids=["forgotten", "kept"])
async def test_a_fact_forgotten_during_a_call_that_fails_keeps_no_tool_round(
    kind: str, forgotten: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = FailsHeldCall(["noted", DEPLOY, "Done."], hold=3)  # the tool round's next call fails
    held = HeldTool()
    held.release.set()
    mine_stores, other_stores = two_processes(kind, tmp_path)
    memory_mine, memory_other = _memories(kind, tmp_path)
    mine_opts = {**mine_stores, "memory": memory_mine}
    async with closing(fence_pair(provider, held, mine_opts, {**other_stores, "memory": memory_other})) as (
        mine,
        other,
    ):
        await mine.run(ANA, "s1", "hello")
        ack = await other.memory.remember(MemoryFact(SCOPE, FACT))

        async def forget() -> None:
            if forgotten:
                await other.memory.forget(SCOPE, ack.fact_id)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(mine, provider, "What is the code?", forget, grants=["deploy"])
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]  # the premise: it carried the fact
        if not forgotten:  # as before: the tool round is kept, the provider's error says so
            assert isinstance(outcome, ProviderError) and outcome.commit_state is CommitState.COMMITTED
            assert await _resident(mine) == 2
            return
        assert isinstance(outcome, FactForgottenDuringRunError), repr(outcome)
        assert outcome.fact_id == ack.fact_id
        assert isinstance(outcome.__cause__, ProviderError)  # the call's failure is not lost
        _stopped_and_said(outcome, caplog, "forgotten")
        assert outcome.run_result is not None and outcome.run_result.tool_outcomes  # listed, not kept
        assert await _resident(mine) == 1  # only "hello": the tool round made from the fact is not kept


async def test_a_document_deleted_during_a_call_that_fails_keeps_no_tool_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = FailsHeldCall([DEPLOY, "Deployed."], hold=2)
    held = HeldTool()
    held.release.set()
    async with closing(_recall_pair(provider, held)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", DOC)

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(
                mine, provider, "When does the rota change? Deploy it.", delete, grants=["deploy"]
            )
        assert len(provider.sent) == 2 and "qzrotaq" in provider.sent[1]
        assert isinstance(outcome, DocumentDeletedDuringRunError), repr(outcome)
        assert isinstance(outcome.__cause__, ProviderError)
        _stopped_and_said(outcome, caplog, "deleted")
        assert outcome.run_result is not None and outcome.run_result.tool_outcomes  # listed, not kept
        loaded = await mine.session_store.load(KEY, OpContext())
        assert loaded is None or not loaded.snapshot.resident


class HistoryFails(InMemoryMemoryStore):
    """A memory store whose ``history`` reads fail once ``failing`` is set."""

    failing = False

    async def history(self, scope: Any, fact_id: str, ctx: OpContext) -> Any:
        if self.failing:
            raise OSError("the memory store went away")
        return await super().history(scope, fact_id, ctx)


async def test_a_look_after_a_failed_call_that_cannot_be_made_keeps_what_ran_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As a failed look at the commit does: what ran is kept, the provider's error raised, a WARNING."""
    provider = FailsHeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    stores, other_stores = two_processes("memory", tmp_path)
    memory = HistoryFails()
    async with closing(fence_pair(provider, held, {**stores, "memory": memory}, dict(other_stores))) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        await mine.memory.remember(MemoryFact(SCOPE, FACT))

        async def break_reads() -> None:
            memory.failing = True

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(
                mine, provider, "What is the code?", break_reads, grants=["deploy"]
            )
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]
        assert isinstance(outcome, ProviderError) and outcome.commit_state is CommitState.COMMITTED
        memory.failing = False
        assert await _resident(mine) == 2  # "hello" and the tool round
    warned = [r for r in caplog.records if "could not be checked again" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if "qz" in r.getMessage()]


async def test_a_bug_in_the_look_after_a_failed_call_keeps_what_ran_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception the look did not type (an engine bug) keeps what ran, as one at the commit does.

    The answer's path hands such a bug to the keeper, which commits what ran; here it left the
    failed call's handler, and the tool round that ran was not committed at all.
    """
    provider = FailsHeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    stores, other_stores = two_processes("memory", tmp_path)
    async with closing(
        fence_pair(provider, held, {**stores, "memory": InMemoryMemoryStore()}, other_stores)
    ) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        await mine.memory.remember(MemoryFact(SCOPE, FACT))

        async def bug(self: FactFence, ticket: Any, what: str = "run") -> None:
            raise RuntimeError("an engine bug")

        async def break_the_look() -> None:
            monkeypatch.setattr(FactFence, "last", bug)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(
                mine, provider, "What is the code?", break_the_look, grants=["deploy"]
            )
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]
        assert isinstance(outcome, ProviderError), repr(outcome)
        assert outcome.commit_state is CommitState.COMMITTED
        assert await _resident(mine) == 2  # "hello" and the tool round
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in messages if "could not be checked again" in m], messages
    assert [m for m in messages if "unexpected RuntimeError" in m], messages  # the bug is not lost
    assert not [m for m in messages if "an engine bug" in m]  # its class, never its text


@pytest.mark.parametrize("forgotten", [True, False], ids=["forgotten", "kept"])
async def test_a_fact_forgotten_during_a_call_the_host_cancels_keeps_no_tool_round(
    forgotten: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancelled last call is a failed one too: what ran is committed only after the same look."""
    provider = HeldCall(["noted", DEPLOY, "Done."], hold=3)  # the tool round's next call: cancelled
    held = HeldTool()
    held.release.set()
    mine_stores, other_stores = two_processes("memory", tmp_path)
    memory = InMemoryMemoryStore()
    async with closing(
        fence_pair(provider, held, {**mine_stores, "memory": memory}, {**other_stores, "memory": memory})
    ) as (mine, other):
        await mine.run(ANA, "s1", "hello")
        ack = await other.memory.remember(MemoryFact(SCOPE, FACT))
        cancel = anyio.CancelScope()

        async def run() -> None:
            with cancel:
                await mine.run(ANA, "s1", "What is the code?", grants=["deploy"])

        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await provider.started.wait()
                if forgotten:
                    await other.memory.forget(SCOPE, ack.fact_id)
                cancel.cancel()
        assert cancel.cancelled_caught
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]  # the premise: it carried the fact
        if not forgotten:  # as before: the tool round is kept
            assert await _resident(mine) == 2
            return
        assert await _resident(mine) == 1  # only "hello": the tool round made from the fact is not kept
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in messages if "forgotten" in m and "before its commit" in m], messages
    assert [m for m in messages if "cancelled" in m and "not committed" in m], messages
    assert not [m for m in messages if "qz" in m or ack.fact_id in m]  # no content, no id


async def test_aclose_during_a_call_after_a_forget_says_nothing_was_committed(tmp_path: Path) -> None:
    """``aclose()`` cancels the run: its caller's ``RuntimeClosedError`` says truthfully nothing was kept."""
    provider = HeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    mine_stores, other_stores = two_processes("memory", tmp_path)
    memory = InMemoryMemoryStore()
    mine_opts = {**mine_stores, "memory": memory, "limits": RuntimeLimits(settle_timeout_s=0.2)}
    mine, other = fence_pair(provider, held, mine_opts, {**other_stores, "memory": memory})
    await mine.run(ANA, "s1", "hello")
    ack = await other.memory.remember(MemoryFact(SCOPE, FACT))
    outcome: list[Exception] = []

    async def run() -> None:
        try:
            await mine.run(ANA, "s1", "What is the code?", grants=["deploy"])
        except Exception as exc:
            outcome.append(exc)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await provider.started.wait()
            await other.memory.forget(SCOPE, ack.fact_id)
            await mine.aclose()
    await other.aclose()
    (closed,) = outcome
    assert isinstance(closed, RuntimeClosedError), repr(closed)
    assert closed.commit_state is CommitState.NOT_COMMITTED, repr(closed)
    assert "not committed" in str(closed) and ack.fact_id not in str(closed), str(closed)
    assert closed.run_result is not None and closed.run_result.tool_outcomes  # listed, not kept
    assert [d.code for d in closed.run_result.diagnostics if d.code == "erased_during_run"]
    loaded = await mine.session_store.load(KEY, OpContext())
    assert loaded is not None and len(loaded.snapshot.resident) == 1  # only "hello"


class HangsHeldCall(HeldCall):
    """:class:`HeldCall` whose held call never answers: the run's ``model_timeout_s`` ends it."""

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if len(self.sent) + 1 == self.hold:
            self.sent.append("\n".join(b.render() for b in request.sources))
            self.started.set()
            await anyio.sleep(30)
        return await super().complete(request, ctx)


async def test_a_fact_forgotten_during_a_call_that_times_out_keeps_no_tool_round(tmp_path: Path) -> None:
    """A model call past ``model_timeout_s`` (``ProviderTimeoutError``) is a failed call: the same look."""
    provider = HangsHeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    mine_stores, other_stores = two_processes("memory", tmp_path)
    memory = InMemoryMemoryStore()
    mine_opts = {**mine_stores, "memory": memory, "limits": RuntimeLimits(model_timeout_s=0.3)}
    async with closing(fence_pair(provider, held, mine_opts, {**other_stores, "memory": memory})) as (
        mine,
        other,
    ):
        await mine.run(ANA, "s1", "hello")
        ack = await other.memory.remember(MemoryFact(SCOPE, FACT))

        async def forget() -> None:
            await other.memory.forget(SCOPE, ack.fact_id)

        outcome = await _run_while_held(mine, provider, "What is the code?", forget, grants=["deploy"])
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]
        assert isinstance(outcome, FactForgottenDuringRunError), repr(outcome)
        assert isinstance(outcome.__cause__, ProviderTimeoutError), repr(outcome.__cause__)
        assert outcome.commit_state is CommitState.NOT_COMMITTED
        assert await _resident(mine) == 1  # only "hello"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_second_cancellation_during_the_look_is_said(
    anyio_backend: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncio: a second ``Task.cancel()`` while what ran is kept cuts that short; a WARNING says so.

    A native cancellation is not held off by the keep's shield (trio's is): the one that lands during
    the look after the cancelled call leaves the tool round uncommitted, and a host's cancellation
    carries no result: only the WARNING tells the operator. There was none.
    """
    provider = HeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    stores, _ = two_processes("memory", tmp_path)
    memory = BlocksHistory(hangs=True)
    async with closing(fence_pair(provider, held, {**stores, "memory": memory}, dict(stores))) as (mine, _):
        await mine.run(ANA, "s1", "hello")
        await mine.memory.remember(MemoryFact(SCOPE, FACT))
        task = asyncio.ensure_future(mine.run(ANA, "s1", "What is the code?", grants=["deploy"]))
        with caplog.at_level(logging.WARNING, logger="agentium"), anyio.fail_after(30):
            await provider.started.wait()
            memory.blocking = True
            task.cancel()
            await memory.entered.wait()  # the look after the cancelled call reads the carried fact
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        memory.blocking = False
        assert await _resident(mine) == 1  # the premise: the keep was cut short, nothing committed
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [m for m in messages if "cancelled" in m and "not committed" in m]
    assert said and "again" in said[0] and "commit_state not_committed" in said[0], messages
    assert not [m for m in messages if "qz" in m]


@pytest.mark.parametrize("forgotten", [True, False], ids=["forgotten", "kept"])
async def test_a_fact_forgotten_during_the_last_call_then_an_engine_bug_keeps_no_tool_round(
    forgotten: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last call answers, then a bug (here in verification) stops the run before its last look.

    What ran is kept after a bug (``failed()``), but it was made from the fact forgotten during that
    call, as after a failed or cancelled call: the same look first. It was committed without one.
    """
    from _effects_support import AlwaysFails

    from agentium_harness._engine import verification

    provider = HeldCall(["noted", DEPLOY, "Done."], hold=3)
    held = HeldTool()
    held.release.set()
    stores, _ = two_processes("memory", tmp_path)
    memory = InMemoryMemoryStore()
    opts = {**stores, "memory": memory, "verifier": AlwaysFails()}
    async with closing(fence_pair(provider, held, opts, dict(stores))) as (mine, _):
        await mine.run(ANA, "s1", "hello")
        ack = await mine.memory.remember(MemoryFact(SCOPE, FACT))

        async def bug(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("an engine bug")

        monkeypatch.setattr(verification, "verify_turn", bug)

        async def forget() -> None:
            if forgotten:
                await mine.memory.forget(SCOPE, ack.fact_id)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(
                mine, provider, "What is the code?", forget, grants=["deploy"], completion=True
            )
        assert len(provider.sent) == 3 and FACT in provider.sent[-1]  # the premise: it carried the fact
        monkeypatch.undo()
        if not forgotten:  # as before: the tool round is kept, the bug's error says so
            assert outcome.commit_state is CommitState.COMMITTED, repr(outcome)
            assert await _resident(mine) == 2
            return
        assert isinstance(outcome, FactForgottenDuringRunError), repr(outcome)
        bug = outcome.__cause__  # the bug's error, caused by it: not lost
        assert type(bug) is AgentiumError and isinstance(bug.__cause__, RuntimeError), repr(bug)
        _stopped_and_said(outcome, caplog, "forgotten")
        assert await _resident(mine) == 1  # only "hello"
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in messages if "unexpected RuntimeError" in m], messages  # the bug is not lost
    assert not [m for m in messages if "an engine bug" in m]
