"""The runner and the eval target: infrastructure failures apart, bounded concurrency, fresh stores."""

from __future__ import annotations

import io
import json
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from _eval_support import (
    EXAMPLES,
    FACT_CASE,
    FAIL_MARKER,
    RECALL_ON,
    case,
    flaky_registry,
    trace,
    write_cases,
    write_config,
)
from _only_plugin import install_only_plugin

from agentium_harness import InvalidArgumentError, ResidentLimits, RuntimeLimits, create_harness_runtime
from agentium_harness._cli import main
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.eval import (
    CaseTrace,
    EvalCase,
    EvalCaseError,
    EvalRun,
    Grade,
    GradeStatus,
    Progress,
    TargetInfo,
    build_report,
    installed_graders,
    parse_cases,
    run_eval,
)
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    hookimpl,
)
from agentium_harness.testing.eval_target import create_harness_eval_target

GRADERS = installed_graders()


def _cases(*items: dict[str, object]) -> list[EvalCase]:
    return parse_cases("\n".join(json.dumps(i) for i in items))


def test_a_provider_failing_on_some_cases_is_counted_apart(tmp_path: Path) -> None:
    config = write_config(tmp_path / "flaky.toml", provider="flaky")
    target = create_harness_eval_target(config, registry=flaky_registry())
    failing = {**FACT_CASE, "id": "fails", "probe": f"What is my locker number? {FAIL_MARKER}"}
    cases = _cases(FACT_CASE, failing, {**FACT_CASE, "id": "fact-2"})
    run = anyio.run(lambda: run_eval(cases, target, GRADERS, concurrency=2))
    assert [r.case.id for r in run.results] == ["fact", "fails", "fact-2"]
    (failed,) = run.infrastructure_failures
    assert failed.case.id == "fails" and failed.grades == {} and failed.trace is None
    assert failed.failure is not None and failed.failure.error.startswith("ProviderError")
    assert "503" in failed.failure.message
    # The other two were graded; the failed case is in no denominator.
    counts = run.counts("supported_answer")
    assert counts == {"pass": 2, "fail": 0, "absent": 0, "valid": 2}
    report = build_report([run], list(GRADERS.values()))
    (summary,) = report["runs"]
    assert summary["totals"] == {"cases": 3, "graded": 2, "infrastructure_failures": 1}
    assert summary["infrastructure_failures"][0]["case"] == "fails"
    assert summary["scores"]["supported_answer"]["pass_rate"] == 1.0


class _Boom:
    name = "boom"
    description = "raises"
    evidence = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        raise RuntimeError("grader bug")


