"""``BlockingRuntime`` refusals raised before a call starts say ``commit_state`` ``not_committed``.

Every other error out of a writing operation says whether it committed
(test_commit_state.py, test_maintenance_commit_state.py). A blocking call
refused before it reached the runtime — made on the runtime's own loop
thread (a tool handler), or after ``close()`` — ran nothing: it says so,
``not_committed``, for each kind of entry point (a run, a history write, a
memory write), and nothing of it is written.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import pytest

from agentium_harness import (
    AgentiumError,
    BlockingCallInLoopError,
    BlockingRuntime,
    CommitState,
    EffectLevel,
    InvalidArgumentError,
    MemoryFact,
    MemoryScope,
    Message,
    Role,
    RuntimeClosedError,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SCOPE = MemoryScope("acme", "ana")
EXCHANGE = [Message(Role.USER, "question"), Message(Role.ASSISTANT, "answer")]


def attempts(b: BlockingRuntime) -> dict[str, Callable[[], object]]:
    """One entry point of each kind, each writing to session ``other`` or to ana's memory."""
    memory = b.memory
    assert memory is not None
    return {
        "run": lambda: b.run(ANA, "other", "hello"),
        "append": lambda: b.append(ANA, "other", EXCHANGE),
        "memory.remember": lambda: memory.remember(MemoryFact(SCOPE, "ana likes tea")),
    }


def runtime(**kw: Any) -> Any:
    return create_harness_runtime(
        provider=kw.pop("provider", None) or ScriptedProvider(replies=["ok"], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=InMemoryMemoryStore(),
        **kw,
    )


def refused(attempt: Callable[[], object]) -> AgentiumError:
    with pytest.raises(AgentiumError) as caught:
        attempt()
    return caught.value


async def nothing_written(rt: Any) -> None:
    assert not (await rt.inspect_session(ANA, "other")).exists
    assert await rt.memory.list(SCOPE) == ()


def test_calls_refused_on_the_runtime_loop_thread_are_not_committed() -> None:
    seen: dict[str, AgentiumError] = {}
    holder: dict[str, BlockingRuntime] = {}

    async def handler(args: object) -> str:
        for name, attempt in attempts(holder["b"]).items():
            seen[name] = refused(attempt)
        return "done"

    script = [{"content": "", "tool_calls": [{"id": "c1", "name": "stop"}]}, "fin"]
    rt = runtime(
        provider=ScriptedProvider(replies=script),
        tools=ToolRegistry([Tool("stop", handler, EffectLevel.WRITE)]),
    )
    with BlockingRuntime(rt) as blocking:
        holder["b"] = blocking
        assert blocking.run(ANA, "s", "go", grants=["stop"]).commit_state is CommitState.COMMITTED
        assert sorted(seen) == ["append", "memory.remember", "run"]
        for name, error in seen.items():
            assert isinstance(error, BlockingCallInLoopError), (name, error)
            assert f"BlockingRuntime.{name}()" in str(error)
            assert error.commit_state is CommitState.NOT_COMMITTED, name
        blocking.call(nothing_written, rt)


def test_calls_after_close_are_not_committed() -> None:
    rt = runtime()
    # Borrowed, so the runtime stays open after close() and can be read back here.
    blocking = BlockingRuntime(rt, owned=False).start()
    blocking.close()
    for name, attempt in attempts(blocking).items():
        error = refused(attempt)
        assert isinstance(error, RuntimeClosedError), (name, error)
        assert error.commit_state is CommitState.NOT_COMMITTED, name
    anyio.run(nothing_written, rt)
    anyio.run(rt.aclose)


@pytest.mark.parametrize(
    "func", [None, 5, "nothing_written", nothing_written(None)], ids=["none", "int", "str", "coro"]
)
def test_call_of_something_not_callable_is_refused_typed_and_runs_nothing(func: Any) -> None:
    # call(5) raised anyio's bare TypeError ("'int' object is not callable") from the portal, after
    # starting the loop thread for it; a coroutine object (not its function) did the same.
    if hasattr(func, "close"):
        func.close()  # only its type matters here: never awaited
    rt = runtime()
    blocking = BlockingRuntime(rt, owned=False)
    with pytest.raises(InvalidArgumentError, match="call") as caught:
        blocking.call(func)
    assert caught.value.commit_state is CommitState.NOT_COMMITTED
    blocking.close()
    anyio.run(nothing_written, rt)
    anyio.run(rt.aclose)


class AsyncCallable:
    async def __call__(self, rt: Any) -> None:
        await nothing_written(rt)


def test_call_of_a_plain_function_is_refused_typed_before_it_runs() -> None:
    # A plain function was called on the loop's own thread (blocking every other call while it
    # ran), and its result returned as it was when not awaitable: call() documents coroutines.
    ran: list[str] = []

    def plain() -> str:
        ran.append("plain")
        return "ran on the loop thread"

    def returning_a_coroutine(rt: Any) -> Any:
        ran.append("lambda-like")
        return nothing_written(rt)

    rt = runtime()
    blocking = BlockingRuntime(rt, owned=False)
    for func, args in ((plain, ()), (returning_a_coroutine, (rt,)), (print, ("x",))):
        with pytest.raises(InvalidArgumentError, match=r"call\(\) takes a coroutine function") as caught:
            blocking.call(func, *args)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
    assert ran == []
    assert blocking._portal is None  # refused before the loop was even started for it
    # What call() documents still runs: a coroutine function, a partial of one, an async __call__.
    blocking.call(nothing_written, rt)
    blocking.call(partial(nothing_written, rt))
    blocking.call(AsyncCallable(), rt)
    blocking.close()
    anyio.run(rt.aclose)
