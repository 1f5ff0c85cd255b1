"""The run fences look once more after the run's last model call, before its commit.

A memory fact forgotten (a plain ``forget``) or a host document deleted
(``delete_document``) while the run's *last* model call was under way was
seen by no fence: no call followed, so the answer made from it was committed
as usual. The fact fence now reads the carried facts back once more before
the commit, and the commit fence's own validation of the carried documents
(no read of its own) stops the run the same way: the typed error of a stop
between two calls, nothing committed, the diagnostic ``erased_during_run``,
a WARNING without content and the span event ``agentium.run.erased_during_run``.

The document fence also looks before the first call when a memory search
ran after recall's validation, and each of its looks now counts in the run's
recall latency (``max_latency_s``, ``RunResult.recall.usage.latency_s``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, OPERATOR
from _fence_support import closing, fence_pair, two_processes
from _telemetry_support import Telemetered

from agentium_harness import (
    AgentiumError,
    CommitState,
    Diagnostic,
    DocumentDeletedDuringRunError,
    DocumentUncheckedDuringRunError,
    ErasedDuringRunError,
    EraseTarget,
    FactForgottenDuringRunError,
    MemoryFact,
    MemoryScope,
    RecallLimits,
    RuntimeLimits,
    SessionKey,
    SourceOwner,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite import SQLiteConfig
from agentium_harness.adapters.sqlite_memory import SQLiteMemoryStore
from agentium_harness.plugin_api import ModelRequest, ModelResponse, OpContext
from agentium_harness.testing.erasure_races import HeldTool

pytestmark = pytest.mark.anyio

FACT = "the vault code is qzfactq"
DOC = "The on-call rota qzrotaq changes every Monday."
SCOPE = MemoryScope("acme", "ana")
KEY = SessionKey("acme", "ana", "s1")


class HeldCall(ScriptedProvider):
    """Answers ``replies`` in order, keeping each request's text; call number ``hold`` (1-based) waits.

    That call says ``started`` and waits (30 s at most) for ``release`` before it answers.
    """

    def __init__(self, replies: Sequence[object], hold: int) -> None:
        super().__init__(replies=list(replies))
        self.hold = hold
        self.sent: list[str] = []
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        parts = [m.content for m in (*request.history, *request.turn)]
        self.sent.append("\n".join([*parts, *(b.render() for b in request.sources)]))
        if len(self.sent) == self.hold:
            self.started.set()
            with anyio.fail_after(30):
                await self.release.wait()
        return await super().complete(request, ctx)


async def _run_while_held(mine: Any, provider: HeldCall, text: str, meanwhile: Any, **kw: Any) -> Any:
    """Ana's run on s1 (``text``); ``meanwhile()`` while the held call is under way. Its result or error."""
    outcome: list[Any] = []

    async def run() -> None:
        try:
            outcome.append(await mine.run(ANA, "s1", text, **kw))
        except Exception as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(30):
            await provider.started.wait()
        await meanwhile()
        provider.release.set()
    (result,) = outcome
    return result


async def _resident(runtime: Any) -> int:
    loaded = await runtime.session_store.load(KEY, OpContext())
    return len(loaded.snapshot.resident)


def _memories(kind: str, tmp_path: Path) -> tuple[Any, Any]:
    if kind == "memory":
        shared = InMemoryMemoryStore()
        return shared, shared
    config = SQLiteConfig(path=str(tmp_path / "memory.db"))
    return SQLiteMemoryStore(config), SQLiteMemoryStore(config)


def _stopped_and_said(outcome: Any, caplog: pytest.LogCaptureFixture, word: str) -> list[Diagnostic]:
    """Stopped, nothing committed, its ``erased_during_run`` diagnostic (before the commit), a WARNING."""
    assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
    assert outcome.before_commit is True
    assert outcome.commit_state is CommitState.NOT_COMMITTED
    assert outcome.run_result is not None and not outcome.run_result.committed
    notes = [d for d in outcome.run_result.diagnostics if d.code == "erased_during_run"]
    assert notes and word in notes[0].message and "before its commit" in notes[0].message, notes
    assert "before its commit" in str(outcome), str(outcome)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and word in r.getMessage()]
    assert warned and "before its commit" in warned[0].getMessage()
    assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log
    return notes


