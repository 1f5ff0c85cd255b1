"""A run never sends again a memory fact forgotten (a plain ``forget``) while it ran.

A run injects memory facts into its request once, and every model call of
the run (each tool round) sends that request again. A plain ``forget`` of
one of those facts — by another task over the same manager, or another
process over the same memory store — is not an erasure: it leaves the
ledger alone, so the erasure fence never looked, and the next call sent
the forgotten fact again. The run now stops before that call
(:class:`ErasedDuringRunError`, nothing committed: its tool round was
made from the fact), as docs/erasure.md says; a forget of a fact the
request does not carry changes nothing, and a run whose request carries no
fact reads nothing more.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, Recording, tool_turn_while
from _fence_support import closing, fence_pair, two_processes

from agentium_harness import (
    CommitState,
    ErasedDuringRunError,
    FactForgottenDuringRunError,
    MemoryFact,
    MemoryScope,
    MemoryStoreError,
    OperationTimeoutError,
    RuntimeLimits,
    SessionKey,
    Telemetry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import MemoryCapabilities, OpContext
from agentium_harness.testing.erasure_races import HeldTool, fact_forgotten_mid_run

pytestmark = pytest.mark.anyio

SECRET = "the vault code is qzfactq"
SCOPE = MemoryScope("acme", "ana")
REPLIES = ["noted", DEPLOY, "Deployed."]


class CountingHistory(InMemoryMemoryStore):
    """An in-memory memory store counting its ``history`` reads (what the fence reads per call)."""

    def __init__(self) -> None:
        super().__init__()
        self.histories = 0

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        self.histories += 1
        return await super().history(scope, fact_id, ctx)


def _memories(kind: str, tmp_path: Path) -> tuple[Any, Any]:
    """Each process's memory store: one in-memory store shared, or a SQLite store each over one file."""
    if kind == "memory":
        shared = InMemoryMemoryStore()
        return shared, shared
    config = SQLiteConfig(path=str(tmp_path / "memory.db"))
    return SQLiteMemoryStore(config), SQLiteMemoryStore(config)


def _pair(kind: str, tmp_path: Path, provider: Recording, held: HeldTool) -> tuple[Any, Any]:
    mine, other = two_processes(kind, tmp_path)
    memory_mine, memory_other = _memories(kind, tmp_path)
    return fence_pair(provider, held, {**mine, "memory": memory_mine}, {**other, "memory": memory_other})


async def _remember(runtime: Any, text: str) -> str:
    ack = await runtime.memory.remember(MemoryFact(SCOPE, text))
    assert ack.fact_id is not None
    return str(ack.fact_id)


def _stopped(provider: Recording, outcome: object) -> None:
    """The first call carried the fact; no call after it did; the run stopped, nothing committed."""
    assert SECRET in provider.sent[1], provider.sent[1]
    assert not [text for text in provider.sent[2:] if SECRET in text], provider.sent[2:]
    assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    assert outcome.run_result is not None and not outcome.run_result.committed
    notes = [d for d in outcome.run_result.diagnostics if d.code == "erased_during_run"]
    assert notes and "forgotten" in notes[0].message, outcome.run_result.diagnostics


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_fact_forgotten_by_another_process_is_not_sent_again(kind: str, tmp_path: Path) -> None:
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(_pair(kind, tmp_path, provider, held)) as (mine, other):
        await mine.run(ANA, "s1", "hello")
        fact_id = await _remember(other, SECRET)

        async def forget() -> None:
            await other.memory.forget(SCOPE, fact_id)

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        _stopped(provider, outcome)
        assert len(provider.sent) == 2
        # Hosts log error texts and an id is content: its fact_id names it, the text only with capture.
        assert isinstance(outcome, FactForgottenDuringRunError) and outcome.fact_id == fact_id
        assert fact_id not in str(outcome)
        loaded = await mine.session_store.load(SessionKey("acme", "ana", "s1"), OpContext())
        assert len(loaded.snapshot.resident) == 1  # only "hello": the stopped run committed nothing


async def test_a_fact_forgotten_through_the_same_manager_is_not_sent_again(tmp_path: Path) -> None:
    """Another task of the process forgets it through the run's own manager: no store read needed."""
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(_pair("memory", tmp_path, provider, held)) as (mine, _):
        await mine.run(ANA, "s1", "hello")
        fact_id = await _remember(mine, SECRET)

        async def forget() -> None:
            await mine.memory.forget(SCOPE, fact_id)

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        _stopped(provider, outcome)


async def test_the_stop_names_the_fact_with_content_capture(tmp_path: Path) -> None:
    provider = Recording(REPLIES)
    held = HeldTool()
    mine_stores, other_stores = two_processes("memory", tmp_path)
    shared = InMemoryMemoryStore()
    capture = {"memory": shared, "telemetry": Telemetry(capture_content=True)}
    async with closing(fence_pair(provider, held, {**mine_stores, **capture}, dict(other_stores))) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        fact_id = await _remember(mine, SECRET)

        async def forget() -> None:
            await mine.memory.forget(SCOPE, fact_id)

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        _stopped(provider, outcome)
        assert isinstance(outcome, FactForgottenDuringRunError) and fact_id in str(outcome)


