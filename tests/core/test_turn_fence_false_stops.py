"""The turn fence stops a run only for an erasure that took its session since the load (docs/erasure.md).

The fence before each model call (:mod:`agentium_harness._engine.turn_fence`)
reads the tenant's finished erasures once the ledger moved. An erasure whose
join record is absent (an earlier version's) or damaged may have joined at
any time, so it counts as one since the load — but only while nothing else
tells: a session stored at the load and still stored at the same revision
was not erased since (an erasure removes the snapshot, and a store never
hands out a revision twice for a key). The commit fence judges it so; a run
must not be stopped (its tool calls dropped) for what its commit would take.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, HookedArchive, gate_after, history_texts, tool_turn_while

import agentium_harness._engine.summary as summary_module
from agentium_harness import (
    CommitState,
    EffectLevel,
    ErasedDuringRunError,
    EraseTarget,
    ErasureInProgressError,
    ErasureState,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SummaryLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.erasure_ledger import joined_key, load_ledger, save_ledger
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._ports.erasure import ErasureLedger
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")


def _stores(kind: str, tmp_path: Path) -> tuple[Any, Any, Any, Any]:
    """Two processes' archive and session store objects over the same data."""
    if kind == "memory":
        archive, store = InMemoryArchive(), InMemorySessionStore()
        return archive, store, archive, store
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    return (
        SQLiteArchive(config),
        SQLiteSessionStore(config),
        SQLiteArchive(config),
        SQLiteSessionStore(config),
    )


def _one_resident_pair(
    provider: Any, tools: ToolRegistry, mine_stores: tuple[Any, Any], other_stores: tuple[Any, Any]
) -> tuple[Any, Any]:
    """Ana's runtime (``provider``, ``tools``) and another process's, keeping one archived group.

    Both keep one group resident; ``*_stores`` are each one's (archive, session store).
    """
    limits = RuntimeLimits(resident=ResidentLimits(max_groups=1))
    mine = create_harness_runtime(
        provider=provider,
        archive=mine_stores[0],
        session_store=mine_stores[1],
        tools=tools,
        limits=limits,
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=other_stores[0],
        session_store=other_stores[1],
        limits=limits,
        retention=RetentionPolicy(max_archived_groups=1),
    )
    return mine, other


def _held_deploy() -> tuple[anyio.Event, anyio.Event, ToolRegistry]:
    """A ``deploy`` tool that sets ``entered`` and waits for ``release``: (entered, release, its registry)."""
    entered, release = anyio.Event(), anyio.Event()

    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed"

    return entered, release, ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_old_erasure_without_a_usable_join_record_does_not_stop_a_run_of_the_id_used_again(
    kind: str, tmp_path: Path
) -> None:
    """s1 erased long ago (join record damaged), used again: bob's erasure mid-run must not stop ana's run."""
    tool_entered, tool_release, deploy_tools = _held_deploy()
    archive, store, other_archive, other_store = _stores(kind, tmp_path)
    provider = ScriptedProvider(replies=["noted", "noted", "noted", DEPLOY, "Deployed."])
    mine = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        tools=deploy_tools,
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=other_archive,
        session_store=other_store,
    )
    try:
        await mine.run(ANA, "s1", "long ago")
        old = await other.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
        assert old.tombstone is not None and old.tombstone.state is ErasureState.COMPLETE
        # Its join record damaged (holds no header): read as absent, as an earlier version's erasure.
        ticket, key = Ticket(None, "test", 30.0), joined_key("acme", old.tombstone.erasure_id)
        revision, _ = await load_ledger(ticket, other_store, key)
        await save_ledger(ticket, other_store, key, ErasureLedger((), joined_after=0), revision)
        await mine.run(ANA, "s1", "the id used again")  # stored again: the session now exists
        await mine.run(BOB, "s1", "bob's own")

        async def erase_bob() -> None:
            # Another user's erasure moves the tenant's ledger; ana's session is untouched.
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)

        result = await tool_turn_while(mine, tool_entered, tool_release, erase_bob)
        assert not isinstance(result, BaseException), repr(result)
        assert result.committed
        assert "deploy it" in await history_texts(mine)
    finally:
        await mine.aclose()
        await other.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("meanwhile", ["retention-of-s2", "s2-erased"])
