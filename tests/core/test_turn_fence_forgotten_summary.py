"""A run never sends again a task summary that forgetting a fact with its sources emptied while it ran.

``forget(..., erase_sources=True)`` erases the fact's source groups and empties
a task summary covering them: it may state the fact, and docs/erasure.md
says the forgotten text then reaches no later request by summary. A run
sends the summary its load found on every model call; when such an erasure
began and finished between two of its calls (another process's), the next
call sent the emptied summary's text again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR, Recording, tool_turn_while
from _fence_support import closing, fence_pair, two_processes

from agentium_harness import (
    CommitState,
    ErasedDuringRunError,
    EraseTarget,
    GroupRef,
    MemoryFact,
    MemoryScope,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SessionKey,
    SessionStoreError,
    SummaryLimits,
    VerifiedIdentity,
)
from agentium_harness._engine import summary_fence
from agentium_harness._scope import ERASURE_RECORDS_TENANT
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer
from agentium_harness.plugin_api import OpContext, TaskSummary
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio

SECRET = "zephyrcode4471"
KEY = SessionKey("acme", "ana", "s1")
BOB = VerifiedIdentity("acme", "bob", "test-auth")


def _pair(provider: Recording, held: HeldTool, stores: Any = None, **extra: Any) -> Any:
    """Ana's runtime and another's (summarizing); ``extra``: the other's.

    ``stores``: each one's adapters (:func:`two_processes`); by default one in-memory set, shared.
    """
    mine, other = stores or two_processes("memory", Path())
    return fence_pair(
        provider,
        held,
        mine,
        {**other, **extra},
        memory=InMemoryMemoryStore(),
        summarizer=ExtractiveSummarizer(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


async def _primed(mine: Any) -> None:
    await mine.run(ANA, "s1", f"The vault code is {SECRET}.")
    for i in range(3):
        await mine.run(ANA, "s1", f"Chatter {i}.")


async def _fact_of_group_0(mine: Any, other: Any) -> tuple[MemoryScope, str]:
    """A fact of ana's, remembered by the other process, whose source is group 0 (the secret's)."""
    (group,) = await mine.archive.read_groups(KEY, 0, 1, OpContext())
    scope = MemoryScope("acme", "ana")
    fact = MemoryFact(scope, "ana keeps a vault code", provenance=[GroupRef("s1", 0, group.digest)])
    ack = await other.memory.remember(fact)
    assert ack.fact_id is not None
    return scope, ack.fact_id


def _count_index_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the fence's reads of the erasure index for a summary's erasure kind (one entry per walk)."""
    walks: list[int] = []
    real = summary_fence.joined_covering

    async def counted(*args: Any, **kwargs: Any) -> Any:
        walks.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(summary_fence, "joined_covering", counted)
    return walks


def _stopped_before_resending(provider: Recording, outcome: object) -> None:
    """The call that asked for the tool carried the summary stating the secret; none after it did."""
    assert SECRET in provider.sent[4]
    assert not [text for text in provider.sent[5:] if SECRET in text], provider.sent[5:]
    assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
    assert outcome.commit_state is CommitState.NOT_COMMITTED


async def test_a_summary_forget_emptied_between_calls_is_not_sent_again() -> None:
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(_pair(provider, held)) as (mine, other):
        await _primed(mine)
        scope, fact_id = await _fact_of_group_0(mine, other)

        async def forget() -> None:
            await other.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            stored = await other.session_store.load(KEY, OpContext())
            assert SECRET not in stored.snapshot.summary.summary.text  # emptied

        outcome = await tool_turn_while(mine, held.entered, held.release, forget, "Deploy it.")
        _stopped_before_resending(provider, outcome)
        assert len(provider.sent) == 5, provider.sent[5:]


