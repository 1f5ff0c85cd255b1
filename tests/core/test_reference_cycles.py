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
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from agentium_harness import (
    AgentiumError,
    HarnessRuntime,
    Message,
    ResidentLimits,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def collector() -> Iterator[None]:
    # The test decides when collections run; automatic ones would free cycles before they are counted.
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


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
