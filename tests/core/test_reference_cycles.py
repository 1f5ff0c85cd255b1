"""A call leaves no reference cycle of the runtime's objects behind.

Objects in a cycle outlive the call that made them until the cycle collector
runs: a run's snapshot, ticket and outcome would then pile up between
collections, and every collection (the oldest generation walks the whole
heap) lands inside some later turn. So each public call, failed ones
included, must free what it made as soon as it returns, by reference
counting alone. Objects of other libraries are not counted: only the types
defined in ``agentium_harness``.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _cycles_support
import pytest
from _effects_support import DEPLOY, AlwaysFails

from agentium_harness import (
    AgentiumError,
    CommitState,
    EffectLevel,
    HarnessRuntime,
    Message,
    ProviderError,
    ResidentLimits,
    Role,
    RuntimeLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import (
    ModelRequest,
    ModelResponse,
    OpContext,
)

#: The reference-cycle tests' fixture (collections only when the test says), shared.
collector = _cycles_support.collector

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _runtime(path: Path, replies: list[str], *, cycle: bool = True) -> HarnessRuntime:
    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=replies, cycle=cycle),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=3)),
    )


async def _cyclic_garbage(call: Callable[[], Awaitable[object]], times: int = 3) -> Counter[str]:
    """The runtime's objects that only the cycle collector frees, after ``call`` ran ``times`` times."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        for _ in range(times):
            try:
                await call()
            except AgentiumError:
                pass
        gc.collect()
        return Counter(
            type(o).__qualname__
            for o in gc.garbage
            if (type(o).__module__ or "").startswith("agentium_harness")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"question {n}"), Message(Role.ASSISTANT, f"answer {n}")]


async def test_runs_appends_reads_and_retractions_leave_no_cycle(tmp_path: Path, collector: None) -> None:
    async with _runtime(tmp_path / "a.db", ["an answer"]) as rt:
        for n in range(5):  # past the resident limit: later calls evict and archive
            await rt.run(ANA, "s1", f"warm-up {n}")
            await rt.append(ANA, "s2", _pair(n))
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "run": lambda: rt.run(ANA, "s1", "a question"),
            "append": lambda: rt.append(ANA, "s2", _pair(99)),
            "read_history": lambda: rt.read_history(ANA, "s2", max_groups=10),
            "read_history(view=False)": lambda: rt.read_history(ANA, "s2", max_groups=10, view=False),
            "list_sessions": lambda: rt.list_sessions(ANA, limit=10),
            "retract": lambda: rt.retract(ANA, "s2", count=1, reason="undo"),
            "reset_view": lambda: rt.reset_view(ANA, "s2", reason="clear"),
            "inspect_session": lambda: rt.inspect_session(ANA, "s1"),
        }
        for name, call in calls.items():
            assert await _cyclic_garbage(call) == Counter(), name


async def test_failed_calls_leave_no_cycle(tmp_path: Path, collector: None) -> None:
    # A failure carries what ran and whether it committed (``run_result``, ``commit_state``): that
    # must not tie the run's objects into a cycle through the error's traceback either.
    async with _runtime(tmp_path / "a.db", ["only one answer"], cycle=False) as rt:
        await rt.run(ANA, "s1", "the first question")
        await rt.append(ANA, "s2", _pair(0))
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "run, the provider failing": lambda: rt.run(ANA, "s1", "one question too many"),
            "run, bad input": lambda: rt.run(ANA, "s1", ""),
            "append, an incomplete group": lambda: rt.append(
                ANA, "s2", [Message(Role.TOOL, "a result", tool_call_id="nobody-asked")]
            ),
            "append, a stale revision": lambda: rt.append(ANA, "s2", _pair(1), expected_revision=1),
            "retract past the view start": lambda: rt.retract(ANA, "s2", count=50, reason="too many"),
        }
        for name, call in calls.items():
            assert await _cyclic_garbage(call) == Counter(), name


