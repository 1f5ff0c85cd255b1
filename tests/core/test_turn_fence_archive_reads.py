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

import attrs
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, Recording, tool_turn_while
from _fence_support import SECRET, TWO_RESIDENT, fence_pair

from agentium_harness import (
    CommitState,
    ErasedDuringRunError,
    EraseTarget,
    RecallLimits,
    RetentionPolicy,
    VerifiedIdentity,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.plugin_api import ArchiveCapabilities, HistoryArchive, OpContext, SessionKey
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio

BOB = VerifiedIdentity("acme", "bob", "test-auth")
PRIMING = [f"Remember this: {SECRET}.", "Chatter one.", "Chatter two.", "Chatter three."]
ONE_ARCHIVED = RetentionPolicy(max_archived_groups=1)


class NoReads(InMemoryArchive):
    """The in-memory archive, declaring no ``bounded_reads`` (as an append-only log may)."""

    capabilities: ClassVar[ArchiveCapabilities] = attrs.evolve(
        InMemoryArchive.capabilities, bounded_reads=False
    )
    read_groups = HistoryArchive.read_groups  # the port's stub: UnsupportedOperationError


async def _trimmed(whose: str) -> tuple[Recording, Any, list[str]]:
    """Ana's recalling tool turn while another process's retention trims ``whose``'s session (s1 or b1).

    Over a :class:`NoReads` archive; both primed with four turns. Returns the
    model, the turn's outcome and the messages resident in ana's s1 after it.
    """
    provider, held = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."]), HeldTool()
    shared = {"archive": NoReads(), "session_store": InMemorySessionStore(), "recall": InMemoryRecallStore()}
    mine, other = fence_pair(
        provider,
        held,
        {"recall_limits": RecallLimits(max_candidates=1)},
        {"retention": ONE_ARCHIVED},
        limits=TWO_RESIDENT,
        **shared,
    )
    try:
        for text in PRIMING:
            await mine.run(ANA, "s1", text)
        for i in range(4):
            await other.run(BOB, "b1", f"Bob's turn {i}.")

        async def trim() -> None:
            target = EraseTarget.session("acme", whose, "s1" if whose == "ana" else "b1")
            result = await other.apply_retention(OPERATOR, target)
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(
            mine, held.entered, held.release, trim, "What is the vault code? Then deploy it."
        )
        stored = await mine.session_store.load(SessionKey("acme", "ana", "s1"), OpContext())
        return provider, outcome, [m.content for g in stored.snapshot.resident for m in g.messages]
    finally:
        await mine.aclose()
        await other.aclose()


async def test_another_users_erasure_does_not_stop_a_run_whose_archive_cannot_read_back() -> None:
    provider, outcome, _ = await _trimmed("bob")
    # The request carried the recalled (unattributed) excerpt: the premise.
    assert "qzvaultq" in provider.sent[len(PRIMING)]
    assert not isinstance(outcome, Exception), repr(outcome)
    assert outcome.commit_state is CommitState.COMMITTED
    assert len(provider.sent) == len(PRIMING) + 2


async def test_the_recalled_group_erased_stops_a_run_whose_archive_cannot_read_back() -> None:
    provider, outcome, held = await _trimmed("ana")
    assert "qzvaultq" in provider.sent[len(PRIMING)]
    assert len(provider.sent) == len(PRIMING) + 1, provider.sent[len(PRIMING) :]
    assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    # Nothing of the turn was committed: no resident message of the session names the tool.
    assert held and not [t for t in held if "deploy" in t.lower()]


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
    provider, held = Recording(["ok"] * 6 + [DEPLOY, "Deployed."]), HeldTool()
    archive, store = Counting(), InMemorySessionStore()
    budget = RecallLimits(max_candidates=3, max_readback_bytes=1, max_evidence_tokens=8192)
    mine, other = fence_pair(
        provider,
        held,
        {"recall": InMemoryRecallStore(), "recall_limits": budget},
        {"retention": ONE_ARCHIVED},
        archive=archive,
        session_store=store,
        limits=TWO_RESIDENT,
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
            mine, held.entered, held.release, trim_bob, "What is the vault note? Deploy it."
        )
        asked = provider.sent[6]
        assert asked.count("qzvaultq") >= 3, asked  # the premise: three recalled excerpts
        assert not isinstance(outcome, Exception), repr(outcome)
        # Recall's own read-back may read one group past its budget; the fence no more than that.
        assert archive.read_bytes <= budget.max_readback_bytes + largest, archive.read_bytes
    finally:
        await mine.aclose()
        await other.aclose()
