"""A turn never sends the model history erased after the turn loaded it (docs/erasure.md).

A run loads its session's resident history once, then calls the model once
or more (a tool round each). Another process (here: another runtime over the
same stores) may erase the session, or its user, in between: the load saw
no erasure, the commit fence only looks when the turn is about to write, so
without a look before each model call the erased text reached the provider.

The fence before each model call reads the tenant's pending erasures (free
on SQLite when nothing was committed to the file since) and, when the ledger
moved since the load, the finished erasures of the whole session: the turn
stops before the call with :class:`ErasedDuringRunError`, nothing committed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import (
    ANA,
    OPERATOR,
    HookedArchive,
    HookedSQLiteArchive,
    Recording,
    gate_after,
    history_texts,
    tool_turn_while,
)

import agentium_harness._engine.runtime as runtime_module
import agentium_harness._engine.summary as summary_module
from agentium_harness import (
    CommitState,
    EffectLevel,
    ErasedDuringRunError,
    EraseTarget,
    ErasureInProgressError,
    ErasureState,
    MemoryDrainError,
    ResidentLimits,
    RuntimeLimits,
    SummaryLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")


class Gate:
    """What the tool and the erase hook wait on: each ``entered``, then waits for its ``release``."""

    def __init__(self) -> None:
        self.tool_entered, self.tool_release = anyio.Event(), anyio.Event()
        self.erase_entered, self.erase_release = anyio.Event(), anyio.Event()
        self.hold_erase = False

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if self.hold_erase and not kwargs.get("dry_run", False):
            self.erase_entered.set()
            with anyio.fail_after(30):
                await self.erase_release.wait()


def _pair(kind: str, tmp_path: Path, provider: Recording, gate: Gate) -> tuple[Any, Any]:
    """The turn's runtime and another process's, over the same stores (the archive's erase hooked)."""

    async def deploy(args: Any) -> str:
        gate.tool_entered.set()
        with anyio.fail_after(30):
            await gate.tool_release.wait()
        return "deployed qzresultq"

    tools = ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])
    other_provider = ScriptedProvider(replies=["ok"], cycle=True)
    if kind == "memory":
        archive: Any = HookedArchive(gate)
        store: Any = InMemorySessionStore()
        mine = create_harness_runtime(provider=provider, archive=archive, session_store=store, tools=tools)
        other = create_harness_runtime(provider=other_provider, archive=archive, session_store=store)
        return mine, other
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    mine = create_harness_runtime(
        provider=provider,
        archive=HookedSQLiteArchive(config, gate),
        session_store=SQLiteSessionStore(config),
        tools=tools,
    )
    other = create_harness_runtime(
        provider=other_provider,
        archive=HookedSQLiteArchive(config, gate),
        session_store=SQLiteSessionStore(config),
    )
    return mine, other


async def _race(mine: Any, entered: anyio.Event, release: anyio.Event, meanwhile: Any) -> Any:
    """The turn on ``mine`` until it sets ``entered``; ``meanwhile()``; then ``release``. Its outcome."""
    return await tool_turn_while(mine, entered, release, meanwhile, "deploy it qzturnq")


