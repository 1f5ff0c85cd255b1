"""A store that answers with far more than asked cannot make a run's cost or record grow without limit.

What the engine looks at is capped at what it asked for, the violations of a
round are listed up to a bound and counted past it, and the uncertainty a
run carries (and commits) is bounded in lines and bytes. Counts and sizes
are asserted, never wall-clock time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from _recall_support import ANA, MINE, Scripted, ScriptedSession, runtime, sid

from agentium_harness import RecallLimits, RecallStatus, current_session_recall_policy
from agentium_harness._engine import recall_turn
from agentium_harness._engine.recall_round import MAX_FINDING_CHARS, MAX_LISTED_VIOLATIONS
from agentium_harness._engine.recall_turn import MAX_UNCERTAINTY_BYTES, MAX_UNCERTAINTY_LINES
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    OpContext,
    RecallSession,
    Scope,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
)

pytestmark = pytest.mark.anyio

FLOOD = 50_000
OTHER = SourceOwner("globex", "bob", "s9")


class FloodSession(ScriptedSession):
    """Answers every call with ``FLOOD`` items, whatever it was asked for."""

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        where = self.store.where  # type: ignore[attr-defined]
        if where == "discover":
            return [Candidate(SourceRef(sid(f"d{i}"), "r1"), MINE, 1.0, 10) for i in range(FLOOD)]
        if where == "scope":  # distinct bad items within the count asked: each one a violation
            return [
                Candidate(SourceRef(sid(f"d{i}", OTHER), "r1"), OTHER, 1.0, 10) for i in range(max_candidates)
            ]
        return await super().discover(query, max_candidates, ctx)

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        if self.store.where == "read":  # type: ignore[attr-defined]
            return [Excerpt(SourceRef(sid(f"x{i}"), "r1"), MINE, "t") for i in range(FLOOD)]
        return [Excerpt(r, MINE, f"text of {r.source_id}") for r in refs]

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        if self.store.where == "validate":  # type: ignore[attr-defined]
            return [Validation(SourceRef(sid(f"x{i}"), "r1"), ValidationStatus.CURRENT) for i in range(FLOOD)]
        return await super().validate_current(refs, ctx)


class Flood(Scripted):
    def __init__(self, where: str) -> None:
        super().__init__([("doc", "the rota changes on monday")])
        self.where = where

    async def open(self, scope: Scope, limits: Any, ctx: OpContext) -> RecallSession:
        return FloodSession(self)


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@pytest.mark.parametrize("where", ["discover", "read", "validate", "scope"])
async def test_a_flooding_store_gives_bounded_findings_logs_and_uncertainty(where: str) -> None:
    limits = RecallLimits(max_candidates=200, max_validations=400) if where == "scope" else RecallLimits()
    store = Flood(where)
    rt, _, _ = runtime(
        store, recall_policy=current_session_recall_policy(on_partial="continue"), recall_limits=limits
    )
    warnings = Warnings()
    root = logging.getLogger()
    root.addHandler(warnings)
    try:
        result = await rt.run(ANA, "s1", "rota?")
    finally:
        root.removeHandler(warnings)
    assert result.recall.status is RecallStatus.PARTIAL
    # Before the fix: one violation, diagnostic and WARNING record per item, and every one of them
    # in the uncertainty committed with the turn (megabytes).
    violations = result.recall.violations
    assert len(violations) <= MAX_LISTED_VIOLATIONS + 1
    assert all(len(v) <= MAX_FINDING_CHARS for v in violations)
    assert len(result.diagnostics) <= 2 * MAX_LISTED_VIOLATIONS + 8
    assert warnings.count <= 2 * MAX_LISTED_VIOLATIONS + 8
    for carried in (result.recall.uncertainty, result.retained.uncertainty):
        assert 0 < len(carried) <= MAX_UNCERTAINTY_LINES
        assert sum(len(u.encode()) for u in carried) <= MAX_UNCERTAINTY_BYTES
    if where != "scope":
        assert any("more than the" in v and "asked" in v for v in violations)
    else:
        assert any("more contract violation(s) in this run, not listed" in v for v in violations)


def test_the_status_notice_renders_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = 0
    notice = recall_turn._notice

    def counting(text: str) -> Any:
        nonlocal rendered
        rendered += 1
        return notice(text)

    monkeypatch.setattr(recall_turn, "_notice", counting)
    lines = tuple(f"recall partial: problem {i}" for i in range(2_000))
    block = recall_turn._status_block(lines, 200)
    # Before the fix: one rendering of the whole notice per line count tried (quadratic).
    assert rendered <= MAX_UNCERTAINTY_LINES + 2
    assert "more not shown" in block.content
