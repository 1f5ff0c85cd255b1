"""The lines ``agentium run`` starts stderr with when a run did not complete (docs/cli.md).

One line says why and whether the turn was committed; when the why is the
run's diagnostics (a recall policy that stopped the run without a reason),
each is on a line of its own after it: joined in the line, a diagnostic
holding ``"; "`` could not be told from the next one, nor from the part
saying what became of the turn.
"""

from __future__ import annotations

from typing import TextIO

from .._engine.results import RunResult, RunStatus, Severity
from .._text import shorten
from .output import shown

__all__ = ["print_run_outcome", "run_outcome"]


def _shorten(text: str, limit: int = 300) -> str:
    # One line of stderr: the full text is in the lines below it and in --json.
    return shorten(" ".join(text.split()), limit)


def run_outcome(result: RunResult) -> tuple[str, tuple[str, ...]]:
    """Why a run did not complete and what became of the turn (one line), and the reasons listed after it.

    The reasons are the run's diagnostics above INFO, as ``code: message``, when they are the
    why (a stopped run whose recall outcome gives no reason); none otherwise.
    """
    kept = "the turn was committed" if result.committed else "nothing was committed"
    if result.status is RunStatus.STOPPED:
        recall = result.recall
        reason = _shorten(recall.reason) if recall is not None else ""
        if reason:
            return f"the recall policy stopped the run: {reason}; {kept}", ()
        listed = tuple(
            f"{d.code}: {_shorten(d.message)}" for d in result.diagnostics if d.severity is not Severity.INFO
        )
        if not listed:
            return f"the recall policy stopped the run: no reason given; {kept}", ()
        many = "s, one a line" if len(listed) > 1 else ","
        return f"the recall policy stopped the run: {len(listed)} reason{many} below; {kept}", listed
    if result.status is RunStatus.NEEDS_CLARIFICATION:
        question = _shorten(result.output) or "no question given"
        asks = f"the recall policy asks a clarification: {question!r}; {kept}"
        return f"{asks}; run again with the answer in TEXT", ()
    if result.status is RunStatus.NOT_ACCEPTED:
        record = result.verification
        verdict = f"{record.verdict.value}: {_shorten(record.reason)}" if record is not None else "unknown"
        judged = f"the completion was verified and not accepted (verdict {verdict})"
        return f"{judged}; {kept} with the verdict", ()
    return f"the model was still calling tools at max_steps; {kept} as it stood", ()


def print_run_outcome(result: RunResult, status: int, out: TextIO) -> None:
    """The first lines of stderr for a run that exits ``status`` (not 0), with or without ``--json``."""
    line, reasons = run_outcome(result)
    out.write(f"agentium run: {shown(line)} (exit status {status})\n")
    for reason in reasons:
        out.write(f"  reason: {shown(reason)}\n")
