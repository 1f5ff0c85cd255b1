"""A memory manager shared by two tenants' runtimes: the host's own calls on it are no tenant's.

A host-built ``MemoryManager`` with no ``Telemetry`` of its own used to take
the telemetry of the first runtime it was handed to (the runtime set it on
the manager), and give it up only once a runtime of other telemetry was built
on it. In between (a tenant's runtime built on its first request), the host's
calls on the manager for the *second* tenant recorded on the first tenant's
exporter, under the first tenant's content capture: the second tenant's text
on the first's spans. A runtime now never changes a manager's telemetry: the
manager records under its own ``Telemetry``, else under the runtime whose
operation calls it (a context variable set around each operation, so two
runtimes' tasks interleaving keep their own), else the defaults.

The CLI's and the demo's calls into plugin code (a plugin command's
``configure``, the demo's verifier config class and factory) are nobody's,
as loading plugins is: made inside runtime A's block, they record nothing on A's.
"""

from __future__ import annotations

import io
import logging
import types
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._cli.main import build_parser
from agentium_harness._demo import task as demo_task
from agentium_harness._plugins.commands import CliCommand
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import client_span, current_span_event, runtime_span
from agentium_harness.testing import SpanRecorder, recording_spans
from agentium_verifier_fs import FsVerifier, FsVerifierConfig

pytestmark = pytest.mark.anyio

ACME, GLOBEX = MemoryScope("acme", "ana"), MemoryScope("globex", "bo")
SECRET_A, SECRET_B = "ACME-secret-1189", "GLOBEX-secret-5523"
MEMORY_SPANS = {"create_memory", "update_memory", "delete_memory", "search_memory"}


@pytest.fixture
def global_provider() -> Iterator[SpanRecorder]:
    """A provider installed as the global one: where a manager's own calls go under the defaults."""
    with recording_spans() as recorder:
        yield recorder


def _runtime(manager: MemoryManager, telemetered: Telemetered, **kw: Any) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=manager,
        telemetry=telemetered.telemetry(capture_content=True),
        **kw,
    )


def _content_telemetered_runtime() -> tuple[Telemetered, HarnessRuntime]:
    """A host's recorder capturing content, and a runtime A (no memory) recording to it."""
    a = Telemetered()
    return a, create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=a.telemetry(capture_content=True),
    )


async def _host_calls(manager: MemoryManager, scope: MemoryScope, secret: str) -> None:
    """The host's own calls for ``scope``'s tenant: write, correct, list, select, forget."""
    ack = await manager.remember(MemoryFact(scope, f"fact {secret}"))
    assert ack.fact_id is not None
    await manager.correct(scope, ack.fact_id, MemoryFact(scope, f"fact two {secret}"))
    await manager.list(scope)
    await manager.select(scope, f"query {secret}")
    await manager.forget(scope, ack.fact_id)


async def test_the_hosts_call_for_the_second_tenant_before_its_runtime_is_built_is_not_on_the_firsts(
    global_provider: SpanRecorder,
) -> None:
    a, b = Telemetered(), Telemetered()
    shared = MemoryManager(InMemoryMemoryStore())
    with anyio.fail_after(30):
        rt_a = _runtime(shared, a)  # acme's runtime, content capture on; globex's not built yet
        await _host_calls(shared, GLOBEX, SECRET_B)
        # Not on acme's exporter at all (it used to be, text and all): on the global one, no text.
        assert not [t for t in a.carried() if SECRET_B in t]
        assert not MEMORY_SPANS & {s.name for s in a.spans}
        assert MEMORY_SPANS <= {s.name for s in global_provider.finished}
        rt_b = _runtime(shared, b)  # globex's runtime now: the same for either tenant's calls
        before = len(global_provider.finished)
        await _host_calls(shared, ACME, SECRET_A)
        await _host_calls(shared, GLOBEX, SECRET_B)
        assert MEMORY_SPANS <= {s.name for s in global_provider.finished[before:]}
        # The runtimes' own operations on it are still theirs (their turns' memory selection).
        await rt_a.run(VerifiedIdentity("acme", "ana", "sso"), "s1", f"hello {SECRET_A}")
        await rt_b.run(VerifiedIdentity("globex", "bo", "sso"), "s1", f"hello {SECRET_B}")
        await rt_a.aclose()
        await rt_b.aclose()
    assert a.named("search_memory") and b.named("search_memory")
    assert not [t for t in a.carried() if SECRET_B in t]
    assert not [t for t in b.carried() if SECRET_A in t]
    assert not MEMORY_SPANS - {"search_memory"} & {s.name for s in a.spans + b.spans}
    carried = [str(v) for s in global_provider.finished for v in (s.attributes or {}).values()]
    assert not [t for t in carried if SECRET_A in t or SECRET_B in t]  # the defaults capture none


