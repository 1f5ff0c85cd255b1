"""``create_harness_eval_target()``: evaluate the actual runtime, case by case (R32).

Each case runs through :meth:`HarnessRuntime.run` exactly as a host would:
its setup turns (facts stated, evicted, corrected) and host documents, then
the probe question, on a fresh session store. What graders need is captured
from the runtime's own work: the runtime is built over thin recording
wrappers of its provider and recall store, which pass every call through
unchanged and note, during the probe turn only, the candidates and excerpts
the store returned to the engine and every model request the engine sent.
The answer, statuses, verdict and retained record come from the
:class:`~agentium_harness.RunResult`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._codec import unstructure
from .._config import ResolvedConfig, load_config
from .._config.runtime import build_runtime
from .._engine.document_fence import index_document_fenced
from .._engine.erasure_fence import ErasureFence
from .._engine.lifecycle import Ticket
from .._engine.results import RunResult
from .._engine.runtime import HarnessRuntime
from .._engine.tools import ToolRegistry
from .._errors import InvalidArgumentError
from .._plugins.registry import PluginRegistry
from .._plugins.spec import path_option_names
from .._ports import OpContext
from .._ports.recall import SourceOwner, group_source_id
from .._scope import RecallScope, Scope, SessionKey, VerifiedIdentity
from ..adapters.memory import InMemorySessionStore
from ..eval._cases import EvalCase, SetupStep
from ..eval._runner import TargetInfo
from ..eval._trace import CaseTrace, LabelInfo, StepOutcome
from ._eval_recording import Recorder, candidates_seen, excerpts_seen, recording_runtime, requests_seen

__all__ = ["HarnessEvalTarget", "create_harness_eval_target"]

#: How the eval target's identities say they were verified.
VERIFIED_BY = "agentium-eval"
#: Sections whose path options are storage, moved into each case's own folder.
_STORAGE_SECTIONS = ("archive", "session_store", "recall", "summarizer", "memory")


def _rebased(resolved: ResolvedConfig, folder: Path, recall_budget: Mapping[str, Any]) -> ResolvedConfig:
    """``resolved`` with every storage path option moved into ``folder`` (shared files stay shared)."""
    moved: dict[str, str] = {}
    changes: dict[str, Any] = {}
    for section in _STORAGE_SECTIONS:
        component = getattr(resolved, section)
        if component is None:
            continue
        updates: dict[str, Any] = {}
        for name in path_option_names(type(component.options)):
            value = getattr(component.options, name)
            if isinstance(value, str | os.PathLike) and os.fspath(value):
                original = os.path.abspath(os.fspath(value))
                if original not in moved:
                    moved[original] = str(folder / f"{len(moved)}-{os.path.basename(original)}")
                updates[name] = moved[original] if isinstance(value, str) else Path(moved[original])
        if updates:
            changes[section] = attrs.evolve(component, options=attrs.evolve(component.options, **updates))
    config = resolved.config
    if recall_budget and config.recall is not None:
        budget = attrs.evolve(config.recall.budget, **recall_budget)
        config = attrs.evolve(config, recall=attrs.evolve(config.recall, budget=budget))
    return attrs.evolve(resolved, config=config, **changes)


Rename = Callable[[str, str | None, str | None], tuple[str, str | None, str | None]]


def _same(tenant: str, user: str | None, session: str | None) -> tuple[str, str | None, str | None]:
    return tenant, user, session


async def _drive(runtime: HarnessRuntime, case: EvalCase, recorder: Recorder, rename: Rename) -> CaseTrace:
    recall_scope = (
        RecallScope(case.project, case.repository)
        if case.project is not None or case.repository is not None
        else None
    )
    labels: dict[str, LabelInfo] = {}
    outcomes: list[StepOutcome] = []
    store = runtime.recall
    timeout = runtime.limits.op_timeout_s
    for index, step in enumerate(case.setup):
        if step.kind == "say":
            tenant, user, session = rename(
                step.tenant or case.tenant, step.user or case.user, step.session or case.session
            )
            assert user is not None and session is not None
            result = await runtime.run(
                VerifiedIdentity(tenant, user, VERIFIED_BY), session, step.text, recall_scope=recall_scope
            )
            outcomes.append(StepOutcome(index, "say", result.status.value))
            if step.label is not None:
                key = SessionKey(tenant, user, session)
                committed = result.committed and result.group_seq is not None
                labels[step.label] = LabelInfo(
                    group_source_id(key, result.group_seq)
                    if committed and result.group_seq is not None
                    else None,
                    SourceOwner.of_session(key),
                    "" if committed else f"the turn was not committed (run {result.status.value})",
                )
            continue
        owner = _owner(step, rename)
        if store is None or not getattr(type(store).capabilities, "document_indexing", False):
            note = "the runtime has no recall store that indexes documents; the step was skipped"
            outcomes.append(StepOutcome(index, step.kind, "skipped", note))
            if step.label is not None:
                labels[step.label] = LabelInfo(None, owner, note)
            continue
        assert step.doc_id is not None
        if step.kind == "document":
            # Fenced as ``agentium recall add`` is: an erasure of the owner under way refuses it.
            ref, notes = await index_document_fenced(
                ErasureFence(runtime.session_store, timeout),
                Ticket(None, "eval document", timeout),
                store,
                owner,
                step.doc_id,
                step.text,
                title=step.title,
            )
            outcomes.append(StepOutcome(index, "document", "indexed", "; ".join(notes)))
            if step.label is not None:
                labels[step.label] = LabelInfo(ref.source_id, owner)
        else:
            existed = await store.delete_document(owner, step.doc_id, OpContext.with_timeout(timeout))
            outcomes.append(StepOutcome(index, "forget_document", "deleted" if existed else "not found"))
    tenant, user, session = rename(case.tenant, case.user, case.session)
    assert user is not None and session is not None
    identity = VerifiedIdentity(tenant, user, VERIFIED_BY)
    if runtime.summarizer is not None:
        await runtime.resources.settle_summary(identity, session)
    recorder.active = True
    try:
        result = await runtime.run(
            identity,
            session,
            case.probe,
            recall_scope=recall_scope,
            completion=True if case.completion else None,
        )
    finally:
        recorder.active = False
    return _trace(
        case, result, Scope.of(identity, session, recall_scope), labels, outcomes, recorder, store is not None
    )


def _owner(step: SetupStep, rename: Rename) -> SourceOwner:
    assert step.owner is not None
    spec = step.owner
    tenant, _, session = rename(spec.tenant, spec.user, spec.session)
    return SourceOwner(tenant, spec.user, session, spec.project, spec.repository)


def _trace(
    case: EvalCase,
    result: RunResult,
    scope: Scope,
    labels: dict[str, LabelInfo],
    outcomes: list[StepOutcome],
    recorder: Recorder,
    has_recall: bool,
) -> CaseTrace:
    recall = result.recall
    verification = getattr(result, "verification", None)
    verdict = getattr(verification, "verdict", None)
    return CaseTrace(
        case_id=case.id,
        scope=scope,
        answer=result.output,
        status=result.status.value,
        committed=result.committed,
        has_recall=has_recall,
        labels=labels,
        setup=tuple(outcomes),
        recall_status=recall.status.value if recall is not None else None,
        recall_decision=recall.decision.value if recall is not None else None,
        recall_included=tuple(r.source_id for r in recall.included) if recall is not None else (),
        recall_omitted=tuple(recall.omitted) if recall is not None else (),
        candidates=candidates_seen(recorder.candidates),
        excerpts=excerpts_seen(recorder.excerpts),
        requests=requests_seen(recorder.requests, case.probe),
        verdict=str(getattr(verdict, "value", verdict)) if verdict is not None else None,
        verification_reason=_verification_reason(verification),
        retained=unstructure(result.retained) if result.committed else None,
        diagnostics=tuple(d.code for d in result.diagnostics),
        dropped_candidates=_dropped(result, recorder.candidates, "discover "),
        dropped_excerpts=_dropped(result, recorder.excerpts, "read "),
    )


def _dropped(result: RunResult, items: Sequence[object], stage: str) -> tuple[str, ...]:
    """Source ids of ``items`` the engine refused at ``stage`` (its ``recall_contract_violation`` notes)."""
    notes = [
        d.message
        for d in result.diagnostics
        if d.code == "recall_contract_violation" and d.message.startswith(stage)
    ]
    seen = dict.fromkeys(getattr(getattr(item, "ref", None), "source_id", None) for item in items)
    return tuple(s for s in seen if isinstance(s, str) and any(repr(s) in note for note in notes))


def _verification_reason(verification: object) -> str | None:
    """The reason of the last verification attempt, when the run was verified."""
    attempts = getattr(verification, "attempts", ())
    reason = getattr(attempts[-1], "reason", None) if attempts else getattr(verification, "reason", None)
    return str(reason) if reason is not None else None


def _check_target_arguments(
    resolved: object, runtime: object, tools: object, workdir: object, label: object
) -> None:
    """Refuse a bad argument with InvalidArgumentError (it raised AssertionError or AttributeError)."""
    if (resolved is None) == (runtime is None):
        raise InvalidArgumentError("give exactly one of resolved (a loaded config) and runtime")
    for value, kind, what in (
        (resolved, ResolvedConfig, "resolved"),
        (runtime, HarnessRuntime, "runtime"),
        (tools, ToolRegistry, "tools"),
        (label, str, "label"),
        (workdir, str | os.PathLike, "workdir"),
    ):
        if value is not None and not isinstance(value, kind):
            raise InvalidArgumentError(
                f"{what} must be a {getattr(kind, '__name__', 'str or a path-like object')} "
                f"or None, got {type(value).__name__}"
            )


class HarnessEvalTarget:
    """Runs eval cases on a real runtime; build it with :func:`create_harness_eval_target`.

    With a config file, every case gets a runtime of its own, built from the
    file with its storage paths moved into a fresh temporary folder: a fresh
    session store, archive and recall index per case. With a runtime passed
    in, every case runs on it with a fresh in-memory session store, and its
    tenants and sessions get the case id as a suffix (``acme@case-1``), since
    the archive and recall store are shared between cases.
    """

    def __init__(
        self,
        *,
        resolved: ResolvedConfig | None = None,
        runtime: HarnessRuntime | None = None,
        tools: ToolRegistry | None = None,
        workdir: str | os.PathLike[str] | None = None,
        label: str | None = None,
    ) -> None:
        _check_target_arguments(resolved, runtime, tools, workdir, label)
        self._resolved = resolved
        self._runtime = runtime
        self._tools = tools
        self._workdir = None if workdir is None else Path(workdir)
        if resolved is not None:
            provider = resolved.provider
            caps = getattr(provider.spec.adapter_class, "capabilities", None)
            mode = getattr(provider.options, "mode", None) if provider.plugin == "recorded" else None
            self._info = TargetInfo(
                label=label or (Path(resolved.source).stem if resolved.source else "config"),
                provider=provider.plugin,
                deterministic=bool(getattr(caps, "deterministic", False)),
                recall=resolved.recall is not None,
                config=resolved.source,
                recorded_mode=str(mode) if mode is not None else None,
            )
        else:
            assert runtime is not None
            caps = getattr(type(runtime.provider), "capabilities", None)
            self._info = TargetInfo(
                label=label or "runtime",
                provider=type(runtime.provider).__name__,
                deterministic=bool(getattr(caps, "deterministic", False)),
                recall=runtime.recall is not None,
                recorded_mode=getattr(runtime.provider, "mode", None)
                if hasattr(runtime.provider, "misses")
                else None,
            )

    @property
    def info(self) -> TargetInfo:
        """What the target runs on (label, provider, recall), for reports."""
        return self._info

    async def run_case(self, case: EvalCase) -> CaseTrace:
        """Run ``case``'s setup steps and probe through ``run()`` and return what the runtime did.

        Raises whatever the runtime raised (a provider failure, a replay miss …):
        the runner counts it as an infrastructure failure.
        """
        recorder = Recorder()
        if self._resolved is None:
            assert self._runtime is not None
            base = self._runtime
            runtime = recording_runtime(
                base,
                recorder,
                hooks=base.parts.hooks,
                session_store=InMemorySessionStore(),
                recall_budget=case.recall_budget,
            )

            def rename(
                tenant: str, user: str | None, session: str | None
            ) -> tuple[str, str | None, str | None]:
                return f"{tenant}@{case.id}", user, None if session is None else f"{session}@{case.id}"

            try:
                return await _drive(runtime, case, recorder, rename)
            finally:
                await runtime.aclose()
        folder = Path(
            await anyio.to_thread.run_sync(
                lambda: tempfile.mkdtemp(prefix="agentium-eval-", dir=self._workdir)
            )
        )
        try:
            built = build_runtime(_rebased(self._resolved, folder, case.recall_budget), tools=self._tools)
            try:
                runtime = recording_runtime(built, recorder, hooks=self._resolved.registry)
                try:
                    return await _drive(runtime, case, recorder, _same)
                finally:
                    await runtime.aclose()
            finally:
                await built.aclose()
        finally:
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))


def create_harness_eval_target(
    config: str | os.PathLike[str] | None = None,
    *,
    runtime: HarnessRuntime | None = None,
    registry: PluginRegistry | None = None,
    environ: Mapping[str, str] | None = None,
    tools: ToolRegistry | None = None,
    workdir: str | os.PathLike[str] | None = None,
    label: str | None = None,
) -> HarnessEvalTarget:
    """An eval target over the actual runtime: from a config file, or a runtime passed in (R32).

    Give exactly one of ``config`` (validated now: a bad file raises
    :class:`~agentium_harness.ConfigError` before any case runs) and
    ``runtime`` (borrowed; never closed). ``workdir`` is where the per-case
    temporary folders go (default: the system's temporary directory).
    """
    if (config is None) == (runtime is None):
        raise InvalidArgumentError("give exactly one of config (a config file path) and runtime")
    if runtime is not None:
        if not isinstance(runtime, HarnessRuntime):
            raise InvalidArgumentError(f"runtime must be a HarnessRuntime, got {type(runtime).__name__}")
        return HarnessEvalTarget(runtime=runtime, tools=tools, workdir=workdir, label=label)
    assert config is not None
    resolved = load_config(config, registry, environ=environ)
    return HarnessEvalTarget(resolved=resolved, tools=tools, workdir=workdir, label=label)
