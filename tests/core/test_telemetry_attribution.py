"""Whose telemetry records work done inside another runtime's block: its own, the global one's, or nobody's.

Three cases a host running runtimes of many tenants in one process meets
(``test_telemetry_per_runtime.py`` has the operations of a runtime B called
inside runtime A's block):

- a ``MemoryManager`` the host built with no ``Telemetry`` of its own records
  on the *global* providers, the same whether it is called outside any block,
  inside runtime A's ``runtime_span`` or inside A's turn (a model call, a tool
  of A's): never on A's providers, never under A's content capture;
- ``runtime.memory`` records on its runtime's providers, also inside runtime
  B's block or turn, when it has the runtime's ``Telemetry``: the manager the
  runtime built over its memory store, or one the host built with it. One the
  host built with no ``Telemetry`` and handed over takes no runtime's: a
  runtime never sets a manager's telemetry (it used to take the first
  runtime's, so a manager shared by two tenants' runtimes put the host's
  calls for the second tenant on the first's exporter until the second
  runtime was built: ``test_telemetry_shared_manager.py``); the runtime's own
  operations on it still record under the runtime's;
- building a runtime (loading plugins, a config file, the adapters'
  factories) is no runtime's operation: done inside A's block, what its plugin
  code records reaches no provider, and a call of it abandoned at its deadline
  is an event on the host's own span only, never on A's. It used to be A's:
  the plugin's spans and events went to A's exporter, under A's content
  capture, with an ``agentium.plugin.call`` span of A's for the abandoned call.
"""

from __future__ import annotations

import json
import threading
import types
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import opentelemetry.trace as otel_trace
import pytest
from _eval_support import FACT_CASE
from _telemetry_support import Telemetered

from agentium_harness import (
    Agent,
    ConfigError,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    VerifiedIdentity,
    create_harness_runtime,
    load_config,
    load_runtime,
)
from agentium_harness._config import runtime as config_runtime
from agentium_harness._plugins import deadline
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider, ScriptedProviderConfig
from agentium_harness.eval import CaseTrace, EvalCase, Grade, Grader, GradeStatus, parse_cases, run_eval
from agentium_harness.plugin_api import client_span, current_span_event, runtime_span
from agentium_harness.testing import SpanRecorder, create_harness_eval_target, recording_spans

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
SCOPE = MemoryScope("acme", "ana")
SECRET = "QZV-secret-7731"
#: The memory operations' own spans (the store's request under a write is ``store.request``).
MEMORY_SPANS = {"create_memory", "update_memory", "delete_memory", "search_memory", "store.request"}


@pytest.fixture
def global_provider() -> Iterator[SpanRecorder]:
    """A third provider installed as the global one."""
    with recording_spans() as recorder:
        yield recorder


class _Store(InMemoryMemoryStore):
    """A memory store whose write sends its backend a request and says a degraded outcome on it."""

    async def remember(self, fact: MemoryFact, ctx: Any) -> Any:
        with client_span("store.request", {"db.operation.name": "put"}):
            current_span_event("store.degraded", {"error.type": "OSError"})
        return await super().remember(fact, ctx)


class _CallingProvider(ScriptedProvider):
    """A model whose call runs the host's ``action`` first: work done inside its runtime's turn."""

    action: Callable[[], Awaitable[object]] | None = None

    async def complete(self, request: Any, ctx: Any) -> Any:
        action, self.action = self.action, None
        if action is not None:
            await action()
        return await super().complete(request, ctx)


def _runtime(provider: ScriptedProvider | None = None, **kw: Any) -> HarnessRuntime:
    return create_harness_runtime(
        provider=provider or ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        **kw,
    )


async def _memory_calls(manager: MemoryManager) -> None:
    """Each kind of memory call a host makes: write, correct, list, select, forget, an Agent's run."""
    ack = await manager.remember(MemoryFact(SCOPE, f"fact {SECRET}"))
    assert ack.fact_id is not None
    await manager.correct(SCOPE, ack.fact_id, MemoryFact(SCOPE, f"fact two {SECRET}"))
    await manager.list(SCOPE)
    await manager.select(SCOPE, f"query {SECRET}")
    await manager.forget(SCOPE, ack.fact_id)
    agent = Agent(ScriptedProvider(replies=[f"noted {SECRET}"]), manager, SCOPE, session="s1")
    await agent.run(f"my pin is {SECRET}")
    await agent.close()


def _carried(spans: Any) -> list[str]:
    out = [str(v) for s in spans for v in (s.attributes or {}).values()]
    return out + [str(v) for s in spans for e in s.events for v in (e.attributes or {}).values()]