class _Meeting(InMemoryMemoryStore):
    """A memory store whose lookups wait until ``parties`` are in flight: two turns' selections interleave."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self._parties, self._arrived, self._all_in = parties, 0, anyio.Event()

    async def lookup(
        self, scope: MemoryScope, query: str, limit: int, ctx: Any, *, at: datetime | None = None
    ) -> Sequence[Any]:
        self._arrived += 1
        if self._arrived >= self._parties:
            self._all_in.set()
        with anyio.fail_after(10):
            await self._all_in.wait()
        return await super().lookup(scope, query, limit, ctx, at=at)


async def test_two_runtimes_turns_interleaved_on_one_manager_each_record_their_own_selection(
    global_provider: SpanRecorder,
) -> None:
    a, b = Telemetered(), Telemetered()
    shared = MemoryManager(_Meeting(parties=2))
    rt_a, rt_b = _runtime(shared, a), _runtime(shared, b)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt_a.run, VerifiedIdentity("acme", "ana", "sso"), "s1", f"hi {SECRET_A}")
            tg.start_soon(rt_b.run, VerifiedIdentity("globex", "bo", "sso"), "s1", f"hi {SECRET_B}")
        await rt_a.aclose()
        await rt_b.aclose()
    # Both selections were in flight at once (the store's lookups met), each under its own runtime.
    [in_a], [in_b] = a.named("search_memory"), b.named("search_memory")
    assert in_a.attributes is not None and in_b.attributes is not None
    assert in_a.attributes["gen_ai.memory.query.text"] == f"hi {SECRET_A}"
    assert in_b.attributes["gen_ai.memory.query.text"] == f"hi {SECRET_B}"
    assert not [t for t in a.carried() if SECRET_B in t]
    assert not [t for t in b.carried() if SECRET_A in t]
    assert not [s for s in global_provider.finished if s.name == "search_memory"]


def _exploding_hooks() -> PluginRegistry:
    """A real registry whose memory-event hook raises with the tenant's secret in its message."""

    @hookimpl
    def agentium_memory_event(event: object) -> None:
        raise RuntimeError(f"hook saw {SECRET_A}")

    registry = PluginRegistry(autoload=False)
    registry.register_plugin(
        "memory-exploder", types.SimpleNamespace(agentium_memory_event=agentium_memory_event)
    )
    return registry


async def test_a_hook_failure_in_a_runtimes_operation_is_logged_under_that_runtimes_capture_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The runtime no longer sets its telemetry on the manager: the hook failure of its own
    # operation's write (runtime.forget) still follows the runtime's content capture, in the log
    # and on its span; the host's own call on the same manager shows no content.
    a = Telemetered()
    shared = MemoryManager(InMemoryMemoryStore(), hooks=_exploding_hooks())
    rt_a = _runtime(shared, a)
    caplog.set_level(logging.WARNING, logger="agentium.engine.hooks")
    with anyio.fail_after(30):
        ack = await shared.remember(MemoryFact(ACME, "a fact"))  # the host's: the defaults
        assert ack.fact_id is not None
        hosts = [r.getMessage() for r in caplog.records]
        caplog.clear()
        await rt_a.forget(ACME, ack.fact_id)  # the runtime's operation: its capture
        runtimes = [r.getMessage() for r in caplog.records]
        await rt_a.aclose()
    assert hosts and not [m for m in hosts if SECRET_A in m]
    assert [m for m in runtimes if SECRET_A in m]
    [deleted] = a.named("delete_memory")
    said = [dict(e.attributes or {}) for e in deleted.events if e.name == "agentium.diagnostic"]
    assert said and SECRET_A in str(said[0].get("agentium.diagnostic.message"))


# -- the CLI's and the demo's calls into plugin code ---------------------------------------------


async def test_a_plugin_commands_configure_inside_a_runtimes_block_records_nothing_on_it(
    global_provider: SpanRecorder,
) -> None:
    a, rt_a = _content_telemetered_runtime()

    def configure(parser: Any) -> None:
        with client_span("configure.request"):
            current_span_event("configure.degraded", {"error.type": "OSError"})

    command = CliCommand(name="probe", help="a probe", configure=configure, run=lambda args: 0)
    with runtime_span(rt_a, "host.a"):
        build_parser([command])
    assert [s.name for s in a.spans] == ["host.a"]  # the plugin's request and event: none of A's
    assert not a.events("configure.")
    assert global_provider.finished == ()  # nor the global provider's: nobody's
    await rt_a.aclose()


def _verifier_plugin() -> types.ModuleType:
    """A plugin registering verifier ``fs`` whose factory sends its backend a request, then fails."""
    module = types.ModuleType("agtest_demo_probe")

    def build(config: FsVerifierConfig) -> FsVerifier:
        with client_span("factory.request"):
            current_span_event("factory.degraded", {"error.type": "OSError"})
        raise OSError("the verifier cannot be built: only the building is under test")

    @hookimpl
    def agentium_register_verifiers(register: Callable[[AdapterSpec], None]) -> None:
        register(
            AdapterSpec(name="fs", adapter_class=FsVerifier, config_class=FsVerifierConfig, factory=build)
        )

    module.agentium_register_verifiers = agentium_register_verifiers  # type: ignore[attr-defined]
    return module


async def test_the_demos_verifier_building_inside_a_runtimes_block_records_nothing_on_it(
    tmp_path: Path, global_provider: SpanRecorder
) -> None:
    a, rt_a = _content_telemetered_runtime()
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[("agtest-demo-probe", _verifier_plugin())], hook_timeout_s=30.0
    )
    with anyio.fail_after(30), runtime_span(rt_a, "host.a"):
        with pytest.raises(OSError, match="only the building"):
            await demo_task.run_task(
                InMemoryArchive(),
                InMemorySessionStore(),
                VerifiedIdentity("acme", "ana", "sso"),
                "s1",
                tmp_path,
                io.StringIO(),
                registry=registry,
            )
    assert [s.name for s in a.spans] == ["host.a"]  # the factory's request and event: none of A's
    assert not a.events("factory.")
    assert global_provider.finished == ()  # nor the global provider's: nobody's
    await rt_a.aclose()
