"""The memory lifecycle end to end: extraction as owned work, a drain that names a hanging item.

Run it with ``python examples/memory.py``; it prints what each step did and
exits 0. See docs/memory.md.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from agentium_harness import (
    Agent,
    MemoryDrainError,
    MemoryFact,
    MemoryManager,
    MemoryScope,
    Message,
    OpContext,
    Role,
)
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore


class RememberSentences:
    """A host extractor: keeps what the user asks to be remembered ("remember that ...")."""

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        facts = []
        for message in messages:
            if message.role is Role.USER and "remember that" in message.content:
                facts.append(MemoryFact(scope, message.content.split("remember that", 1)[1].strip(" .")))
        return facts


class SlowExtractor:
    """An extractor whose backend never answers: the drain must time out and name it."""

    async def extract(
        self, scope: MemoryScope, messages: Sequence[Message], ctx: OpContext
    ) -> list[MemoryFact]:
        await anyio.sleep_forever()
        return []


async def main() -> None:
    folder = Path(tempfile.mkdtemp())
    store = SQLiteMemoryStore(SQLiteConfig(path=str(folder / "memory.db")))
    alice = MemoryScope("acme", "alice")
    provider = ScriptedProvider(replies=["Noted.", "It is blue."], cycle=True)

    manager = MemoryManager(store, extractor=RememberSentences())
    agent = Agent(provider, manager, alice)
    await agent.run("Please remember that the boiler valve is blue.")
    await agent.close()  # drains the extraction before tearing down
    assert agent.last_drain is not None
    print("drain:", agent.last_drain.describe())
    print("facts:", [f.text for f in await manager.list(alice)])

    second = Agent(provider, MemoryManager(store), alice)
    reply = await second.run("What colour is the boiler valve?")
    print("injected:", [b.content for b in reply.memory])
    await second.close()

    slow = MemoryManager(store, extractor=SlowExtractor())
    third = Agent(provider, slow, alice, drain_timeout_s=0.2)
    await third.run("anything")
    try:
        await third.close()
    except MemoryDrainError as exc:
        print("drain failed, truthfully:", exc.result.describe())
        assert exc.result.cancelled and not exc.result.completed
    print("agent state:", third.state.value)
    await store.aclose()


if __name__ == "__main__":
    anyio.run(main)