async def test_a_manager_with_no_telemetry_records_on_the_global_providers_inside_another_runtimes_block_too(
    global_provider: SpanRecorder,
) -> None:
    a = Telemetered()
    model_a = _CallingProvider(replies=["ok"], cycle=True)
    rt_a = _runtime(model_a, telemetry=a.telemetry(capture_content=True))
    seen: dict[str, list[str]] = {}
    with anyio.fail_after(30):
        for where in ("outside", "A's runtime_span", "A's turn"):
            manager, before = MemoryManager(_Store()), len(global_provider.finished)
            if where == "outside":
                await _memory_calls(manager)
            elif where == "A's runtime_span":
                with runtime_span(rt_a, "host.a"):
                    await _memory_calls(manager)
            else:
                model_a.action = lambda m=manager: _memory_calls(m)
                await rt_a.run(ANA, "s1", "hi")
                assert model_a.action is None  # it ran, inside A's model call
            seen[where] = sorted(s.name for s in global_provider.finished[before:])
        await rt_a.aclose()
    # The same spans on the global provider wherever it was called; none on A's.
    assert MEMORY_SPANS | {"chat"} <= set(seen["outside"])
    assert seen["A's runtime_span"] == seen["outside"] == seen["A's turn"]
    assert not MEMORY_SPANS & {s.name for s in a.spans}
    assert not [e for s in a.spans for e in s.events if e.name == "store.degraded"]
    # The manager's store said its degraded outcome on its own request's span (the global provider's).
    degraded = [s.name for s in global_provider.finished for e in s.events if e.name == "store.degraded"]
    assert degraded == ["store.request"] * 3
    # A's content capture never applied to the manager's calls: the defaults capture none.
    assert not [text for text in _carried(global_provider.finished) if SECRET in text]


@pytest.mark.parametrize("built_by", ["runtime", "host"])
async def test_a_runtimes_memory_records_on_its_runtimes_providers_inside_another_runtimes_block(
    global_provider: SpanRecorder, built_by: str
) -> None:
    # Built by the runtime over a store, or by the host with the runtime's Telemetry: the same.
    a, b = Telemetered(), Telemetered()
    rt_a = _runtime(
        memory=_Store() if built_by == "runtime" else MemoryManager(_Store(), telemetry=a.telemetry()),
        telemetry=a.telemetry(),
    )
    model_b = _CallingProvider(replies=["ok"], cycle=True)
    rt_b = _runtime(model_b, telemetry=b.telemetry(capture_content=True))
    assert rt_a.memory is not None
    memory: MemoryManager = rt_a.memory
    seen: dict[str, list[str]] = {}
    with anyio.fail_after(30):
        for where in ("outside", "B's runtime_span", "B's turn"):
            before = len(a.spans)
            if where == "outside":
                await _memory_calls(memory)
            elif where == "B's runtime_span":
                with runtime_span(rt_b, "host.b"):
                    await _memory_calls(memory)
            else:
                model_b.action = lambda: _memory_calls(memory)
                await rt_b.run(ANA, "s1", "hi")
                assert model_b.action is None
            seen[where] = sorted(s.name for s in a.spans[before:])
        await rt_b.aclose()
    assert MEMORY_SPANS | {"chat"} <= set(seen["outside"])
    assert seen["B's runtime_span"] == seen["outside"] == seen["B's turn"]
    assert not MEMORY_SPANS & {s.name for s in b.spans}
    assert not [e for s in b.spans for e in s.events if e.name == "store.degraded"]
    assert not [text for text in _carried(a.spans) if SECRET in text]  # B's capture never applied
    assert global_provider.finished == ()
    await rt_a.aclose()


async def test_a_manager_given_no_telemetry_never_takes_a_runtimes_for_the_hosts_calls(
    global_provider: SpanRecorder,
) -> None:
    # Given to one runtime, to two of the same telemetry, or to two of different telemetry: the
    # host's own calls on it record as a standalone manager's, never under a runtime's (its content
    # capture included). A manager the host gave its own Telemetry keeps it.
    a, c, own = Telemetered(), Telemetered(), Telemetered()
    same = a.telemetry(capture_content=True)
    alone, kept, shared, given = (
        MemoryManager(_Store()),
        MemoryManager(_Store()),
        MemoryManager(_Store()),
        MemoryManager(_Store(), telemetry=own.telemetry()),
    )
    runtimes = [
        _runtime(memory=alone, telemetry=same),
        _runtime(memory=kept, telemetry=same),
        _runtime(memory=kept, telemetry=same),
        _runtime(memory=shared, telemetry=same),
        _runtime(memory=shared, telemetry=c.telemetry()),
        _runtime(memory=given, telemetry=a.telemetry()),
    ]
    with anyio.fail_after(30):
        for manager in (alone, kept, shared):
            await _memory_calls(manager)
        await given.remember(MemoryFact(SCOPE, "given"))  # given its own Telemetry: its own, always
        for runtime in runtimes:
            await runtime.aclose()
    assert not MEMORY_SPANS & {s.name for s in a.spans}
    assert not MEMORY_SPANS & {s.name for s in c.spans}
    assert MEMORY_SPANS | {"chat"} <= {s.name for s in global_provider.finished}
    assert not [text for text in _carried(global_provider.finished) if SECRET in text]
    assert not [text for text in _carried(a.spans) if SECRET in text]
    assert {"create_memory", "store.request"} <= {s.name for s in own.spans}