async def test_another_fact_forgotten_does_not_stop_the_run(tmp_path: Path) -> None:
    """A forget of a fact the request does not carry (another user's) changes nothing."""
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(_pair("memory", tmp_path, provider, held)) as (mine, other):
        await mine.run(ANA, "s1", "hello")
        await _remember(other, SECRET)
        bobs = MemoryScope("acme", "bob")
        ack = await other.memory.remember(MemoryFact(bobs, "bob likes tea"))

        async def forget() -> None:
            await other.memory.forget(bobs, ack.fact_id)

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        assert not isinstance(outcome, Exception), repr(outcome)
        assert outcome.committed
        assert len(provider.sent) == 3 and SECRET in provider.sent[2]


async def test_the_fence_reads_each_carried_fact_once_per_later_call_and_nothing_without_facts(
    tmp_path: Path,
) -> None:
    """Cost: one bounded ``history`` read per carried fact per later model call, and once more after the
    last call (before the commit); none with no fact."""
    counting = CountingHistory()
    mine_stores, other_stores = two_processes("memory", tmp_path)
    provider = Recording(["noted", DEPLOY, "Deployed.", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(
        fence_pair(provider, held, {**mine_stores, "memory": counting}, {**other_stores, "memory": counting})
    ) as (mine, other):
        await mine.run(ANA, "s1", "hello")  # no fact yet: one call, no read
        held.release.set()
        await mine.run(ANA, "s1", "Deploy it.", grants=["deploy"])  # no fact carried: no read
        assert counting.histories == 0
        await _remember(other, SECRET)
        await _remember(other, "ana likes green tea")
        await mine.run(ANA, "s1", "Deploy it.", grants=["deploy"])  # two calls, two facts carried
        assert SECRET in provider.sent[-1] and "green tea" in provider.sent[-1]
        # Before the second call, and after it (before the commit): one read for each fact each time.
        assert counting.histories == 4


class NoHistory(InMemoryMemoryStore):
    """An in-memory memory store that does not declare ``history`` (the fence cannot read facts back)."""

    capabilities = MemoryCapabilities(
        acknowledged_writes=True, correction=True, forgetting=True, listing=True, erasure=True
    )


async def test_without_history_a_fact_forgotten_through_the_same_manager_still_stops_the_run(
    tmp_path: Path,
) -> None:
    """The store is not read; the run's own manager knows what it forgot (its ``forgotten_ids``)."""
    provider = Recording(REPLIES)
    held = HeldTool()
    stores, _ = two_processes("memory", tmp_path)
    async with closing(fence_pair(provider, held, {**stores, "memory": NoHistory()}, dict(stores))) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        fact_id = await _remember(mine, SECRET)

        async def forget() -> None:
            await mine.memory.forget(SCOPE, fact_id)

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        _stopped(provider, outcome)


@pytest.mark.parametrize("forgets", [True, False], ids=["forgotten", "another-forgotten"])
async def test_the_public_helper_over_sqlite(tmp_path: Path, forgets: bool) -> None:
    """:func:`fact_forgotten_mid_run` over SQLite: what a backend's tests run over their own stores."""
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    memory_config = SQLiteConfig(path=str(tmp_path / "memory.db"))

    def build(provider: Any, **options: Any) -> Any:
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
        return create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store), **options
        )

    await fact_forgotten_mid_run(build, partial(SQLiteMemoryStore, memory_config), forgets=forgets)


class FailingHistory(InMemoryMemoryStore):
    """An in-memory memory store whose ``history`` fails once ``broken`` (a foreign exception)."""

    broken = False

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        if self.broken:
            raise ValueError("memory backend down")
        return await super().history(scope, fact_id, ctx)


async def test_a_failed_read_fails_the_run_before_the_call(tmp_path: Path) -> None:
    """The fact is never sent unchecked: the store's failure, typed, stops the run before the call."""
    failing = FailingHistory()
    stores, _ = two_processes("memory", tmp_path)
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(fence_pair(provider, held, {**stores, "memory": failing}, dict(stores))) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        await _remember(mine, SECRET)

        async def break_it() -> None:
            failing.broken = True

        outcome = await tool_turn_while(mine, held.entered, held.release, break_it, "Deploy it.")
        assert isinstance(outcome, MemoryStoreError), repr(outcome)
        assert "memory backend down" in str(outcome)
        assert len(provider.sent) == 2 and SECRET in provider.sent[1]  # no call after the failure
        # Nothing says the fact went: what ran is committed without the answer, as after any failure.
        assert outcome.commit_state is CommitState.COMMITTED, outcome.commit_state


