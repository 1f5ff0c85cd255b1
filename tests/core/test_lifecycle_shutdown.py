"""Lifecycle, second pass (issue 21, item 9): one close attempt, truthful drains, a build that cleans up.

Each test failed before the change: a second concurrent ``aclose()`` cancelled
the first one's in-flight run at once and closed the owned adapters twice; a
drain reported an extraction "completed" while the final write it queued
still ran, and a failed background summary update as ok; a config whose
second factory failed leaked the adapter its first factory had built.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, ClassVar

import anyio
import attrs
import pytest

from agentium_harness import (
    ConfigError,
    MemoryDrainError,
    MemoryManager,
    ResidentLimits,
    RunResult,
    RuntimeClosedError,
    RuntimeLimits,
    SummaryLimits,
    Verdict,
    VerifiedIdentity,
    create_harness_runtime,
    load_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import (
    AdapterSpec,
    CompletionCandidate,
    CompletionVerifier,
    ModelRequest,
    ModelResponse,
    OpContext,
    PluginRegistry,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    hookimpl,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
#: For closes that must let their work finish: the settle and close waits end as soon as it has (well
#: under a second here), so only a stalled machine ever uses more of them, and then does not fail.
GENEROUS = RuntimeLimits(settle_timeout_s=30.0, close_timeout_s=30.0)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SlowProvider(ScriptedProvider):
    """Answers after ``delay`` seconds (honouring cancellation)."""

    def __init__(self, delay: float) -> None:
        super().__init__(replies=["ok"], cycle=True)
        self.delay = delay
        self.started = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.started.set()
        await anyio.sleep(self.delay)
        return await super().complete(request, ctx)


class CountingArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        await anyio.sleep(0.05)


# -- two concurrent aclose() calls share one attempt ---------------------------------------------


async def test_two_concurrent_acloses_share_one_attempt() -> None:
    provider, archive = SlowProvider(0.4), CountingArchive()
    rt = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=InMemorySessionStore(),
        limits=GENEROUS,
        owned=[archive],
    )
    outcomes: dict[str, Any] = {}

    async def run() -> None:
        try:
            outcomes["run"] = await rt.run(ANA, "s1", "q")
        except Exception as exc:
            outcomes["run"] = exc

    async def close(name: str) -> None:
        try:
            await rt.aclose()
            outcomes[name] = "closed"
        except Exception as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await provider.started.wait()
        tg.start_soon(close, "first")
        await anyio.sleep(0.05)
        tg.start_soon(close, "second")
    # The in-flight run settled within settle_timeout_s: the second call did not cut it short.
    assert isinstance(outcomes["run"], RunResult) and outcomes["run"].committed
    assert outcomes["first"] == outcomes["second"] == "closed"
    assert archive.closes == 1, "the owned adapter was closed more than once"
    assert rt.state.value == "closed"


# -- drain covers work started while it runs ----------------------------------------------------


async def test_drain_waits_for_a_final_write_queued_while_it_runs() -> None:
    manager = MemoryManager(InMemoryMemoryStore())
    written = anyio.Event()

    async def final_write() -> None:
        await anyio.sleep(0.3)
        written.set()

    async def extraction() -> None:
        await anyio.sleep(0.05)
        manager.start_work("final write of fact 1", "final-write", final_write)

    manager.start_work("extraction of turn 1", "extraction", extraction)
    result = await manager.drain(30.0)  # returns once both are done
    assert written.is_set(), "drain returned while the queued final write still ran"
    assert set(result.completed) == {"extraction of turn 1", "final write of fact 1"}
    assert manager.running() == ()


async def test_a_final_write_queued_during_the_drain_is_cancelled_and_reported_past_its_timeout() -> None:
    manager = MemoryManager(InMemoryMemoryStore())

    async def final_write() -> None:
        await anyio.sleep(30)

    async def extraction() -> None:
        # It runs once the drain below waits, and must end within the drain's 0.3 s: one checkpoint,
        # not a sleep that a stalled machine could stretch past the drain's deadline.
        await anyio.lowlevel.checkpoint()
        manager.start_work("final write of fact 1", "final-write", final_write)

    manager.start_work("extraction of turn 1", "extraction", extraction)
    with pytest.raises(MemoryDrainError) as info:
        await manager.drain(0.3)
    result = info.value.result
    assert result.completed == ("extraction of turn 1",)
    assert result.cancelled == ("final write of fact 1",) and result.still_running == ()
    assert manager.running() == ()


# -- a failed background summary update is a failure --------------------------------------------


class FailingSummarizer(ExtractiveSummarizer):
    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        await anyio.sleep(0.05)
        raise RuntimeError("the summary model is down")


@pytest.mark.parametrize("memory", [False, True])
@pytest.mark.parametrize("ended_before_drain", [False, True])
async def test_a_failed_background_summary_update_fails_the_drain(
    memory: bool, ended_before_drain: bool
) -> None:
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=FailingSummarizer(),
        summary_limits=SummaryLimits(background=True),
        memory=InMemoryMemoryStore() if memory else None,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    for text in ["one", "two"]:
        await rt.run(ANA, "s1", text)
    if ended_before_drain:
        await anyio.sleep(0.5)
    with pytest.raises(MemoryDrainError) as info:
        await rt.drain(30.0)  # returns once the update failed
    result = info.value.result
    assert not result.ok
    [failed] = result.failed
    assert failed.startswith("summary update") and "s1" in failed
    detail = next(i.detail for i in result.items if i.name == failed)
    assert "the summary model is down" in detail
    # Reported once.
    again = await rt.drain(30.0)
    assert again.ok and again.items == ()
    await rt.aclose()


# -- build_runtime closes what it built when a later factory fails -------------------------------


CLOSED: list[str] = []


class TrackedArchive(InMemoryArchive):
    capabilities = InMemoryArchive.capabilities

    async def aclose(self) -> None:
        CLOSED.append("archive")


@attrs.frozen
class NoOptions:
    pass


def _registry(store_factory: Any) -> PluginRegistry:
    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("tracked", TrackedArchive, NoOptions, factory=lambda _: TrackedArchive()))

    def agentium_register_session_stores(register: Any) -> None:
        register(AdapterSpec("flaky", InMemorySessionStore, NoOptions, factory=store_factory))

    plugin = types.SimpleNamespace(
        agentium_register_archives=hookimpl(agentium_register_archives),
        agentium_register_session_stores=hookimpl(agentium_register_session_stores),
    )
    return PluginRegistry.load(autoload=False, extra_plugins=[("tracked-dist", plugin)])


CONFIG = """
[provider]
plugin = "scripted"

