"""One runtime's telemetry never applies to another runtime's operations, whatever is current.

A host runs runtimes for many tenants in one process. ``plugin_api.runtime_span``
(and the engine's own entry points) made a runtime's telemetry *current* in a
context variable, and an operation of another runtime called inside that
block (its ``aclose()``, ``drain()``, its memory manager's writes) took it as
its own: its spans went to the first runtime's tracer provider, under the
first runtime's content capture, so the second tenant's messages and errors
reached the first tenant's exporter. Each runtime's operations now record
under that runtime's own ``Telemetry``, and the plugin calls made on its
behalf with it.

A call into plugin code abandoned at its deadline (``call_with_deadline``) is
attributed to the runtime whose telemetry was under way when it started;
one started under none (a registry load, no runtime yet) records nothing on
any provider, the global one included (its WARNING stays).
"""

from __future__ import annotations

import contextvars
import gc
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import anyio
import anyio.to_thread
import opentelemetry.trace as otel_trace
import pytest
from _telemetry_support import Telemetered

from agentium_harness import (
    Agent,
    HarnessRuntime,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Message,
    Role,
    RuntimeCloseError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._plugins.deadline import HookTimeoutError, call_with_deadline
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import client_span, current_span_event, runtime_span
from agentium_harness.testing import SpanRecorder, recording_spans

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
SECRET = "QZV-secret-7731"


class LeakyClose(InMemoryArchive):
    """An owned adapter whose close sends a request, says a degraded outcome, and fails quoting content."""

    capabilities = InMemoryArchive.capabilities

    async def aclose(self) -> None:
        with client_span("b.flush", {"db.operation.name": "flush"}):
            current_span_event("b.flush.degraded", {"error.type": "OSError"})
        raise OSError(f"disk gone while flushing {SECRET}")


@pytest.fixture
def global_provider() -> Iterator[SpanRecorder]:
    """A third provider installed as the global one: nothing of either runtime may reach it."""
    with recording_spans() as recorder:
        yield recorder


def _carried(spans: Any) -> list[str]:
    """Every attribute value and event attribute value of ``spans``, as text."""
    out = [str(v) for s in spans for v in (s.attributes or {}).values()]
    out += [str(v) for s in spans for e in s.events for v in (e.attributes or {}).values()]
    return out


def _runtime(recorded: Telemetered, **telemetry: Any) -> HarnessRuntime:
    """A runtime over in-memory storage and a scripted model, recording under ``recorded``'s telemetry."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=recorded.telemetry(**telemetry),
    )


def _host_span(host: Telemetered, name: str) -> AbstractContextManager[Any]:
    """A span of the host's own (no runtime's), current inside the block and ended at its end."""
    return otel_trace.use_span(host.tracer_provider.get_tracer("host").start_span(name), True)


def _abandoned_on(span: str, call: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The one event a call abandoned at its 0.2 s deadline leaves on the host's ``span``."""
    return [
        (
            span,
            "agentium.plugin.abandoned",
            {"agentium.plugin.call": call, "agentium.plugin.timeout_s": 0.2},
        )
    ]


async def test_another_runtimes_operations_inside_a_runtime_span_use_their_own_telemetry(
    global_provider: SpanRecorder,
) -> None:
    a, b = Telemetered(), Telemetered()
    rt_a = _runtime(a, capture_content=True)
    archive_b = LeakyClose()
    rt_b = create_harness_runtime(
        provider=ScriptedProvider(replies=[f"reply {SECRET}"]),
        archive=archive_b,
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        owned=[archive_b],
        telemetry=b.telemetry(capture_content=False),
    )
    with anyio.fail_after(30), runtime_span(rt_a, "host.a", {"agentium.operation": "a"}):
        await rt_b.append(ANA, "s1", [Message(Role.USER, f"hello {SECRET}")])
        await rt_b.run(ANA, "s2", f"question {SECRET}")
        assert rt_b.memory is not None
        await rt_b.memory.remember(MemoryFact(MemoryScope("acme", "ana"), f"fact {SECRET}"))
        await rt_b.drain()
        with pytest.raises(RuntimeCloseError):
            await rt_b.aclose()
    # A's exporter has A's own span, and nothing of B's.
    assert [s.name for s in a.spans] == ["host.a"]
    await rt_a.aclose()
    names = {s.name for s in b.spans}
    assert {
        "agentium.history.append",
        "invoke_agent agentium",
        "create_memory",
        "agentium.drain",
        "agentium.runtime.close",
        "b.flush",
    } <= names
    # The plugin call made on B's behalf (its adapter's close) reported on B's close span.
    close = b.one("agentium.runtime.close")
    assert b.child_of("b.flush", close)
    assert ("b.flush", "b.flush.degraded", {"error.type": "OSError"}) in b.events("b.flush")
    # B records no content (A's capture never applied to it), and the global provider got nothing.
    assert not [text for text in _carried(b.spans) if SECRET in text]
    assert not [e for s in b.spans for e in s.events if "exception.message" in (e.attributes or {})]
    assert global_provider.finished == ()


