"""The eval runner: cases run concurrently within a bound, graded separately, never stopped by one failure.

A case whose target raises (the provider failed, a replay missed, a store
was down) is an *infrastructure failure*: it is recorded with its error and
counted apart, and it receives no grades, so it can neither pass nor fail a
grader (R34). Every other case is graded by every grader it names.

A grader is plugin code called synchronously, so it is bounded as every other
call into plugin code is (:func:`~agentium_harness._plugins.deadline.call_with_deadline`):
it runs in a daemon thread, off the event loop, and one that has not returned
by the grader bound is abandoned there and graded ``absent``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TextIO

import anyio
import anyio.to_thread
import attrs

from .._observe.spans import unattributed
from .._plugins.deadline import ENV_HOOK_TIMEOUT, call_with_deadline, check_timeout, process_hook_timeout
from ._cases import EvalCase
from ._graders import Grade, Grader, GradeStatus
from ._trace import CaseTrace

__all__ = [
    "CONTRACTS_STATEMENT",
    "CaseResult",
    "EvalRun",
    "EvalTarget",
    "InfraFailure",
    "Progress",
    "TargetInfo",
    "installed_graders",
    "run_eval",
]

#: What every report of a deterministic (scripted, extractive or recorded) run states (R35).
CONTRACTS_STATEMENT = (
    "This run used a scripted, extractive or recorded provider ({provider}); it establishes that the "
    "runtime keeps its contracts (evidence discovered, read, included and labeled, scope, abstention) "
    "and does not prove live-model quality."
)


@attrs.frozen(slots=True)
class TargetInfo:
    """What a target runs on, for reports: its label, config, provider and whether recall is on."""

    label: str
    provider: str
    deterministic: bool
    recall: bool
    config: str | None = None
    recorded_mode: str | None = None

    @property
    def statement(self) -> str | None:
        """The contracts-not-quality statement for a deterministic or recorded provider, else ``None``."""
        if self.deterministic or self.recorded_mode is not None:
            mode = f", mode {self.recorded_mode}" if self.recorded_mode else ""
            return CONTRACTS_STATEMENT.format(provider=f"{self.provider}{mode}")
        return None


class EvalTarget(Protocol):
    """What the runner needs: a description and one traced case at a time (``create_harness_eval_target``)."""

    @property
    def info(self) -> TargetInfo:
        """The target's description."""
        ...

    async def run_case(self, case: EvalCase) -> CaseTrace:
        """Run ``case``'s setup and probe; raise when the infrastructure failed."""
        ...


@attrs.frozen(slots=True)
class InfraFailure:
    """Why a case could not be graded: the error type (with its causes) and message."""

    error: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> InfraFailure:
        """Name the error and the chain of causes behind it (a provider error caused by a replay miss …)."""
        names = [type(exc).__name__]
        cause = exc.__cause__ or exc.__context__
        while cause is not None and len(names) < 5:
            names.append(type(cause).__name__)
            cause = cause.__cause__ or cause.__context__
        return cls(" <- ".join(names), str(exc))


@attrs.frozen(slots=True)
class CaseResult:
    """One case's result: its trace and grades, or the infrastructure failure that stopped it."""

    case: EvalCase
    trace: CaseTrace | None
    grades: Mapping[str, Grade]
    failure: InfraFailure | None = None

    @property
    def graded(self) -> bool:
        """True when the case ran and was graded."""
        return self.failure is None


@attrs.frozen(slots=True)
class EvalRun:
    """A whole run over one target: every case result, in case-file order, and the graders used."""

    info: TargetInfo
    results: tuple[CaseResult, ...]
    graders: tuple[str, ...]
    evidence_graders: tuple[str, ...]
    cases_file: str
    started_at: float
    finished_at: float

    def counts(self, grader: str) -> dict[str, int]:
        """``pass``, ``fail``, ``absent`` counts of ``grader`` over graded cases; ``valid`` = pass + fail."""
        out = {s.value: 0 for s in GradeStatus}
        for r in self.results:
            grade = r.grades.get(grader)
            if grade is not None:
                out[grade.status.value] += 1
        out["valid"] = out["pass"] + out["fail"]
        return out

    def pass_rate(self, grader: str) -> float | None:
        """Passes over valid grades (``None`` when there is no valid grade; absent never counts)."""
        counts = self.counts(grader)
        return counts["pass"] / counts["valid"] if counts["valid"] else None

    @property
    def infrastructure_failures(self) -> tuple[CaseResult, ...]:
        """The cases that could not be graded."""
        return tuple(r for r in self.results if r.failure is not None)