class FailsLast(ScriptedProvider):
    """The scripted provider, cycling: the script's last call fails with a connection error (every run)."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=[*replies, "never sent"], cycle=True)
        self.period = len(replies) + 1
        self.made = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.made += 1
        reply = await super().complete(request, ctx)  # the script moves on either way
        if self.made % self.period == 0:
            raise ConnectionError("upstream reset the connection")
        return reply


def _deploying_runtime(path: Path, provider: FailsLast, **kw: Any) -> HarnessRuntime:
    async def deploy(args: Any) -> str:
        return "deployed v2 to prod"

    config = SQLiteConfig(path=str(path))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        owned=(archive, store),
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        **kw,
    )


async def test_a_failure_after_a_tool_ran_leaves_no_cycle(tmp_path: Path, collector: None) -> None:
    # The tool ran, then the model call after it failed: what ran is committed, the error raised.
    async with _deploying_runtime(tmp_path / "a.db", FailsLast([DEPLOY])) as rt:

        def run() -> Awaitable[object]:
            return rt.run(ANA, "s1", "deploy v2", grants=["deploy"])

        with pytest.raises(ProviderError) as caught:
            await run()
        assert caught.value.commit_state is CommitState.COMMITTED
        del caught  # it holds the error and its traceback: not the runtime's cycle
        assert await _cyclic_garbage(run) == Counter()


async def test_a_failure_in_a_revision_leaves_no_cycle(tmp_path: Path, collector: None) -> None:
    # The verifier refuses the answer, the revision's model call fails: the error crosses the
    # verification step's own handler before the run's.
    provider = FailsLast([DEPLOY, "Deployed."])
    policy = verified_completion_policy(on_fail="revise", max_revisions=2)
    async with _deploying_runtime(tmp_path / "a.db", provider, verifier=AlwaysFails()) as rt:

        def run() -> Awaitable[object]:
            return rt.run(ANA, "s1", "deploy v2", grants=["deploy"], completion=policy)

        with pytest.raises(ProviderError) as caught:
            await run()
        assert caught.value.commit_state is CommitState.COMMITTED
        assert provider.made == 3  # the tool call, the refused answer, the revision that failed
        del caught  # it holds the error and its traceback: not the runtime's cycle
        assert await _cyclic_garbage(run) == Counter()


async def test_an_unexpected_exception_leaves_no_cycle(
    tmp_path: Path, collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An engine bug (a stage raising a plain exception) leaves as an AgentiumError caused by it:
    # neither the error nor its cause may tie the run's objects into a cycle.
    from agentium_harness._engine import history_write, turn_budget

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(turn_budget.TurnBudget, "fit", bug)  # after the tool ran
    monkeypatch.setattr(history_write, "check_group_size", bug)
    async with _deploying_runtime(tmp_path / "a.db", FailsLast([DEPLOY, "Deployed."])) as rt:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "run": lambda: rt.run(ANA, "s1", "deploy v2", grants=["deploy"]),
            "append": lambda: rt.append(ANA, "s2", _pair(0)),
        }
        for name, call in calls.items():
            assert await _cyclic_garbage(call) == Counter(), name


class _DeploysThenAnswers(ScriptedProvider):
    """Asks for the deploy tool, then answers once its result is in the turn (a stopped run keeps no step)."""

    def __init__(self) -> None:
        super().__init__(replies=[DEPLOY], cycle=True)
        self.answers = ScriptedProvider(replies=["Deployed."], cycle=True)

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if request.turn and request.turn[-1].role is Role.TOOL:
            return await self.answers.complete(request, ctx)
        return await super().complete(request, ctx)


async def test_runs_carrying_facts_and_documents_leave_no_cycle(tmp_path: Path, collector: None) -> None:
    """The turn fence's fact and document fences (held by the run's trace) tie nothing into a cycle.

    Each run carries a memory fact and a host document's excerpt and makes a
    second model call (the fences look); the stopped ones (the tool forgets the
    fact, or deletes the document) raise with what ran, which must not either.
    """
    from agentium_harness import MemoryFact, MemoryScope, SourceOwner
    from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
    from agentium_harness.adapters.memory_recall import InMemoryRecallStore

    scope = MemoryScope("acme", "ana")
    facts: list[str] = []
    mode = {"forget": False, "delete": False}
    holder: dict[str, HarnessRuntime] = {}
    raised: list[str] = []

    async def deploy(args: Any) -> str:
        rt = holder["rt"]
        if mode["forget"]:
            await rt.memory.forget(scope, facts[-1])
        if mode["delete"]:
            await rt.delete_document(SourceOwner("acme"), "rota")
        return "deployed v2 to prod"

    config = SQLiteConfig(path=str(tmp_path / "a.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    rt = holder["rt"] = create_harness_runtime(
        provider=_DeploysThenAnswers(),
        archive=archive,
        session_store=store,
        owned=(archive, store),
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        memory=InMemoryMemoryStore(),
        recall=InMemoryRecallStore(),
    )
    async with rt:

        async def run() -> object:
            ack = await rt.memory.remember(MemoryFact(scope, f"ana deploys on rota {len(facts)}"))
            facts.append(str(ack.fact_id))
            await rt.index_document(SourceOwner("acme"), "rota", "The deploy rota changes every Monday.")
            try:
                result = await rt.run(ANA, "s1", "deploy per the rota", grants=["deploy"])
            except AgentiumError as exc:
                raised.append(type(exc).__name__)
                raise
            assert not mode["forget"] and not mode["delete"], result  # a stop raises
            assert result.recall is not None and result.recall.included, result.recall
            return result

        assert await _cyclic_garbage(run) == Counter(), "carried"
        mode["forget"] = True
        assert await _cyclic_garbage(run) == Counter(), "fact forgotten"
        mode["forget"], mode["delete"] = False, True
        assert await _cyclic_garbage(run) == Counter(), "document deleted"
        assert raised == ["FactForgottenDuringRunError"] * 3 + ["DocumentDeletedDuringRunError"] * 3, raised
