"""AgentiumHistoryProvider while an operator erases its session: loads and saves never see erased messages.

An erasure (``HarnessRuntime.erase``) removes the session outright; its id
may be used again at once, and the new session's seqs start again from 0.
A load or save that reads several pages must not mix the erased session's
messages with the new one's, nor fail with an error about an argument the
host never gave. The erasure is run from inside the runtime's
``read_history``, right after the call's first page, which is where a
concurrent one would land; pages are made small so a few groups need several.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider, _provider
from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    OperatorAttestation,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HarnessRuntime]:
    monkeypatch.setattr(_provider, "MAX_PAGE_GROUPS", 4)  # a page of 4 groups: a few groups make pages
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    built = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=archive,
        session_store=store,
        owned=(archive, store),
    )
    try:
        yield built
    finally:
        await built.aclose()


def erase_after_first_read(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch, then: Callable[[], Awaitable[None]]
) -> None:
    """Make the runtime's first ``read_history`` erase the session (and run ``then``) before it returns."""
    read = runtime.read_history
    reads = 0

    async def read_then_erase(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        page = await read(*args, **kwargs)
        reads += 1
        if reads == 1:
            target = EraseTarget.session("acme", "ana", "chat-1")
            await runtime.erase(target, reason="dsr", attestation=OPERATOR)
            await then()
        return page

    monkeypatch.setattr(runtime, "read_history", read_then_erase)


async def fill(provider: AgentiumHistoryProvider, prefix: str, count: int) -> None:
    for n in range(count):
        await provider.save_messages("chat-1", [AFMessage("user", [f"{prefix} {n}"])])


async def texts(provider: AgentiumHistoryProvider) -> list[str]:
    return [m.text for m in await provider.get_messages("chat-1")]


async def test_a_load_across_an_erasure_never_mixes_erased_messages_with_the_new_sessions(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second page was read at the first page's before_seq, in the new session.
    provider = AgentiumHistoryProvider(runtime, ANA, max_messages=10)
    await fill(provider, "old", 20)
    erase_after_first_read(runtime, monkeypatch, lambda: fill(provider, "new", 20))
    assert await texts(provider) == [f"new {n}" for n in range(10, 20)]


async def test_a_load_across_an_erasure_shows_the_erased_state(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second page's before_seq was past the erased session's end: InvalidArgumentError.
    provider = AgentiumHistoryProvider(runtime, ANA, max_messages=10)
    await fill(provider, "old", 20)
    erase_after_first_read(runtime, monkeypatch, lambda: fill(provider, "new", 0))
    assert await texts(provider) == []


async def test_a_save_across_an_erasure_reads_the_new_sessions_tail_again(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A save of 6 messages reads the view's tail until it decides; the erasure between its pages
    # made the save fail with InvalidArgumentError about a before_seq, and store nothing. "old 19"
    # (the newest message) inside the messages past their first leaves the first page undecided.
    provider = AgentiumHistoryProvider(runtime, ANA)
    await fill(provider, "old", 20)
    erase_after_first_read(runtime, monkeypatch, lambda: fill(provider, "new", 0))
    given = ["turn 0", "old 19", "turn 2", "turn 3", "turn 4", "turn 5"]
    await provider.save_messages("chat-1", [AFMessage("user", [text]) for text in given])
    monkeypatch.undo()
    assert await texts(provider) == given
