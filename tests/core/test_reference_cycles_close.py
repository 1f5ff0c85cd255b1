"""A runtime built, used once, closed and dropped is freed by reference counting alone.

A host that builds a runtime per request, per tenant or per test (directly,
from a config, on the demo's embedded SQLite defaults, or behind
``BlockingRuntime``) drops it once closed. If anything of it were left in a
reference cycle, the whole graph (adapters, caches, the Python objects of
their connections) would stay alive until the cycle collector ran, holding
memory and delaying finalizers. So from building to dropping, nothing of
``agentium_harness`` may be left to the collector: no instance of a type it
defines, and no function or method of its code (a closure or a bound method
stored on a long-lived object ties cycles just as well).

Other libraries' own cycles are not counted; they hold none of ours (the
count would show it). One is inherent and known: ``trio.run`` leaves its
runner, system nursery and tasks in a cycle. Config loading (``parse_config``
and ``resolve_config``) made two cattrs converters per load, which refer to
themselves through their hook dispatch; loads now share one
(:func:`agentium_harness._codec.shared_converter`) and leave no cycle of any
library (the last test). The runtime tests build from a config loaded before
the counted window (what a host building a runtime per request from one
loaded config does).
"""

from __future__ import annotations

import gc
import io
import threading
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import _cycles_support
import anyio
import pytest

from agentium_harness import (
    BlockingRuntime,
    HarnessRuntime,
    MemoryFact,
    MemoryScope,
    VerifiedIdentity,
    create_harness_runtime,
    parse_config,
    resolve_config,
)
from agentium_harness._config.load import ResolvedConfig
from agentium_harness._config.runtime import build_runtime
from agentium_harness._demo.run import run_demo
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.plugin_api import PluginRegistry

#: The reference-cycle tests' fixture (collections only when the test says), shared.
collector = _cycles_support.collector

ANA = VerifiedIdentity("acme", "ana", "test-auth")
GUARD_S = 30.0
BACKENDS = ["asyncio", "trio"]


def _ours(o: object) -> str | None:
    """The name of ``o`` if it is of ``agentium_harness`` (its type, or the code of a function or method)."""
    if isinstance(o, types.MethodType):
        o = o.__func__
    if isinstance(o, types.FunctionType):
        module = o.__module__ or ""
        return f"{o.__qualname__}()" if module.startswith("agentium_harness") else None
    kind = type(o)
    return kind.__qualname__ if (kind.__module__ or "").startswith("agentium_harness") else None


def _left_for_collector(
    make_and_drop: Callable[[], None], named: Callable[[object], str | None] = _ours
) -> Counter[str]:
    """What of ``agentium_harness`` only the cycle collector frees, once ``make_and_drop`` returned.

    ``named`` names what is counted (``None``: not counted); by default only what is ours.
    """
    make_and_drop()  # first: imports and per-process caches are made once, not per runtime
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        make_and_drop()
        gc.collect()
        return Counter(name for name in map(named, gc.garbage) if name is not None)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _in_memory(tmp: Path) -> HarnessRuntime:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["an answer"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
    )


