"""Closing one session: settle its admitted run and its summary update, flush deferred evictions.

``resources.close_session`` lands here (docs/runtime.md, "Closing a session").
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, overload

import anyio
import attrs

from .._errors import AgentiumError, MemoryDrainError, RuntimeCloseError
from .._observe import spans as observe
from .._observe.logs import log_diagnostics
from .._observe.turn import settings_of, traced_operation
from .._scope import SessionKey, VerifiedIdentity, require_identity
from .._text import error_text
from .hooks import broadcast
from .lifecycle import LifecycleState, close_owned
from .maintenance import flush_session
from .maintenance_state import MAINTENANCE, maintenance_errors
from .memory.holders import drain_owned, drain_scope
from .memory.manager import MemoryManager, announce_drain, work_tracker
from .memory.work import DrainResult
from .memory_fence import unfence_memory
from .owned_work import SummaryReport
from .parts import CloseAttempt
from .results import CleanupReport, CleanupStatus, Diagnostic, Severity
from .unexpected import WriteProgress, unexpected_error

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["HarnessResources", "ResourcesOf", "close_session", "drain_runtime", "shutdown_runtime"]

_lifecycle = logging.getLogger("agentium.engine.lifecycle")
_maintenance = logging.getLogger("agentium.engine.maintenance")


async def close_session(runtime: HarnessRuntime, key: SessionKey, progress: WriteProgress) -> CleanupReport:
    """Settle the session's admitted run (bounded), its background summary update, then flush it.

    Waits up to ``settle_timeout_s`` for an admitted operation; waits for or
    cancels the summary update and says which; retries any eviction an
    archive failure deferred; never closes borrowed clients. ``progress``
    follows the flush's save.
    """
    diagnostics: list[Diagnostic] = []
    settled = 0
    pending = runtime.parts.admission.active.get(key)
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
            unsettled_report = CleanupReport(CleanupStatus.INCOMPLETE, 0, 1, 0, 0, (), tuple(diagnostics))
            return _logged(runtime, unsettled_report)
        settled = 1
    flushed = remaining = unsettled = 0
    if key in runtime.parts.admission.active:
        # A new operation was admitted while we waited; leave the session to it.
        unsettled = 1
        diagnostics.append(
            Diagnostic("run_admitted", "another run was admitted; not flushed", Severity.ERROR)
        )
    else:
        async with runtime.parts.admission.admit(key, "close_session") as ticket:
            try:
                flushed, remaining = await flush_session(
                    ticket,
                    archive=runtime.archive,
                    store=runtime.session_store,
                    hooks=runtime.parts.hooks,
                    limits=runtime.limits.resident,
                    key=key,
                    diagnostics=diagnostics,
                    recall=runtime.recall,
                    hybrid=runtime.hybrid,
                    keep_receipts=runtime.summarizer is not None,
                    progress=progress,
                )
            except Exception as exc:
                # One no stage typed (an engine bug) is reported typed, saying whether the flush saved.
                typed = (
                    exc
                    if isinstance(exc, AgentiumError)
                    else unexpected_error(exc, progress, "close_session", MAINTENANCE)
                )
                diagnostics.append(Diagnostic("flush_failed", error_text(typed), Severity.ERROR))
                del typed  # its traceback holds this frame: no cycle through the local
    summary_status = await runtime.parts.work.settle(key, runtime.limits.settle_timeout_s)
    if summary_status is not None:
        # This report hands the outcome to the host: aclose does not raise it again.
        runtime.parts.work.last_report(key)
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
    if runtime.parts.hooks is not None:
        extra = await broadcast(
            runtime.parts.hooks,
            "agentium_session_closed",
            runtime.limits.close_timeout_s,
            key=key,
            report=report,
        )
        if extra:
            report = attrs.evolve(report, diagnostics=report.diagnostics + tuple(extra))
    return _logged(runtime, report)


def _logged(runtime: HarnessRuntime, report: CleanupReport) -> CleanupReport:
    """``report``, its diagnostics logged on their stages' loggers and its outcome on maintenance's."""
    settings = settings_of(runtime)
    fields = {"agentium_cleanup_status": report.status.value, "agentium_flushed": report.flushed_groups}
    log_diagnostics(report.diagnostics, fields, capture_content=settings.capture_content)
    level = logging.INFO if report.status is CleanupStatus.CLEAN else logging.WARNING
    _maintenance.log(level, "session closed: %s", report.status.value, extra=fields)
    return report


# Claiming a runtime's close attempt is check-and-set; aclose() may be called from several threads at once.
_CLAIM = threading.Lock()


async def shutdown_runtime(runtime: HarnessRuntime) -> None:
    """``HarnessRuntime.aclose``: settle or cancel operations, drain owned work, close owned adapters.

    One attempt at a time: a second ``aclose()`` while one runs waits for it
    and gets its outcome (it neither cuts the first one's settle short nor
    closes anything twice); if that attempt was itself cancelled, the waiter
    makes its own. Every failure is collected and raised together as
    :class:`RuntimeCloseError`, leaving the runtime ``closing`` so a later
    call retries what failed.
    """
    while True:
        with _CLAIM:
            attempt = runtime.parts.close_attempt
            if attempt is None:
                if runtime.parts.admission.state is LifecycleState.CLOSED:
                    return
                attempt = runtime.parts.close_attempt = CloseAttempt()
                break
        await attempt.done.wait()
        if attempt.finished:
            if attempt.error is not None:
                raise RuntimeCloseError(attempt.error.failures)
            return
    _lifecycle.info("runtime closing")
    # One span per attempt, under the runtime's telemetry: its drain, hooks and closes are children,
    # and what it left is an event on it (an incomplete close has no other span to go on).
    with observe.using(runtime.parts.telemetry, runtime), observe.internal_span(CLOSE_SPAN) as span:
        left: dict[str, int] = {}
        try:
            failures = await _shutdown_once(runtime, left)
            attempt.error = RuntimeCloseError(failures) if failures else None
            attempt.finished = True
        finally:
            runtime.parts.close_attempt = None
            attempt.done.set()
        if attempt.error is not None:
            # The failures' texts may quote an adapter's error: only counts here (the texts are on the error).
            count = len(attempt.error.failures)
            _lifecycle.warning(
                "runtime close incomplete: %d problem(s); it stays closing",
                count,
                extra={"agentium_close_failures": count},
            )
            span.event(INCOMPLETE_EVENT, {"agentium.close.failures": count, **left})
            raise attempt.error
    _lifecycle.info("runtime closed")


#: The span of one ``aclose()`` attempt.
CLOSE_SPAN = "agentium.runtime.close"
#: Its event when the attempt left problems: ``agentium.close.failures`` (how many) and, per kind, how many
#: operations did not stop, owned work items still running or failed, and closes that failed.
INCOMPLETE_EVENT = "agentium.runtime.close_incomplete"
#: Its event when closes its operations left running (a recall session's) had not ended by the
#: time the adapters closed: ``agentium.close.trailing`` (how many).
TRAILING_EVENT = "agentium.runtime.close_trailing"


async def _shutdown_once(runtime: HarnessRuntime, left: dict[str, int]) -> list[str]:
    """One shutdown attempt in three bounded phases; returns the failures (``left`` counts them by kind).

    1. Up to ``settle_timeout_s``: admitted operations and owned work (the
       background summary updates and the memory manager's work; of a manager
       another open runtime shares, only this runtime's: :mod:`.memory.holders`)
       settle, side by side.
    2. Up to ``close_timeout_s``: what is left is cancelled and given that long to stop.
    3. Its erasure fence is withdrawn from a memory manager it shares, and its summary
       updates' source untracked, now or once its left-over work ended (:func:`_leave_manager`). Then, up to
       ``close_timeout_s``: the ``drained`` hook, the memory manager's
       store and every owned adapter close, side by side (each bounded, a
       close blocked in a worker thread abandoned). The adapters close once
       the closes operations left to finish (``LateCalls.wait_trailing``: a
       recall session's, within its own 0.1 s and grace) ended, each waited for
       no longer than its own bound (0.3 s from its start) nor ``close_timeout_s``.

    So an attempt returns within about ``settle_timeout_s + 2 * close_timeout_s``
    (a retry skips the settle), plus that short wait (0.3 s at most) when an operation left a close
    running.
    """
    admission = runtime.parts.admission
    limits = runtime.limits
    first = admission.state is LifecycleState.OPEN
    admission.set_state(LifecycleState.CLOSING)
    settle = limits.settle_timeout_s if first else 0.0
    failures: list[str] = []
    drained: list[DrainResult] = []

    async def operations() -> None:
        if not await admission.wait_settled(settle):
            stuck = await admission.cancel_all("runtime closing", limits.close_timeout_s)
            failures.extend(
                f"{t.kind} on session {t.key.session if t.key else '?'!r} did not stop after cancellation"
                for t in stuck
            )

    async def owned_work() -> None:
        drainer = runtime.parts.drainer
        tracker = work_tracker(drainer) if isinstance(drainer, MemoryManager) else drainer
        only = drain_scope(drainer, runtime) if isinstance(drainer, MemoryManager) else None
        # Under the runtime's own telemetry: the drain's span and metrics go where its turns' go.
        with observe.using(runtime.parts.telemetry, runtime):
            drained.append(await tracker.drain(settle, limits.close_timeout_s, only))

    async with anyio.create_task_group() as tg:
        tg.start_soon(operations)
        tg.start_soon(owned_work)
    [result] = drained
    _count(left, "agentium.close.operations_running", len(failures))
    # Failed work is reported once; work that would not stop keeps the runtime closing.
    failures.extend(f"owned work {name} did not stop" for name in result.still_running)
    _count(left, "agentium.close.work_running", len(result.still_running))
    failures.extend(f"owned work {name} failed during shutdown" for name in result.failed if first)
    if first and result.dropped_failed:
        failures.append(f"{result.dropped_failed} more owned work items failed (not listed)")
    if first:
        _count(left, "agentium.close.work_failed", len(result.failed) + result.dropped_failed)
    before_closes = len(failures)
    if runtime.memory is not None:
        # Its store may close below: a manager another runtime shares stops reading it — once nothing
        # of this runtime runs on (its erasures included), which may be later (:func:`_leave_manager`).
        _leave_manager(runtime, runtime.memory)

    async def announce() -> None:
        if isinstance(runtime.parts.drainer, MemoryManager):
            await announce_drain(runtime.parts.drainer, result, limits.close_timeout_s)

    async def close_memory() -> None:
        if runtime.memory is not None and runtime.parts.owns_memory_manager:
            try:
                await runtime.memory.aclose(limits.close_timeout_s)
            except Exception as exc:
                failures.append(f"closing the memory manager failed: {error_text(exc)}")

    async def close_adapters() -> None:
        # What its operations left to finish (a recall session's close cut off by its caller's
        # deadline, bounded by its own 0.1 s and grace) ends first: it uses these adapters, and must
        # not outlive this close (nor its event loop, whose end would cut it short).
        trailing = await admission.late.wait_trailing(limits.close_timeout_s)
        if trailing:
            _lifecycle.warning("runtime closing: %d close(s) left by operations still running", trailing)
            observe.current_span_event(TRAILING_EVENT, {"agentium.close.trailing": trailing})
        still_open: list[object] = []
        for adapter, problem in await close_owned(runtime.parts.owned, limits.close_timeout_s):
            if problem is not None:
                failures.append(problem)
                still_open.append(adapter)
        runtime.parts.owned = still_open

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        tg.start_soon(close_memory)
        tg.start_soon(close_adapters)
    _count(left, "agentium.close.closes_failed", len(failures) - before_closes)
    if not failures:
        admission.set_state(LifecycleState.CLOSED)
    return failures


def _leave_manager(runtime: HarnessRuntime, manager: MemoryManager) -> None:
    """A closing runtime lets go of ``manager``: its erasure fence and its summary updates' source.

    Both now when nothing of the runtime runs on; else the fence stays while
    its left-over work (an operation or owned work that did not stop) could
    still write, and goes at the first fence read after it ended
    (:func:`.memory_fence.unfence_memory`), and the source stays until a
    drain has settled it idle (its reports taken: :meth:`WorkTracker.retire`).
    """
    admission, work, tracker = runtime.parts.admission, runtime.parts.work, work_tracker(manager)

    def busy() -> bool:
        return bool(admission.tickets()) or bool(work.running()) or tracker.busy(runtime)

    unfence_memory(manager, runtime, busy)
    tracker.retire(runtime)


def _count(left: dict[str, int], key: str, count: int) -> None:
    if count:
        left[key] = count


async def drain_runtime(runtime: HarnessRuntime, timeout_s: float) -> DrainResult:
    """``HarnessRuntime.drain``: one drain over its owned work; raises when anything did not complete.

    Of a memory manager another open runtime shares, only this runtime's work
    (:mod:`.memory.holders`); else all of it, the manager's own drain.
    """
    drainer = runtime.parts.drainer
    only = drain_scope(drainer, runtime) if isinstance(drainer, MemoryManager) else None
    # Under the runtime's own telemetry (a memory manager's own applies only where the runtime set none).
    with observe.using(runtime.parts.telemetry, runtime):
        if isinstance(drainer, MemoryManager) and only is not None:
            result = await drain_owned(drainer, only, timeout_s)
        else:
            result = await drainer.drain(timeout_s)  # the memory manager raises itself
    if not result.ok:
        raise MemoryDrainError(f"drain: {result.describe()}", result)
    return result


class HarnessResources:
    """Per-session resource management exposed as ``runtime.resources`` (R8)."""

    def __init__(self, runtime: HarnessRuntime) -> None:
        self._runtime = runtime

    async def close_session(self, identity: VerifiedIdentity, session_id: str) -> CleanupReport:
        """Settle admitted runs, flush deferred evictions and report what happened.

        Waits (bounded by ``settle_timeout_s``) for an operation admitted on the
        session, then retries any eviction an archive failure deferred, closes
        per-session resources the runtime owns, and never closes borrowed
        clients. Safe to call more than once. Every error it raises carries
        ``commit_state``: whether its flush saved (``not_committed`` for an
        argument or admission refusal).
        """
        runtime = self._runtime
        progress = WriteProgress()
        # A refused argument or admission says so too: nothing was flushed.
        with maintenance_errors("close_session", progress):
            key = SessionKey.of(require_identity(identity), session_id)
            runtime.parts.admission.check_open()
        # The root span of its settle and flush, under the runtime's telemetry; close_session logs the
        # report's diagnostics itself (with the cleanup's status), the span gets an event for each.
        operation = traced_operation(
            runtime, "close_session", key.tenant, key.user, key.session, name="agentium.close_session"
        )
        # An error outside the flush (a refused admission, an engine bug) says whether the flush saved.
        with operation, maintenance_errors("close_session", progress):
            report = await close_session(runtime, key, progress)
            operation.report(report.diagnostics, log=False)
        return report

    async def settle_summary(self, identity: VerifiedIdentity, session_id: str) -> SummaryReport | None:
        """Wait (bounded by ``settle_timeout_s``, then cancel) for the session's background summary update.

        Returns the report of its last update that ended, or ``None`` if none ran.
        A failure reported here is the host's: ``aclose`` does not raise it again.
        """
        key = SessionKey.of(require_identity(identity), session_id)
        await self._runtime.parts.work.settle(key, self._runtime.limits.settle_timeout_s)
        return self._runtime.parts.work.last_report(key)


class ResourcesOf:
    """``runtime.resources``: a :class:`HarnessResources` made on each access, not stored on the runtime.

    Stored, it would refer back to its runtime: the runtime and everything it
    holds (adapters, caches, connections' objects) would then outlive the
    host's last reference until the cycle collector ran. Made on access, it
    holds the runtime only as long as its caller holds it.
    """

    @overload
    def __get__(self, runtime: None, owner: type[object]) -> ResourcesOf: ...

    @overload
    def __get__(self, runtime: HarnessRuntime, owner: type[object]) -> HarnessResources: ...

    def __get__(self, runtime: HarnessRuntime | None, owner: type[object]) -> ResourcesOf | HarnessResources:
        return self if runtime is None else HarnessResources(runtime)