async def test_an_abandoned_plugin_call_reports_under_the_runtime_it_was_made_for(
    global_provider: SpanRecorder,
) -> None:
    a, b = Telemetered(), Telemetered()
    rt_a = _runtime(a, capture_content=True)
    rt_b = _runtime(b, capture_content=False)
    gate, finished = threading.Event(), threading.Event()

    def plugin_code() -> None:
        gate.wait(30)  # blocked past its deadline; released once every operation has ended
        try:
            with client_span("late.request", {"db.operation.name": "get"}):
                current_span_event("late.degraded", {"error.type": "TimeoutError"})
        finally:
            finished.set()

    with runtime_span(rt_a, "host.a"), runtime_span(rt_b, "host.b"):
        with pytest.raises(HookTimeoutError):
            await anyio.to_thread.run_sync(call_with_deadline, plugin_code, 0.2, "plugin hook of b")
    gate.set()  # it finishes now, outside any operation of either runtime
    assert await anyio.to_thread.run_sync(finished.wait, 30)
    assert [s.name for s in a.spans] == ["host.a"]
    abandoned = b.one("agentium.plugin.call")
    assert b.child_of("agentium.plugin.call", b.one("host.b"))
    assert dict(abandoned.attributes or {}) == {"error.type": "HookTimeoutError"}
    late = b.one("late.request")
    assert [e.name for e in late.events] == ["late.degraded"]
    assert global_provider.finished == ()


