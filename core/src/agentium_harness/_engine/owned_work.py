"""Owned background work of a runtime: summary updates that run after a turn has returned.

A job runs as a task of the event loop itself (``asyncio`` task or ``trio``
system task), not of the caller's task group, so the turn that started it
returns at once. Each job has its own cancel scope and ticket (so every
adapter call in it still runs under its deadline) and at most one job runs
per session. The runtime waits for a session's job before the next run on
that session loads its snapshot, so background work never makes a run's
commit conflict; ``close_session`` and ``aclose`` wait for it or cancel it
and say which.

A job runs on the loop of the run that started it, but may be waited for and
cancelled from any loop and thread (the runtime is shared by threads that
each run their own loop). If its loop ends first (a host calling
``anyio.run`` per request), the job is cancelled with it and reported as
such: nothing committed is lost, and the frontier catches up in a later update.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from .._ports.summary import SummaryState
from .._scope import SessionKey
from .._text import error_text
from .bounded import spawn
from .lifecycle import LateCalls, Ticket
from .loops import LoopHandle, ThreadSafeEvent
from .results import Diagnostic, Severity

__all__ = ["MAX_KEPT_REPORTS", "OwnedWork", "SummaryReport", "WorkStatus"]

#: Most sessions whose last report (and, apart, whose unreported failure) is kept between drains.
#: A long-lived host serving many sessions that never drains would otherwise keep one of each per
#: session forever; past this, the oldest is dropped, and a dropped failure is counted so a drain
#: still says that it happened. Read at call time.
MAX_KEPT_REPORTS = 1000


class WorkStatus(enum.StrEnum):
    """How a background summary update ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@attrs.frozen(slots=True)
class SummaryReport:
    """The outcome of the last background summary update of a session."""

    status: WorkStatus
    state: SummaryState | None
    diagnostics: tuple[Diagnostic, ...] = ()


#: A job's work: its state and diagnostics, which it has already said (logged, an event, counted) as it
#: ended (``summary.summarize_after_commit`` in background mode), so the run that carries them does not.
Work = Callable[[Ticket], Awaitable[tuple[SummaryState | None, list[Diagnostic]]]]


def _cancelled(message: str) -> SummaryReport:
    note = Diagnostic("summary_cancelled", message, Severity.WARNING)
    return SummaryReport(WorkStatus.CANCELLED, None, (note,))


class _Job:
    __slots__ = ("done", "loop", "report", "said", "scope", "task", "ticket")

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket
        self.loop = LoopHandle.current()
        self.done = ThreadSafeEvent()
        self.scope = anyio.CancelScope()
        self.report: SummaryReport | None = None
        #: How many of the report's first diagnostics the work itself said as it ended.
        self.said = 0
        self.task: Any = None  # the asyncio task, kept referenced so it is not collected

    def cancel(self, reason: str) -> None:
        """Cancel from any thread; the scope is cancelled on the job's own loop (before it starts, too)."""
        self.ticket.cancel(reason)
        self.loop.run_soon(self.scope.cancel)