# -- building a runtime inside another runtime's block --------------------------------------------


def _plugin(gate: threading.Event, finished: threading.Event) -> types.ModuleType:
    """A plugin whose registration hook and factories send requests and say degraded outcomes.

    Provider ``probe`` builds at once; provider ``hang`` blocks until ``gate`` is set, then
    sends a request (late: its call was abandoned) and sets ``finished``.
    """
    module = types.ModuleType("agtest_build_probe")

    def probe(config: ScriptedProviderConfig) -> ScriptedProvider:
        with client_span("factory.request", {"db.operation.name": "connect"}):
            current_span_event("factory.degraded", {"error.type": "OSError"})
        current_span_event("factory.said", {"error.type": "OSError"})
        return ScriptedProvider(config)

    def hang(config: ScriptedProviderConfig) -> ScriptedProvider:
        gate.wait(30)
        try:
            with client_span("late.factory.request"):
                current_span_event("late.degraded", {"error.type": "TimeoutError"})
        finally:
            finished.set()
        return ScriptedProvider(config)

    @hookimpl
    def agentium_register_providers(register: Callable[[AdapterSpec], None]) -> None:
        with client_span("register.request"):
            current_span_event("register.degraded", {"error.type": "OSError"})
        for name, factory in (("probe", probe), ("hang", hang)):
            spec = AdapterSpec(
                name=name,
                adapter_class=ScriptedProvider,
                config_class=ScriptedProviderConfig,
                factory=factory,
            )
            register(spec)

    module.agentium_register_providers = agentium_register_providers  # type: ignore[attr-defined]
    return module