[archive]
plugin = "tracked"

[session_store]
plugin = "flaky"
"""


def _refuse(_: Any) -> Any:
    raise OSError("the session database is not reachable")


class NotAStore:
    """What a broken factory returns: not a session store at all."""

    capabilities: ClassVar[object] = object()


async def test_a_failed_factory_closes_the_adapters_built_before_it(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG)
    CLOSED.clear()
    with pytest.raises(ConfigError, match="not reachable"):
        load_runtime(path, registry=_registry(_refuse), environ={})
    assert CLOSED == ["archive"]


async def test_a_build_refused_after_every_factory_ran_closes_them_all(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG)
    CLOSED.clear()
    with pytest.raises(Exception, match="session_store"):
        load_runtime(path, registry=_registry(lambda _: NotAStore()), environ={})
    assert CLOSED == ["archive"]


# -- verify(), inspect_session() and probe() are admitted (issue 21, item 8) ---------------------


class SlowVerifier(CompletionVerifier):
    """An owned verifier whose check takes ``delay`` seconds; it records whether it was closed mid-call."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = anyio.Event()
        self.in_call = False
        self.closed_during_call = False
        self.closes = 0

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        self.in_call = True
        self.started.set()
        try:
            await anyio.sleep(self.delay)
            return VerificationResult(Verdict.PASS, reason="checked")
        finally:
            self.in_call = False

    async def aclose(self) -> None:
        self.closed_during_call = self.closed_during_call or self.in_call
        self.closes += 1


def _verifying_runtime(verifier: SlowVerifier, limits: RuntimeLimits) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier,
        limits=limits,
        owned=[verifier],
    )


