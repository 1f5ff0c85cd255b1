"""A run never sends again the excerpt of a host document deleted while it ran.

Recall puts excerpts of host documents into a run's request once; every
model call of the run (each tool round) sends that request again. A host's
``delete_document`` between two calls (another task, or another process
over the same recall store) is not an erasure: the ledger does not move and
the erasure fence never looked, so the next call sent the deleted
document's text again. The run now stops before that call, as for a
forgotten memory fact (docs/erasure.md).
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _effects_support import DEPLOY
from _erasure_harness import ANA, Recording, tool_turn_while
from _fence_support import closing, fence_pair, two_processes
from _telemetry_support import Telemetered

from agentium_harness import (
    CommitState,
    DocumentDeletedDuringRunError,
    DocumentUncheckedDuringRunError,
    ErasedDuringRunError,
    RecallStatus,
    SourceOwner,
    Telemetry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.testing.erasure_races import HeldTool, document_deleted_mid_run

pytestmark = pytest.mark.anyio

SECRET = "The on-call rota qzrotaq changes every Monday."
QUESTION = "When does the on-call rota change? Deploy it."
REPLIES = [DEPLOY, "Deployed."]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_document_deleted_between_calls_is_not_sent_again(kind: str, tmp_path: Path) -> None:
    provider = Recording(REPLIES)
    held = HeldTool()
    mine_stores, other_stores = two_processes(kind, tmp_path, recall=True)
    async with closing(fence_pair(provider, held, mine_stores, other_stores)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True

        outcome = await tool_turn_while(mine, held.entered, held.release, delete, QUESTION)
        assert "qzrotaq" in provider.sent[0], provider.sent[0]
        assert not [text for text in provider.sent[1:] if "qzrotaq" in text], provider.sent[1:]
        assert isinstance(outcome, DocumentDeletedDuringRunError), repr(outcome)
        assert isinstance(outcome, ErasedDuringRunError)  # what hosts catch for the fence already
        assert outcome.commit_state is CommitState.NOT_COMMITTED
        assert outcome.source_ids == ("doc/acme/~/~/~/~/oncall",)
        # Hosts log error texts, and an id is content: the text names the document only with capture.
        assert "oncall" not in str(outcome) and "1 host document(s)" in str(outcome), str(outcome)
        assert outcome.run_result is not None and not outcome.run_result.committed
        notes = [d for d in outcome.run_result.diagnostics if d.code == "erased_during_run"]
        assert notes and "deleted" in notes[0].message, outcome.run_result.diagnostics


async def test_the_stop_names_the_document_with_content_capture(tmp_path: Path) -> None:
    provider = Recording(REPLIES)
    held = HeldTool()
    mine_stores, other_stores = two_processes("memory", tmp_path, recall=True)
    capture = {**mine_stores, "telemetry": Telemetry(capture_content=True)}
    async with closing(fence_pair(provider, held, capture, other_stores)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True

        outcome = await tool_turn_while(mine, held.entered, held.release, delete, QUESTION)
        assert isinstance(outcome, DocumentDeletedDuringRunError), repr(outcome)
        assert "doc/acme/~/~/~/~/oncall" in str(outcome), str(outcome)


async def test_another_document_deleted_does_not_stop_the_run(tmp_path: Path) -> None:
    provider = Recording(REPLIES)
    held = HeldTool()
    mine_stores, other_stores = two_processes("memory", tmp_path, recall=True)
    async with closing(fence_pair(provider, held, mine_stores, other_stores)) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)
        await other.index_document(SourceOwner("acme", "bob"), "bobs", "Bob's garden notes: tulips.")

        async def delete() -> None:
            assert await other.delete_document(SourceOwner("acme", "bob"), "bobs") is True

        outcome: Any = await tool_turn_while(mine, held.entered, held.release, delete, QUESTION)
        assert not isinstance(outcome, Exception), repr(outcome)
        assert outcome.recall is not None and outcome.recall.status is RecallStatus.COMPLETE
        assert len(provider.sent) == 2 and "qzrotaq" in provider.sent[1]


class CountingOpens(InMemoryRecallStore):
    """An in-memory recall store counting the recall sessions opened (what the fence costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.opens = 0

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        self.opens += 1
        return await super().open(*args, **kwargs)


async def test_the_fence_opens_one_session_per_later_call_and_none_without_documents() -> None:
    """Cost: one recall session (open, validate, close) per later model call carrying a document."""
    recall = CountingOpens()
    stores = {"archive": InMemoryArchive(), "session_store": InMemorySessionStore(), "recall": recall}
    provider = Recording(["Monday.", DEPLOY, "Deployed.", "Monday.", DEPLOY, "Deployed."])
    held = HeldTool()
    held.release.set()
    async with closing(fence_pair(provider, held, stores, dict(stores))) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)
        before = recall.opens
        await mine.run(ANA, "s1", "When does the on-call rota change?")  # one call
        one_call = recall.opens - before
        before = recall.opens
        await mine.run(ANA, "s2", QUESTION, grants=["deploy"])  # two calls: the second is fenced
        assert "qzrotaq" in provider.sent[-1]
        assert recall.opens - before == one_call + 1
        assert await other.delete_document(SourceOwner("acme"), "oncall") is True
        before = recall.opens
        await mine.run(ANA, "s3", "When does the on-call rota change?")  # one call, no document now
        bare = recall.opens - before
        before = recall.opens
        await mine.run(ANA, "s4", QUESTION, grants=["deploy"])  # two calls, no document: no look
        assert "qzrotaq" not in provider.sent[-1]
        assert recall.opens - before == bare


