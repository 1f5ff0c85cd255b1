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

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from af_runtimes import build_runtime
from agent_framework import Message as AFMessage

from agentium_agent_framework import AgentiumHistoryProvider, _provider
from agentium_harness import (
    CommitState,
    EraseTarget,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    SessionConflictError,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import erasure
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SessionKey, StoredSnapshot

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "sso")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")


@pytest.fixture
async def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[HarnessRuntime]:
    monkeypatch.setattr(_provider, "MAX_PAGE_GROUPS", 4)  # a page of 4 groups: a few groups make pages
    built = build_runtime(tmp_path / "agentium.db")
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


class _SweepingStore(InMemorySessionStore):
    """The shipped in-memory store; each load of session ``s1`` lets ``sweep`` run once (``left`` times).

    That is where another process's erasure lands between an append's load
    and its commit: the erasure ledger moves while the append commits.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sweep: Callable[[], Awaitable[None]] | None = None
        self.left = 0

    async def load(self, key: SessionKey, ctx: OpContext) -> StoredSnapshot | None:
        found = await super().load(key, ctx)
        if self.sweep is not None and self.left > 0 and key.tenant == "acme" and key.session == "s1":
            self.left -= 1
            await self.sweep()
        return found


async def _not_kept(*args: Any) -> None:
    return None


async def _swept(
    sweeps: int, busy_timeout_s: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[HarnessRuntime, AgentiumHistoryProvider]:
    """Session ``s1`` erased, its id free again; its next ``sweeps`` loads each see another erasure."""
    store = _SweepingStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]), archive=InMemoryArchive(), session_store=store
    )
    await runtime.append(ANA, "s1", [Message(role="user", content="before the erasure")])
    # As an earlier core version erased it: keeping no record of where it joined the erasure ledger,
    # so core cannot tell it finished before a load, and refuses the append while erasures of the
    # tenant run (conservatively, as it did for every erasure before).
    with monkeypatch.context() as patched:
        patched.setattr(erasure, "save_joined", _not_kept)
        await runtime.erase(EraseTarget.session("acme", "ana", "s1"), reason="dsr", attestation=OPERATOR)
    made = itertools.count()

    async def sweep() -> None:  # an erasure of another session of the tenant (as a retention sweep's)
        other = f"other-{next(made)}"
        await runtime.append(ANA, other, [Message(role="user", content="x")])
        await runtime.erase(EraseTarget.session("acme", "ana", other), reason="dsr", attestation=OPERATOR)

    store.sweep, store.left = sweep, sweeps
    return runtime, AgentiumHistoryProvider(runtime, ANA, busy_timeout_s=busy_timeout_s)


async def test_a_save_refused_while_erasures_run_is_retried_with_back_off_until_it_lands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Core refuses the append conservatively while the tenant's erasures move (an old erasure of its id).

    The session did not change, so no race was lost: the save backs off and
    tries again within ``busy_timeout_s`` instead of spending its restarts
    at once and saying the session changed, and lands once the sweep is over.
    """
    runtime, provider = await _swept(sweeps=24, busy_timeout_s=30, monkeypatch=monkeypatch)
    try:
        await provider.save_messages("s1", [AFMessage("user", ["after the erasure"])])
        page = await runtime.read_history(ANA, "s1", max_groups=10)
        assert [m.content for g in page.groups for m in g.messages] == ["after the erasure"]
    finally:
        await runtime.aclose()


async def test_a_save_refused_until_busy_timeout_raises_that_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, provider = await _swept(sweeps=10_000, busy_timeout_s=0.3, monkeypatch=monkeypatch)
    try:
        with pytest.raises(SessionConflictError) as caught:
            await provider.save_messages("s1", [AFMessage("user", ["after the erasure"])])
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert "was erased" in str(caught.value) and "may predate the erasure" in str(caught.value)
        assert not (await runtime.inspect_session(ANA, "s1")).exists
    finally:
        await runtime.aclose()