async def test_an_abandoned_plugin_call_no_runtime_made_records_nothing_on_the_global_provider(
    global_provider: SpanRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    gate, finished = threading.Event(), threading.Event()

    def plugin_code() -> None:
        gate.wait(30)
        try:
            with client_span("late.request"):
                current_span_event("late.degraded", {"error.type": "TimeoutError"})
        finally:
            finished.set()

    with caplog.at_level("WARNING", logger="agentium.registry"), pytest.raises(HookTimeoutError):
        await anyio.to_thread.run_sync(call_with_deadline, plugin_code, 0.2, "a hook of plugin x")
    gate.set()
    assert await anyio.to_thread.run_sync(finished.wait, 30)
    assert [r.getMessage() for r in caplog.records if r.name == "agentium.registry"] == [
        "a hook of plugin x did not return within 0.2s; abandoned, still running in a daemon thread"
    ]
    assert global_provider.finished == ()


async def test_an_unattributed_abandoned_call_is_an_event_on_the_callers_own_span() -> None:
    # The host's start-up span is the host's: the event goes on it, and no span is made.
    host = Telemetered()
    gate = threading.Event()
    try:
        with _host_span(host, "host start-up"):
            with pytest.raises(HookTimeoutError):
                await anyio.to_thread.run_sync(call_with_deadline, lambda: gate.wait(30), 0.2, "hook of x")
    finally:
        gate.set()
    assert [s.name for s in host.spans] == ["host start-up"]
    assert host.events("agentium.plugin") == _abandoned_on("host start-up", "hook of x")


async def test_a_runtime_used_by_plugin_code_no_runtime_made_still_records_under_its_own_telemetry(
    global_provider: SpanRecorder,
) -> None:
    # The call records nothing of its own, but a runtime it drives (a plugin command's) is that runtime's.
    b = Telemetered()
    rt_b = _runtime(b)

    def plugin_command() -> None:
        anyio.run(rt_b.aclose)
        with client_span("not.b"):  # outside B's operations: nobody's, recorded nowhere
            pass

    await anyio.to_thread.run_sync(call_with_deadline, plugin_command, 30.0, "plugin command 'b'")
    assert [s.name for s in b.spans] == ["agentium.drain", "agentium.runtime.close"]
    assert global_provider.finished == ()


async def test_an_agent_run_inside_another_runtimes_span_records_under_its_managers_telemetry(
    global_provider: SpanRecorder,
) -> None:
    # An Agent's model call and memory search are its manager's: A's content capture never applies.
    a, m = Telemetered(), Telemetered()
    rt_a = _runtime(a, capture_content=True)
    manager = MemoryManager(InMemoryMemoryStore(), telemetry=m.telemetry(capture_content=False))
    agent = Agent(
        ScriptedProvider(replies=[f"noted {SECRET}"]), manager, MemoryScope("acme", "ana"), session="s1"
    )
    with anyio.fail_after(30), runtime_span(rt_a, "host.a"):
        await agent.run(f"my pin is {SECRET}")
        await agent.close()
    assert [s.name for s in a.spans] == ["host.a"]
    assert {"chat", "search_memory"} <= {s.name for s in m.spans}
    assert not [text for text in _carried(m.spans) if SECRET in text]
    assert global_provider.finished == ()


class _ClosingStore(InMemoryMemoryStore):
    """A memory store whose close sends its backend a request (a flush)."""

    async def aclose(self) -> None:
        with client_span("store.flush", {"db.operation.name": "flush"}):
            pass


class _ClosingProvider(ScriptedProvider):
    """A model provider whose close sends its backend a request."""

    async def aclose(self) -> None:
        with client_span("provider.flush", {"db.operation.name": "flush"}):
            pass


async def test_a_managers_and_an_agents_owned_adapters_close_under_the_managers_telemetry(
    global_provider: SpanRecorder,
) -> None:
    # MemoryManager.aclose (an owned store) and Agent.close (owned adapters) are the manager's operations:
    # what their adapters' closes record goes to its provider, never to the runtime whose block they are in.
    a, m = Telemetered(), Telemetered()
    rt_a = _runtime(a, capture_content=True)
    manager = MemoryManager(_ClosingStore(), telemetry=m.telemetry(), owns_store=True)
    provider = _ClosingProvider(replies=["noted"])
    agent = Agent(
        provider,
        MemoryManager(InMemoryMemoryStore(), telemetry=m.telemetry()),
        MemoryScope("acme", "ana"),
        session="s1",
        owned=[provider],
    )
    with anyio.fail_after(30), runtime_span(rt_a, "host.a"):
        await manager.aclose()
        await agent.close()
    assert [s.name for s in a.spans] == ["host.a"]
    assert {"store.flush", "provider.flush"} <= {s.name for s in m.spans}
    assert global_provider.finished == ()
    await rt_a.aclose()


class _DegradedClose(InMemoryMemoryStore):
    """A memory store whose close says a degraded outcome (no span of its own around it)."""

    async def aclose(self) -> None:
        current_span_event("store.close.degraded", {"error.type": "OSError"})


async def test_an_event_said_under_one_telemetry_never_goes_on_another_runtimes_span(
    global_provider: SpanRecorder,
) -> None:
    # The manager's close opens no span: what its store says there has no span of the manager's to go
    # on, and the span current (runtime A's) is not one. The host's own span still takes such an event.
    a, m, host = Telemetered(), Telemetered(), Telemetered()
    rt_a = _runtime(a, capture_content=True)
    inside_a = MemoryManager(_DegradedClose(), telemetry=m.telemetry(), owns_store=True)
    under_host = MemoryManager(_DegradedClose(), telemetry=m.telemetry(), owns_store=True)
    with anyio.fail_after(30):
        with runtime_span(rt_a, "host.a"):
            await inside_a.aclose()
        with _host_span(host, "host.request"):
            await under_host.aclose()
    assert a.events("store.") == []
    assert host.events("store.") == [("host.request", "store.close.degraded", {"error.type": "OSError"})]
    assert global_provider.finished == ()
    await rt_a.aclose()


async def test_a_call_abandoned_inside_an_unattributed_call_is_an_event_on_the_callers_own_span() -> None:
    # Plugin code no runtime's telemetry covers (a plugin command) makes a call into plugin code of its
    # own (a registry load's import) that is abandoned: no runtime's either, so its event goes on the
    # host's span, as the outer call's would.
    host = Telemetered()
    gate = threading.Event()

    def command() -> str:
        with pytest.raises(HookTimeoutError):
            call_with_deadline(lambda: gate.wait(30), 0.2, "importing plugin y")
        return "done"

    try:
        with _host_span(host, "host start-up"):
            assert await anyio.to_thread.run_sync(call_with_deadline, command, 30.0, "command of x") == "done"
    finally:
        gate.set()
    assert [s.name for s in host.spans] == ["host start-up"]
    assert host.events("agentium.plugin") == _abandoned_on("host start-up", "importing plugin y")


async def test_a_context_copied_inside_a_runtime_span_does_not_keep_the_runtime_alive() -> None:
    # A worker thread's or an abandoned plugin call's copy of the context outlives the operation;
    # its telemetry state named the runtime strongly, so the runtime (and all it holds) lived on
    # until that copy died: the reference-cycle tests saw a closed runtime freed inside a later one.
    a = Telemetered()
    rt = _runtime(a)
    with anyio.fail_after(30):
        async with rt:
            with runtime_span(rt, "host.a"):
                kept = contextvars.copy_context()
    gone = weakref.ref(rt)
    del rt
    gc.collect()
    assert gone() is None, "a copied context kept the runtime alive"
    assert len(kept) > 0  # the copy itself is still alive, holding the operation's state