def _assert_stopped(
    error: Any, provider: Recording, calls_before: int, caplog: pytest.LogCaptureFixture
) -> None:
    # No request made after the erasure began: the erased text never reached the provider again.
    assert len(provider.sent) == calls_before, provider.sent[calls_before:]
    assert isinstance(error, ErasedDuringRunError), error
    assert isinstance(error, ErasureInProgressError)  # a host's handler of the refusal at load catches it
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert error.erasure_id
    report = error.run_result
    assert report is not None and not report.committed
    assert [d.code for d in report.diagnostics if d.code == "erased_during_run"] == ["erased_during_run"]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "erased" in r.getMessage()]
    assert warned
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("level", ["session", "user"])
@pytest.mark.parametrize("gap", ["before-first-call", "between-rounds"])
async def test_no_model_call_sends_history_erased_since_the_load(
    kind: str,
    level: str,
    gap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An erasure that began and completed after the turn's load stops the turn before its next call."""
    provider = Recording(["noted", DEPLOY, "Deployed."])
    gate = Gate()
    mine, other = _pair(kind, tmp_path, provider, gate)
    target = (
        EraseTarget.session("acme", "ana", "s1") if level == "session" else EraseTarget.user("acme", "ana")
    )
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")
        assert "qzsecretq" in (await history_texts(mine))[0]
        if gap == "before-first-call":
            entered, release = gate_after(runtime_module, "load_session", monkeypatch)
            gate.tool_release.set()
            calls_before = 1
        else:
            entered, release = gate.tool_entered, gate.tool_release
            calls_before = 2  # the priming turn's, and the call that asked for the tool

        async def erase() -> None:
            result = await other.erase(target, reason="dsr", attestation=OPERATOR)
            assert result.tombstone is not None and result.tombstone.state is ErasureState.COMPLETE

        caplog.set_level(logging.WARNING)
        error = await _race(mine, entered, release, erase)
        _assert_stopped(error, provider, calls_before, caplog)
        # Nothing of the turn was written into the erased id.
        assert not [t for t in await history_texts(mine) if "qz" in t]
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_model_call_waits_for_no_erasure_still_under_way(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An erasure of the user still under way when the tool round ends: no second call, nothing committed."""
    provider = Recording(["noted", DEPLOY, "Deployed."])
    gate = Gate()
    mine, other = _pair(kind, tmp_path, provider, gate)
    erased: list[Any] = []
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")
        caplog.set_level(logging.WARNING)
        async with anyio.create_task_group() as tg:

            async def erase() -> None:
                erased.append(
                    await other.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)
                )

            async def meanwhile() -> None:
                gate.hold_erase = True
                tg.start_soon(erase)
                with anyio.fail_after(30):
                    await gate.erase_entered.wait()  # the erasure is recorded and under way

            error = await _race(mine, gate.tool_entered, gate.tool_release, meanwhile)
            _assert_stopped(error, provider, 2, caplog)
            gate.erase_release.set()
        assert erased[0].tombstone.state is ErasureState.COMPLETE
        assert not [t for t in await history_texts(mine) if "qz" in t]
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_erasure_of_another_user_does_not_stop_the_turn(kind: str, tmp_path: Path) -> None:
    """The tenant's ledger moves (bob erased) during the tool round: ana's turn goes on and commits."""
    provider = Recording(["noted", "noted", DEPLOY, "Deployed."])
    gate = Gate()
    mine, other = _pair(kind, tmp_path, provider, gate)
    try:
        await mine.run(ANA, "s1", "first")
        await mine.run(BOB, "s1", "bob's own")

        async def erase_bob() -> None:
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)

        result = await _race(mine, gate.tool_entered, gate.tool_release, erase_bob)
        assert not isinstance(result, BaseException), result
        assert result.committed and len(provider.sent) == 4
        assert "deploy it qzturnq" in await history_texts(mine)
    finally:
        await mine.aclose()
        await other.aclose()


class RecordingSummarizer(ExtractiveSummarizer):
    """The extractive summarizer, keeping the text of every group it is offered."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[str] = []

    async def summarize(self, previous: Any, groups: Any, ctx: Any) -> Any:
        self.offered.extend(m.content for g in groups for m in g.messages)
        return await super().summarize(previous, groups, ctx)


@pytest.mark.parametrize("background", [False, True], ids=["in-run", "background"])
async def test_a_summary_update_never_offers_groups_erased_since_the_run_loaded(
    background: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run committed; its summary update read the archived groups; then the session is erased."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    summarizer = RecordingSummarizer()
    mine = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        summarizer=summarizer,
        summary_limits=SummaryLimits(background=background),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    try:
        await mine.run(ANA, "s1", "my account number qzsecretq")
        entered, release = gate_after(summary_module, "_read", monkeypatch)
        caplog.set_level(logging.WARNING)

        async def erase() -> None:
            done = await other.erase(
                EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR
            )
            assert done.tombstone is not None and done.tombstone.state is ErasureState.COMPLETE

        async def turn() -> Any:
            result = await mine.run(ANA, "s1", "a second turn")
            if background:
                # The update stopped: the drain says it failed, and why (no content).
                with pytest.raises(MemoryDrainError, match="stopped before its summarizer call"):
                    await mine.drain(timeout_s=25)
            return result

        outcome: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def run_it() -> None:
                outcome.append(await turn())

            tg.start_soon(run_it)
            with anyio.fail_after(30):
                await entered.wait()  # committed, group 0 archived and read back for the summary
            await erase()
            release.set()
        assert not [t for t in summarizer.offered if "qz" in t], summarizer.offered
        stopped = [
            r for r in caplog.records if "summary update stopped before a model call" in r.getMessage()
        ]
        assert stopped and not [r for r in caplog.records if "qz" in r.getMessage()]
        if not background:
            (result,) = outcome
            assert any(d.code == "summary_failed" and "erasure" in d.message for d in result.diagnostics)
    finally:
        await mine.aclose()
        await other.aclose()
