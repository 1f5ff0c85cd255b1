"""What a recall store said never reaches committed history by way of a stop either.

``retained.uncertainty`` keeps the engine's words alone
(``test_recall_committed_words``). Two other lines of the same retained
record were written from the store's words: when a turn whose tools ran is
stopped and what ran is committed, ``retained.interruption.detail`` says why,
and it was the recall policy's reason (the default policy's quotes every
problem whole: the store's error text) or the document fence's
``DocumentUncheckedDuringRunError`` text (the store's error, whole). An
error naming another tenant's row was written into this tenant's history.
Both now commit the engine's words (an error by its class); the host keeps
the whole text in ``RunResult.recall.reason``, the diagnostics and the
error it is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, ScriptedSession, sid

from agentium_harness import (
    CommitState,
    DocumentUncheckedDuringRunError,
    EffectLevel,
    InterruptionCause,
    RunStatus,
    Tool,
    ToolRegistry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext, SourceOwner, SourceRef, Validation

pytestmark = pytest.mark.anyio

#: Another tenant's source, which the store's error names.
FOREIGN = sid("salaries-globex", SourceOwner("globex", "bob", "s9"))
DOCS = [("kettle", "the kettle was descaled in May")]
#: ``validate_current`` calls answered before the one that fails: the look before the second model
#: call follows the dispatch fence's, the commit fence's follows that look.
LOOK, COMMIT = 1, 2
TOOL_TURN = [{"content": "", "tool_calls": [{"id": "t1", "name": "note"}]}, "Noted."]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _FailsLater(ScriptedSession):
    """``validate_current`` answers the first ``store.good`` calls, then fails naming another tenant's row."""

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        store = self.store
        assert isinstance(store, FailsLater)
        if store.calls >= store.good:
            raise RuntimeError(f"row {FOREIGN} is locked")
        store.calls += 1
        return await super().validate_current(refs, ctx)


class FailsLater(Scripted):
    def __init__(self, good: int) -> None:
        super().__init__(DOCS)
        self.good, self.calls = good, 0

    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _FailsLater:
        return _FailsLater(self)


async def _tool_run(store: Scripted) -> tuple[Any, bytes]:
    """A turn whose one tool runs; its result (or error) and every byte committed for it."""

    async def note(args: Any) -> str:
        return "noted"

    sessions, archive = InMemorySessionStore(), InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=list(TOOL_TURN)),
        archive=archive,
        session_store=sessions,
        recall=store,
        tools=ToolRegistry([Tool("note", note, EffectLevel.WRITE)]),
    )
    async with rt:
        with anyio.fail_after(30):
            try:
                outcome: Any = await rt.run(ANA, "s1", "when was the kettle descaled", grants=["note"])
            except DocumentUncheckedDuringRunError as exc:
                outcome = exc
    stored = [row for _, row in sessions._rows.values()]
    stored += [data for groups in archive._groups.values() for data, _ in groups.values()]
    assert stored, "nothing was committed"
    return outcome, b"".join(stored)


async def test_a_commit_fence_stop_commits_what_ran_without_the_stores_error_text() -> None:
    # The look before the second call answers; the commit fence's fails: the default policy stops.
    result, committed = await _tool_run(FailsLater(good=COMMIT))
    assert result.status is RunStatus.STOPPED and result.commit_state is CommitState.COMMITTED
    assert result.recall is not None and FOREIGN in result.recall.reason  # the host's, whole
    interruption = result.retained.interruption
    assert interruption is not None and interruption.cause is InterruptionCause.RECALL_STOPPED
    assert b"globex" not in committed and b"salaries" not in committed
    assert "RuntimeError" in interruption.detail, interruption.detail


async def test_a_document_fence_that_could_not_look_commits_what_ran_without_the_stores_error_text() -> None:
    # The look before the second model call fails: the run stops before it, what ran is kept.
    error, committed = await _tool_run(FailsLater(good=LOOK))
    assert isinstance(error, DocumentUncheckedDuringRunError), repr(error)
    assert FOREIGN in str(error)  # the host's error has the reason whole
    assert error.commit_state is CommitState.COMMITTED and error.run_result is not None
    interruption = error.run_result.retained.interruption
    assert interruption is not None
    assert b"globex" not in committed and b"salaries" not in committed
    assert "RuntimeError" in interruption.detail, interruption.detail
