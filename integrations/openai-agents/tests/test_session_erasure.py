"""AgentiumSession while an operator erases its session: calls show the erased state, never erased items.

An erasure (``HarnessRuntime.erase``) removes the session outright; its id
may be used again at once, and the new session's seqs start again from 0
(its revisions do not: they start above every revision the erased session
had, so a write expecting one of those conflicts). A session object alive across the erasure must never
hand out an erased item, even when the erasure lands inside one of its calls
(between the pages of a ``get_items``, between ``pop_item``'s read and its
retraction). The erasure is run from inside the runtime's ``read_history``,
right after the call's first read, which is where a concurrent one would land.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sdk_sessions import ANA

from agentium_harness import (
    CommitState,
    EraseTarget,
    HarnessRuntime,
    Message,
    OperatorAttestation,
    Role,
    ToolCall,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_openai_agents import AgentiumSession, ForeignItemError, PopRefusedError, item_to_message

pytestmark = pytest.mark.anyio

OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-1", "sso"), statement="DSR-1")


def item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


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


async def test_get_items_across_an_erasure_never_mixes_erased_items_with_the_new_sessions(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One item per group: get_items(10) reads 5 groups, then a second page. The second page
    # was read at the first page's seq, in the new session: 5 new items and 5 erased ones.
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(20):
        await session.add_items([item(f"old {n}")])

    async def reuse_the_id() -> None:
        for n in range(20):
            await session.add_items([item(f"new {n}")])

    erase_after_first_read(runtime, monkeypatch, reuse_the_id)
    assert [i["content"] for i in await session.get_items(10)] == [f"new {n}" for n in range(10, 20)]


async def test_get_items_across_an_erasure_shows_the_erased_state(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second page's before_seq was past the erased session's end: read_history refused it
    # with an InvalidArgumentError about an argument the host never gave.
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(20):
        await session.add_items([item(f"old {n}")])

    async def nothing() -> None:
        return None

    erase_after_first_read(runtime, monkeypatch, nothing)
    assert await session.get_items(10) == []


async def test_pop_item_across_an_erasure_returns_the_item_it_retracted_never_an_erased_one(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pop_item reads the last item at revision 3 and retracts at that revision. The session is
    # erased and its id used again for three revisions in between: pop_item returned the erased
    # item it had read. (Revisions of the new session now start above 3, so the retraction
    # conflicts and pop_item reads the new session's last item again.)
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(3):
        await session.add_items([item(f"old {n}")])

    async def reuse_the_id() -> None:
        for n in range(3):
            await session.add_items([item(f"new {n}")])

    erase_after_first_read(runtime, monkeypatch, reuse_the_id)
    assert await session.pop_item() == item("new 2")
    monkeypatch.undo()
    assert await session.get_items() == [item("new 0"), item("new 1")]
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [m.content for g in audit.groups for m in g.group.messages] == ["new 0", "new 1", "new 2"]


async def test_pop_item_across_an_erasure_never_retracts_another_frameworks_item(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, but the new session's last message is another framework's. It used to be retracted
    # (the new session was back at the revision pop_item read, revisions starting again at 1 after
    # an erasure) and the typed error said so. The new session now starts above the erased one's
    # revisions: the retraction conflicts, the last message is read again and refused as it is
    # (ForeignItemError), nothing retracted.
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(2):
        await session.add_items([item(f"old {n}")])

    async def reuse_the_id() -> None:
        await session.add_items([item("new 0")])
        foreign = Message(Role.USER, "hi", payload={"type": "message"}, payload_format="other.framework/v1")
        await runtime.append(ANA, "chat-1", [foreign])

    erase_after_first_read(runtime, monkeypatch, reuse_the_id)
    with pytest.raises(ForeignItemError, match=r"other\.framework/v1") as raised:
        await session.pop_item()
    assert raised.value.commit_state is not CommitState.COMMITTED
    monkeypatch.undo()
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [(g.control, [m.content for m in g.group.messages]) for g in audit.groups] == [
        (None, ["new 0"]),
        (None, ["hi"]),
    ]


async def test_clear_session_across_an_erasure_never_brings_the_erased_session_back(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # clear_session read a non-empty view, then reset it. The session was erased in between: the
    # reset of the absent session committed a new one holding only the "clear" control group.
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(3):
        await session.add_items([item(f"old {n}")])

    async def nothing() -> None:
        return None

    erase_after_first_read(runtime, monkeypatch, nothing)
    await session.clear_session()
    monkeypatch.undo()
    assert (await runtime.list_sessions(ANA, limit=10)).sessions == ()
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert (audit.groups, audit.snapshot_revision) == ((), 0)
    assert await session.get_items() == []


async def test_clear_session_across_an_erasure_and_reuse_clears_the_new_sessions_view(
    runtime: HarnessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The id used again in between (to another revision): clear_session reads the new session and
    # clears it (one control group), rather than giving up or resetting at a revision it never read.
    session = AgentiumSession(runtime, ANA, "chat-1")
    for n in range(3):
        await session.add_items([item(f"old {n}")])

    async def reuse_the_id() -> None:
        await session.add_items([item("new 0")])

    erase_after_first_read(runtime, monkeypatch, reuse_the_id)
    await session.clear_session()
    monkeypatch.undo()
    assert await session.get_items() == []
    audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
    assert [g.control.kind.value if g.control else g.group.messages[0].content for g in audit.groups] == [
        "new 0",
        "reset_view",
    ]


class RevisionReusingStore(InMemorySessionStore):
    """The in-memory store, but a session created after an erasure starts again at revision 1.

    Core's stores never hand a revision out twice for a key; a store of a host's own may.
    """

    async def erase(self, *args: Any, **kwargs: Any) -> Any:
        report = await super().erase(*args, **kwargs)
        self._floor = 0
        return report


async def test_pop_item_refusing_the_message_it_retracted_says_it_was_retracted() -> None:
    # pop_item reads the last item at revision 2; the session is erased and its id used again,
    # and with revisions starting again at 1 the new session is at revision 2 when the retraction
    # lands: it takes the new session's last message, a tool result of run(), for which no item can
    # be returned. The error said "nothing was retracted"; the retraction was committed.
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=InMemoryArchive(),
        session_store=RevisionReusingStore(),
    )
    async with runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        for n in range(2):
            await session.add_items([item(f"old {n}")])

        async def reuse_the_id() -> None:
            await session.add_items([item("new 0")])
            call = Message(Role.ASSISTANT, "", (ToolCall("c1", "fetch", {}),))
            await runtime.append(ANA, "chat-1", [call, Message(Role.TOOL, "page", tool_call_id="c1")])

        with pytest.MonkeyPatch.context() as patch:
            erase_after_first_read(runtime, patch, reuse_the_id)
            with pytest.raises(PopRefusedError) as refused:
                await session.pop_item()
        assert refused.value.commit_state is CommitState.COMMITTED
        said = str(refused.value)
        assert "nothing was retracted" not in said and "retracted it all the same" in said
        audit = await runtime.read_history(ANA, "chat-1", max_groups=10, view=False)
        assert [g.control.kind.value for g in audit.groups if g.control] == ["retract"]
        # The call, its result retracted, is left out of the view's items (the API refuses it alone).
        assert await session.get_items() == [item("new 0")]


async def test_pop_item_taking_calls_with_its_item_says_what_another_sessions_retraction_took() -> None:
    # pop_item reads the old session's last item with a call after it that no read shows (its
    # result retracted), so it retracts two messages at revision 3. Erased, its id used again and
    # (revisions starting again at 1) at revision 3: the retraction takes two items of the new
    # session, and an item must not leave the view unreturned: the error says both were retracted.
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["(not called)"]),
        archive=InMemoryArchive(),
        session_store=RevisionReusingStore(),
    )
    async with runtime:
        session = AgentiumSession(runtime, ANA, "chat-1")
        await session.add_items([item("old")])
        # One group: an item, then a call of run() whose result and answer the host retracts.
        call = Message(Role.ASSISTANT, "", (ToolCall("c1", "fetch", {}),))
        result, done = Message(Role.TOOL, "page", tool_call_id="c1"), Message(Role.ASSISTANT, "done")
        await runtime.append(ANA, "chat-1", [item_to_message(item("old 0")), call, result, done])
        await runtime.retract(ANA, "chat-1", count=2, reason="host")  # the call is left out of reads
        assert await session.get_items() == [item("old"), item("old 0")]

        async def reuse_the_id() -> None:
            other = AgentiumSession(runtime, ANA, "chat-1")  # read nothing: no erasure fence to meet
            for n in range(3):
                await other.add_items([item(f"new {n}")])

        with pytest.MonkeyPatch.context() as patch:
            erase_after_first_read(runtime, patch, reuse_the_id)
            with pytest.raises(PopRefusedError) as refused:
                await session.pop_item()
        assert refused.value.commit_state is CommitState.COMMITTED
        assert "2 messages" in str(refused.value) and "retracted it all the same" in str(refused.value)
        assert await session.get_items() == [item("new 0")]