class Progress:
    """A one-line progress bar on ``stream`` (stderr), drawn only when it is a terminal."""

    def __init__(self, total: int, stream: TextIO | None = None, *, label: str = "eval") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.label = label
        self.done = 0
        self.failed = 0
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty is not None and isatty())

    def step(self, failed: bool) -> None:
        """Count one finished case and redraw."""
        self.done += 1
        self.failed += int(failed)
        if self.enabled:
            width = 30
            filled = int(width * self.done / max(1, self.total))
            bar = "#" * filled + "." * (width - filled)
            infra = f", {self.failed} infra" if self.failed else ""
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}{infra}")
            self.stream.flush()

    def end(self) -> None:
        """Finish the line."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def installed_graders(registry: Any = None) -> dict[str, Grader]:
    """The graders the plugin registry holds, by name (built-ins first); loads the registry if not given."""
    if registry is None:
        from .._plugins.registry import PluginRegistry

        registry = PluginRegistry.load()
    return {name: registry.grader(name) for name in registry.grader_names()}


async def _grade(
    name: str, grader: Grader, case: EvalCase, trace: CaseTrace, timeout_s: float, bound: str
) -> Grade:
    # In a daemon thread, waited for up to ``timeout_s`` from a worker thread so the event loop (and
    # the other cases) go on meanwhile; the worker returns at the deadline at the latest, so an
    # eval cancelled meanwhile may leave it without waiting. A grader that hangs used to block the
    # event loop itself, and the whole eval with it.
    call = partial(
        call_with_deadline, partial(grader.grade, case, trace), timeout_s, f"grader {name!r}", bound
    )
    try:
        # Grading is no runtime's operation, also when the host runs the eval inside a runtime's block.
        with unattributed():
            grade = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except Exception as exc:  # a grader's own bug or hang (HookTimeoutError): recorded, never a pass
        return Grade.absent(f"grader error: {type(exc).__name__}: {exc}")
    if not isinstance(grade, Grade):
        return Grade.absent(f"grader error: returned {type(grade).__name__}, not a Grade")
    return grade


async def run_eval(
    cases: Sequence[EvalCase],
    target: EvalTarget,
    graders: Mapping[str, Grader],
    *,
    concurrency: int = 4,
    progress: Progress | None = None,
    cases_file: str = "",
    grader_timeout_s: float | None = None,
) -> EvalRun:
    """Run every case on ``target`` (at most ``concurrency`` at once) and grade each.

    A case that raises becomes an infrastructure failure and the others go
    on; a grader that raises yields ``absent`` with the error as its reason.
    Each ``grade`` call may take ``grader_timeout_s`` seconds (default: the
    bound on calls into plugin code, ``AGENTIUM_HOOK_TIMEOUT``, 30 s unless
    set); one that has not returned by then is abandoned in its daemon thread
    and yields ``absent`` with ``grader error: HookTimeoutError: grader '<name>'
    did not return within ...``. Cancellation still stops the run.

    :raises InvalidArgumentError: ``grader_timeout_s`` is not a number of
        seconds in (0, 1 day], or ``AGENTIUM_HOOK_TIMEOUT`` is set to one that is not.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if grader_timeout_s is None:
        grade_s, bound = process_hook_timeout(), ENV_HOOK_TIMEOUT
    else:
        grade_s, bound = check_timeout(grader_timeout_s, "grader_timeout_s"), "grader_timeout_s"
    names = tuple(graders)
    results: list[CaseResult | None] = [None] * len(cases)
    limiter = anyio.CapacityLimiter(concurrency)
    started = time.time()

    async def one(index: int, case: EvalCase) -> None:
        async with limiter:
            wanted = [n for n in names if case.graders is None or n in case.graders]
            try:
                trace = await target.run_case(case)
            except Exception as exc:  # any failure of one case is that case's; the others go on
                results[index] = CaseResult(case, None, {}, InfraFailure.of(exc))
            else:
                grades = {n: await _grade(n, graders[n], case, trace, grade_s, bound) for n in wanted}
                results[index] = CaseResult(case, trace, grades)
        if progress is not None:
            found = results[index]
            progress.step(failed=found is not None and found.failure is not None)

    async with anyio.create_task_group() as tg:
        for index, case in enumerate(cases):
            tg.start_soon(one, index, case)
    if progress is not None:
        progress.end()
    done = tuple(r for r in results if r is not None)
    return EvalRun(
        info=target.info,
        results=done,
        graders=names,
        evidence_graders=tuple(n for n in names if getattr(graders[n], "evidence", False)),
        cases_file=cases_file,
        started_at=started,
        finished_at=time.time(),
    )
