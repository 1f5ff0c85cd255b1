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
    MAX_POLICY_CHARS,
    MAX_SUMMARY_CITATIONS,
    Citation,
    SummaryLimits,
    SummaryState,
    TaskSummary,
    check_notes,
    check_seq,
    check_text,
    fit_notes,
    is_policy_token,
    newest_notes,
    text_reach,
)
from .._text import error_text, shorten
from .._validators import MAX_COUNT
from .erased_groups import may_state
from .results import Diagnostic, Severity

__all__ = ["checked_answer", "failed", "given_until", "violation", "well_formed"]

#: Longest quote of an adapter's error in a diagnostic: the message is the adapter's, of any size.
_MAX_QUOTE = 300
#: Seqs a diagnostic names of the citations it dropped; the rest are counted.
_SHOWN_SEQS = 5
#: The uncertainty note of a summary whose oldest citations were cut (one note, however often).
_CITATIONS_CUT = (
    f"older citations were dropped to keep the summary bounded (at most {MAX_SUMMARY_CITATIONS} kept)"
)


def violation(message: str) -> Diagnostic:
    """A ``summarizer_contract_violation`` that refused the answer."""
    return Diagnostic("summarizer_contract_violation", message, Severity.ERROR)


def failed(exc: BaseException, what: str = "the summarizer failed") -> Diagnostic:
    """A ``summary_failed`` diagnostic for ``exc``, its message quoted in bounded length."""
    # error_text: the adapter's exception may not even print (its __str__ raising, a lone surrogate).
    return Diagnostic(
        "summary_failed",
        f"{what} ({shorten(error_text(exc), _MAX_QUOTE)}); the previous summary and its frontier stay",
        Severity.ERROR,
    )


def given_until(current: SummaryState | None, offered: Sequence[MessageGroup], boundary: int) -> int | None:
    """The new state's ``SummaryState.given_until``: how far the text it answered may state.

    Past the last group offered, whatever frontier the summarizer answered
    (it may fold fewer than it was given, and still write what it read),
    and as far as the previous text reached (:func:`text_reach`): the
    summarizer was given that text too, and may carry it on. A previous
    text saved without the field may state any archived group
    (``boundary``). With nothing offered (no call) the field is kept as it is.
    """
    if not offered:
        return current.given_until if current is not None else None
    carried = text_reach(current, boundary) if current is not None and may_state(current.summary) else 0
    return max(carried, offered[-1].seq + 1)


def well_formed(answer: TaskSummary, most: int) -> tuple[TaskSummary, int]:
    """A copy of ``answer``, every field exactly of its stored type; else :class:`InvalidArgumentError`.

    Only the first ``most`` citations are read (and kept); the second value
    counts the later ones, dropped unread. The list's real length and items
    are taken (``tuple.__len__``, ``list.__getitem__``), not what a subclass
    says: the check runs on the event loop, and an answer of millions of
    citations must cost it no more than ``most`` items.
    """
    raw = answer.citations
    if not isinstance(raw, tuple | list):
        raise InvalidArgumentError(f"TaskSummary.citations must be a tuple, got {type(raw).__name__}")
    if isinstance(raw, tuple):
        unread = max(0, tuple.__len__(raw) - most)
        items: Sequence[object] = tuple.__getitem__(raw, slice(0, most))
    else:
        unread = max(0, list.__len__(raw) - most)
        items = list.__getitem__(raw, slice(0, most))
    citations: list[Citation] = []
    for i, citation in enumerate(items):
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
        uncertainty=check_notes(newest_notes(answer.uncertainty), "TaskSummary.uncertainty"),
    ), unread


