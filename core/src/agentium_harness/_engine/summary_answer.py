"""The engine's check of a summarizer's answer, before anything of it is kept.

A summarizer is an adapter: what it returns is checked, never trusted. The
answer must be a :class:`TaskSummary` whose every field has exactly the
type the snapshot codec stores (``bool`` is not an ``int``, ``0.0`` is not
a seq, a ``str`` encodes as UTF-8): an answer that is not is refused whole
as ``summary_failed``, because a saved one would make the session snapshot
undecodable on its next load. The checks read the fields and build a fresh
record, so an answer built around the record's validators
(``object.__setattr__``, a subclass) is held to the same rules. Then its
frontier, text size and citations are checked against what it was given.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import InvalidArgumentError
from .._history import MessageGroup
from .._ports.summary import (
    Citation,
    SummaryLimits,
    TaskSummary,
    check_notes,
    check_seq,
    check_text,
)
from .results import Diagnostic, Severity

__all__ = ["checked_answer", "failed", "violation", "well_formed"]

#: Longest quote of an adapter's error in a diagnostic: the message is the adapter's, of any size.
_MAX_QUOTE = 300


def violation(message: str) -> Diagnostic:
    """A ``summarizer_contract_violation`` that refused the answer."""
    return Diagnostic("summarizer_contract_violation", message, Severity.ERROR)


def failed(exc: BaseException, what: str = "the summarizer failed") -> Diagnostic:
    """A ``summary_failed`` diagnostic for ``exc``, its message quoted in bounded length."""
    text = str(exc)
    if len(text) > _MAX_QUOTE:
        text = text[:_MAX_QUOTE] + "…"
    return Diagnostic(
        "summary_failed",
        f"{what} ({type(exc).__name__}: {text}); the previous summary and its frontier stay",
        Severity.ERROR,
    )


def well_formed(answer: TaskSummary) -> TaskSummary:
    """A copy of ``answer``, every field exactly of its stored type; else :class:`InvalidArgumentError`."""
    raw = answer.citations
    if not isinstance(raw, tuple | list):
        raise InvalidArgumentError(f"TaskSummary.citations must be a tuple, got {type(raw).__name__}")
    citations: list[Citation] = []
    for i, citation in enumerate(raw):
        if not isinstance(citation, Citation):
            raise InvalidArgumentError(
                f"TaskSummary.citations[{i}] must be a Citation, got {type(citation).__name__}"
            )
        seq = check_seq(citation.seq, f"TaskSummary.citations[{i}].seq")
        citations.append(Citation(seq, check_text(citation.digest, f"TaskSummary.citations[{i}].digest")))
    return TaskSummary(
        text=check_text(answer.text, "TaskSummary.text"),
        frontier=check_seq(answer.frontier, "TaskSummary.frontier"),
        citations=tuple(citations),
        policy=check_text(answer.policy, "TaskSummary.policy"),
        version=check_text(answer.version, "TaskSummary.version"),
        uncertainty=check_notes(answer.uncertainty, "TaskSummary.uncertainty"),
    )


def checked_answer(
    answer: object,
    previous: TaskSummary | None,
    given: Sequence[MessageGroup],
    start: int,
    limits: SummaryLimits,
    end: int,
) -> tuple[TaskSummary | None, list[Diagnostic]]:
    """The summarizer's answer with its citations checked, or ``None`` when it must be refused whole.

    ``end`` is one past the last group of the run the groups were offered
    from (groups out of the view are not offered, so it may pass the last one given).
    """
    notes: list[Diagnostic] = []
    if not isinstance(answer, TaskSummary):
        return None, [violation(f"summarizer returned a {type(answer).__name__}, not a TaskSummary")]
    try:
        answer = well_formed(answer)
    except InvalidArgumentError as exc:
        return None, [failed(exc, "the summarizer's answer is malformed")]
    if not start <= answer.frontier <= end:
        return None, [
            violation(
                f"summarizer claimed frontier {answer.frontier}, outside the groups it was given "
                f"({start}..{end}); refused, the previous summary stays"
            )
        ]
    size = len(answer.text.encode("utf-8"))
    if size > limits.max_summary_bytes:
        return None, [
            Diagnostic(
                "summary_too_large",
                f"the summary is {size} bytes, over max_summary_bytes={limits.max_summary_bytes}; "
                "refused whole (never cut), the previous summary stays",
                Severity.ERROR,
            )
        ]
    allowed = {(g.seq, g.digest) for g in given if g.seq < answer.frontier}
    if previous is not None:
        allowed.update((c.seq, c.digest) for c in previous.citations)
    kept: list[Citation] = []
    for citation in answer.citations:
        if (citation.seq, citation.digest) in allowed:
            kept.append(citation)
        else:
            notes.append(
                violation(f"dropped citation {citation!r}: it names no group the summarizer was given")
            )
    return TaskSummary(
        text=answer.text,
        frontier=answer.frontier,
        citations=tuple(kept),
        policy=answer.policy,
        version=answer.version,
        uncertainty=answer.uncertainty,
    ), notes
