"""Separate graders (R33): each judges one property of a case's trace, pass, fail or absent, with a reason.

``absent`` means the grader had nothing to judge (the case states no
expectation for it); it is never counted as a pass (R34). The built-in
graders are registered through the ``agentium_register_graders`` hook like
a plugin's; a plugin adds its own by registering any object with ``name``,
``description``, ``evidence`` and ``grade(case, trace)``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import attrs

from .._ports.recall import SourceOwner
from ._cases import EvalCase, SetupStep
from ._trace import CaseTrace, LabelInfo

__all__ = [
    "ABSTAIN_MARKERS",
    "BUILTIN_GRADERS",
    "CITATION",
    "AbstentionGrader",
    "DiscoveredEvidenceGrader",
    "Grade",
    "GradeStatus",
    "Grader",
    "PromptInclusionGrader",
    "ReadEvidenceGrader",
    "ScopeGrader",
    "StaleFactsGrader",
    "SupportedAnswerGrader",
    "abstained",
    "cited_sources",
]

#: How an answer cites a source: ``[source: <id>]`` (the extractive provider's form).
CITATION = re.compile(r"\[source:\s*([^\]\s]+)\s*\]")
#: Phrases that mark an answer as declining (case-insensitive).
ABSTAIN_MARKERS: tuple[str, ...] = (
    "i have no evidence",
    "no evidence in the provided sources",
    "i don't know",
    "i do not know",
    "cannot answer",
    "can't answer",
    "not enough information",
)


class GradeStatus(enum.StrEnum):
    """A grader's verdict on one case."""

    PASS = "pass"
    FAIL = "fail"
    #: Nothing to judge: never a success, left out of the valid-grade denominator.
    ABSENT = "absent"


@attrs.frozen(slots=True)
class Grade:
    """One grader's result for one case, with the reason a reader needs."""

    status: GradeStatus
    reason: str

    @classmethod
    def passed(cls, reason: str) -> Grade:
        """A pass."""
        return cls(GradeStatus.PASS, reason)

    @classmethod
    def failed(cls, reason: str) -> Grade:
        """A fail."""
        return cls(GradeStatus.FAIL, reason)

    @classmethod
    def absent(cls, reason: str) -> Grade:
        """Nothing to judge."""
        return cls(GradeStatus.ABSENT, reason)


@runtime_checkable
class Grader(Protocol):
    """What a grader is: a name, a description, whether it judges evidence, and ``grade``."""

    @property
    def name(self) -> str:
        """The name cases and reports use (an identifier)."""
        ...

    @property
    def description(self) -> str:
        """One line saying what the grader checks."""
        ...

    @property
    def evidence(self) -> bool:
        """True for graders of evidence handling (discovered, read, prompt inclusion)."""
        ...

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Judge ``trace`` against ``case``; must not raise for an ordinary trace."""
        ...


def abstained(trace: CaseTrace) -> bool:
    """True when the runtime declined: the run stopped or asked back, or the answer says it cannot answer."""
    if trace.status in ("stopped", "needs_clarification"):
        return True
    text = " ".join(trace.answer.lower().split())
    return not text or any(marker in text for marker in ABSTAIN_MARKERS)


def cited_sources(answer: str) -> tuple[str, ...]:
    """Source ids the answer cites (``[source: id]``), in order, each once."""
    return tuple(dict.fromkeys(CITATION.findall(answer)))


def _contains(haystack: str, needle: str) -> bool:
    return " ".join(needle.lower().split()) in " ".join(haystack.lower().split())


def _resolve(trace: CaseTrace, labels: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``{label: source id}`` for labels that resolved, and the reasons for those that did not."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for label in labels:
        info = trace.labels.get(label, LabelInfo(None, None, "not set up"))
        if info.source_id is None:
            missing.append(f"{label!r} has no source ({info.note or 'its step produced none'})")
        else:
            found[label] = info.source_id
    return found, missing


def _kept(trace: CaseTrace, source_id: str, owner: SourceOwner | None, dropped: tuple[str, ...]) -> bool:
    """True for an item the engine accepted: in the run's scope and not dropped as a contract violation."""
    return owner is not None and owner.visible_to(trace.scope) and source_id not in dropped


def _not(dropped: tuple[str, ...], source_id: str, what: str) -> str:
    if source_id in dropped:
        return f"was returned by the store but dropped by the engine as a contract violation (not {what})"
    return f"was not {what}"