def _erased_event(t: Telemetered, state: str) -> None:
    events = [(name, attrs) for _, name, attrs in t.events("agentium.run.")]
    assert ("agentium.run.erased_during_run", {"agentium.erasure.state": state}) in events, events


# -- a memory fact forgotten during the last model call ---------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("calls", [1, 2], ids=["only-call", "after-a-tool-round"])
async def test_a_fact_forgotten_during_the_last_call_stops_the_commit(
    kind: str, calls: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    replies: list[object] = ["noted", "The code is qzfactq."] if calls == 1 else ["noted", DEPLOY, "Done."]
    provider = HeldCall(replies, hold=1 + calls)  # the run's last call
    held = HeldTool()
    held.release.set()
    t = Telemetered()
    mine_stores, other_stores = two_processes(kind, tmp_path)
    memory_mine, memory_other = _memories(kind, tmp_path)
    mine_opts = {**mine_stores, "memory": memory_mine, "telemetry": t.telemetry()}
    async with closing(fence_pair(provider, held, mine_opts, {**other_stores, "memory": memory_other})) as (
        mine,
        other,
    ):
        await mine.run(ANA, "s1", "hello")
        ack = await other.memory.remember(MemoryFact(SCOPE, FACT))

        async def forget() -> None:
            await other.memory.forget(SCOPE, ack.fact_id)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(mine, provider, "What is the code?", forget, grants=["deploy"])
        assert FACT in provider.sent[-1]  # the premise: the last call carried the fact
        assert len(provider.sent) == 1 + calls
        assert isinstance(outcome, FactForgottenDuringRunError), repr(outcome)
        assert outcome.fact_id == ack.fact_id
        _stopped_and_said(outcome, caplog, "forgotten")
        _erased_event(t, "forgotten")
        assert await _resident(mine) == 1  # only "hello": neither the answer nor the tool round


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_user_erasure_during_the_last_call_is_named_as_the_cause(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An erasure of the run's user during its last call takes the fact it carries as well.

    The stop names the erasure (the cause), as a stop before a later call does
    (the ledger is looked at before the facts), not a plain ``forget`` of the
    fact: found by review of 44e3a1e6, which reported ``FactForgottenDuringRunError``.
    """
    provider = HeldCall(["noted", "The code is qzfactq."], hold=2)
    mine_stores, other_stores = two_processes(kind, tmp_path)
    memory_mine, memory_other = _memories(kind, tmp_path)
    mine_opts = {**mine_stores, "memory": memory_mine}
    async with closing(fence_pair(provider, None, mine_opts, {**other_stores, "memory": memory_other})) as (
        mine,
        other,
    ):
        await mine.run(ANA, "s1", "hello")
        await other.memory.remember(MemoryFact(SCOPE, FACT))
        erased: list[str] = []

        async def erase_ana() -> None:
            done = await other.erase(EraseTarget.user("acme", "ana"), reason="dsr", attestation=OPERATOR)
            assert done.tombstone is not None
            erased.append(done.tombstone.erasure_id)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(mine, provider, "What is the code?", erase_ana)
        assert FACT in provider.sent[-1]  # the premise: the last call carried the fact
        assert isinstance(outcome, ErasedDuringRunError), repr(outcome)
        assert not isinstance(outcome, FactForgottenDuringRunError), repr(outcome)
        assert outcome.erasure_id == erased[0] and outcome.before_commit is True
        assert outcome.commit_state is CommitState.NOT_COMMITTED
        assert "before its commit" in str(outcome), str(outcome)
        assert outcome.run_result is not None and not outcome.run_result.committed
        notes = [d for d in outcome.run_result.diagnostics if d.code == "erased_during_run"]
        assert notes and erased[0] in notes[0].message and "before its commit" in notes[0].message, notes
        assert not [r for r in caplog.records if "qz" in r.getMessage()]  # no content in the log


async def test_a_fact_kept_through_the_last_call_commits_and_reads_once_more(tmp_path: Path) -> None:
    """Nothing forgotten: the run commits; the look after the last call is one read per carried fact."""

    class Counting(InMemoryMemoryStore):
        histories = 0

        async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
            Counting.histories += 1
            return await super().history(scope, fact_id, ctx)

    counting = Counting()
    provider = HeldCall(["noted", "The code is qzfactq.", "Done."], hold=0)
    stores, _ = two_processes("memory", tmp_path)
    async with closing(fence_pair(provider, None, {**stores, "memory": counting}, dict(stores))) as (mine, _):
        await mine.run(ANA, "s1", "hello")
        assert Counting.histories == 0  # no fact carried: no read
        await mine.memory.remember(MemoryFact(SCOPE, FACT))
        await mine.memory.remember(MemoryFact(SCOPE, "ana likes green tea"))
        result = await mine.run(ANA, "s1", "What is the code?")
        assert FACT in provider.sent[-1] and "green tea" in provider.sent[-1] and result.committed
        assert Counting.histories == 2  # one call: no look before it; after it, one read per fact


# -- a host document deleted during the last model call ---------------------------------------


def _recall_pair(provider: Any, held: HeldTool | None, t: Telemetered | None = None, **mine: Any) -> Any:
    stores, other = two_processes("memory", Path("."), recall=True)
    extra = {} if t is None else {"telemetry": t.telemetry()}
    return fence_pair(provider, held, {**stores, **extra, **mine}, other)


@pytest.mark.parametrize("on_partial", ["stop", "continue"])
async def test_a_document_deleted_during_the_only_call_stops_the_commit(
    on_partial: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the recall policy says of a changed source: a deleted one stops the run, typed.

    On the old source the commit fence handed it to the policy: ``stop`` ended
    the run (``stopped``, no error), ``continue`` committed the answer.
    """
    provider = HeldCall(["Monday, qzrotaq."], hold=1)
    t = Telemetered()
    policy = current_session_recall_policy(on_partial=on_partial)  # type: ignore[arg-type]
    async with closing(_recall_pair(provider, None, t, recall_policy=policy)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", DOC)

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(mine, provider, "When does the on-call rota change?", delete)
        assert "qzrotaq" in provider.sent[0]
        assert isinstance(outcome, DocumentDeletedDuringRunError), repr(outcome)
        assert outcome.source_ids == ("doc/acme/~/~/~/~/oncall",)
        _stopped_and_said(outcome, caplog, "deleted")
        _erased_event(t, "deleted")
        loaded = await mine.session_store.load(KEY, OpContext())
        assert loaded is None or not loaded.snapshot.resident  # nothing committed


async def test_a_document_deleted_during_the_last_call_after_a_tool_round_keeps_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default policy stopped the answer but committed the tool round made from the document."""
    provider = HeldCall([DEPLOY, "Deployed."], hold=2)
    held = HeldTool()
    held.release.set()
    async with closing(_recall_pair(provider, held)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", DOC)

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await _run_while_held(
                mine, provider, "When does the rota change? Deploy it.", delete, grants=["deploy"]
            )
        assert len(provider.sent) == 2 and "qzrotaq" in provider.sent[1]
        assert isinstance(outcome, DocumentDeletedDuringRunError), repr(outcome)
        _stopped_and_said(outcome, caplog, "deleted")
        assert outcome.run_result is not None and outcome.run_result.tool_outcomes  # listed, not kept
        loaded = await mine.session_store.load(KEY, OpContext())
        assert loaded is None or not loaded.snapshot.resident


class CountingOpens(InMemoryRecallStore):
    """An in-memory recall store counting the recall sessions opened."""

    def __init__(self) -> None:
        super().__init__()
        self.opens = 0

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        self.opens += 1
        return await super().open(*args, **kwargs)


async def test_the_look_at_commit_reads_nothing_more_than_the_commit_fence() -> None:
    """A one-call run carrying a document opens two recall sessions, as before: dispatch and commit."""
    recall = CountingOpens()
    provider = HeldCall(["Monday."], hold=0)
    async with closing(_recall_pair(provider, None, recall=recall)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        before = recall.opens
        result = await mine.run(ANA, "s1", "When does the on-call rota change?")
        assert "qzrotaq" in provider.sent[0] and result.committed
        assert recall.opens - before == 2


# -- before the first call: a delete during the memory search ----------------------------------


class HeldLookup(InMemoryMemoryStore):
    """An in-memory memory store whose next ``lookup`` (the run's memory search) waits once ``armed``."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.started, self.release = anyio.Event(), anyio.Event()

    async def lookup(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            self.started.set()
            with anyio.fail_after(30):
                await self.release.wait()
        return await super().lookup(*args, **kwargs)


async def test_a_document_deleted_during_the_memory_search_is_never_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = HeldLookup()
    provider = HeldCall(["Monday, qzrotaq."], hold=0)
    async with closing(_recall_pair(provider, None, memory=memory)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", DOC)
        memory.armed = True
        outcome: list[Any] = []

        async def run() -> None:
            try:
                outcome.append(await mine.run(ANA, "s1", "When does the on-call rota change?"))
            except Exception as exc:
                outcome.append(exc)

        with caplog.at_level(logging.WARNING, logger="agentium"):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                with anyio.fail_after(30):
                    await memory.started.wait()
                assert await other.delete_document(SourceOwner("acme"), "oncall") is True
                memory.release.set()
        assert provider.sent == []  # the excerpt recall read was never sent
        assert isinstance(outcome[0], DocumentDeletedDuringRunError), repr(outcome[0])
        stopped = outcome[0]
        assert stopped.before_commit is False and stopped.commit_state is CommitState.NOT_COMMITTED
        assert "before its next model call" in str(stopped), str(stopped)
        warned = [r for r in caplog.records if r.levelno == logging.WARNING and "deleted" in r.getMessage()]
        assert warned and not [r for r in caplog.records if "qz" in r.getMessage()]


async def test_without_memory_the_first_call_is_not_looked_before() -> None:
    """Nothing runs between recall's validation and the first call: no look (one session fewer)."""
    recall = CountingOpens()
    provider = HeldCall(["Monday.", "Monday."], hold=0)
    async with closing(_recall_pair(provider, None, recall=recall)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        before = recall.opens
        await mine.run(ANA, "s1", "When does the on-call rota change?")
        bare = recall.opens - before
    recall = CountingOpens()
    provider = HeldCall(["Monday.", "Monday."], hold=0)
    async with closing(_recall_pair(provider, None, recall=recall, memory=InMemoryMemoryStore())) as (
        mine,
        _,
    ):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        before = recall.opens
        await mine.run(ANA, "s1", "When does the on-call rota change?")
        assert recall.opens - before == bare + 1  # with a memory search between: one look before


# -- the looks count in the run's recall latency ---------------------------------------------


class SlowValidation(InMemoryRecallStore):
    """An in-memory recall store whose ``validate_current`` sleeps ``delay_s`` once ``slow`` is set."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s, self.slow, self.validations = delay_s, False, 0

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        session = await super().open(*args, **kwargs)
        if self.slow:
            real = session.validate_current

            async def slow(refs: Any, ctx: Any) -> Any:
                self.validations += 1
                await anyio.sleep(self.delay_s)
                return await real(refs, ctx)

            session.validate_current = slow
        return session


class SlowAfterFirstCall(HeldTool):
    """A held tool that, when called, makes the recall store slow (the looks after the first call)."""

    def __init__(self, store: SlowValidation) -> None:
        super().__init__()
        self.store = store
        self.release.set()

    async def _call(self, args: Any) -> str:
        self.store.slow = True
        return await super()._call(args)


async def test_the_looks_count_in_the_run_recall_latency() -> None:
    """Two looks and the commit fence, 0.2 s each at least: the run's recall latency holds all three."""
    recall = SlowValidation(0.2)
    provider = HeldCall([DEPLOY, DEPLOY, "Done."], hold=0)
    held = SlowAfterFirstCall(recall)
    limits = RecallLimits(max_latency_s=5.0)
    async with closing(_recall_pair(provider, held, recall=recall, recall_limits=limits)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        with anyio.fail_after(30):
            result = await mine.run(ANA, "s1", "When does the rota change? Deploy it.", grants=["deploy"])
        assert result.committed and len(provider.sent) == 3
        assert recall.validations == 3  # before calls 2 and 3, and the commit fence
        assert result.recall is not None and result.recall.usage.latency_s >= 0.6, result.recall.usage


async def test_looks_past_the_latency_budget_stop_the_run_unchecked() -> None:
    """Each look alone fits ``max_latency_s``; together they do not: the run stops, fail closed."""
    recall = SlowValidation(0.3)
    provider = HeldCall([DEPLOY, DEPLOY, DEPLOY, DEPLOY, "Done."], hold=0)
    held = SlowAfterFirstCall(recall)
    limits = RecallLimits(max_latency_s=0.8)
    async with closing(_recall_pair(provider, held, recall=recall, recall_limits=limits)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        with anyio.fail_after(30):
            try:
                await mine.run(ANA, "s1", "When does the rota change? Deploy it.", grants=["deploy"])
            except DocumentUncheckedDuringRunError as exc:
                outcome: Any = exc
            else:
                outcome = None
        assert isinstance(outcome, DocumentUncheckedDuringRunError), repr(outcome)
        # The look that ran out of the run's recall latency: cut at what was left, or not started.
        assert "did not finish within" in str(outcome) or "latency budget" in str(outcome), str(outcome)
        assert len(provider.sent) < 5  # the last calls were not made unchecked


async def test_the_looks_count_in_the_result_of_a_run_stopped_past_the_budget() -> None:
    """The error's ``run_result`` (what ran, committed) holds the looks' time that spent the budget.

    On the old source only a run reaching its commit fence counted them: this
    result said a few milliseconds while the error said the budget was spent.
    """
    recall = SlowValidation(0.3)
    provider = HeldCall([DEPLOY, DEPLOY, DEPLOY, DEPLOY, "Done."], hold=0)
    held = SlowAfterFirstCall(recall)
    limits = RecallLimits(max_latency_s=0.8)
    async with closing(_recall_pair(provider, held, recall=recall, recall_limits=limits)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        with anyio.fail_after(30), pytest.raises(DocumentUncheckedDuringRunError) as caught:
            await mine.run(ANA, "s1", "When does the rota change? Deploy it.", grants=["deploy"])
        ran = caught.value.run_result
        assert ran is not None and ran.committed and ran.recall is not None
        # Two looks of 0.3 s at least before the one cut short: the usage says so.
        assert ran.recall.usage.latency_s >= 0.6, ran.recall.usage


async def test_the_looks_count_in_what_ran_after_a_provider_failure() -> None:
    """A model call failing after two looks: the committed tool rounds' result counts the looks.

    A third is made after the failed call, before the tool rounds are kept
    (tests/core/test_turn_fence_failed_last_call.py): it counts too.
    """
    recall = SlowValidation(0.2)
    provider = HeldCall([DEPLOY, DEPLOY], hold=0)  # the third call fails: the script ran out
    held = SlowAfterFirstCall(recall)
    async with closing(_recall_pair(provider, held, recall=recall)) as (mine, _):
        await mine.index_document(SourceOwner("acme"), "oncall", DOC)
        with anyio.fail_after(30), pytest.raises(AgentiumError) as caught:
            await mine.run(ANA, "s1", "When does the rota change? Deploy it.", grants=["deploy"])
        assert len(provider.sent) == 3 and recall.validations == 3  # before calls 2 and 3, after 3
        ran = caught.value.run_result
        assert caught.value.commit_state is CommitState.COMMITTED, caught.value
        assert ran is not None and ran.recall is not None
        assert ran.recall.usage.latency_s >= 0.6, ran.recall.usage


class SlowThenHeld(HeldTool):
    """Its first call makes the recall store slow and returns; its second says ``entered`` and waits."""

    def __init__(self, store: SlowValidation) -> None:
        super().__init__()
        self.store, self.called = store, 0

    async def _call(self, args: Any) -> str:
        self.called += 1
        if self.called == 1:
            self.store.slow = True
            return self.result
        return await super()._call(args)


async def test_the_looks_count_in_what_ran_when_aclose_cancels_the_run() -> None:
    """``aclose()`` during the second tool round: the caller's result counts the looks.

    The one before call 2, and the one made before what ran is kept (a cancelled call is a failed one).
    """
    recall = SlowValidation(0.3)
    provider = HeldCall([DEPLOY, DEPLOY, "Done."], hold=0)
    held = SlowThenHeld(recall)
    # aclose() gives the run settle_timeout_s before it cancels it.
    mine, other = _recall_pair(provider, held, recall=recall, limits=RuntimeLimits(settle_timeout_s=0.2))
    await mine.index_document(SourceOwner("acme"), "oncall", DOC)
    outcome: list[BaseException] = []

    async def run() -> None:
        try:
            await mine.run(ANA, "s1", "When does the rota change? Deploy it.", grants=["deploy"])
        except AgentiumError as exc:
            outcome.append(exc)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await held.entered.wait()
            await mine.aclose()
    await other.aclose()
    (closed,) = outcome
    assert isinstance(closed, AgentiumError) and closed.commit_state is CommitState.COMMITTED, repr(closed)
    assert recall.validations == 2  # the look before call 2, and the one after the cancellation
    ran = closed.run_result
    assert ran is not None and ran.recall is not None
    assert ran.recall.usage.latency_s >= 0.3, ran.recall.usage