def _sqlite(tmp: Path) -> HarnessRuntime:
    config = SQLiteConfig(path=str(tmp / "direct.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["an answer"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
    )


def _config_text(tmp: Path, plugin: str) -> str:
    """A config with every section the built-in plugins offer: history, recall, memory, summaries."""

    def section(name: str) -> str:
        if plugin == "sqlite":
            return f'[{name}]\nplugin = "sqlite"\n[{name}.options]\npath = "{tmp / "config.db"}"\n'
        return f'[{name}]\nplugin = "memory"\n'

    text = '[provider]\nplugin = "scripted"\n[provider.options]\nresponses = ["an answer"]\n'
    text += "".join(section(n) for n in ("archive", "session_store", "recall", "memory"))
    text += '[summarizer]\nplugin = "extractive"\n'
    if plugin == "sqlite":  # hybrid recall needs a store with vectors: the built-in in-memory one has none
        text += '[embedder]\nplugin = "hashing"\n'
    return text


def _resolved(tmp: Path, plugin: str) -> ResolvedConfig:
    # Loaded before the counted window: a runtime per request is built from one loaded config.
    config = parse_config(_config_text(tmp, plugin), environ={})
    return resolve_config(config, PluginRegistry.load(autoload=False))


def _once(make: Callable[[], HarnessRuntime], backend: str) -> Callable[[], None]:
    async def turn() -> None:
        with anyio.fail_after(GUARD_S):
            runtime = make()
            async with runtime:
                result = await runtime.run(ANA, "s1", "a question")
                assert result.output == "an answer"
                if runtime.memory is not None:
                    await runtime.memory.remember(MemoryFact(MemoryScope("acme", "ana"), "Ana likes tea."))
                await runtime.resources.close_session(ANA, "s1")

    return lambda: anyio.run(turn, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [_in_memory, _sqlite], ids=["in-memory", "sqlite"])
def test_a_runtime_built_used_and_closed_leaves_no_cycle(
    tmp_path: Path, collector: None, backend: str, make: Callable[[Path], HarnessRuntime]
) -> None:
    assert _left_for_collector(_once(lambda: make(tmp_path), backend)) == Counter()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("plugin", ["memory", "sqlite"])
def test_a_runtime_built_from_config_leaves_no_cycle(
    tmp_path: Path, collector: None, backend: str, plugin: str
) -> None:
    resolved = _resolved(tmp_path, plugin)
    assert _left_for_collector(_once(lambda: build_runtime(resolved), backend)) == Counter()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_demo_on_the_embedded_defaults_leaves_no_cycle(
    tmp_path: Path, collector: None, backend: str
) -> None:
    # The demo's runtimes over SQLite with recall and inline summaries, several turns past eviction.
    runs = iter(range(2))

    async def demo() -> None:
        with anyio.fail_after(GUARD_S):
            assert await run_demo(tmp_path / f"demo-{next(runs)}", 6, io.StringIO())

    assert _left_for_collector(lambda: anyio.run(demo, backend=backend)) == Counter()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blocking_runtime_leaves_no_cycle(tmp_path: Path, collector: None, backend: str) -> None:
    # Its loop runs in a thread of its own, which ends with the close: nothing that thread held
    # (the deadline keeper of its loop) may be left in a cycle either. Its memory view is used too.
    resolved = _resolved(tmp_path, "sqlite")

    def host() -> None:
        with BlockingRuntime(build_runtime(resolved), backend=backend) as runtime:
            assert runtime.run(ANA, "s1", "a question").output == "an answer"
            assert runtime.memory is not None
            runtime.memory.remember(MemoryFact(MemoryScope("acme", "ana"), "Ana likes tea."))
            runtime.close_session(ANA, "s1")

    def in_a_thread() -> None:
        # The host's thread, so a hang fails the test within the guard instead of blocking it.
        failed: list[BaseException] = []

        def target() -> None:
            try:
                host()
            except BaseException as exc:  # handed to the test below
                failed.append(exc)

        thread = threading.Thread(target=target)
        thread.start()
        thread.join(GUARD_S)
        assert not thread.is_alive(), "the blocking host did not finish"
        if failed:
            raise failed[0]

    assert _left_for_collector(in_a_thread) == Counter()


def test_substituting_a_configs_variables_leaves_no_cycle(collector: None) -> None:
    # Every load substitutes ${VAR} references through the whole parsed file.
    from agentium_harness._config.source import substitute_env

    data = {"provider": {"plugin": "scripted", "options": {"responses": ["${ANSWER}", "${MISSING}"]}}}

    def substitute() -> None:
        substituted, issues = substitute_env(data, {"ANSWER": "an answer"})
        assert substituted["provider"]["options"]["responses"][0] == "an answer"
        assert [issue.path for issue in issues] == ["$.provider.options.responses[1]"]

    assert _left_for_collector(substitute) == Counter()


@pytest.mark.parametrize("plugin", ["memory", "sqlite"])
def test_loading_a_config_leaves_no_cycle(tmp_path: Path, collector: None, plugin: str) -> None:
    # Each load made two cattrs converters (parsing, then resolving), each referring to itself through
    # its hook dispatch: some 630 objects per load, hooks of ours among them, left to the collector.
    # Every object is counted, cattrs' own too: a load leaves no cycle of any library.
    text = _config_text(tmp_path, plugin)
    registry = PluginRegistry.load(autoload=False)

    def load() -> None:
        resolved = resolve_config(parse_config(text, environ={}), registry)
        assert resolved.provider is not None and resolved.provider.plugin == "scripted"

    assert _left_for_collector(load, lambda o: f"{type(o).__module__}.{type(o).__qualname__}") == Counter()
