"""Shared pieces of the memory tests: a real SQLite store per test, hook plugins, recording providers."""

from __future__ import annotations

import threading
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio

from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import (
    EraseReport,
    EraseTarget,
    MemoryEvent,
    MemoryFact,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    Role,
    SourceKind,
    hookimpl,
)

ALICE_SCOPE = ("tenant-a", "alice")


class GatedMemoryStore(SQLiteMemoryStore):
    """A SQLite memory store whose next write (``hold_write``) or erase (``hold_erase``) waits.

    Set a flag; the call then sets ``entered`` and waits for ``gate`` (a dry-run erase never
    waits), so a test holds a write or an erasure pending at a point of its choosing.
    """

    def __init__(self, config: SQLiteConfig) -> None:
        super().__init__(config)
        self.hold_write = self.hold_erase = False
        self.entered, self.gate = anyio.Event(), anyio.Event()

    async def _held(self) -> None:
        self.entered.set()
        await self.gate.wait()

    async def remember(self, fact: MemoryFact, ctx: OpContext) -> Any:
        if self.hold_write:
            self.hold_write = False
            await self._held()
        return await super().remember(fact, ctx)

    async def erase(self, target: EraseTarget, ctx: OpContext, **options: Any) -> EraseReport:
        if self.hold_erase and not options.get("dry_run"):
            self.hold_erase = False
            await self._held()
        return await super().erase(target, ctx, **options)


class HookedLock:
    """A lock that, released once ``hook`` is set, runs it first thing after the release."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hook: Any = None

    def __enter__(self) -> HookedLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()


def sqlite_store(tmp_path: Path, name: str = "memory.db") -> SQLiteMemoryStore:
    return SQLiteMemoryStore(SQLiteConfig(path=str(tmp_path / name)))


def hook_registry(*, raising: bool = False) -> tuple[PluginRegistry, list[MemoryEvent]]:
    """A real plugin registry with one plugin recording memory events (and, if asked, one that raises)."""
    events: list[MemoryEvent] = []

    @hookimpl
    def agentium_memory_event(event: MemoryEvent) -> None:
        events.append(event)

    registry = PluginRegistry(autoload=False)
    recorder = types.SimpleNamespace(agentium_memory_event=agentium_memory_event)
    registry.register_plugin("memory-recorder", recorder)
    if raising:

        @hookimpl
        def explode(event: MemoryEvent) -> None:
            raise RuntimeError("memory hook exploded")

        registry.register_plugin("memory-exploder", types.SimpleNamespace(agentium_memory_event=explode))
    return registry, events


class RecordingProvider(ModelProvider):
    """Answers 'ok <n>' and keeps every request it was sent."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(deterministic=True)

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.closed = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        ctx.raise_if_expired("provider complete")
        self.requests.append(request)
        return ModelResponse(Message(Role.ASSISTANT, f"ok {len(self.requests)}"))

    async def aclose(self) -> None:
        self.closed += 1


class OkProvider(ModelProvider):
    """Answers a bare 'ok' and keeps every request it was sent (for checks on the requests' memory)."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(deterministic=True)

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(Message(Role.ASSISTANT, "ok"))


def memory_texts(request: ModelRequest) -> list[str]:
    """The texts of a request's memory sources, in the order the request holds them."""
    return [b.content for b in request.sources if b.kind is SourceKind.MEMORY]


class HangingProvider(RecordingProvider):
    """Never answers until cancelled; ``started`` is set once a request arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.started = anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        self.started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


class FailingClose:
    """An owned resource whose ``aclose`` fails ``failures`` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def aclose(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(f"teardown attempt {self.calls} failed")


def texts(facts: Sequence[Any]) -> list[str]:
    return sorted(f.text for f in facts)
