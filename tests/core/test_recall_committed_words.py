"""What a recall store said out of contract never ends up in committed state.

A round's problems quote what the store returned: a contract violation names
the ids it gave (another tenant's, say), a failed call's error text may name
them too. ``retained.uncertainty`` is committed with the turn, in the
snapshot and the archived group, where the host's own tenant owns it: it used
to keep those problems whole, so another tenant's id was written into this
tenant's history. It now keeps the engine's words alone, as the model's
``recall-status`` notice does (an error's class, a count of violations); the
whole text stays the host's, in ``RunResult.recall.violations`` and the
``recall_*`` diagnostics, which are never committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Recording, Scripted, ScriptedSession, sid

from agentium_harness import (
    RunResult,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.plugin_api import (
    Candidate,
    OpContext,
    SourceOwner,
    SourceRef,
    Validation,
)

pytestmark = pytest.mark.anyio

#: Another tenant's owner and one of its sources, which a misbehaving store returns.
GLOBEX = SourceOwner("globex", "bob", "s9")
FOREIGN = sid("salaries-globex", GLOBEX)
CONTINUE = current_session_recall_policy(on_failed="continue", on_partial="continue")
DOCS = [("kettle", "the kettle was descaled in May")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Foreign(ScriptedSession):
    """Discovery returns another tenant's source first: a contract violation quoting its id."""

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        mine = await super().discover(query, max_candidates - 1, ctx)
        return [Candidate(SourceRef(FOREIGN, "r1"), GLOBEX, 9.0, 10), *mine]


class Foreign(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _Foreign:
        return _Foreign(self)


class _FailsNaming(ScriptedSession):
    """Validation at the commit fence fails, its error text naming another tenant's source."""

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        if self.store.validated:
            raise RuntimeError(f"row {FOREIGN} is locked")
        self.store.validated = True
        return await super().validate_current(refs, ctx)


class FailsNaming(Scripted):
    validated = False

    async def open(self, scope: Any, limits: Any, ctx: OpContext) -> _FailsNaming:
        return _FailsNaming(self)


async def _committed(store: Scripted) -> tuple[RunResult, bytes]:
    """Run one turn that continues with uncertainty; its result and every byte committed for it."""
    sessions, archive = InMemorySessionStore(), InMemoryArchive()
    rt = create_harness_runtime(
        provider=Recording(),
        archive=archive,
        session_store=sessions,
        recall=store,
        recall_policy=CONTINUE,
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "when was the kettle descaled")
    # What the in-memory stores hold is what a durable one would have written.
    stored = [row for _, row in sessions._rows.values()]
    stored += [data for groups in archive._groups.values() for data, _ in groups.values()]
    assert stored, "nothing was committed"
    return result, b"".join(stored)


async def test_a_violation_naming_another_tenants_id_is_counted_in_the_committed_uncertainty() -> None:
    result, committed = await _committed(Foreign(DOCS))
    assert result.recall is not None and result.group_seq is not None
    assert any(FOREIGN in v for v in result.recall.violations)  # the host's own result has it whole
    assert b"globex" not in committed and b"salaries" not in committed
    assert any("answered out of contract 1 time(s)" in u for u in result.retained.uncertainty)
    assert result.recall.uncertainty == result.retained.uncertainty


async def test_a_commit_fence_error_naming_another_tenants_id_is_committed_by_its_class() -> None:
    result, committed = await _committed(FailsNaming(DOCS))
    assert result.recall is not None and result.group_seq is not None
    assert any(FOREIGN in d.message for d in result.diagnostics if d.code == "recall_source_changed")
    assert b"globex" not in committed and b"salaries" not in committed
    assert "recall failed: recall validate_current failed: RuntimeError" in result.retained.uncertainty