class OwnedWork:
    """The runtime's background jobs, one per session at most."""

    def __init__(self, op_timeout_s: float, late: LateCalls | None = None) -> None:
        self._op_timeout_s = op_timeout_s
        # Calls a job abandons are noted here, with the admitted operations' (erasure waits for them).
        self._late = late
        # Jobs start, end and are drained on several loops' threads: every change of the maps below
        # and every look at them that iterates happens under this lock.
        self._lock = threading.Lock()
        self._jobs: dict[SessionKey, _Job] = {}
        # The last report of each session, and how many of its first diagnostics the update said itself.
        self._last: dict[SessionKey, tuple[SummaryReport, int]] = {}
        # Updates that failed or were cancelled since the last drain (the latest per session),
        # so a drain reports them even when they ended before it began.
        self._unreported: dict[SessionKey, _Job] = {}
        # Unreported failures dropped past MAX_KEPT_REPORTS since the last drain, by status.
        self._dropped: dict[WorkStatus, int] = dict.fromkeys(WorkStatus, 0)

    def _ended(self, key: SessionKey, job: _Job, report: SummaryReport) -> None:
        """Keep ``report`` as the last of ``key`` (under the lock); past the bound the oldest are dropped."""
        bound = max(1, MAX_KEPT_REPORTS)
        self._last.pop(key, None)  # re-inserted last: the dicts are kept in order of ending
        self._last[key] = (report, job.said if job.report is report else 0)
        while len(self._last) > bound:
            del self._last[next(iter(self._last))]
        if report.status is not WorkStatus.COMPLETED:
            self._unreported.pop(key, None)
            self._unreported[key] = job
            while len(self._unreported) > bound:
                oldest = self._unreported.pop(next(iter(self._unreported)))
                status = oldest.report.status if oldest.report is not None else WorkStatus.CANCELLED
                self._dropped[status] += 1

    def start(self, key: SessionKey, work: Work) -> None:
        """Run ``work`` in the background for ``key``; the caller has waited for any earlier job."""
        job = _Job(Ticket(key, "summary update", self._op_timeout_s))
        job.ticket.late = self._late
        with self._lock:
            self._jobs[key] = job

        async def run() -> None:
            try:
                with job.scope as scope:
                    try:
                        state, notes = await work(job.ticket)
                        said = len(notes)
                        notes = [*notes, *job.ticket.abandonment_diagnostics()]
                        # The summarizer's failure is reported, not raised: it still failed the update.
                        # A saved update's own degradations (a dropped citation, a gap) are warnings.
                        failed = any(n.severity is Severity.ERROR for n in notes)
                        status = WorkStatus.FAILED if failed else WorkStatus.COMPLETED
                        job.report = SummaryReport(status, state, tuple(notes))
                        job.said = said
                    except Exception as exc:
                        job.report = SummaryReport(
                            WorkStatus.FAILED,
                            None,
                            (Diagnostic("summary_failed", error_text(exc), Severity.ERROR),),
                        )
                if scope.cancelled_caught or job.report is None:
                    job.report = _cancelled("the summary update was cancelled")
                    job.said = 0  # this report's note was said by nobody yet
            finally:
                if job.report is None:
                    # Cancelled from outside its own scope: the event loop it ran on ended (asyncio.run
                    # cancels what is left; a trio run, its system tasks).
                    job.report = _cancelled(
                        "the summary update was cancelled because the event loop it ran on ended before it "
                        "finished (anyio.run per request ends it with the request: use BlockingRuntime, or "
                        "await runtime.resources.settle_summary() before the loop ends); nothing committed "
                        "was lost"
                    )
                with self._lock:
                    self._ended(key, job, job.report)
                    if self._jobs.get(key) is job:
                        del self._jobs[key]
                job.done.set()

        job.task = spawn(run)

    def running(self) -> list[SessionKey]:
        """The sessions with a job running now (a snapshot)."""
        return [key for key, _job in self._running()]

    def _running(self) -> list[tuple[SessionKey, _Job]]:
        with self._lock:
            running = list(self._jobs.items())
        alive = []
        for key, job in running:
            if job.loop.finished and not job.done.is_set():
                self._end_orphan(key, job)
            else:
                alive.append((key, job))
        return alive

    def _end_orphan(self, key: SessionKey, job: _Job) -> None:
        """End a job whose event loop was closed with it still pending (``loop.close()`` cancels nothing).

        It can never run again, so it is reported cancelled and no longer waited for.
        """
        report = _cancelled(
            "the summary update was cancelled because the event loop it ran on was closed before it "
            "finished (keep the loop running until the update ends, or use BlockingRuntime); nothing "
            "committed was lost"
        )
        with self._lock:
            if job.report is not None or self._jobs.get(key) is not job:
                return
            job.report = report
            self._ended(key, job, report)
            del self._jobs[key]
        job.done.set()

    def idle(self) -> bool:
        """True when no job runs and no failure awaits a drain's report: nothing is left to drain."""
        self._running()  # jobs whose loop was closed under them end here
        with self._lock:
            return not self._jobs and not self._unreported and not any(self._dropped.values())

    def _job(self, key: SessionKey) -> _Job | None:
        job = self._jobs.get(key)
        if job is not None and job.loop.finished and not job.done.is_set():
            self._end_orphan(key, job)
            return None
        return job

    def busy(self, key: SessionKey) -> bool:
        """True while a job of ``key`` is running."""
        return self._job(key) is not None

    def last_report(self, key: SessionKey) -> SummaryReport | None:
        """The report of the last job of ``key`` that ended, handed to the host.

        Handed over, a failure is the host's to act on: a later drain
        (``aclose``) does not report it again.
        """
        with self._lock:
            report, _said = self._last.get(key, (None, 0))
            self._handed_over(key, report)
            return report

    def take_report(self, key: SessionKey) -> tuple[SummaryReport | None, int]:
        """The last report of ``key``, removed (a run surfaces it once in its diagnostics, to the host).

        And how many of its first diagnostics the update already said as it
        ended: the run carries them in its result but does not say them again.
        """
        with self._lock:
            report, said = self._last.pop(key, (None, 0))
            self._handed_over(key, report)
            return report, said

    def drop_reports(self, covers: Callable[[SessionKey], bool]) -> None:
        """Drop the kept reports of the sessions ``covers`` names: an erasure removed what they hold.

        A report keeps the summary state its update saved (the text) and
        diagnostics that may quote an adapter's error: neither may outlive
        the erasure of its session. An ended failure nobody was told of is
        counted instead (as one dropped past :data:`MAX_KEPT_REPORTS`), so a
        drain still says that it happened, without naming it.
        """
        with self._lock:
            for key in [k for k in self._last if covers(k)]:
                del self._last[key]
            for key in [k for k, job in self._unreported.items() if covers(k) and job.done.is_set()]:
                job = self._unreported.pop(key)
                self._dropped[job.report.status if job.report is not None else WorkStatus.CANCELLED] += 1

    def _handed_over(self, key: SessionKey, report: SummaryReport | None) -> None:
        """Forget ``report`` as unreported, if it is the latest failure of ``key`` (under the lock)."""
        job = self._unreported.get(key)
        if report is not None and job is not None and job.report is report:
            del self._unreported[key]

    async def settle(self, key: SessionKey, timeout_s: float) -> WorkStatus | None:
        """Wait up to ``timeout_s`` for the job of ``key``; cancel it past that. ``None`` if none ran."""
        job = self._job(key)
        if job is None:
            return None
        with anyio.move_on_after(timeout_s):
            await job.done.wait()
        if not job.done.is_set():
            job.cancel("summary update cancelled: its session is settling")
            with anyio.move_on_after(timeout_s):
                await job.done.wait()
        report = job.report
        return report.status if report is not None else WorkStatus.CANCELLED

    async def drain(
        self, timeout_s: float, grace_s: float | None = None
    ) -> tuple[list[tuple[SessionKey, SummaryReport, bool]], dict[WorkStatus, int]]:
        """Settle every update for a drain: ``(key, report, stopped)`` for each it saw, and dropped counts.

        Waits up to ``timeout_s`` for the running updates — including those
        started while it waits — cancels the rest and waits up to ``grace_s``
        for them to stop (without ``grace_s``: half of ``timeout_s`` each).
        Reports every update it saw, plus each that failed or was cancelled
        since the last drain; a report is given once. Failures dropped unlisted
        past ``MAX_KEPT_REPORTS`` since the last drain are counted by status.
        """
        wait = max(0.0, timeout_s) if grace_s is not None else max(0.0, timeout_s) / 2
        grace = grace_s if grace_s is not None else wait
        seen: dict[int, tuple[SessionKey, _Job]] = {}

        def look() -> list[_Job]:
            running = self._running()
            for key, job in running:
                seen.setdefault(id(job), (key, job))
            return [job for _key, job in running]

        with anyio.move_on_after(wait):
            while running := look():
                await running[0].done.wait()
        with anyio.move_on_after(grace):
            while running := look():
                for job in running:
                    job.cancel("summary update cancelled: the runtime is draining")
                await running[0].done.wait()
        look()
        with self._lock:
            for key, job in self._unreported.items():
                seen.setdefault(id(job), (key, job))
            self._unreported = {k: j for k, j in self._unreported.items() if not j.done.is_set()}
            dropped, self._dropped = self._dropped, dict.fromkeys(WorkStatus, 0)
        out: list[tuple[SessionKey, SummaryReport, bool]] = []
        for key, job in seen.values():
            if job.done.is_set() and job.report is not None:
                out.append((key, job.report, True))
            else:
                note = Diagnostic("summary_cancelled", "did not stop after cancellation", Severity.WARNING)
                out.append((key, SummaryReport(WorkStatus.CANCELLED, None, (note,)), False))
        return out, dropped
