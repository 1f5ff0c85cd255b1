"""``runtime.forget`` says truthfully what happened to each source: erased now, gone before, never held.

An ``Agent`` cites each turn of its own conversation as a group of its
session, but Agentium does not archive that conversation: no session store
holds it. ``forget(erase_sources=True)`` of such a fact reported its source
``gone`` / ``erased`` — an erasure nobody ran. It is now ``not_held``, apart
from a source erased by the call (``archived`` → ``erased``) and one erased
before it (``gone``), and the fact itself is forgotten either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from agentium_harness import (
    Agent,
    EraseTarget,
    FactStatus,
    GroupRef,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    OperatorAttestation,
    ResidentLimits,
    RuntimeLimits,
    SessionKey,
    SourcePlace,
    SourceState,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import Message, OpContext, Role

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SCOPE = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 9")


class SaysExtractor:
    """Proposes ``said: <text>`` for each user message (the manager attaches the turn it read)."""

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return [MemoryFact(scope, f"said: {m.content}") for m in messages if m.role is Role.USER]


def _runtime(archive: InMemoryArchive) -> Any:
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        memory=MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor()),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


@asynccontextmanager
async def _running() -> AsyncIterator[tuple[InMemoryArchive, Any, Any]]:
    """A started runtime over a fresh archive (30 s to run in): the archive, the runtime, its memory."""
    archive = InMemoryArchive()
    rt = _runtime(archive)
    with anyio.fail_after(30):
        async with rt:
            yield archive, rt, rt.memory


async def _runs(rt: Any, session: str, *texts: str) -> None:
    """One run of ``rt`` per text, in ``session`` of ana's."""
    for text in texts:
        await rt.run(ANA, session, text)


async def _erase_session(rt: Any, session: str) -> None:
    """The operator erases ana's ``session`` whole."""
    await rt.erase(EraseTarget.session("acme", "ana", session), reason="dsr", attestation=OPERATOR)


async def _cited(memory: MemoryManager, text: str, refs: list[GroupRef]) -> str:
    """Remember a fact ``text`` citing ``refs``; its id."""
    ack = await memory.remember(MemoryFact(SCOPE, text, provenance=refs))
    assert ack.fact_id is not None
    return ack.fact_id


async def _agents_fact(memory: MemoryManager) -> Any:
    """The fact extracted from an Agent's turn 0 of its session "chat" (a conversation never archived)."""
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), memory, SCOPE, session="chat")
    await agent.run("I live in Leeds")
    await agent.close()  # drains the extraction: its fact cites the agent's turn 0 of "chat"
    [extracted] = [f for f in await memory.list(SCOPE) if f.text == "said: I live in Leeds"]
    return extracted


