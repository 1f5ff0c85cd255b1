"""Closing one session: settle its admitted run and its summary update, flush deferred evictions.

``resources.close_session`` lands here (docs/runtime.md, "Closing a session").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import attrs

from .._errors import MemoryDrainError, RuntimeCloseError
from .._memory.work import DrainResult
from .._scope import SessionKey, VerifiedIdentity, require_identity
from .hooks import broadcast
from .lifecycle import LifecycleState, close_owned
from .maintenance import flush_session
from .owned_work import SummaryReport
from .results import CleanupReport, CleanupStatus, Diagnostic, Severity

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["HarnessResources", "close_session", "shutdown_runtime"]


async def close_session(runtime: HarnessRuntime, key: SessionKey) -> CleanupReport:
    """Settle the session's admitted run (bounded), its background summary update, then flush it.

    Waits up to ``settle_timeout_s`` for an admitted operation; waits for or
    cancels the summary update and says which; retries any eviction an
    archive failure deferred; never closes borrowed clients.
    """
    diagnostics: list[Diagnostic] = []
    settled = 0
    pending = runtime._admission.active.get(key)
    if pending is not None:
        with anyio.move_on_after(runtime.limits.settle_timeout_s):
            await pending.done.wait()
        if not pending.done.is_set():
            diagnostics.append(
                Diagnostic(
                    "run_unsettled",
                    f"an admitted {pending.kind} did not settle within "
                    f"{runtime.limits.settle_timeout_s}s; nothing was flushed",
                    Severity.ERROR,
                )
            )
            return CleanupReport(CleanupStatus.INCOMPLETE, 0, 1, 0, 0, (), tuple(diagnostics))
        settled = 1
    flushed = remaining = unsettled = 0
    if key in runtime._admission.active:
        # A new operation was admitted while we waited; leave the session to it.
        unsettled = 1
        diagnostics.append(
            Diagnostic("run_admitted", "another run was admitted; not flushed", Severity.ERROR)
        )
    else:
        async with runtime._admission.admit(key, "close_session") as ticket:
            try:
                flushed, remaining = await flush_session(
                    ticket,
                    archive=runtime.archive,
                    store=runtime.session_store,
                    hooks=runtime._hooks,
                    limits=runtime.limits.resident,
                    key=key,
                    diagnostics=diagnostics,
                    recall=runtime.recall,
                    keep_receipts=runtime.summarizer is not None,
                )
            except Exception as exc:
                diagnostics.append(Diagnostic("flush_failed", f"{type(exc).__name__}: {exc}", Severity.ERROR))
    summary_status = await runtime._work.settle(key, runtime.limits.settle_timeout_s)
    if summary_status is not None:
        diagnostics.append(
            Diagnostic(f"summary_update_{summary_status.value}", "the background summary update ended")
        )
    failed = any(d.severity is Severity.ERROR for d in diagnostics) or any(
        d.code in ("eviction_deferred", "archive_contract_violation") for d in diagnostics
    )
    report = CleanupReport(
        status=CleanupStatus.INCOMPLETE if failed else CleanupStatus.CLEAN,
        settled_runs=settled,
        unsettled_runs=unsettled,
        flushed_groups=flushed,
        remaining_resident=remaining,
        closed_resources=(),
        diagnostics=tuple(diagnostics),
    )
    if runtime._hooks is not None:
        extra = await broadcast(
            runtime._hooks, "agentium_session_closed", runtime.limits.close_timeout_s, key=key, report=report
        )
        if extra:
            report = attrs.evolve(report, diagnostics=report.diagnostics + tuple(extra))
    return report


async def shutdown_runtime(runtime: HarnessRuntime) -> None:
    """``HarnessRuntime.aclose``: settle or cancel operations, drain owned work, close owned adapters.

    Every step is bounded (see the method's docstring); every failure is
    collected and raised together as :class:`RuntimeCloseError`, leaving the
    runtime ``closing`` so a second call retries what failed.
    """
    admission = runtime._admission
    if admission.state is LifecycleState.CLOSED:
        return
    first = admission.state is LifecycleState.OPEN
    admission.state = LifecycleState.CLOSING
    failures: list[str] = []
    settled = await admission.wait_settled(runtime.limits.settle_timeout_s if first else 0.0)
    if not settled:
        stuck = await admission.cancel_all("runtime closing", runtime.limits.close_timeout_s)
        failures.extend(
            f"{t.kind} on session {t.key.session if t.key else '?'!r} did not stop after cancellation"
            for t in stuck
        )
    # One drain covers all owned work: the memory manager's and the background summary
    # updates (tracked in it through OwnedWorkSource), each waited for, then cancelled.
    try:
        await runtime._drainer.drain(runtime.limits.settle_timeout_s if first else 0.0)
    except MemoryDrainError as exc:
        drained = exc.result
        if isinstance(drained, DrainResult):
            # Failed work is reported once; work that would not stop keeps the runtime closing.
            failures.extend(f"owned work {name} did not stop" for name in drained.still_running)
            failures.extend(f"owned work {name} failed during shutdown" for name in drained.failed if first)
    if runtime.memory is not None and runtime._owns_memory_manager:
        try:
            await runtime.memory.aclose(runtime.limits.close_timeout_s)
        except Exception as exc:
            failures.append(f"closing the memory manager failed: {type(exc).__name__}: {exc}")
    still_open: list[object] = []
    for adapter, problem in await close_owned(runtime._owned, runtime.limits.close_timeout_s):
        if problem is not None:
            failures.append(problem)
            still_open.append(adapter)
    runtime._owned = still_open
    if failures:
        raise RuntimeCloseError(failures)
    admission.state = LifecycleState.CLOSED


class HarnessResources:
    """Per-session resource management exposed as ``runtime.resources`` (R8)."""

    def __init__(self, runtime: HarnessRuntime) -> None:
        self._runtime = runtime

    async def close_session(self, identity: VerifiedIdentity, session_id: str) -> CleanupReport:
        """Settle admitted runs, flush deferred evictions and report what happened.

        Waits (bounded by ``settle_timeout_s``) for an operation admitted on the
        session, then retries any eviction an archive failure deferred, closes
        per-session resources the runtime owns, and never closes borrowed
        clients. Safe to call more than once.
        """
        return await self._runtime._close_session(identity, session_id)

    async def settle_summary(self, identity: VerifiedIdentity, session_id: str) -> SummaryReport | None:
        """Wait (bounded by ``settle_timeout_s``, then cancel) for the session's background summary update.

        Returns the report of its last update that ended, or ``None`` if none ran.
        """
        key = SessionKey.of(require_identity(identity), session_id)
        await self._runtime._work.settle(key, self._runtime.limits.settle_timeout_s)
        return self._runtime._work.last_report(key)
