"""``save_messages`` under other writers: a save that keeps losing its race goes on within ``busy_timeout_s``.

A save reads the view's tail, then appends at the revision it read: another
writer landing in between makes it read again. It gave up after 5 attempts
made back to back, however young the call: several threads saving to one
session (the SDK's concurrent-access pattern, each thread with its own event
loop) could lose 5 races in a row and fail, although every race lost meant
another save committed. It now reads again, with jittered back-off, for at
least 5 attempts and until ``busy_timeout_s`` is spent, as a load does; with
``busy_timeout_s=0`` it still gives up after 5 attempts with
``SessionConflictError``, nothing written.

The other writer lands from inside the runtime's ``append``, between the
save's read of the tail and its append at the revision read.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from af_runtimes import build_runtime
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider
from agentium_harness import (
    CommitState,
    HarnessRuntime,
    Message,
    Role,
    SessionConflictError,
    VerifiedIdentity,
)

ANA = VerifiedIdentity("acme", "ana", "sso")
#: Races a save loses in a row: more than the 5 attempts a save used to make.
LOST_RACES = 6


def interfere_before_appends(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch, interfere: Callable[[int], Awaitable[None]]
) -> tuple[list[int], list[int]]:
    """Run ``interfere(n)`` before each of the first ``LOST_RACES`` appends at a revision read.

    Returns the interferences made and the appends the save attempted (its
    ``expected_revision`` each).
    """
    append = runtime.append
    done: list[int] = []
    attempts: list[int] = []

    async def interfere_then_append(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("expected_revision") is not None:
            attempts.append(kwargs["expected_revision"])
            if len(done) < LOST_RACES:
                done.append(len(done))
                await interfere(len(done) - 1)  # another writer commits after the save's read
        return await append(*args, **kwargs)

    monkeypatch.setattr(runtime, "append", interfere_then_append)
    return done, attempts


async def view_texts(runtime: HarnessRuntime, sid: str = "chat-1") -> list[str]:
    page = await runtime.read_history(ANA, sid, max_groups=200)
    assert page.next_before_seq is None
    return [m.content for g in page.groups for m in g.messages]


@pytest.mark.anyio
async def test_a_save_losing_more_than_five_races_saves_once(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["first"])])
    append_unpatched = runtime.append

    async def other_writer(n: int) -> None:
        await append_unpatched(ANA, "chat-1", [Message(Role.USER, f"other {n}")])

    done, attempts = interfere_before_appends(runtime, monkeypatch, other_writer)
    await provider.save_messages("chat-1", [AFMessage("user", ["mine"])])
    assert len(done) == LOST_RACES
    assert len(attempts) == LOST_RACES + 1  # each race lost, then the one won
    monkeypatch.undo()
    # Saved exactly once, after every write that landed before it.
    assert await view_texts(runtime) == ["first", *(f"other {n}" for n in range(LOST_RACES)), "mine"]


@pytest.mark.anyio
async def test_a_replayed_load_losing_more_than_five_races_stores_only_the_new_message(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other writer's write leaves the view's tail as it was: the replay still repeats it."""
    provider = AgentiumHistoryProvider(runtime, ANA)
    await provider.save_messages("chat-1", [AFMessage("user", ["first"]), AFMessage("assistant", ["hi"])])
    loaded = await provider.get_messages("chat-1")
    append_unpatched = runtime.append

    async def write_and_take_back(n: int) -> None:
        await append_unpatched(ANA, "chat-1", [Message(Role.USER, f"other {n}")])
        await runtime.retract(ANA, "chat-1", count=1, reason="another writer")

    done, attempts = interfere_before_appends(runtime, monkeypatch, write_and_take_back)
    await provider.save_messages("chat-1", [*loaded, AFMessage("user", ["new"])])
    assert len(done) == LOST_RACES
    assert len(attempts) == LOST_RACES + 1
    monkeypatch.undo()
    assert await view_texts(runtime) == ["first", "hi", "new"]


@pytest.mark.anyio
async def test_a_zero_busy_timeout_still_gives_up_after_five_attempts_with_nothing_written(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = AgentiumHistoryProvider(runtime, ANA, busy_timeout_s=0)
    await provider.save_messages("chat-1", [AFMessage("user", ["first"])])
    append_unpatched = runtime.append

    async def other_writer(n: int) -> None:
        await append_unpatched(ANA, "chat-1", [Message(Role.USER, f"other {n}")])

    done, attempts = interfere_before_appends(runtime, monkeypatch, other_writer)
    with pytest.raises(SessionConflictError, match=r"save \(5 attempts\); nothing was written") as refused:
        await provider.save_messages("chat-1", [AFMessage("user", ["mine"])])
    assert refused.value.commit_state is CommitState.NOT_COMMITTED
    assert len(done) == len(attempts) == 5
    monkeypatch.undo()
    # Only the other writer's five messages: the failed save wrote nothing.
    assert await view_texts(runtime) == ["first", *(f"other {n}" for n in range(5))]


def test_four_threads_saving_to_one_session_store_every_message_once(tmp_path: Path) -> None:
    """Each thread runs its own event loop on one provider and one session id, as the SDK's tests do."""
    runtime = build_runtime(tmp_path / "agentium.db")
    provider = AgentiumHistoryProvider(runtime, ANA)
    threads_n, saves = 4, 20
    failures: list[BaseException] = []

    def saver(t: int) -> None:
        async def save_all() -> None:
            for n in range(saves):
                await provider.save_messages("chat-1", [AFMessage("user", [f"t{t}-{n}"])])

        try:
            asyncio.run(save_all())
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=saver, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        stored = asyncio.run(view_texts(runtime))
        assert Counter(stored) == Counter(f"t{t}-{n}" for t in range(threads_n) for n in range(saves))
        # Each thread's saves in its own order.
        for t in range(threads_n):
            assert [s for s in stored if s.startswith(f"t{t}-")] == [f"t{t}-{n}" for n in range(saves)]
    finally:
        asyncio.run(runtime.aclose())
