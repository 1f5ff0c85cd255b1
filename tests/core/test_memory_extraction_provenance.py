"""Facts an extractor proposes name the group they were extracted from, so erasing its session removes them.

Extracted facts were written with no provenance: a session erasure, which
removes the facts of the user whose provenance names the session
(docs/erasure.md), left every fact extracted from that session's messages.
The manager now attaches the groups the extraction read
(``extract_in_background(..., sources=...)``; an ``Agent`` names its turn:
its session, the turn's number and the digest of its messages), and refuses
(nothing written) an extractor citing a group it was not given.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from agentium_harness import (
    Agent,
    EraseTarget,
    ErasureState,
    GroupRef,
    HarnessRuntime,
    InvalidArgumentError,
    MemoryDrainError,
    MemoryFact,
    MemoryFactNotFoundError,
    MemoryManager,
    MemoryScope,
    MessageGroup,
    OperatorAttestation,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import (
    MAX_FACT_REVISIONS,
    MAX_PROVENANCE,
    MemoryStore,
    Message,
    OpContext,
    Role,
)

pytestmark = pytest.mark.anyio

ANA = MemoryScope("acme", "ana")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops-7", "sso"), statement="DSR-7")
DIGEST = "sha256:" + "b" * 64


class SaysExtractor:
    """Proposes ``said: <text>`` for each user message, citing what ``cite`` says (nothing by default)."""

    def __init__(self, cite: Sequence[GroupRef] = ()) -> None:
        self.cite = tuple(cite)

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        return [
            MemoryFact(scope, f"said: {m.content}", provenance=self.cite)
            for m in messages
            if m.role is Role.USER
        ]


def _runtime(tmp_path: Path, kind: str, extractor: SaysExtractor) -> HarnessRuntime:
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    store: MemoryStore = InMemoryMemoryStore() if kind == "memory" else SQLiteMemoryStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=SQLiteArchive(config),
        session_store=SQLiteSessionStore(config),
        memory=MemoryManager(store, extractor=extractor),
        owned=(store,),
    )
    return runtime


async def _said(runtime: HarnessRuntime, session: str, text: str) -> None:
    assert runtime.memory is not None
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), runtime.memory, ANA, session=session)
    await agent.run(text)
    await agent.close()  # drains the extraction: its fact is written


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_erasing_a_session_removes_the_facts_extracted_from_it(tmp_path: Path, kind: str) -> None:
    runtime = _runtime(tmp_path, kind, SaysExtractor())
    memory = runtime.memory
    assert memory is not None
    with anyio.fail_after(30):
        await _said(runtime, "s1", "my pin is 4321")
        await _said(runtime, "s2", "I live in Leeds")
        facts = {f.text: f for f in await memory.list(ANA)}
        assert set(facts) == {"said: my pin is 4321", "said: I live in Leeds"}
        turn = (Message(Role.USER, "my pin is 4321"), Message(Role.ASSISTANT, "noted"))
        pin = facts["said: my pin is 4321"]
        assert pin.fact.provenance == (GroupRef("s1", 0, MessageGroup(0, turn).digest),)
        assert [r.session for r in facts["said: I live in Leeds"].fact.provenance] == ["s2"]
        result = await runtime.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="DSR", attestation=OPERATOR
        )
        tombstone = result.tombstone
        assert tombstone is not None and tombstone.state is ErasureState.COMPLETE
        erased = tombstone.store("memory")
        assert erased is not None and {c.kind: c.count for c in erased.counts} == {"fact": 1, "revision": 1}
        assert [f.text for f in await memory.list(ANA)] == ["said: I live in Leeds"]
        with pytest.raises(MemoryFactNotFoundError):
            await memory.history(ANA, pin.fact_id)
        await runtime.aclose()


async def test_an_extractor_citing_a_subset_of_its_groups_keeps_it() -> None:
    given = [GroupRef("s1", 4, DIGEST), GroupRef("s1", 5, DIGEST)]
    manager = MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor(cite=given[1:]))
    with anyio.fail_after(30):
        manager.extract_in_background(ANA, [Message(Role.USER, "hi")], "ex", sources=given)
        await manager.drain()
    [fact] = await manager.list(ANA)
    assert fact.fact.provenance == (given[1],)


@pytest.mark.parametrize(
    "cited",
    [GroupRef("s2", 4, DIGEST), GroupRef("s1", 9, DIGEST), GroupRef("s1", 4, "sha256:" + "c" * 64)],
    ids=["another session", "another seq", "another digest"],
)
async def test_an_extractor_citing_a_group_it_was_not_given_writes_nothing(cited: GroupRef) -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor(cite=[cited]))
    with anyio.fail_after(30):
        said = [Message(Role.USER, "hi"), Message(Role.USER, "there")]
        manager.extract_in_background(ANA, said, "ex", sources=[GroupRef("s1", 4, DIGEST)])
        with pytest.raises(MemoryDrainError) as info:
            await manager.drain()
    assert info.value.result.failed and "not given" in info.value.result.describe()
    assert await manager.list(ANA) == ()


@pytest.mark.parametrize(
    "sources",
    [(), "s1", [("s1", 0, DIGEST)], [GroupRef("s1", n, DIGEST) for n in range(MAX_PROVENANCE + 1)], None, 5],
    ids=["none", "a string", "not GroupRef", "past MAX_PROVENANCE", "None", "an int"],
)
async def test_extraction_without_its_sources_is_refused_and_nothing_starts(sources: object) -> None:
    manager = MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor())
    with pytest.raises(InvalidArgumentError, match="sources"):
        manager.extract_in_background(ANA, [Message(Role.USER, "hi")], "ex", sources=sources)  # type: ignore[arg-type]
    assert manager.running() == ()
    await manager.drain()
    assert await manager.list(ANA) == ()


async def test_an_agent_turn_without_a_digest_is_not_extracted_and_a_warning_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A lone surrogate has no UTF-8 form, so the turn has no digest to cite: a fact extracted from
    # it could be found by no session erasure, so none is extracted.
    manager = MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor())
    agent = Agent(ScriptedProvider(replies=["noted"], cycle=True), manager, ANA, session="s1")
    with anyio.fail_after(30), caplog.at_level(logging.WARNING, logger="agentium.engine"):
        reply = await agent.run("my pin is \ud800 4321")
        assert reply.extraction is None and manager.running() == ()
        await agent.run("I live in Leeds")  # the next turn is extracted as usual, citing seq 1
        await agent.close()
    assert "agent extraction skipped" in caplog.text and "4321" not in caplog.text
    [fact] = await manager.list(ANA)
    assert fact.text == "said: I live in Leeds"
    assert [(r.session, r.seq) for r in fact.fact.provenance] == [("s1", 1)]


@pytest.mark.parametrize("bound", ["provenance", "revisions"])
async def test_an_extracted_duplicate_the_store_refuses_at_a_bound_is_a_warning(
    bound: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The fact already cites MAX_PROVENANCE groups (or holds MAX_FACT_REVISIONS revisions), so the
    # store refuses to merge the extraction's group into it: the fact stays, citing none of s9's
    # groups, and erasing s9 will not remove it. The extraction still completes; it was silent.
    manager = MemoryManager(InMemoryMemoryStore(), extractor=SaysExtractor())
    if bound == "provenance":
        cites = [GroupRef("s0", n, DIGEST) for n in range(MAX_PROVENANCE)]
        await manager.remember(MemoryFact(ANA, "said: my pin is 4321", provenance=cites))
    else:
        ack = await manager.remember(
            MemoryFact(ANA, "said: my pin is 4321", provenance=[GroupRef("s0", 0, DIGEST)])
        )
        assert ack.fact_id is not None
        for n in range(1, MAX_FACT_REVISIONS):
            text = "said: my pin is 4321" if n % 2 == 0 else "said: my pin was 4321"
            await manager.correct(
                ANA, ack.fact_id, MemoryFact(ANA, text, provenance=[GroupRef("s0", 0, DIGEST)])
            )
    with anyio.fail_after(30), caplog.at_level(logging.WARNING, logger="agentium.engine.memory"):
        manager.extract_in_background(
            ANA, [Message(Role.USER, "my pin is 4321")], "ex", sources=[GroupRef("s9", 0, DIGEST)]
        )
        await manager.drain()
    [fact] = await manager.list(ANA)
    assert "s9" not in {r.session for r in fact.fact.provenance}  # refused: nothing written
    warnings = [
        r for r in caplog.records if r.name == "agentium.engine.memory" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, caplog.text
    assert "1 of the 1 facts" in warnings[0].getMessage() and "rejected" in warnings[0].getMessage()
    assert "4321" not in caplog.text and "s9" not in caplog.text