def checked_answer(
    answer: object,
    previous: TaskSummary | None,
    given: Sequence[MessageGroup],
    start: int,
    limits: SummaryLimits,
    end: int,
) -> tuple[TaskSummary | None, list[Diagnostic]]:
    """The summarizer's answer checked and bounded, or ``None`` when it must be refused whole.

    Refused whole: malformed (``summary_failed``), a frontier outside the
    groups given or a ``policy``/``version`` that is not a short name
    (:func:`is_policy_token`) (``summarizer_contract_violation``), text over
    ``max_summary_bytes`` (``summary_too_large``). Cut, and said so:
    uncertainty notes past their bounds (:func:`fit_notes`), citations of
    groups it was not given or repeated, or past the first ``len(given)`` +
    previous citations + :data:`MAX_SUMMARY_CITATIONS` of the list (dropped
    unread: a padded list costs the check no more than that), and the oldest
    citations past :data:`MAX_SUMMARY_CITATIONS` (``summary_citations_condensed``).

    ``end`` is one past the last group of the run the groups were offered
    from (groups out of the view are not offered, so it may pass the last one given).
    """
    notes: list[Diagnostic] = []
    if not isinstance(answer, TaskSummary):
        return None, [violation(f"summarizer returned a {type(answer).__name__}, not a TaskSummary")]
    # Every citation the engine could keep is one per group given or previously cited: past that
    # (and a margin of MAX_SUMMARY_CITATIONS for repeats) an answer is padded: it is read in order up
    # to that many, and the rest are dropped unread (cut, not refused, as dropped citations are).
    most = len(given) + (len(previous.citations) if previous is not None else 0) + MAX_SUMMARY_CITATIONS
    try:
        answer, unread = well_formed(answer, most)
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
    for name, value in (("policy", answer.policy), ("version", answer.version)):
        # Both are copied into the retained record of every committed group after this update, which
        # no erasure rewrites: a name, never text that could state what the summarized groups said.
        # The value is not quoted (it may be that text).
        if not is_policy_token(value):
            return None, [
                violation(
                    f"the summary's {name} ({len(value)} characters) is not a name of 1 to "
                    f"{MAX_POLICY_CHARS} ASCII letters, digits and . _ : / + -; refused whole, the "
                    "previous summary stays"
                )
            ]
    kept, dropped = _citations(answer, previous, given, unread)
    if dropped:
        notes.append(dropped)
    raw_notes = answer.uncertainty
    if len(kept) > MAX_SUMMARY_CITATIONS:
        kept, cut = _newest(kept)
        notes.append(cut)
        if _CITATIONS_CUT not in raw_notes:
            raw_notes = (*raw_notes, _CITATIONS_CUT)
    uncertainty = fit_notes(raw_notes)
    if uncertainty != raw_notes:
        notes.append(
            Diagnostic(
                "summary_uncertainty_condensed",
                f"the summary's {len(answer.uncertainty)} uncertainty note(s) were cut to the newest that "
                "fit the bound; the first note says how many were dropped",
                Severity.WARNING,
            )
        )
    return TaskSummary(
        text=answer.text,
        frontier=answer.frontier,
        citations=tuple(kept),
        policy=answer.policy,
        version=answer.version,
        uncertainty=uncertainty,
    ), notes


def _newest(kept: Sequence[Citation]) -> tuple[list[Citation], Diagnostic]:
    """The :data:`MAX_SUMMARY_CITATIONS` citations of ``kept`` with the highest seqs, in their order.

    Each names a distinct group (:func:`_citations` kept one per seq). The
    oldest go: the summarizer folded them longest ago, and the text it keeps
    is the newest part as much as anything.
    """
    newest = set(sorted(c.seq for c in kept)[-MAX_SUMMARY_CITATIONS:])
    cut = len(kept) - len(newest)
    # A warning: the answer is kept (and saved); only the oldest citations are not.
    return [c for c in kept if c.seq in newest], Diagnostic(
        "summary_citations_condensed",
        f"the summary cited {len(kept)} groups; the {cut} oldest citation(s) were dropped to keep "
        f"{MAX_SUMMARY_CITATIONS}, and its uncertainty says so",
        Severity.WARNING,
    )


def _shown(seq: int) -> str:
    """``seq`` as a dropped citation's diagnostic names it: ``MAX_COUNT`` (no group's) as what it stands for.

    The model summarizer cites a tag no group can have (``[g<past 10**12>]``) as ``MAX_COUNT``
    (a citation holds no larger seq): the tag's own number is not known here, nor said.
    """
    return f"{seq}" if seq < MAX_COUNT else f"{MAX_COUNT} or more, which no group has"


def _citations(
    answer: TaskSummary, previous: TaskSummary | None, given: Sequence[MessageGroup], unread: int = 0
) -> tuple[list[Citation], Diagnostic | None]:
    """The answer's citations the engine keeps, at most one per group, and one diagnostic for the rest.

    A citation is kept when it names a group the summarizer was given (below
    its frontier) or one the previous summary cited, with that group's
    digest; so at most one per such group is kept however many it repeats,
    and the dropped ones are counted in one diagnostic, not one each, with
    the ``unread`` ones :func:`well_formed` dropped before reading them.
    """
    allowed = {(g.seq, g.digest) for g in given if g.seq < answer.frontier}
    if previous is not None:
        allowed.update((c.seq, c.digest) for c in previous.citations)
    kept: list[Citation] = []
    cited: set[int] = set()
    unknown: list[int] = []
    repeated = 0
    for citation in answer.citations:
        if (citation.seq, citation.digest) not in allowed:
            unknown.append(citation.seq)
        elif citation.seq in cited:
            repeated += 1
        else:
            cited.add(citation.seq)
            kept.append(citation)
    if not unknown and not repeated and not unread:
        return kept, None
    parts = []
    if unknown:
        shown = ", ".join(_shown(s) for s in sorted(set(unknown))[:_SHOWN_SEQS])
        more = ", …" if len(set(unknown)) > _SHOWN_SEQS else ""
        parts.append(
            f"{len(unknown)} name no group the summarizer was given, or not with its digest "
            f"(seq {shown}{more})"
        )
    if repeated:
        parts.append(f"{repeated} repeat a group already cited")
    if unread:
        parts.append(f"{unread} came after the first {len(answer.citations)} and were not read")
    # A warning: the answer itself is kept (and saved), only these citations are not.
    message = f"dropped {len(unknown) + repeated + unread} citation(s): " + "; ".join(parts)
    return kept, Diagnostic("summarizer_contract_violation", message, Severity.WARNING)