class _Target:
    """A target that records how many cases run at once (the runner's bound, not the runtime, is tested)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    @property
    def info(self) -> TargetInfo:
        return TargetInfo("fake", "scripted", True, False)

    async def run_case(self, case: EvalCase) -> CaseTrace:
        self.now += 1
        self.most = max(self.most, self.now)
        await anyio.sleep(0.02)
        self.now -= 1
        return trace(case_id=case.id, answer="I have no evidence in the provided sources to answer that.")


def test_concurrency_is_bounded_and_a_raising_grader_is_absent_never_a_pass() -> None:
    target = _Target()
    cases = [case(id=f"c{i}", expect={"abstain": True}) for i in range(9)]
    graders = {"abstention": GRADERS["abstention"], "boom": _Boom()}
    run = anyio.run(lambda: run_eval(cases, target, graders, concurrency=3))
    assert 2 <= target.most <= 3
    assert run.counts("abstention")["pass"] == 9
    boom = run.counts("boom")
    assert boom == {"pass": 0, "fail": 0, "absent": 9, "valid": 0} and run.pass_rate("boom") is None
    assert run.results[0].grades["boom"].reason.startswith("grader error: RuntimeError")
    with pytest.raises(ValueError):
        anyio.run(lambda: run_eval(cases, target, graders, concurrency=0))


def test_a_case_naming_graders_gets_only_those() -> None:
    cases = [case(id="only", graders=["abstention"], expect={"abstain": True})]
    run = anyio.run(lambda: run_eval(cases, _Target(), GRADERS))
    assert list(run.results[0].grades) == ["abstention"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_only_on_a_terminal() -> None:
    plain = io.StringIO()
    run = anyio.run(
        lambda: run_eval([case(id="a"), case(id="b")], _Target(), GRADERS, progress=Progress(2, plain))
    )
    assert len(run.results) == 2 and plain.getvalue() == ""
    tty = _Tty()
    anyio.run(lambda: run_eval([case(id="a"), case(id="b")], _Target(), GRADERS, progress=Progress(2, tty)))
    assert "\r" in tty.getvalue() and "2/2" in tty.getvalue() and tty.getvalue().endswith("\n")


def test_each_case_gets_fresh_stores_and_nothing_is_written_next_to_the_config(tmp_path: Path) -> None:
    before = sorted(p.name for p in EXAMPLES.iterdir())
    target = create_harness_eval_target(EXAMPLES / "recall-on.toml", workdir=tmp_path)
    # Same tenant, user and session: the second case must not see the first case's fact.
    asks = {"id": "asks", "probe": "What is my locker number?", "expect": {"abstain": True}}
    run = anyio.run(lambda: run_eval(_cases(FACT_CASE, asks), target, GRADERS, concurrency=1))
    assert run.results[0].grades["supported_answer"].status is GradeStatus.PASS
    second = run.results[1]
    assert second.trace is not None and second.trace.candidates == ()
    assert second.grades["abstention"].status is GradeStatus.PASS
    assert sorted(p.name for p in EXAMPLES.iterdir()) == before
    assert list(tmp_path.iterdir()) == []  # the per-case folders are removed


def test_a_runtime_passed_in_is_evaluated_and_stays_open() -> None:
    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=InMemoryRecallStore(),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        )
        target = create_harness_eval_target(runtime=runtime)
        doc = {
            "id": "doc",
            "setup": [{"document": "The on-call rota changes every Monday.", "id": "rota", "label": "rota"}],
            "probe": "When does the on-call rota change?",
            "expect": {"evidence": ["rota"], "answer": ["Monday"]},
        }
        run = await run_eval(_cases(FACT_CASE, doc), target, GRADERS, concurrency=2)
        for result in run.results:
            assert result.graded, result.failure
            for name in ("discovered_evidence", "read_evidence", "prompt_inclusion", "supported_answer"):
                assert result.grades[name].status is GradeStatus.PASS, (result.case.id, result.grades[name])
        assert target.info.recall and target.info.deterministic
        assert runtime.state.value == "open"
        await runtime.aclose()

    anyio.run(main)


def test_the_target_needs_exactly_one_source(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        create_harness_eval_target()
    with pytest.raises(InvalidArgumentError):
        create_harness_eval_target(tmp_path / "x.toml", runtime=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        create_harness_eval_target(runtime="not a runtime")  # type: ignore[arg-type]


class _AnswerMentions12(CompletionVerifier):
    """A verifier over the answer text only (enough to see the verdict reach the trace)."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(test_records=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        if "12" in candidate.claim:
            return VerificationResult(Verdict.PASS, reason="the answer names locker 12")
        return VerificationResult(Verdict.FAIL, reason="no locker number in the answer")


def test_a_verified_probe_carries_its_verdict_into_the_trace() -> None:
    async def main() -> None:
        runtime = create_harness_runtime(
            provider=ExtractiveProvider(),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            recall=InMemoryRecallStore(),
            verifier=_AnswerMentions12(),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        )
        verified = {**FACT_CASE, "id": "verified", "completion": True}
        unknown = {"id": "none", "probe": "Who won the chess tournament?", "completion": True}
        run = await run_eval(
            _cases(verified, unknown, FACT_CASE), create_harness_eval_target(runtime=runtime), GRADERS
        )
        passed, failed, plain = (r.trace for r in run.results)
        assert (
            passed is not None
            and passed.verdict == "pass"
            and passed.verification_reason == "the answer names locker 12"
        )
        assert passed.retained is not None and passed.retained["verification"]["verdict"] == "pass"
        assert failed is not None and failed.verdict == "fail" and failed.status == "not_accepted"
        assert plain is not None and plain.verdict is None
        await runtime.aclose()

    anyio.run(main)


