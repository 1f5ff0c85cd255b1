"""What a memory store said never reaches committed history by way of a stop.

Before each later model call a run reads back the memory facts its request
carries (the memory forget fence, :mod:`agentium_harness._engine.fact_fence`).
When that read fails, the run stops before the call and the tool calls that
ran are committed without the answer (``step_failed``). The interruption's
detail was the error's text whole, the store's error text among it: a store
error naming another tenant's fact was written into this tenant's snapshot
and archive. It is now the engine's words (the error by its class, which
read of the look failed), as a recall store's error is committed
(``test_recall_committed_stops``); the host keeps the whole text in the
error it is raised. So is a session store's own typed error that stops the
turn's commit once (what ran is then committed on the retry).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _recall_support import ANA

from agentium_harness import (
    AgentiumError,
    CommitState,
    EffectLevel,
    InterruptionCause,
    MemoryFact,
    MemoryScope,
    MemoryStoreError,
    SessionStoreError,
    Tool,
    ToolRegistry,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

#: Another tenant's fact, which the store's error names.
FOREIGN = "fact-globex-salaries-77"
FACT = "the kettle was descaled in May"
TOOL_TURN = [{"content": "", "tool_calls": [{"id": "t1", "name": "note"}]}, "Noted."]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ForeignError(Exception):
    """An exception a store raises untyped."""


class FailingHistory(InMemoryMemoryStore):
    """Reads a fact's history back by failing, its error naming another tenant's fact."""

    def __init__(self, typed: bool) -> None:
        super().__init__()
        self.typed = typed

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        said = f"row {FOREIGN} of tenant globex is locked"
        raise MemoryStoreError(said) if self.typed else ForeignError(said)


async def _tool_run(
    store: InMemoryMemoryStore, sessions: InMemorySessionStore | None = None
) -> tuple[AgentiumError, bytes]:
    """A turn whose one tool runs, the fact carried; its error and every byte committed for it."""

    async def note(args: Any) -> str:
        return "noted"

    sessions, archive = sessions or InMemorySessionStore(), InMemoryArchive()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=list(TOOL_TURN)),
        archive=archive,
        session_store=sessions,
        memory=store,
        tools=ToolRegistry([Tool("note", note, EffectLevel.WRITE)]),
    )
    async with rt:
        await rt.memory.remember(MemoryFact(MemoryScope("acme", "ana"), FACT))
        with anyio.fail_after(30), pytest.raises(AgentiumError) as caught:
            await rt.run(ANA, "s1", "when was the kettle descaled", grants=["note"])
    stored = [row for _, row in sessions._rows.values()]
    stored += [data for groups in archive._groups.values() for data, _ in groups.values()]
    assert stored, "nothing was committed"
    return caught.value, b"".join(stored)


@pytest.mark.parametrize("typed", [False, True], ids=["foreign", "typed"])
async def test_a_fact_that_cannot_be_read_back_commits_what_ran_without_the_stores_error_text(
    typed: bool,
) -> None:
    error, committed = await _tool_run(FailingHistory(typed))
    assert isinstance(error, MemoryStoreError), repr(error)
    assert FOREIGN in str(error)  # the host's error has the store's words whole
    assert error.commit_state is CommitState.COMMITTED and error.run_result is not None
    interruption = error.run_result.retained.interruption
    assert interruption is not None and interruption.cause is InterruptionCause.STEP_FAILED
    assert FOREIGN.encode() not in committed and b"globex" not in committed
    # The engine's words: the error by its class, the store's exception by its class, which read.
    assert interruption.detail.startswith("MemoryStoreError: memory forget fence"), interruption.detail
    cause = "MemoryStoreError" if typed else "ForeignError"
    assert f"carried fact 1 of 1 failed ({cause})" in interruption.detail, interruption.detail


class SaveFailsOnce(InMemorySessionStore):
    """The turn's first save fails with the store's own typed error, naming another tenant's row."""

    failed = False

    async def save(self, key: Any, snapshot: Any, expected_revision: Any, ctx: Any) -> int:
        if not self.failed:
            self.failed = True
            raise SessionStoreError(f"row {FOREIGN} of tenant globex is locked; nothing was written")
        return await super().save(key, snapshot, expected_revision, ctx)


async def test_a_session_stores_typed_error_is_committed_by_its_class_alone() -> None:
    error, committed = await _tool_run(InMemoryMemoryStore(), SaveFailsOnce())
    assert isinstance(error, SessionStoreError), repr(error)
    assert FOREIGN in str(error)  # the host's error has the store's words whole
    assert error.commit_state is CommitState.COMMITTED and error.run_result is not None
    interruption = error.run_result.retained.interruption
    assert interruption is not None and interruption.cause is InterruptionCause.STEP_FAILED
    assert FOREIGN.encode() not in committed and b"globex" not in committed
    assert interruption.detail.startswith("SessionStoreError (the session save's error"), interruption.detail


class OneErrorObject(InMemoryMemoryStore):
    """Raises one exception object on every read, whatever the run (a store may keep one per failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.error = MemoryStoreError(f"row {FOREIGN} of tenant globex is locked")

    async def history(self, scope: Any, fact_id: str, ctx: Any) -> Any:
        raise self.error


async def test_a_stores_reused_error_object_is_never_marked_so_a_later_run_still_commits_what_ran() -> None:
    # The engine marked the store's own object (its commit state, message, committed words): the
    # next run the same object stopped took the last run's state ("committed as group …") for its
    # own and committed nothing of what ran.
    store = OneErrorObject()
    first, _ = await _tool_run(store)
    second, committed = await _tool_run(store)
    for error in (first, second):
        assert error is not store.error and type(error) is MemoryStoreError
        assert FOREIGN in str(error) and str(error).count("committed as group") == 1, str(error)
        assert error.commit_state is CommitState.COMMITTED and error.run_result is not None
        assert error.run_result.retained.interruption is not None
    assert str(store.error) == f"row {FOREIGN} of tenant globex is locked"
    assert store.error.commit_state is None and store.error.committed_detail is None
    assert FOREIGN.encode() not in committed