async def _status(rt: Any, fact_id: str) -> tuple[Any, set[tuple[str, int, str, str]]]:
    result = await rt.forget(SCOPE, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
    return result, {(h.session.session, h.seq, h.place, h.state) for h in result.sources}


async def test_each_source_is_reported_erased_gone_or_not_held_as_it_truly_is() -> None:
    key = SessionKey("acme", "ana", "s1")
    async with _running() as (archive, rt, memory):
        await _runs(rt, "s1", "my pin is 4321", "the sky is blue", "again")  # groups 0 and 1 archived
        (group,) = await archive.read_groups(key, 0, 1, OpContext())
        cited = [GroupRef("s1", 0, group.digest)]
        first = await memory.remember(MemoryFact(SCOPE, "ana's pin is 4321", provenance=cited))
        second = await memory.remember(MemoryFact(SCOPE, "ana has a pin", provenance=cited))
        extracted = await _agents_fact(memory)
        assert [(r.session, r.seq) for r in extracted.fact.provenance] == [("chat", 0)]
        assert first.fact_id is not None and second.fact_id is not None

        # An archived source: erased by this call.
        result, status = await _status(rt, first.fact_id)
        assert ("s1", 0, SourcePlace.ARCHIVED, SourceState.ERASED) in status
        assert len(result.erasures) == 1
        assert 0 not in [g.seq for g in await archive.read_groups(key, 0, 10, OpContext())]

        # The same source, cited by another fact: erased already, so gone (and no erasure ran).
        result, status = await _status(rt, second.fact_id)
        assert status == {("s1", 0, SourcePlace.GONE, SourceState.ERASED)}
        assert result.erasures == ()

        # The Agent's turn: never held by Agentium, so nothing was erased — not "gone".
        result, status = await _status(rt, extracted.fact_id)
        assert status == {("chat", 0, SourcePlace.NOT_HELD, SourceState.NOT_HELD)}
        assert result.erasures == () and result.still_held == ()
        assert any("never held by Agentium" in n for n in result.notes)

        # Every fact itself is forgotten all the same.
        for fact_id in (first.fact_id, second.fact_id, extracted.fact_id):
            assert (await memory.history(SCOPE, fact_id))[-1].status is FactStatus.FORGOTTEN


async def test_a_source_whose_session_was_erased_whole_is_gone_not_not_held() -> None:
    async with _running() as (archive, rt, memory):
        for text in ("one", "two", "three"):
            await rt.run(ANA, "s2", text)
            await rt.run(ANA, "s3", text)
        refs = [
            GroupRef(s, 0, g.digest)
            for s in ("s2", "s3")
            for g in await archive.read_groups(SessionKey("acme", "ana", s), 0, 1, OpContext())
        ]
        # The session erasure removes facts citing s2; this one is written after it.
        await _erase_session(rt, "s2")
        _, status = await _status(rt, await _cited(memory, "ana counts", refs))
        assert ("s2", 0, SourcePlace.GONE, SourceState.ERASED) in status
        assert ("s3", 0, SourcePlace.ARCHIVED, SourceState.ERASED) in status


async def test_a_source_of_a_session_erased_and_then_used_again_is_gone_not_not_held() -> None:
    # The session erasure took s2's groups 0-2; s2 was then used again (its new groups 0-1 have
    # other digests). The old groups were held and erased: "never held" would be false.
    key = SessionKey("acme", "ana", "s2")
    async with _running() as (archive, rt, memory):
        await _runs(rt, "s2", "one", "two", "three", "four")  # groups 0-2 archived
        old = await archive.read_groups(key, 0, 3, OpContext())
        refs = [GroupRef("s2", g.seq, g.digest) for g in old if g.seq in (0, 2)]
        await _erase_session(rt, "s2")
        await _runs(rt, "s2", "again", "and again")  # new groups 0 and 1
        (new,) = await archive.read_groups(key, 0, 1, OpContext())
        assert new.digest != refs[0].digest
        result, status = await _status(rt, await _cited(memory, "ana counts", refs))
        assert status == {
            ("s2", 0, SourcePlace.GONE, SourceState.ERASED),
            ("s2", 2, SourcePlace.GONE, SourceState.ERASED),
        }
        assert result.erasures == ()
        assert not any("never held" in n for n in result.notes)
        # The session's new group was not taken for the old one: still stored.
        assert [g.digest for g in await archive.read_groups(key, 0, 1, OpContext())] == [new.digest]


async def test_an_erasure_completing_between_the_ledger_reads_still_reads_as_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # forget read the finished erasures, then the pending ones. An erasure of the (absent) session
    # that completed between the two reads (indexed, then out of pending: in that order) was in
    # neither, and its erased source read as never held. Each read here answers as the store did
    # at its moment: the first one before the erasure completed, the later ones after.
    from agentium_harness._engine import forget as forget_module

    async with _running() as (archive, rt, memory):
        await _runs(rt, "s2", "one", "two", "three")
        (group,) = await archive.read_groups(SessionKey("acme", "ana", "s2"), 0, 1, OpContext())
        await _erase_session(rt, "s2")
        fact_id = await _cited(memory, "ana counts", [GroupRef("s2", 0, group.digest)])
        real_finished, real_pending = forget_module.finished_covering, forget_module.pending_records
        reads: list[str] = []

        async def finished(*args: object, **kw: object) -> tuple[object, ...]:
            done = await real_finished(*args, **kw)  # type: ignore[arg-type]
            reads.append("finished")
            return () if len(reads) == 1 else done  # first read: not indexed yet

        async def pending(*args: object, **kw: object) -> tuple[object, ...]:
            found = await real_pending(*args, **kw)  # type: ignore[arg-type]
            assert found == ()
            reads.append("pending")
            if len(reads) == 1:  # first read: still pending, so the finished one it becomes
                return tuple(await real_finished(*args[:2], SessionKey("acme", "ana", "s2")))  # type: ignore[arg-type]
            return found

        monkeypatch.setattr(forget_module, "finished_covering", finished)
        monkeypatch.setattr(forget_module, "pending_records", pending)
        result = await rt.forget(SCOPE, fact_id, erase_sources=False)
        assert reads, "forget read no erasure ledger"
        assert {(h.session.session, h.seq, h.place, h.state) for h in result.sources} == {
            ("s2", 0, SourcePlace.GONE, SourceState.ERASED)
        }


async def test_an_agent_source_is_not_held_also_after_an_erasure_of_its_user() -> None:
    # An erasure of the whole user is on record (ana was erased, then came back). It covers every
    # session id of hers, but it removed only the sessions it lists: the Agent's conversation,
    # never stored, is not among them, and reporting its turn "gone" claims an erasure of it.
    async with _running() as (_, rt, memory):
        await rt.run(ANA, "s1", "hello")
        await rt.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)
        extracted = await _agents_fact(memory)
        result, status = await _status(rt, extracted.fact_id)
        assert status == {("chat", 0, SourcePlace.NOT_HELD, SourceState.NOT_HELD)}
        assert result.erasures == ()


async def test_a_source_erased_by_a_groups_erasure_before_its_session_was_erased_and_reused_is_gone() -> None:
    # Group 0 of s2 went first (a forgotten fact's sources), then the whole session, which was then
    # used again. The session erasure's tombstone lists only what it removed itself; the groups
    # erasure before it names group 0.
    key = SessionKey("acme", "ana", "s2")
    async with _running() as (archive, rt, memory):
        await _runs(rt, "s2", "one", "two", "three")
        (group,) = await archive.read_groups(key, 0, 1, OpContext())
        ref = [GroupRef("s2", 0, group.digest)]
        result, status = await _status(rt, await _cited(memory, "ana said one", ref))
        assert ("s2", 0, SourcePlace.ARCHIVED, SourceState.ERASED) in status
        await _erase_session(rt, "s2")
        await _runs(rt, "s2", "again", "and again")
        result, status = await _status(rt, await _cited(memory, "ana said one, again", ref))
        assert status == {("s2", 0, SourcePlace.GONE, SourceState.ERASED)}
        assert result.erasures == ()