def _listing(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"


EvidenceStage = Literal["discovered", "read", "in_prompt"]


@attrs.frozen(slots=True)
class DiscoveredEvidenceGrader:
    """Expected sources are among the candidates recall discovered for the probe."""

    name: str = "discovered_evidence"
    description: str = "expected sources are among the candidates recall discovered"
    evidence: bool = True

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Pass when every expected label's source id was a candidate."""
        labels = case.expect.labels_for("discovered")
        if not labels:
            return Grade.absent("the case expects no discovered evidence")
        found, missing = _resolve(trace, labels)
        if not trace.has_recall:
            return Grade.failed(f"expected {_listing(list(labels))} but the runtime has no recall store")
        # What the engine refused (out of scope, over a budget) was not discovered (a leak is scope's).
        seen = {
            c.source_id
            for c in trace.candidates
            if _kept(trace, c.source_id, c.owner, trace.dropped_candidates)
        }
        missing += [
            f"{label!r} ({sid}) {_not(trace.dropped_candidates, sid, 'discovered')}"
            for label, sid in found.items()
            if sid not in seen
        ]
        if missing:
            return Grade.failed("; ".join(missing) + f"; candidates: {_listing(sorted(seen))}")
        return Grade.passed(f"discovered {_listing(list(labels))} among {len(seen)} candidate(s)")


@attrs.frozen(slots=True)
class ReadEvidenceGrader:
    """Expected sources were read whole: complete excerpts, no context omitted."""

    name: str = "read_evidence"
    description: str = "expected sources were read whole (complete, nothing omitted)"
    evidence: bool = True

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Pass when each expected source has a whole excerpt among those read."""
        labels = case.expect.labels_for("read")
        if not labels:
            return Grade.absent("the case expects no read evidence")
        found, missing = _resolve(trace, labels)
        if not trace.has_recall:
            return Grade.failed(f"expected {_listing(list(labels))} read but the runtime has no recall store")
        by_id = {
            e.source_id: e
            for e in trace.excerpts
            if _kept(trace, e.source_id, e.owner, trace.dropped_excerpts)
        }
        for label, sid in found.items():
            excerpt = by_id.get(sid)
            if excerpt is None:
                missing.append(f"{label!r} ({sid}) {_not(trace.dropped_excerpts, sid, 'read')}")
            elif not excerpt.whole:
                missing.append(
                    f"{label!r} was read {excerpt.completeness} "
                    f"(omitted context: {_listing(list(excerpt.omitted))})"
                )
        if missing:
            return Grade.failed("; ".join(missing))
        return Grade.passed(f"read {_listing(list(labels))} whole")


@attrs.frozen(slots=True)
class PromptInclusionGrader:
    """Expected evidence is in the model request as labeled source data; excluded evidence is not."""

    name: str = "prompt_inclusion"
    description: str = "expected evidence is in the request, labeled; excluded evidence is not"
    evidence: bool = True

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Pass when every expected label is a labeled block in a request and no excluded one is."""
        wanted = case.expect.labels_for("in_prompt")
        excluded = case.expect.excluded
        if not wanted and not excluded:
            return Grade.absent("the case expects nothing about the request")
        blocks = trace.request_blocks()
        by_id = {b.source_id: b for b in blocks}
        found, problems = _resolve(trace, wanted)
        if wanted and not trace.requests:
            problems.append(f"no model request was made (run {trace.status})")
        else:
            for label, sid in found.items():
                block = by_id.get(sid)
                if block is None:
                    problems.append(f"{label!r} ({sid}) is not in the request")
                elif block.attribute("completeness") is None or not block.kind:
                    problems.append(f"{label!r} is in the request without its labels")
        leaked, _ = _resolve(trace, excluded)
        problems += [
            f"excluded {label!r} ({sid}) is in the request" for label, sid in leaked.items() if sid in by_id
        ]
        if problems:
            return Grade.failed("; ".join(problems) + f"; request sources: {_listing(sorted(by_id))}")
        parts = [f"{_listing(list(wanted))} in the request, labeled"] if wanted else []
        if excluded:
            parts.append(f"{_listing(list(excluded))} kept out")
        return Grade.passed("; ".join(parts))


@attrs.frozen(slots=True)
class SupportedAnswerGrader:
    """The answer states the expected fact and every source it cites was in the request."""

    name: str = "supported_answer"
    description: str = "the answer states the expected fact; every cited source was in the request"
    evidence: bool = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Pass when each expected string is in the answer and each citation names a request source."""
        expected = case.expect.answer
        if not expected:
            return Grade.absent("the case expects no particular answer")
        if abstained(trace):
            return Grade.failed(
                f"the runtime abstained (run {trace.status}); expected {_listing(list(expected))}"
            )
        problems = [f"the answer does not state {e!r}" for e in expected if not _contains(trace.answer, e)]
        in_request = {b.source_id for b in trace.request_blocks()}
        cited = cited_sources(trace.answer)
        problems += [
            f"the answer cites {sid}, which was not in the request" for sid in cited if sid not in in_request
        ]
        if problems:
            return Grade.failed("; ".join(problems))
        return Grade.passed(f"states {_listing(list(expected))}; cites {_listing(list(cited))}")


@attrs.frozen(slots=True)
class StaleFactsGrader:
    """The answer does not use a superseded or forgotten fact."""

    name: str = "stale_facts"
    description: str = "the answer does not use a superseded or forgotten fact"
    evidence: bool = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Fail when any stale string appears in the answer."""
        stale = case.expect.stale
        if not stale:
            return Grade.absent("the case names no stale fact")
        used = [s for s in stale if _contains(trace.answer, s)]
        if used:
            return Grade.failed(f"the answer uses stale {_listing([repr(s) for s in used])}")
        how = "abstained" if abstained(trace) else "answered"
        return Grade.passed(f"{how} without {_listing([repr(s) for s in stale])}")


@attrs.frozen(slots=True)
class AbstentionGrader:
    """The runtime abstains when no accessible evidence supports an answer (and answers when it should)."""

    name: str = "abstention"
    description: str = "abstains when no accessible evidence supports an answer"
    evidence: bool = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """``abstain: true`` needs a decline; ``abstain: false`` needs an answer."""
        want = case.expect.abstain
        if want is None:
            return Grade.absent("the case says nothing about abstaining")
        did = abstained(trace)
        if did == want:
            return Grade.passed("abstained" if did else "answered")
        if want:
            return Grade.failed("answered although no accessible evidence supports an answer")
        return Grade.failed(f"abstained (run {trace.status}) although evidence supports an answer")


def _owner_text(owner: SourceOwner | None) -> str:
    if owner is None:
        return "unknown owner"
    parts = [f"tenant={owner.tenant}"] + [
        f"{k}={v}"
        for k in ("user", "session", "project", "repository")
        if (v := getattr(owner, k)) is not None
    ]
    return ",".join(parts)


def _elsewhere(case: EvalCase, step: SetupStep) -> bool:
    """True when a setup step puts material outside the probe's own session or tenant."""
    if step.owner is not None:
        return step.owner.tenant != case.tenant or step.owner.user not in (None, case.user)
    return any(
        value is not None and value != mine
        for value, mine in ((step.tenant, case.tenant), (step.user, case.user), (step.session, case.session))
    )


@attrs.frozen(slots=True)
class ScopeGrader:
    """No foreign-scope evidence anywhere in the trace: candidates, reads, request, answer, record."""

    name: str = "scope"
    description: str = "no foreign-scope evidence anywhere in the trace"
    evidence: bool = False

    def grade(self, case: EvalCase, trace: CaseTrace) -> Grade:
        """Fail on a candidate, excerpt or request block outside the probe's scope, or foreign text shown."""
        foreign = {
            info.source_id: label
            for label, info in trace.labels.items()
            if info.source_id is not None
            and info.owner is not None
            and not info.owner.visible_to(trace.scope)
        }
        planted = (
            bool(foreign) or bool(case.expect.foreign_text) or any(_elsewhere(case, s) for s in case.setup)
        )
        if not planted:
            return Grade.absent("the case plants no foreign-scope material")
        problems: list[str] = []
        for c in trace.candidates:
            if c.owner is None or not c.owner.visible_to(trace.scope) or c.source_id in foreign:
                problems.append(f"candidate {c.source_id} ({_owner_text(c.owner)}) is outside the scope")
        for e in trace.excerpts:
            if e.owner is None or not e.owner.visible_to(trace.scope) or e.source_id in foreign:
                problems.append(f"excerpt {e.source_id} ({_owner_text(e.owner)}) is outside the scope")
        for b in trace.request_blocks():
            if b.source_id in foreign:
                problems.append(f"request block {b.source_id} is foreign (label {foreign[b.source_id]!r})")
        shown = "\n".join([trace.answer, *(b.content for b in trace.request_blocks())])
        problems += [
            f"foreign text {t!r} is in the request or answer"
            for t in case.expect.foreign_text
            if _contains(shown, t)
        ]
        if problems:
            return Grade.failed("; ".join(problems))
        return Grade.passed(
            f"nothing foreign among {len(trace.candidates)} candidate(s), {len(trace.excerpts)} excerpt(s), "
            f"{len(trace.request_blocks())} request block(s) and the answer"
        )


#: The built-in graders, in report order (registered by the built-in plugin).
BUILTIN_GRADERS: tuple[Grader, ...] = (
    DiscoveredEvidenceGrader(),
    ReadEvidenceGrader(),
    PromptInclusionGrader(),
    SupportedAnswerGrader(),
    StaleFactsGrader(),
    AbstentionGrader(),
    ScopeGrader(),
)