async def test_an_erasure_of_another_session_of_the_user_does_not_stop_the_run(
    kind: str, meanwhile: str, tmp_path: Path
) -> None:
    """Guard: s1 erased and used again before the load; mid-run, ana's s2 loses groups or is erased."""
    tool_entered, tool_release, deploy_tools = _held_deploy()
    archive, store, other_archive, other_store = _stores(kind, tmp_path)
    mine, other = _one_resident_pair(
        ScriptedProvider(replies=["noted"] * 5 + [DEPLOY, "Deployed."]),
        deploy_tools,
        (archive, store),
        (other_archive, other_store),
    )
    try:
        await mine.run(ANA, "s1", "long ago")
        await other.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
        await mine.run(ANA, "s1", "the id used again")
        for n in range(3):
            await mine.run(ANA, "s2", f"s2 turn {n}")  # two of s2's groups archived

        async def erase_s2() -> None:
            if meanwhile == "s2-erased":
                target = EraseTarget.session("acme", "ana", "s2")
                await other.erase(target, reason="dsr", attestation=OPERATOR)
            else:
                done = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s2"))
                assert len(done.erasures) == 1, done

        result = await tool_turn_while(mine, tool_entered, tool_release, erase_s2)
        assert not isinstance(result, BaseException), repr(result)
        assert result.committed
        assert "deploy it" in await history_texts(mine)
    finally:
        await mine.aclose()
        await other.aclose()


async def test_a_summary_update_is_not_stopped_for_an_old_erasure_without_a_usable_join_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """s1 erased long ago (join record damaged), used again; bob erased before ana's summarizer call."""
    archive, store = InMemoryArchive(), InMemorySessionStore()
    mine = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=store,
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True), archive=archive, session_store=store
    )
    try:
        await mine.run(ANA, "s1", "long ago")
        old = await other.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
        assert old.tombstone is not None
        ticket, key = Ticket(None, "test", 30.0), joined_key("acme", old.tombstone.erasure_id)
        revision, _ = await load_ledger(ticket, store, key)
        await save_ledger(ticket, store, key, ErasureLedger((), joined_after=0), revision)
        await mine.run(ANA, "s1", "the id used again")
        await mine.run(BOB, "s1", "bob's own")
        entered, release = gate_after(summary_module, "_read", monkeypatch)
        outcome: list[Any] = []

        async def turn() -> None:
            outcome.append(await mine.run(ANA, "s1", "a second turn"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(30):
                await entered.wait()  # committed, its group archived and read back for the summary
            await other.erase(EraseTarget.user("acme", "bob"), reason="dsr", attestation=OPERATOR)
            release.set()
        (result,) = outcome
        assert result.committed
        assert not result.has("summary_failed"), [d.message for d in result.diagnostics]
    finally:
        await mine.aclose()
        await other.aclose()


class _HeldErase:
    """What the hooked archive awaits before a real erase: ``entered``, then ``release``."""

    def __init__(self) -> None:
        self.entered, self.release = anyio.Event(), anyio.Event()

    async def before(self, target: EraseTarget, kwargs: dict[str, Any]) -> None:
        if not kwargs.get("dry_run", False):
            self.entered.set()
            with anyio.fail_after(30):
                await self.release.wait()


async def test_retention_of_the_session_under_way_stops_the_run_without_calling_its_history_erased() -> None:
    """Retention of ana's s1 is under way at the tool round's end: the run stops before its next call.

    A groups erasure leaves the resident history alone, so the run is no
    :class:`ErasedDuringRunError` ("made from the erased history"): it is
    the :class:`ErasureInProgressError` a load meets, and what ran is
    offered to a commit like any stop's, which the erasure under way refuses.
    """
    tool_entered, tool_release, deploy_tools = _held_deploy()
    held = _HeldErase()
    archive, store = HookedArchive(held), InMemorySessionStore()
    sent: list[int] = []

    class Counting(ScriptedProvider):
        async def complete(self, request: Any, ctx: Any) -> Any:
            sent.append(1)
            return await super().complete(request, ctx)

    mine, other = _one_resident_pair(
        Counting(replies=["noted", "noted", "noted", DEPLOY, "Deployed."]),
        deploy_tools,
        (archive, store),
        (archive, store),
    )
    retained: list[Any] = []
    try:
        for n in range(3):
            await mine.run(ANA, "s1", f"turn {n}")  # two groups archived: one past the policy
        async with anyio.create_task_group() as tg:

            async def retain() -> None:
                target = EraseTarget.session("acme", "ana", "s1")
                retained.append(await other.apply_retention(OPERATOR, target))

            async def meanwhile() -> None:
                tg.start_soon(retain)
                with anyio.fail_after(30):
                    await held.entered.wait()  # recorded in the ledger, under way

            error = await tool_turn_while(mine, tool_entered, tool_release, meanwhile)
            held.release.set()
        assert isinstance(error, ErasureInProgressError), repr(error)
        assert not isinstance(error, ErasedDuringRunError), repr(error)
        assert error.commit_state is CommitState.NOT_COMMITTED
        assert len(sent) == 4  # no call after the retention began
        report = error.run_result
        assert report is not None and [o.name for o in report.tool_outcomes] == ["deploy"]
        assert not report.has("erased_during_run")
        assert "could not be committed" in str(error)
        assert len(retained[0].erasures) == 1
        assert "turn 2" in await history_texts(mine)  # the session lives on
    finally:
        await mine.aclose()
        await other.aclose()
