"""Closing one session: settle its admitted run and its summary update, flush deferred evictions.

``resources.close_session`` lands here (docs/runtime.md, "Closing a session").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import attrs

from .._scope import SessionKey
from .commit import broadcast
from .maintenance import flush_session
from .results import CleanupReport, CleanupStatus, Diagnostic, Severity

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["close_session"]


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
        extra = await broadcast(runtime._hooks, "agentium_session_closed", key=key, report=report)
        if extra:
            report = attrs.evolve(report, diagnostics=report.diagnostics + tuple(extra))
    return report
