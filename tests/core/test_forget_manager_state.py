"""``forget(erase_sources=True)``: the memory manager's own state words leave once a source was erased.

An exception no stage typed (an engine bug) in the memory manager's forget
leaves it typed, its own ``commit_state`` and words ("nothing was written
(commit_state not_committed)", "whether it was written is unknown", "it
stands (commit_state committed)"). Once a source's erasure stood,
``forget`` marked it ``unknown`` but kept those words: the message said
``not_committed`` and then ``unknown``; and a forget the store had
acknowledged (``committed``: the fact is forgotten) went out ``unknown``.
The call's state now replaces them, ``committed`` once the fact was.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentium_harness import (
    AgentiumError,
    CommitState,
    GroupRef,
    MemoryFact,
    MemoryScope,
    Message,
    OperatorAttestation,
    ResidentLimits,
    Role,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.memory import base, writes
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 12")
SCOPE = MemoryScope("acme", "ana")


def _bug(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    ("where", "state"),
    [
        ("before", CommitState.UNKNOWN),  # before the store's write: the erasure stands
        ("during", CommitState.UNKNOWN),
        ("after", CommitState.COMMITTED),  # the store acknowledged it: the fact is forgotten
    ],
)
async def test_the_managers_words_give_way_to_the_calls(
    where: str, state: CommitState, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        recall=InMemoryRecallStore(),
        memory=InMemoryMemoryStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        key = SessionKey("acme", "ana", "s1")
        for i in range(2):
            await rt.append(ANA, "s1", [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
        (group,) = await archive.read_groups(key, 0, 1, OpContext())
        ack = await rt.memory.remember(
            MemoryFact(SCOPE, "from q0", provenance=[GroupRef("s1", 0, group.digest)])
        )
        assert ack.fact_id is not None
        if where == "before":
            monkeypatch.setattr(writes, "checked_scope", _bug)
        elif where == "during":
            monkeypatch.setattr(writes, "checked_ack", _bug)
        else:
            monkeypatch.setattr(base.MemoryManagerBase, "_event", _bug)
        with pytest.raises(AgentiumError, match="memory forget failed with an unexpected error") as caught:
            await rt.forget(SCOPE, ack.fact_id, erase_sources=True, reason="user asked", attestation=OPERATOR)
        said = str(caught.value)
        assert await archive.read_groups(key, 0, 1, OpContext()) == []  # its source's erasure stands
        assert caught.value.commit_state is state, said
        assert said.count("commit_state") == 1, said
        assert f"(commit_state {state.value})" in said
        if state is CommitState.UNKNOWN:
            assert "the erasures of its sources that completed stand" in said
            assert "nothing was written" not in said
        if where == "before":
            # The manager's forget failed before its store's write began: the fact is known not forgotten.
            assert "before the store's forget began: the fact was not forgotten" in said, said
            assert "may be forgotten" not in said, said
        elif where == "during":
            # Failed as it forgot the fact (its sources erased): whether it is forgotten cannot be told.
            assert "it failed while forgetting the fact" in said and "may be forgotten" in said, said
    finally:
        await rt.aclose()