def test_completion_must_be_a_boolean() -> None:
    with pytest.raises(EvalCaseError, match=r"\$\.completion: expected true or false, got string"):
        parse_cases(json.dumps({**FACT_CASE, "completion": "yes"}))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_eval_runs_under_asyncio_and_trio(backend: str, tmp_path: Path) -> None:
    target = create_harness_eval_target(EXAMPLES / "recall-on.toml", workdir=tmp_path)
    run = anyio.run(lambda: run_eval(_cases(FACT_CASE), target, GRADERS), backend=backend)
    assert run.results[0].grades["supported_answer"].status is GradeStatus.PASS


#: How long the hung grader below blocks when nothing cuts it off: far past every bound here.
HANG_S = 30.0


class _Stuck:
    """A plugin grader that blocks (in whatever thread calls it) until the test releases ``gate``."""

    name = "stuck"
    description = "hangs"
    evidence = False

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.called = threading.Event()

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        self.called.set()
        self.gate.wait(HANG_S)
        return Grade.passed("released")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What the hung grader waits on; released after the test so its abandoned thread ends."""
    event = threading.Event()
    yield event
    event.set()


def test_a_grader_that_hangs_is_abandoned_at_the_hook_timeout_and_graded_absent(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``grade`` used to be called on the event loop itself: a hung grader held the whole eval forever."""
    monkeypatch.setenv("AGENTIUM_HOOK_TIMEOUT", "0.5")
    stuck = _Stuck(gate)
    cases = [case(id=f"c{i}", expect={"abstain": True}) for i in range(3)]
    graders = {"abstention": GRADERS["abstention"], "stuck": stuck}

    async def go() -> EvalRun:
        with anyio.fail_after(20):  # the unbounded version blocks the loop for HANG_S, then fails below
            return await run_eval(cases, _Target(), graders, concurrency=3)

    started = time.monotonic()
    run = anyio.run(go)
    took = time.monotonic() - started
    assert stuck.called.is_set()
    assert took < HANG_S / 3  # the three cases' graders were cut off side by side, not one after another
    assert run.counts("abstention")["pass"] == 3  # the other grader's grades are kept
    assert run.counts("stuck") == {"pass": 0, "fail": 0, "absent": 3, "valid": 0}
    reason = run.results[0].grades["stuck"].reason
    assert reason.startswith("grader error: HookTimeoutError: grader 'stuck' did not return within 0.5s"), (
        reason
    )
    assert "AGENTIUM_HOOK_TIMEOUT sets this bound" in reason


def test_the_grader_bound_can_be_given_and_is_checked(gate: threading.Event) -> None:
    cases = [case(id="c0", expect={"abstain": True})]
    run = anyio.run(lambda: run_eval(cases, _Target(), {"stuck": _Stuck(gate)}, grader_timeout_s=0.3))
    reason = run.results[0].grades["stuck"].reason
    assert "grader 'stuck' did not return within 0.3s (grader_timeout_s sets this bound)" in reason
    for bad in (0, -1, float("nan"), "1"):
        with pytest.raises(InvalidArgumentError, match="grader_timeout_s"):
            anyio.run(lambda: run_eval(cases, _Target(), GRADERS, grader_timeout_s=bad))  # type: ignore[arg-type]  # noqa: B023


def test_agentium_eval_reports_a_hung_plugin_grader_and_exits_0(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the command line a hung grader is an absent grade per case; the eval runs, as with a raising one."""
    stuck = _Stuck(gate)

    @hookimpl
    def agentium_register_graders(register: Any) -> None:
        register(stuck)

    module = types.SimpleNamespace(agentium_register_graders=agentium_register_graders)
    install_only_plugin(
        monkeypatch, module, dist="agtest-stuck", value="agtest_stuck:main", hook_timeout_s=0.5
    )
    cases = write_cases(tmp_path / "cases.jsonl", [{**FACT_CASE, "graders": ["stuck", "supported_answer"]}])
    started = time.monotonic()
    code = main(["eval", str(RECALL_ON), str(cases), "--out", str(tmp_path / "out"), "--json"])
    assert time.monotonic() - started < HANG_S / 3
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    (graded,) = report["runs"][0]["cases"]
    assert graded["grades"]["supported_answer"]["status"] == "pass"
    assert graded["grades"]["stuck"]["status"] == "absent"
    assert "grader 'stuck' did not return within 0.5s" in graded["grades"]["stuck"]["reason"]