def _config(tmp_path: Path, provider: str) -> Path:
    path = tmp_path / f"{provider}.toml"
    path.write_text(
        f'[provider]\nplugin = "{provider}"\n[provider.options]\nresponses = ["hi"]\n'
        '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The hanging factory's gate; only that factory gets a short bound (every other plugin call 30 s)."""
    real = deadline.call_with_deadline

    def bounded(call: Callable[[], Any], timeout_s: float, what: str, bound: str | None = None) -> Any:
        return real(call, 0.3 if "'hang'" in what else timeout_s, what, bound)

    monkeypatch.setattr(config_runtime, "call_with_deadline", bounded)
    event = threading.Event()
    yield event
    event.set()


async def test_building_a_runtime_inside_another_runtimes_span_records_on_no_runtimes_providers(
    global_provider: SpanRecorder,
    gate: threading.Event,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Host code builds runtime B (plugins, config, factories) inside runtime A's block. None of it is
    # A's operation, and B does not exist yet: its plugin code records on no provider, and the factory
    # abandoned at its deadline is an event on the host's own span inside the block, never on A's.
    a, host = Telemetered(), Telemetered()
    rt_a = _runtime(telemetry=a.telemetry(capture_content=True))
    finished = threading.Event()
    hung = "the factory of provider adapter 'hang' (plugin agtest-build-probe) did not return within 0.3s"
    with caplog.at_level("WARNING", logger="agentium.registry"), runtime_span(rt_a, "host.a"):
        registry = PluginRegistry.load(
            autoload=False,
            extra_plugins=[("agtest-build-probe", _plugin(gate, finished))],
            hook_timeout_s=30.0,
        )
        load_config(_config(tmp_path, "probe"), registry)
        rt_b = load_runtime(_config(tmp_path, "probe"), registry=registry)
        with pytest.raises(ConfigError, match=r"did not return within 0\.3s"):
            load_runtime(_config(tmp_path, "hang"), registry=registry)
        with otel_trace.use_span(host.tracer_provider.get_tracer("host").start_span("host.build"), True):
            with pytest.raises(ConfigError, match=r"did not return within 0\.3s"):
                load_runtime(_config(tmp_path, "hang"), registry=registry)
    gate.set()  # the abandoned factories go on now, outside A's block, and send their late requests
    assert await anyio.to_thread.run_sync(finished.wait, 30)
    assert [s.name for s in a.spans] == ["host.a"]
    assert a.one("host.a").events == ()
    assert global_provider.finished == ()
    # The WARNING says each abandoned call; the host's own span has its event.
    assert [r.getMessage() for r in caplog.records if r.name == "agentium.registry"] == [
        f"{hung}; abandoned, still running in a daemon thread"
    ] * 2
    assert host.events("agentium.plugin") == [
        (
            "host.build",
            "agentium.plugin.abandoned",
            {"agentium.plugin.call": hung.split(" did not")[0], "agentium.plugin.timeout_s": 0.3},
        )
    ]
    with anyio.fail_after(30):
        await rt_a.aclose()
        await rt_b.aclose()


class _ClosingProvider(ScriptedProvider):
    """A provider whose close sends its backend a request."""

    capabilities = ScriptedProvider.capabilities

    async def aclose(self) -> None:
        with client_span("provider.close.request", {"db.operation.name": "close"}):
            current_span_event("provider.close.degraded", {"error.type": "OSError"})


def _failing_build_plugin() -> types.ModuleType:
    """Provider ``closing`` builds; archive ``broken``'s factory raises, so the build closes the provider."""
    module = types.ModuleType("agtest_failing_build")

    def broken(config: ScriptedProviderConfig) -> InMemoryArchive:
        raise OSError("the archive cannot be built")

    @hookimpl
    def agentium_register_providers(register: Callable[[AdapterSpec], None]) -> None:
        register(
            AdapterSpec(name="closing", adapter_class=_ClosingProvider, config_class=ScriptedProviderConfig)
        )

    @hookimpl
    def agentium_register_archives(register: Callable[[AdapterSpec], None]) -> None:
        register(
            AdapterSpec(
                name="broken",
                adapter_class=InMemoryArchive,
                config_class=ScriptedProviderConfig,
                factory=broken,
            )
        )

    module.agentium_register_providers = agentium_register_providers  # type: ignore[attr-defined]
    module.agentium_register_archives = agentium_register_archives  # type: ignore[attr-defined]
    return module


async def test_a_failed_builds_adapter_closes_record_on_no_provider(
    global_provider: SpanRecorder, tmp_path: Path
) -> None:
    # The adapters built before a failure are closed in a thread of the build's: that thread's
    # context had no state, so their closes took the global providers, in A's block or not.
    a = Telemetered()
    rt_a = _runtime(telemetry=a.telemetry())
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[("agtest-failing-build", _failing_build_plugin())], hook_timeout_s=30.0
    )
    config = tmp_path / "failing.toml"
    config.write_text(
        '[provider]\nplugin = "closing"\n[provider.options]\nresponses = ["hi"]\n'
        '[archive]\nplugin = "broken"\n[session_store]\nplugin = "memory"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="the archive cannot be built"):
        load_runtime(config, registry=registry)
    with runtime_span(rt_a, "host.a"), pytest.raises(ConfigError, match="the archive cannot be built"):
        load_runtime(config, registry=registry)
    assert [s.name for s in a.spans] == ["host.a"]
    assert a.one("host.a").events == ()
    assert global_provider.finished == ()
    with anyio.fail_after(30):
        await rt_a.aclose()


class _TracingGrader:
    """A grader whose grading sends a request (a judge model's, say) and says a degraded outcome."""

    name = "tracing"
    description = "passes every case, after a request of its own"
    evidence = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        with client_span("grader.request", {"db.operation.name": "judge"}):
            current_span_event("grader.degraded", {"error.type": "OSError"})
        current_span_event("grader.said", {"error.type": "OSError"})
        return Grade.passed("graded")


async def test_grading_an_eval_inside_another_runtimes_span_records_on_no_provider(
    global_provider: SpanRecorder,
) -> None:
    # A grader is plugin code no runtime's operation covers: it was A's when the host ran the eval
    # in A's block (its request on A's provider, its events on A's span), nothing outside it. The
    # eval's runtime given its own telemetry had its cases' runs on the global provider instead.
    a, e = Telemetered(), Telemetered()
    rt_a = _runtime(telemetry=a.telemetry(capture_content=True))
    target_runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=InMemoryRecallStore(),
        telemetry=e.telemetry(),
    )
    graders: dict[str, Grader] = {"tracing": _TracingGrader()}
    cases = parse_cases(json.dumps({**FACT_CASE, "graders": ["tracing"]}), graders=list(graders))
    with anyio.fail_after(30), runtime_span(rt_a, "host.a"):
        run = await run_eval(cases, create_harness_eval_target(runtime=target_runtime), graders)
    assert run.results[0].grades["tracing"].status is GradeStatus.PASS
    assert [s.name for s in a.spans] == ["host.a"]
    assert a.one("host.a").events == ()
    # A case's runs record under the eval's runtime's telemetry (they took the global providers);
    # the grader's request and events on no provider.
    assert "invoke_agent agentium" in {s.name for s in e.spans}
    assert not [s for s in e.spans if s.name.startswith("grader.")]
    assert not [ev for s in e.spans for ev in s.events if ev.name.startswith("grader.")]
    assert global_provider.finished == ()
    with anyio.fail_after(30):
        await target_runtime.aclose()
        await rt_a.aclose()
