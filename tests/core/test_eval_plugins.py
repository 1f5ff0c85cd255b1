"""Graders from plugins (``agentium_register_graders``) and graders catching a real runtime's faults."""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from typing import Any

import anyio
import attrs
from _eval_support import FACT_CASE

from agentium_harness import ResidentLimits, RuntimeLimits, Scope, create_harness_runtime
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallSession, InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.eval import (
    CaseTrace,
    EvalCase,
    Grade,
    GradeStatus,
    UnknownGraderError,
    installed_graders,
    parse_cases,
    run_eval,
)
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    OpContext,
    PluginRegistry,
    RecallLimits,
    RecallSession,
    SourceRef,
    hookimpl,
)
from agentium_harness.testing import create_harness_eval_target


@attrs.frozen
class _Long:
    name: str = "long_answer"
    description: str = "the answer has more than 20 characters"
    evidence: bool = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        return Grade.passed("long") if len(trace.answer) > 20 else Grade.failed("short")


def _plugin(*graders: object) -> types.SimpleNamespace:
    @hookimpl
    def agentium_register_graders(register: Any) -> None:
        for grader in graders:
            register(grader)

    return types.SimpleNamespace(agentium_register_graders=agentium_register_graders)


def test_a_plugin_grader_is_registered_selected_and_run() -> None:
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("long-dist", _plugin(_Long()))])
    graders = installed_graders(registry)
    assert list(graders)[-1] == "long_answer" and "scope" in graders
    assert registry.grader("long_answer").description.startswith("the answer")
    line = json.dumps({**FACT_CASE, "graders": ["long_answer", "supported_answer"]})
    cases = parse_cases(line, graders=list(graders))
    # Without the plugin the same case file is refused before anything runs.
    try:
        parse_cases(line, graders=list(installed_graders(PluginRegistry.load(autoload=False))))
    except UnknownGraderError as exc:
        assert "long_answer" in str(exc)
    else:
        raise AssertionError("an unknown grader must be refused")

    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=InMemoryRecallStore(),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        )
        run = await run_eval(cases, create_harness_eval_target(runtime=runtime), graders)
        assert set(run.results[0].grades) == {"long_answer", "supported_answer"}
        assert run.results[0].grades["long_answer"].status is GradeStatus.PASS
        await runtime.aclose()

    anyio.run(main)


def test_bad_grader_registrations_are_problems_not_crashes() -> None:
    class NoGrade:
        name = "nograde"
        description = "x"
        evidence = False

    registry = PluginRegistry.load(
        autoload=False,
        extra_plugins=[
            ("bad-graders", _plugin(NoGrade(), _Long(), _Long(), attrs.evolve(_Long(), name="scope")))
        ],
    )
    errors = [p.error for p in registry.problems if p.hook == "agentium_register_graders"]
    assert any("no callable grade" in e for e in errors)
    assert any("registered twice" in e for e in errors)
    assert any("'scope' is already registered by agentium-harness" in e for e in errors)
    # The first long_answer was kept; the built-in scope grader is unchanged.
    assert registry.grader_names().count("long_answer") == 1
    assert registry.grader("scope").description.startswith("no foreign-scope")


class _LeakySession(InMemoryRecallSession):
    """A broken store: discovery also returns every other source it holds, of any tenant."""

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        found = list(await super().discover(query, max_candidates, ctx))
        mine = {c.ref.source_id for c in found}
        sources = self._store._sources.items()
        leaked = [Candidate(SourceRef(sid, s.revision), s.owner, 1.0, len(s.text)) for sid, s in sources]
        return [*found, *(c for c in leaked if c.ref.source_id not in mine)]


class _LeakyStore(InMemoryRecallStore):
    session_class = _LeakySession

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return _LeakySession(self, scope)


def test_the_scope_grader_catches_a_store_that_leaks_across_tenants() -> None:
    trap = {
        "id": "trap",
        "setup": [
            {
                "document": "Globex pays salaries on the 25th.",
                "id": "pay",
                "label": "pay",
                "owner": {"tenant": "globex"},
            }
        ],
        "probe": "When are salaries paid?",
        "expect": {"excluded": ["pay"], "foreign_text": ["25th"], "abstain": True},
    }
    graders = installed_graders()

    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=_LeakyStore(),
        )
        run = await run_eval(
            parse_cases(json.dumps(trap)), create_harness_eval_target(runtime=runtime), graders
        )
        (result,) = run.results
        assert result.trace is not None
        scope = result.grades["scope"]
        assert scope.status is GradeStatus.FAIL and "outside the scope" in scope.reason
        # The engine dropped the foreign candidate, so nothing reached the model: those graders pass.
        assert "recall_contract_violation" in result.trace.diagnostics
        assert result.grades["prompt_inclusion"].status is GradeStatus.PASS
        assert result.grades["abstention"].status is GradeStatus.PASS
        await runtime.aclose()

    anyio.run(main)


def test_only_the_probe_turn_is_traced() -> None:
    graders = installed_graders()

    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=InMemoryRecallStore(),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        )
        run = await run_eval(
            parse_cases(json.dumps(FACT_CASE)), create_harness_eval_target(runtime=runtime), graders
        )
        (result,) = run.results
        trace = result.trace
        assert trace is not None
        # Three setup turns each called the model; only the probe's one request is in the trace.
        assert len(trace.requests) == 1 and [s.kind for s in trace.setup] == ["say", "say", "say"]
        assert trace.status == "completed" and trace.committed and trace.recall_status == "complete"
        (block,) = trace.requests[0].sources
        assert (
            block.source_id == trace.labels["locker"].source_id
            and block.attribute("completeness") == "complete"
        )
        assert trace.retained is not None and trace.retained["scope"]["tenant"].startswith("acme@")
        await runtime.aclose()

    anyio.run(main)


class _OversizedSession(InMemoryRecallSession):
    """A broken store: read ignores ``max_excerpt_bytes`` and returns whole texts."""

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        return await super().read(refs, 1_000_000, ctx)


class _OversizedStore(InMemoryRecallStore):
    session_class = _OversizedSession

    async def open(self, scope: Scope, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return _OversizedSession(self, scope)


def test_an_excerpt_the_engine_drops_is_not_read_evidence() -> None:
    text = "The release captain signs off with the code word marigold. " * 4
    case = {
        "id": "oversized",
        "setup": [{"document": text, "id": "checklist", "label": "checklist"}],
        "probe": "Which code word does the release captain sign off with?",
        "recall_budget": {"max_excerpt_bytes": 64},
        "expect": {"evidence": ["checklist"], "in_prompt": [], "abstain": True},
    }

    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=_OversizedStore(),
        )
        target = create_harness_eval_target(runtime=runtime)
        (result,) = (await run_eval(parse_cases(json.dumps(case)), target, installed_graders())).results
        assert result.trace is not None and result.trace.dropped_excerpts == (
            result.trace.labels["checklist"].source_id,
        )
        read = result.grades["read_evidence"]
        assert read.status is GradeStatus.FAIL and "dropped by the engine" in read.reason
        assert result.grades["discovered_evidence"].status is GradeStatus.PASS
        assert result.grades["abstention"].status is GradeStatus.PASS  # partial recall: the policy stopped
        await runtime.aclose()

    anyio.run(main)