async def test_aclose_waits_for_a_running_verify_before_closing_the_verifier() -> None:
    verifier = SlowVerifier(0.4)
    rt = _verifying_runtime(verifier, GENEROUS)
    got: list[Any] = []

    async def verify() -> None:
        got.append(await rt.verify(ANA, "s1", "done"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(verify)
        await verifier.started.wait()
        await rt.aclose()
    [(record, _notes)] = got
    assert record.verdict is Verdict.PASS
    assert verifier.closes == 1 and not verifier.closed_during_call
    with pytest.raises(RuntimeClosedError):
        await rt.verify(ANA, "s1", "done")


async def test_aclose_cancels_a_hung_verify_before_closing_the_verifier() -> None:
    verifier = SlowVerifier(3600)
    # Only the settle wait is meant to run out; the cancelled verify unwinds and the verifier closes at
    # once, so the close wait is generous (a stalled machine must not cut the verifier's close short).
    limits = RuntimeLimits(settle_timeout_s=0.3, close_timeout_s=30.0)
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier,
        verify_timeout_s=3600,
        limits=limits,
        owned=[verifier],
    )
    errors: list[BaseException] = []

    async def verify() -> None:
        try:
            await rt.verify(ANA, "s1", "done")
        except BaseException as exc:
            errors.append(exc)

    # Bounded as a whole: before, aclose() left the hung verify running (and the test waiting an hour).
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(verify)
            await verifier.started.wait()
            await rt.aclose()
    assert isinstance(errors[0], RuntimeClosedError)
    assert verifier.closes == 1 and not verifier.closed_during_call


class SlowLoadStore(InMemorySessionStore):
    capabilities = InMemorySessionStore.capabilities

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.loading = anyio.Event()
        self.closed_during_load = False
        self.in_load = False

    async def load(self, key: Any, ctx: OpContext) -> Any:
        if self.slow:
            self.in_load = True
            self.loading.set()
            try:
                await anyio.sleep(0.4)
            finally:
                self.in_load = False
        return await super().load(key, ctx)

    async def aclose(self) -> None:
        self.closed_during_load = self.closed_during_load or self.in_load


async def test_an_inspection_runs_beside_a_run_and_aclose_waits_for_it() -> None:
    provider, store = SlowProvider(0.3), SlowLoadStore()
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        limits=GENEROUS,
        owned=[store],
    )
    views: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.run, ANA, "s1", "q")
        await provider.started.wait()
        # Read-only: allowed while the run holds the session.
        views.append(await rt.inspect_session(ANA, "s1"))
    store.slow = True

    async def inspect() -> None:
        views.append(await rt.inspect_session(ANA, "s1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(inspect)
        await store.loading.wait()
        await rt.aclose()
    assert len(views) == 2 and views[1].resident_seqs == (0,)
    assert not store.closed_during_load
    with pytest.raises(RuntimeClosedError):
        await rt.inspect_session(ANA, "s1")
    with pytest.raises(RuntimeClosedError):
        await rt.probe()


class SlowHealthArchive(InMemoryArchive):
    capabilities = attrs.evolve(InMemoryArchive.capabilities, health_check=True)

    def __init__(self) -> None:
        super().__init__()
        self.probing = anyio.Event()
        self.in_health = False
        self.closed_during_health = False

    async def health(self, ctx: OpContext) -> str:
        self.in_health = True
        self.probing.set()
        try:
            await anyio.sleep(0.4)
            return "fine"
        finally:
            self.in_health = False

    async def aclose(self) -> None:
        self.closed_during_health = self.closed_during_health or self.in_health


async def test_aclose_waits_for_a_running_probe() -> None:
    archive = SlowHealthArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        limits=GENEROUS,
        owned=[archive],
    )
    results: list[Any] = []

    async def probe() -> None:
        results.append(await rt.probe())

    async with anyio.create_task_group() as tg:
        tg.start_soon(probe)
        await archive.probing.wait()
        await rt.aclose()
    assert ("archive", "ok: fine") in results[0]
    assert not archive.closed_during_health