async def test_a_summary_retention_keeps_does_not_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retention keeps a summary's text by design (docs/erasure.md): the run goes on, no index walk."""
    walks = _count_index_walks(monkeypatch)
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(_pair(provider, held, retention=RetentionPolicy(max_archived_groups=1))) as (
        mine,
        other,
    ):
        await _primed(mine)

        async def trim() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result

        outcome = await tool_turn_while(mine, held.entered, held.release, trim, "Deploy it.")
        assert SECRET in provider.sent[4]
        assert not isinstance(outcome, ErasedDuringRunError), repr(outcome)
        assert len(provider.sent) == 6
        assert walks == []  # the summary's text is unchanged: the snapshot settles it


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_summary_forget_emptied_then_refilled_between_calls_is_not_sent_again(
    kind: str, tmp_path: Path
) -> None:
    """Emptied by the forget, then written again by another process's summary update, before the next call.

    The snapshot no longer holds the summary emptied, but the run's request
    still carries the old text (stating the fact): it must not be sent.
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(_pair(provider, held, two_processes(kind, tmp_path))) as (mine, other):
        await _primed(mine)
        scope, fact_id = await _fact_of_group_0(mine, other)

        async def forget_then_refill() -> None:
            await other.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            before = await other.session_store.load(KEY, OpContext())
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update folds it
            after = await other.session_store.load(KEY, OpContext())
            summary = after.snapshot.summary.summary
            assert summary.text and SECRET not in summary.text  # refilled, no longer emptied
            assert summary != before.snapshot.summary.summary

        outcome = await tool_turn_while(mine, held.entered, held.release, forget_then_refill, "Deploy it.")
        _stopped_before_resending(provider, outcome)


async def test_a_summary_written_again_with_no_erasure_of_the_session_does_not_stop_the_run() -> None:
    """Another user's erasure moves the ledger; another process's update rewrites the summary: no stop.

    The summary sent changed, but no group below its frontier was erased since
    the run's load: nothing it states was forgotten.
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(_pair(provider, held)) as (mine, other):
        await _primed(mine)
        await other.run(BOB, "b1", "bob's own")

        async def elsewhere_then_refill() -> None:
            before = await other.session_store.load(KEY, OpContext())
            await other.erase(EraseTarget.session("acme", "bob", "b1"), reason="dsr", attestation=OPERATOR)
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update folds it
            after = await other.session_store.load(KEY, OpContext())
            assert after.snapshot.summary.summary.text != before.snapshot.summary.summary.text

        outcome = await tool_turn_while(mine, held.entered, held.release, elsewhere_then_refill, "Deploy it.")
        assert SECRET in provider.sent[4]
        assert not isinstance(outcome, ErasedDuringRunError), repr(outcome)
        assert len(provider.sent) == 6


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_retention_with_a_summary_rewrite_in_one_window_does_not_stop_the_run(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention below the sent summary's frontier, then a summary update, between two calls: no stop.

    Retention keeps a summary's text (docs/erasure.md): the text the run sends
    was not forgotten. The fence used to take the two for a ``forget``
    (changed text, groups below the frontier erased since the load) and stop
    the run; it now reads the kind of the finished erasure from the index,
    only then: a ``forget`` still stops it (the tests above).
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    retention = RetentionPolicy(max_archived_groups=1)
    async with closing(_pair(provider, held, two_processes(kind, tmp_path), retention=retention)) as (
        mine,
        other,
    ):
        await _primed(mine)

        async def trim_then_refill() -> None:
            before = await other.session_store.load(KEY, OpContext())
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update folds it
            after = await other.session_store.load(KEY, OpContext())
            sent = before.snapshot.summary.summary
            assert after.snapshot.summary.summary.text != sent.text  # rewritten
            erased = after.snapshot.erased
            assert any(r.start < sent.frontier for r in erased), (erased, sent.frontier)  # below it

        walks = _count_index_walks(monkeypatch)
        outcome = await tool_turn_while(mine, held.entered, held.release, trim_then_refill, "Deploy it.")
        assert SECRET in provider.sent[4]
        assert not isinstance(outcome, ErasedDuringRunError), repr(outcome)
        assert len(provider.sent) == 6
        assert walks == [1]  # the one case the snapshot cannot settle: the index said retention


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_forget_then_retention_of_the_same_groups_in_one_window_still_stops_the_run(
    kind: str, tmp_path: Path
) -> None:
    """A forget, a summary update and then retention, all between two calls: the forget still stops it.

    Retention names every seq below its cutoff (``SeqRange(0, cutoff)``),
    the forgotten fact's sources too. The index is read newest first: the
    retention entry alone accounts for every seq erased since the load, and
    the fence stopped its walk there and called the summary kept, though the
    forget (older, joined since the load too) emptied it: the run went on
    sending the old summary, which states the forgotten fact.
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine_stores, other_stores = two_processes(kind, tmp_path)
    # The fact is the other process's only: Ana's request does not carry it (the fact fence would stop
    # the run for it), only the summary stating the secret.
    async with closing(
        fence_pair(
            provider,
            held,
            {**mine_stores, "memory": InMemoryMemoryStore()},
            {
                **other_stores,
                "memory": InMemoryMemoryStore(),
                "retention": RetentionPolicy(max_archived_groups=1),
            },
            summarizer=ExtractiveSummarizer(),
            summary_limits=SummaryLimits(background=False),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
    ) as (mine, other):
        await _primed(mine)
        scope, fact_id = await _fact_of_group_0(mine, other)

        async def forget_refill_trim() -> None:
            await other.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update refills it
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result
            after = await other.session_store.load(KEY, OpContext())
            summary = after.snapshot.summary.summary
            assert summary.text and SECRET not in summary.text  # refilled, no longer emptied
            assert any(r.start == 0 and r.stop > 1 for r in after.snapshot.erased), after.snapshot.erased

        outcome = await tool_turn_while(mine, held.entered, held.release, forget_refill_trim, "Deploy it.")
        _stopped_before_resending(provider, outcome)


class IndexGoesDown(InMemorySessionStore):
    """An in-memory session store failing its erasure index reads (not the pending ledger's) once ``down``."""

    down = False

    async def load(self, key: SessionKey, ctx: OpContext) -> Any:
        if self.down and key.tenant == ERASURE_RECORDS_TENANT and key.session != "pending":
            raise SessionStoreError("erasure index unreadable (test)")
        return await super().load(key, ctx)


async def test_an_unreadable_erasure_index_in_the_summary_case_fails_the_run_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retention with a rewrite needs the index to tell it from a forget: unreadable, the run stops (typed).

    The summary the run carries may state a forgotten fact; it is not sent
    again on a guess: the store's typed error fails the run before the call.
    """
    sessions = IndexGoesDown()
    stores = {"archive": InMemoryArchive(), "session_store": sessions}
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    async with closing(
        _pair(provider, held, (stores, dict(stores)), retention=RetentionPolicy(max_archived_groups=1))
    ) as (mine, other):
        await _primed(mine)

        async def trim_refill_then_break() -> None:
            result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
            assert len(result.erasures) == 1, result
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update folds it
            sessions.down = True

        outcome = await tool_turn_while(
            mine, held.entered, held.release, trim_refill_then_break, "Deploy it."
        )
        sessions.down = False
        assert SECRET in provider.sent[4]
        assert isinstance(outcome, SessionStoreError), repr(outcome)
        assert "erasure index unreadable" in str(outcome)
        assert len(provider.sent) == 5, provider.sent[5:]  # no call after the look that failed


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_forget_of_groups_retention_took_before_the_load_then_a_refill_still_stops_the_run(
    kind: str, tmp_path: Path
) -> None:
    """The fact's source group was erased by retention before the run loaded; the summary kept its text.

    A ``forget`` with its sources erases the summarized groups again and
    empties the summary; another process's update refills it before the
    next call. The snapshot's erased ranges do not grow (the group was
    marked already), so nothing looked erased since the load: the fence
    called the summary kept and the run sent the old one again, stating the
    forgotten fact.
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine_stores, other_stores = two_processes(kind, tmp_path)
    async with closing(
        fence_pair(
            provider,
            held,
            {**mine_stores, "memory": InMemoryMemoryStore()},
            {
                **other_stores,
                "memory": InMemoryMemoryStore(),
                "retention": RetentionPolicy(max_archived_groups=1),
            },
            summarizer=ExtractiveSummarizer(),
            summary_limits=SummaryLimits(background=False),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
    ) as (mine, other):
        await _primed(mine)
        scope, fact_id = await _fact_of_group_0(mine, other)
        result = await other.apply_retention(OPERATOR, EraseTarget.session("acme", "ana", "s1"))
        assert len(result.erasures) == 1, result
        before = await other.session_store.load(KEY, OpContext())
        assert SECRET in before.snapshot.summary.summary.text  # retention kept the summary's text
        assert any(r.start == 0 and r.stop > 0 for r in before.snapshot.erased), before.snapshot.erased

        async def forget_then_refill() -> None:
            done = await other.forget(scope, fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            assert done.erasures, done
            emptied = await other.session_store.load(KEY, OpContext())
            assert SECRET not in emptied.snapshot.summary.summary.text
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update refills it
            after = await other.session_store.load(KEY, OpContext())
            summary = after.snapshot.summary.summary
            assert summary.text and SECRET not in summary.text  # refilled, no longer emptied
            assert after.snapshot.erased == before.snapshot.erased  # nothing newly marked erased

        outcome = await tool_turn_while(mine, held.entered, held.release, forget_then_refill, "Deploy it.")
        _stopped_before_resending(provider, outcome)


class _HoldsBackTheNewest(ExtractiveSummarizer):
    """Folds all but the newest group it is given (a frontier below it), writing every group it read."""

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> Any:
        lines = previous.text.splitlines() if previous is not None and previous.text else []
        lines += [m.content for g in groups for m in g.messages if m.role.value == "user"]
        start = previous.frontier if previous is not None else groups[0].seq
        return TaskSummary("\n".join(dict.fromkeys(lines)), frontier=max(start, groups[-1].seq))


async def test_a_summary_stating_a_group_given_past_its_frontier_forgotten_then_refilled_stops_the_run() -> (
    None
):
    """The summary sent states group 2, given to its summarizer but past its frontier (2).

    A ``forget`` of group 2 empties it; another process's update refills it
    before the next call. The fence looked for erased groups below the sent
    summary's frontier only, found none, and the run sent the old text again.
    """
    provider = Recording(["noted", "ok", "ok", "ok", DEPLOY, "Deployed."])
    held = HeldTool()
    mine_stores, other_stores = two_processes("memory", Path())
    async with closing(
        fence_pair(
            provider,
            held,
            # A memory each: the fact is not in the run's request (its own fence would stop the run).
            {**mine_stores, "memory": InMemoryMemoryStore()},
            {**other_stores, "memory": InMemoryMemoryStore()},
            summarizer=_HoldsBackTheNewest(),
            summary_limits=SummaryLimits(background=False),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
    ) as (mine, other):
        for text in ("Chatter 0.", "Chatter 1.", f"The vault code is {SECRET}.", "Chatter 2."):
            await mine.run(ANA, "s1", text)
        loaded = await mine.session_store.load(KEY, OpContext())
        state = loaded.snapshot.summary
        assert state.summary.frontier == 2 and SECRET in state.summary.text and state.given_until == 3
        (group,) = await mine.archive.read_groups(KEY, 2, 1, OpContext())
        scope = MemoryScope("acme", "ana")
        fact = MemoryFact(scope, "ana keeps a vault code", provenance=[GroupRef("s1", 2, group.digest)])
        ack = await other.memory.remember(fact)
        assert ack.fact_id is not None

        async def forget_then_refill() -> None:
            await other.forget(scope, ack.fact_id, erase_sources=True, reason="dsr", attestation=OPERATOR)
            before = await other.session_store.load(KEY, OpContext())
            assert SECRET not in before.snapshot.summary.summary.text  # emptied
            await other.run(ANA, "s1", "More chatter.")  # archives a group: its summary update folds it
            after = await other.session_store.load(KEY, OpContext())
            summary = after.snapshot.summary.summary
            assert summary.text and SECRET not in summary.text  # refilled, no longer emptied

        outcome = await tool_turn_while(mine, held.entered, held.release, forget_then_refill, "Deploy it.")
        _stopped_before_resending(provider, outcome)
