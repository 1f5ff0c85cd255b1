"""Shared pieces of the tests of ``forget(erase_sources=True)``'s states and wording.

A runtime on the in-memory adapters keeping one group resident (so a session's first group is
archived once a second is appended), and a fact remembered from the first archived group of each
session named: the sources a forget with ``erase_sources`` erases.
"""

from __future__ import annotations

from typing import Any

from agentium_harness import (
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
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

ANA = VerifiedIdentity("acme", "ana", "test-auth")
OPERATOR = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 12")
SCOPE = MemoryScope("acme", "ana")


def forget_runtime(archive: InMemoryArchive, memory: InMemoryMemoryStore | None = None) -> Any:
    """A runtime over ``archive`` and ``memory`` (a fresh in-memory store by default), one group resident."""
    return create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"], cycle=True),
        archive=archive,
        session_store=InMemorySessionStore(),
        recall=InMemoryRecallStore(),
        memory=InMemoryMemoryStore() if memory is None else memory,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


async def fact_from(rt: Any, archive: InMemoryArchive, *sessions: str, text: str = "from q0") -> str:
    """Append two groups to each of ``sessions``; remember a fact citing each one's archived group 0."""
    refs = []
    for sid in sessions:
        for i in range(2):
            await rt.append(ANA, sid, [Message(Role.USER, f"q{i}"), Message(Role.ASSISTANT, f"a{i}")])
        (group,) = await archive.read_groups(SessionKey("acme", "ana", sid), 0, 1, OpContext())
        refs.append(GroupRef(sid, 0, group.digest))
    ack = await rt.memory.remember(MemoryFact(SCOPE, text, provenance=refs))
    assert ack.fact_id is not None
    return ack.fact_id
