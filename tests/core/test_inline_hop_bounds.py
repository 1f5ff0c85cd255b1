"""Bounds of an adapter call the engine runs in its own task (``Ticket.call``'s ``hops_only``).

The built-in SQLite store's ``load``, ``save`` and ``commit_with_archive``
wait for nothing but their thread hop, so on asyncio the engine runs them without a task of their own
(:func:`~agentium_harness._engine.inline_call.bounded_inline`): the hop itself
keeps the deadline. Here its worker thread blocks where cancellation cannot
reach it, as in ``test_blocked_threads``: the caller still gets its typed
timeout at the deadline, the call is reported abandoned, the thread is told
its caller left, a cancelled caller leaves after the grace, and an abandoned
call's end event is set when its thread ends. Each blocked thread waits on an
event the test sets at the end (at most ``BLOCK_S``, far past every bound
asserted); only the call meant to time out gets a short deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import pytest
from _short_deadline import short_only_for

import agentium_harness.adapters.sqlite as sqlite_module
from agentium_harness import (
    Message,
    OpContext,
    OperationTimeoutError,
    Role,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.bounded import Overrun
from agentium_harness._engine.inline_call import bounded_inline
from agentium_harness._engine.loops import ThreadSafeEvent
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.threaded import ThreadBoundAdapter, host_task_cancelled

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
#: How long a blocked thread blocks at most (the test releases it earlier).
BLOCK_S = 60.0
#: Scheduling slack on a loaded two-core machine; still well under BLOCK_S, so a held caller fails.
SLACK_S = 20.0
#: The deadline of everything a test expects to succeed.
ROOMY_S = 30.0
MESSAGES = [Message(Role.USER, "question"), Message(Role.ASSISTANT, "answer")]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Released at the end of the test so blocked threads return (late) instead of waiting BLOCK_S."""
    event = threading.Event()
    yield event
    event.set()


released = threading.Event()


def _blocked_commits(monkeypatch: pytest.MonkeyPatch, gate: threading.Event) -> list[bool]:
    """Make the store's commits block their thread on ``gate`` (deaf to cancellation) once armed.

    Returns what each blocked thread saw of its caller when released
    (:func:`host_task_cancelled`); the list's first item arms the block.
    """
    original = sqlite_module.save_snapshot
    told: list[bool] = []

    def save_snapshot(*args: Any, **kwargs: Any) -> Any:
        if told and told[0]:
            gate.wait(BLOCK_S)
            told.append(host_task_cancelled())
            released.set()
        return original(*args, **kwargs)

    monkeypatch.setattr(sqlite_module, "save_snapshot", save_snapshot)
    released.clear()
    told.append(False)
    return told


def _runtime(tmp_path: Any, op_timeout_s: float) -> Any:
    path = str(tmp_path / "store.db")
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=SQLiteArchive(SQLiteConfig(path=path)),
        session_store=SQLiteSessionStore(SQLiteConfig(path=path)),
        limits=RuntimeLimits(op_timeout_s=op_timeout_s),
    )


async def _append_times_out_at_its_deadline_and_is_abandoned(rt: Any, operation: str) -> None:
    """One more append by ``rt`` (``op_timeout_s`` 0.3) fails with ``operation``'s abandoned timeout."""
    started = time.monotonic()
    with pytest.raises(OperationTimeoutError) as info:
        await rt.append(ANA, "s1", MESSAGES)
    assert time.monotonic() - started < 0.3 + SLACK_S
    assert info.value.operation == operation
    assert info.value.abandoned and "abandoned" in str(info.value)


async def test_a_commit_blocked_in_its_thread_times_out_at_its_deadline_and_is_abandoned(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, gate: threading.Event
) -> None:
    short_only_for(monkeypatch, "session save", "session read-back")
    told = _blocked_commits(monkeypatch, gate)
    rt = _runtime(tmp_path, 0.3)
    await rt.append(ANA, "s1", MESSAGES)  # a first commit goes through
    told[0] = True
    await _append_times_out_at_its_deadline_and_is_abandoned(rt, "session save")
    told[0] = False
    gate.set()
    # The released thread saw that its caller had left.
    with anyio.fail_after(ROOMY_S):
        await anyio.to_thread.run_sync(released.wait, ROOMY_S)
    assert told[1] is True
    await rt.aclose()


async def test_a_cancelled_caller_leaves_a_commit_blocked_in_its_thread(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, gate: threading.Event
) -> None:
    told = _blocked_commits(monkeypatch, gate)
    rt = _runtime(tmp_path, ROOMY_S)
    await rt.append(ANA, "s1", MESSAGES)
    told[0] = True
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await rt.append(ANA, "s1", MESSAGES)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 0.3 + SLACK_S
    told[0] = False
    gate.set()
    await rt.aclose()


async def test_a_load_blocked_in_its_thread_times_out_at_its_deadline_and_is_abandoned(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, gate: threading.Event
) -> None:
    short_only_for(monkeypatch, "session load")
    first = _runtime(tmp_path, ROOMY_S)
    await first.append(ANA, "s1", MESSAGES)
    await first.aclose()
    original = sqlite_module.read_snapshot

    def read_snapshot(*args: Any, **kwargs: Any) -> Any:
        gate.wait(BLOCK_S)  # deaf to cancellation, as a stuck client call
        return original(*args, **kwargs)

    monkeypatch.setattr(sqlite_module, "read_snapshot", read_snapshot)
    rt = _runtime(tmp_path, 0.3)  # knows no row yet: its load reads the file in a worker thread
    await _append_times_out_at_its_deadline_and_is_abandoned(rt, "session load")
    gate.set()
    await rt.aclose()


class Hopper(ThreadBoundAdapter[object]):
    """A thread-bound adapter whose ``block`` waits for nothing but its hop (it says so, as SQLite does)."""

    _agentium_hops_only: ClassVar[frozenset[str]] = frozenset({"block"})
    cancel_grace_s: ClassVar[float] = BLOCK_S  # the end event may only come from the thread's end

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.ended = threading.Event()

    def open_connection(self) -> object:
        return object()

    def _block(self, conn: object) -> str:
        self.gate.wait(BLOCK_S)
        self.ended.set()
        return "late"

    async def block(self, ctx: OpContext) -> str:
        return await self.run(ctx, "block", self._block)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_abandoned_inline_call_reports_its_end_when_its_thread_ends(gate: threading.Event) -> None:
    adapter = Hopper(gate)
    ctx = OpContext.with_timeout(ROOMY_S)
    deadline_seen: list[bool] = []
    events: list[ThreadSafeEvent] = []
    started = time.monotonic()
    with pytest.raises(Overrun) as info:
        await bounded_inline(
            lambda: adapter.block(ctx),
            0.3,
            on_deadline=lambda: deadline_seen.append(True),
            on_abandon=events.append,
        )
    assert time.monotonic() - started < 0.3 + SLACK_S
    assert info.value.abandoned and deadline_seen == [True]
    assert len(events) == 1 and not events[0].is_set() and not adapter.ended.is_set()
    gate.set()
    with anyio.fail_after(ROOMY_S):
        await events[0].wait()
    assert adapter.ended.is_set()
    # The adapter is free again for the next call, which runs as usual.
    adapter.gate = threading.Event()
    adapter.gate.set()
    assert await bounded_inline(lambda: adapter.block(OpContext.with_timeout(ROOMY_S)), ROOMY_S) == "late"
    await adapter.aclose()
