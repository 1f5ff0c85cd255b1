"""A summary update never hands its summarizer archived groups an erasure took since it read them.

After a run's commit the summary update reads the newly archived groups and
hands them to the summarizer (which may call a model) after the erasure
fence's look. Retention (or forgetting a fact with its sources) of another
process that erased those very groups between the read and that call was
not one of the whole session, so the fence passed it and the summarizer got
the erased text (the save then found the snapshot moved and dropped the
update). Now the fence is told the groups offered, and one the snapshot
marks erased stops the update before the call (``summary_failed``).
"""

from __future__ import annotations

from typing import Any

import pytest
from _erasure_harness import ANA, OPERATOR
from _fence_support import fence_pair

from agentium_harness import (
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SessionKey,
    SummaryLimits,
    VerifiedIdentity,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext, TaskSummary

pytestmark = pytest.mark.anyio

SECRET = "zephyrcode4471"
BOB = VerifiedIdentity("acme", "bob", "test-auth")


class Recording(ExtractiveSummarizer):
    """The extractive summarizer, keeping the text of every group it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[str] = []
        self.down = True  # failing until told otherwise: the frontier stays at group 0

    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        if self.down:
            raise RuntimeError("summarizer down")
        self.given += [m.content for g in groups for m in g.messages]
        return await super().summarize(previous, groups, ctx)


class Hooked(InMemoryArchive):
    """The in-memory archive; once armed, its first read runs ``meanwhile`` after reading."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Any = None

    async def read_groups(self, key: Any, start_seq: int, max_groups: int, ctx: OpContext) -> Any:
        page = await super().read_groups(key, start_seq, max_groups, ctx)
        hook, self.meanwhile = self.meanwhile, None
        if hook is not None:
            await hook()
        return page


@pytest.mark.parametrize("whose", ["ana", "bob"], ids=["offered-erased", "other-session-erased"])
async def test_groups_erased_between_the_read_and_the_summarizer_call_are_not_handed_to_it(
    whose: str,
) -> None:
    archive, store, summarizer = Hooked(), InMemorySessionStore(), Recording()
    mine, other = fence_pair(
        ScriptedProvider(replies=["noted"], cycle=True),
        None,
        {"summarizer": summarizer, "summary_limits": SummaryLimits(background=False)},
        {"retention": RetentionPolicy(max_archived_groups=1)},
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        # Groups 0 (the secret) and 1 archived, none summarized (the summarizer was down).
        for text in [f"The vault code is {SECRET}.", "Chatter one.", "Chatter two."]:
            await mine.run(ANA, "s1", text)
        for i in range(3):
            await other.run(BOB, "b1", f"Bob's turn {i}.")
        summarizer.down = False

        async def trim() -> None:
            target = EraseTarget.session("acme", whose, "s1" if whose == "ana" else "b1")
            result = await other.apply_retention(OPERATOR, target)
            assert len(result.erasures) == 1, result

        archive.meanwhile = trim
        # This commit archives group 2; the update reads groups 0 to 2, then retention runs:
        # keeping ana's newest archived group erases groups 0 and 1 (or it trims bob's session).
        result = await mine.run(ANA, "s1", "Chatter three.")
        assert archive.meanwhile is None  # the hook ran: the premise
        given = [t for t in summarizer.given if SECRET in t]
        if whose == "ana":
            assert given == [], "the summarizer was handed an erased group"
            assert result.has("summary_failed"), result.diagnostics
        else:
            assert given, "an update whose groups no erasure took was stopped"
    finally:
        await mine.aclose()
        await other.aclose()


class NotesOnly(ExtractiveSummarizer):
    """Writes what it reads as uncertainty notes, never as text; keeps every previous summary it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.previous: list[TaskSummary | None] = []

    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        self.previous.append(previous)
        notes = [*(previous.uncertainty if previous is not None else ())]
        notes += [m.content for g in groups for m in g.messages if m.role.value == "user"]
        return TaskSummary("", frontier=groups[-1].seq + 1, uncertainty=tuple(dict.fromkeys(notes))[-4:])


@pytest.mark.parametrize("refill", [False, True], ids=["emptied", "emptied-then-refilled"])
async def test_a_notes_only_summary_a_forget_emptied_before_the_call_is_not_handed_to_the_summarizer(
    refill: bool,
) -> None:
    """The previous summary has no text, only notes stating the forgotten fact: the fence looks at it too.

    The update handed its summarizer the previous summary whatever the
    fence said, and told the fence of it only when it had text; notes are
    the summarizer's words as much (a forget empties them), so a forget
    between the update's read and its call reached the summarizer's model.
    Refilled (another process's update wrote new notes, no text, since), the
    snapshot's text equals the sent one (both empty): the fence compared
    text only and called it kept.
    """
    archive, store, summarizer = Hooked(), InMemorySessionStore(), NotesOnly()
    facts = InMemoryMemoryStore()
    mine, other = fence_pair(
        ScriptedProvider(replies=["noted"], cycle=True),
        None,
        {"summarizer": summarizer, "summary_limits": SummaryLimits(background=False)},
        {"memory": facts, "summarizer": NotesOnly(), "summary_limits": SummaryLimits(background=False)},
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    try:
        for text in [f"The vault code is {SECRET}.", "Chatter one."]:
            await mine.run(ANA, "s1", text)
        key = SessionKey("acme", "ana", "s1")
        stored = (await store.load(key, OpContext())).snapshot.summary
        assert stored is not None and not stored.summary.text and SECRET in repr(stored.summary.uncertainty)
        (group,) = await archive.read_groups(key, 0, 1, OpContext())
        scope = MemoryScope("acme", "ana")
        fact = MemoryFact(scope, "ana keeps a vault code", provenance=[GroupRef("s1", 0, group.digest)])
        ack = await other.memory.remember(fact)
        assert ack.fact_id is not None

        async def forget() -> None:
            await other.forget(scope, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            emptied = (await store.load(key, OpContext())).snapshot.summary
            assert emptied is not None and SECRET not in repr(emptied.summary)  # the premise
            if refill:
                await other.run(ANA, "s1", "Other chatter.")  # its update writes notes again
                now = (await store.load(key, OpContext())).snapshot.summary
                assert now is not None and not now.summary.text and now.summary.uncertainty, now

        archive.meanwhile = forget
        summarizer.previous.clear()
        result = await mine.run(ANA, "s1", "Chatter two.")  # archives group 1: the update reads it
        assert archive.meanwhile is None  # the hook ran
        handed = [p for p in summarizer.previous if p is not None and SECRET in repr(p)]
        assert handed == [], "the summarizer was handed the notes a forget emptied"
        assert result.has("summary_failed"), result.diagnostics
    finally:
        await mine.aclose()
        await other.aclose()