@pytest.mark.parametrize("deletes", [True, False], ids=["deleted", "another-deleted"])
async def test_the_public_helper_over_sqlite(tmp_path: Path, deletes: bool) -> None:
    """:func:`document_deleted_mid_run` over SQLite: what a backend's tests run over their own stores."""
    config = SQLiteConfig(path=str(tmp_path / "agentium.db"))
    recall_config = SQLiteRecallConfig(path=str(tmp_path / "recall.db"))

    def build(provider: Any, **options: Any) -> Any:
        archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
        return create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store), **options
        )

    await document_deleted_mid_run(build, partial(SQLiteRecallStore, recall_config), deletes=deletes)


class BreaksMidRun(InMemoryRecallStore):
    """An in-memory recall store whose ``open`` fails once ``broken`` is set (a backend gone mid-run)."""

    broken = False

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise ValueError("recall backend down")
        return await super().open(*args, **kwargs)


async def test_a_recall_store_that_cannot_be_checked_stops_the_run_before_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fail closed, as the fact fence does: a document that cannot be checked is not sent again unchecked."""
    recall = BreaksMidRun()
    t = Telemetered()
    stores = {"archive": InMemoryArchive(), "session_store": InMemorySessionStore(), "recall": recall}
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(fence_pair(provider, held, {**stores, "telemetry": t.telemetry()}, dict(stores))) as (
        mine,
        other,
    ):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)

        async def break_it() -> None:
            recall.broken = True

        with caplog.at_level(logging.WARNING, logger="agentium"):
            outcome = await tool_turn_while(mine, held.entered, held.release, break_it, QUESTION)
        assert isinstance(outcome, DocumentUncheckedDuringRunError), repr(outcome)
        assert not isinstance(outcome, ErasedDuringRunError)  # nothing says the document went
        assert "recall backend down" in str(outcome)
        assert len(provider.sent) == 1 and "qzrotaq" in provider.sent[0]  # no call after the failure
        assert outcome.run_result is not None
        # What ran is committed, without the answer, as after any typed stop (the fact fence's failed read).
        assert outcome.commit_state is CommitState.COMMITTED, outcome.commit_state
        events = [(name, attrs) for _, name, attrs in t.events("agentium.run.")]
        assert ("agentium.run.document_fence_unchecked", {"agentium.operation": "run"}) in events, events
        assert not [name for name, _ in events if name.endswith("erased_during_run")], events
        warned = [r for r in caplog.records if r.levelno == logging.WARNING and "validated" in r.getMessage()]
        assert warned, [r.getMessage() for r in caplog.records]
        assert not [r for r in caplog.records if "qzrotaq" in r.getMessage() or "oncall" in r.getMessage()]
        recall.broken = False
        later = await mine.run(ANA, "s1", "When does the on-call rota change?")
        assert later.committed  # the session is usable again: nothing was left half-done


class AnswersNothingMidRun(InMemoryRecallStore):
    """An in-memory recall store whose sessions answer no ``validate_current`` once ``silent`` is set."""

    silent = False

    async def open(self, *args: Any, **kwargs: Any) -> Any:
        session = await super().open(*args, **kwargs)
        if self.silent:

            async def nothing(refs: Any, ctx: Any) -> list[Any]:
                return []  # no answer for any ref: the engine calls each unknown (a contract violation)

            session.validate_current = nothing  # type: ignore[method-assign]
        return session


async def test_a_document_the_store_cannot_answer_for_stops_the_run_too() -> None:
    """``unknown`` (no answer for the ref) is a look that could not be made: the run fails closed."""
    recall = AnswersNothingMidRun()
    stores = {"archive": InMemoryArchive(), "session_store": InMemorySessionStore(), "recall": recall}
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(fence_pair(provider, held, stores, dict(stores))) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)

        async def silence() -> None:
            recall.silent = True

        outcome = await tool_turn_while(mine, held.entered, held.release, silence, QUESTION)
        assert isinstance(outcome, DocumentUncheckedDuringRunError), repr(outcome)
        assert "unknown" in str(outcome), str(outcome)
        assert len(provider.sent) == 1 and "qzrotaq" in provider.sent[0]  # not sent again unchecked


async def test_a_document_deleted_and_indexed_again_reads_as_changed() -> None:
    """Deleted and indexed again (other text) before the check: ``changed``, the run goes on.

    Its old excerpt is sent again; the commit fence judges the change by
    the recall policy (the default stops the answer: what ran is committed).
    """
    stores = {
        "archive": InMemoryArchive(),
        "session_store": InMemorySessionStore(),
        "recall": InMemoryRecallStore(),
    }
    provider = Recording(REPLIES)
    held = HeldTool()
    async with closing(fence_pair(provider, held, stores, dict(stores))) as (mine, other):
        await other.index_document(SourceOwner("acme"), "oncall", SECRET)

        async def delete_and_add() -> None:
            assert await other.delete_document(SourceOwner("acme"), "oncall") is True
            await other.index_document(
                SourceOwner("acme"), "oncall", "The on-call rota changes every Tuesday."
            )

        outcome: Any = await tool_turn_while(mine, held.entered, held.release, delete_and_add, QUESTION)
        assert not isinstance(outcome, Exception), repr(outcome)
        assert len(provider.sent) == 2 and "qzrotaq" in provider.sent[1]
        assert outcome.recall is not None and outcome.recall.status is RecallStatus.PARTIAL, outcome.recall
        assert outcome.status.value == "stopped" and outcome.committed  # what ran, without the answer