class SlowHistory(InMemoryMemoryStore):
    """An in-memory memory store whose ``history`` takes ``delay_s`` each (a slow backend), counted."""

    delay_s = 0.0

    def __init__(self) -> None:
        super().__init__()
        self.histories = 0

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        self.histories += 1
        await anyio.sleep(self.delay_s)
        return await super().history(scope, fact_id, ctx)


async def test_one_look_at_many_carried_facts_is_bounded_by_one_operation_deadline(tmp_path: Path) -> None:
    """A slow store cannot hold a run ``max_injected_facts`` times ``op_timeout_s`` before each later call.

    Each read had its own ``op_timeout_s``, one after another: eight facts at
    just under the deadline each held the run eight deadlines before one
    model call. The look as a whole is now one operation under one deadline:
    past it the run fails before the call (typed, the fact not sent unchecked).
    """
    slow = SlowHistory()
    stores, _ = two_processes("memory", tmp_path)
    provider = Recording(REPLIES)
    held = HeldTool()
    limits = RuntimeLimits(op_timeout_s=1.0)
    async with closing(
        fence_pair(provider, held, {**stores, "memory": slow}, dict(stores), limits=limits)
    ) as (mine, _):
        await mine.run(ANA, "s1", "hello")
        for i in range(8):
            await _remember(mine, f"{SECRET} part {i}")

        async def slow_down() -> None:
            slow.delay_s = 0.3  # each read well within op_timeout_s; eight of them are not

        with anyio.fail_after(30):
            outcome = await tool_turn_while(mine, held.entered, held.release, slow_down, "Deploy it.")
        assert all(f"part {i}" in provider.sent[1] for i in range(8)), provider.sent[1]
        assert isinstance(outcome, OperationTimeoutError), repr(outcome)
        assert len(provider.sent) == 2  # no call after the look that ran out of time
        assert slow.histories < 8  # the look stopped at its deadline, not after every read


async def test_a_fact_corrected_between_calls_does_not_stop_the_run(tmp_path: Path) -> None:
    """A correction is no forget (the replaced revision stays in the history): the run goes on."""
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(_pair("memory", tmp_path, provider, held)) as (mine, other):
        await mine.run(ANA, "s1", "hello")
        fact_id = await _remember(other, SECRET)

        async def correct() -> None:
            await other.memory.correct(SCOPE, fact_id, MemoryFact(SCOPE, "the vault code is qznewq"))

        outcome = await tool_turn_while(mine, held.entered, held.release, correct, "Deploy it.")
        assert not isinstance(outcome, Exception), repr(outcome)
        assert outcome.committed
        assert len(provider.sent) == 3 and SECRET in provider.sent[2] and "qznewq" not in provider.sent[2]


class BlocksHistory(InMemoryMemoryStore):
    """An in-memory memory store whose ``history`` waits (20 s at most) once ``blocking``.

    Only the first read then waits, unless ``hangs``: every read does.
    """

    def __init__(self, hangs: bool = False) -> None:
        super().__init__()
        self.blocking = False
        self.hangs = hangs
        self.entered = anyio.Event()

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        if self.blocking:
            self.blocking = self.hangs
            self.entered.set()
            await anyio.sleep(20)
        return await super().history(scope, fact_id, ctx)


@pytest.mark.parametrize("hangs", [False, True], ids=["once", "hangs"])
async def test_a_cancellation_during_the_fence_read_is_a_cancellation(tmp_path: Path, hangs: bool) -> None:
    """The host cancels the run while the fence reads a carried fact: it stops at once, what ran is kept.

    The cancellation is not turned into a store failure: the tool round that
    ran is committed with the interruption ``cancelled``, as after any
    cancellation once a tool started (docs/runtime.md). The facts are read
    once more first (a cancelled call is a failed one); a store that hangs
    there too leaves the commit its share of ``close_timeout_s`` (``hangs``).
    """
    store = BlocksHistory(hangs)
    stores, _ = two_processes("memory", tmp_path)
    provider = Recording(REPLIES)
    held = HeldTool()
    held.release.set()
    mine = {**stores, "memory": store, "limits": RuntimeLimits(close_timeout_s=0.4)}
    async with closing(fence_pair(provider, held, mine, dict(stores))) as (
        mine,
        _,
    ):
        await mine.run(ANA, "s1", "hello")
        await _remember(mine, SECRET)
        store.blocking = True
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(mine.run, ANA, "s1", "Deploy it.", grants=["deploy"]))
                await store.entered.wait()
                tg.cancel_scope.cancel()
        store.blocking = False
        assert len(provider.sent) == 2  # the call after the read was never made
        page = await mine.read_history(ANA, "s1", max_groups=10)
        kept = page.groups[-1].group
        assert kept.retained.interruption is not None
        assert kept.retained.interruption.cause.value == "cancelled", kept.retained.interruption
        assert [m.role.value for m in kept.messages] == ["user", "assistant", "tool"]
