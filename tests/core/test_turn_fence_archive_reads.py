"""The turn fence's look at recalled archived groups with an archive that cannot read them back.

Recall may put excerpts of archived groups into a run's request with an
archive that does not declare ``bounded_reads`` (shown unattributed: the
engine could not read the group back). When the tenant's erasures moved —
any erasure of the tenant, another user's retention included — the fence
read each such group back with ``read_groups`` all the same, which that
archive does not offer: the run failed with ``UnsupportedOperationError``
(an erasure elsewhere in the tenant stopped every such run), and an erasure
of the recalled group itself was not told apart from that. Now, for such
an archive, the fence asks the session's snapshot, which a groups erasure
marks (``erased``) before it finishes: a recalled group marked there stops
the run (``ErasedDuringRunError``), any other erasure leaves it running.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import attrs
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, tool_turn_while

from agentium_harness import (
    CommitState,
    EffectLevel,
    ErasedDuringRunError,
    EraseTarget,
    RecallLimits,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    ArchiveCapabilities,
    HistoryArchive,
    ModelRequest,
    ModelResponse,
    OpContext,
    SessionKey,
)

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")
SECRET = "the vault code is qzvaultq"
PRIMING = [f"Remember this: {SECRET}.", "Chatter one.", "Chatter two.", "Chatter three."]


class NoReads(InMemoryArchive):
    """The in-memory archive, declaring no ``bounded_reads`` (as an append-only log may)."""

    capabilities: ClassVar[ArchiveCapabilities] = attrs.evolve(
        InMemoryArchive.capabilities, bounded_reads=False
    )
    read_groups = HistoryArchive.read_groups  # the port's stub: UnsupportedOperationError


class Recording(ScriptedProvider):
    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies=replies)
        self.sent: list[str] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        parts = [m.content for m in (*request.history, *request.turn)]
        parts += [b.render() for b in request.sources]
        self.sent.append("\n".join(parts))
        return await super().complete(request, ctx)


def _pair(provider: Recording, entered: anyio.Event, release: anyio.Event) -> Any:
    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed"

    limits = RuntimeLimits(resident=ResidentLimits(max_groups=2))
    archive, store, recall = NoReads(), InMemorySessionStore(), InMemoryRecallStore()
    mine = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        recall=recall,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        limits=limits,
        recall_limits=RecallLimits(max_candidates=1),
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        recall=recall,
        limits=limits,
        retention=RetentionPolicy(max_archived_groups=1),
    )
    return mine, other


async def _primed(mine: Any, other: Any) -> None:
    for text in PRIMING:
        await mine.run(ANA, "s1", text)
    for i in range(4):
        await other.run(BOB, "b1", f"Bob's turn {i}.")


async def test_another_users_erasure_does_not_stop_a_run_whose_archive_cannot_read_back() -> None:
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    entered, release = anyio.Event(), anyio.Event()
    mine, other = _pair(provider, entered, release)
    try:
        await _primed(mine, other)

        async def trim_bob() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "bob", "b1"))
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(
            mine, entered, release, trim_bob, "What is the vault code? Then deploy it."
        )
        # The request carried the recalled (unattributed) excerpt: the premise.
        assert "qzvaultq" in provider.sent[len(PRIMING)]
        assert not isinstance(outcome, Exception), repr(outcome)
        assert outcome.commit_state is CommitState.COMMITTED
        assert len(provider.sent) == len(PRIMING) + 2
    finally:
        await mine.aclose()
        await other.aclose()


async def test_the_recalled_group_erased_stops_a_run_whose_archive_cannot_read_back() -> None:
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    entered, release = anyio.Event(), anyio.Event()
    mine, other = _pair(provider, entered, release)
    try:
        await _primed(mine, other)

        async def trim_mine() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(
            mine, entered, release, trim_mine, "What is the vault code? Then deploy it."
        )
        assert "qzvaultq" in provider.sent[len(PRIMING)]
        assert len(provider.sent) == len(PRIMING) + 1, provider.sent[len(PRIMING) :]
        assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
        assert outcome.commit_state is CommitState.NOT_COMMITTED
        # Nothing of the turn was committed: no resident message of the session names the tool.
        stored = await mine.session_store.load(SessionKey("acme", "ana", "s1"), OpContext())
        held = [m.content for g in stored.snapshot.resident for m in g.messages]
        assert held and not [t for t in held if "deploy" in t.lower()]
    finally:
        await mine.aclose()
        await other.aclose()


class Counting(InMemoryArchive):
    """The in-memory archive, counting the bytes of the groups its reads return once ``counting``."""

    def __init__(self) -> None:
        super().__init__()
        self.counting, self.read_bytes = False, 0

    async def read_groups(self, key: Any, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        page = await super().read_groups(key, start_seq, max_groups, ctx)
        if self.counting:
            self.read_bytes += sum(g.size_bytes for g in page)
        return page


async def test_the_fence_reads_no_more_of_the_archive_than_recall_may() -> None:
    """Recall's read-back stops at its byte budget; the fence's look after an erasure must not read past it.

    Three archived groups are recalled; the read-back budget lets recall read one (the one past
    the budget) and show the other two unattributed. Another user's retention moves the ledger
    during the tool round. The fence read every recalled group back in full, whatever its size
    (up to 32 MiB each, eight by default: 256 MiB on every erasure in the tenant).
    """
    provider = Recording(["ok"] * 6 + [DEPLOY, "Deployed."])
    entered, release = anyio.Event(), anyio.Event()

    async def deploy(args: Any) -> str:
        entered.set()
        with anyio.fail_after(30):
            await release.wait()
        return "deployed"

    limits = RuntimeLimits(resident=ResidentLimits(max_groups=2))
    archive, store, recall = Counting(), InMemorySessionStore(), InMemoryRecallStore()
    budget = RecallLimits(max_candidates=3, max_readback_bytes=1, max_evidence_tokens=8192)
    mine = create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=store,
        recall=recall,
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
        limits=limits,
        recall_limits=budget,
    )
    other = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"], cycle=True),
        archive=archive,
        session_store=store,
        limits=limits,
        retention=RetentionPolicy(max_archived_groups=1),
    )
    try:
        filler = " ".join(f"word{i}" for i in range(200))
        for i in range(3):
            await mine.run(ANA, "s1", f"The vault note {i}: qzvaultq {filler}.")
        for i in range(3):
            await mine.run(ANA, "s1", f"Chatter {i}.")
        for i in range(4):
            await other.run(BOB, "b1", f"Bob's turn {i}.")
        largest = max(len(f"The vault note 0: qzvaultq {filler}.".encode()), 1) * 2

        async def trim_bob() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "bob", "b1"))
            assert len(result.erasures) == 1, result
            archive.counting = True

        outcome = await tool_turn_while(
            mine, entered, release, trim_bob, "What is the vault note? Deploy it."
        )
        asked = provider.sent[6]
        assert asked.count("qzvaultq") >= 3, asked  # the premise: three recalled excerpts
        assert not isinstance(outcome, Exception), repr(outcome)
        # Recall's own read-back may read one group past its budget; the fence no more than that.
        assert archive.read_bytes <= budget.max_readback_bytes + largest, archive.read_bytes
    finally:
        await mine.aclose()
        await other.aclose()
