"""Recall statuses, policy decisions and the host-replaceable strategies (R20–R22).

A :class:`RecallPolicy` bundles three host decisions: how the query is
formed from the turn (``query``), how candidates are ordered before reading
(``rank``), and what to do with the outcome at each fence (``decide``). The
engine owns everything else: budgets, scope checks, assembly and validation
(:mod:`.recall`, :mod:`.recall_view`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from .._errors import InvalidArgumentError
from .._history import Message, Role
from .._ports.recall import Candidate
from .._validators import require_instance, require_instances
from .foreign_results import is_tool_output_block

__all__ = [
    "BUILTIN_QUERIES",
    "BUILTIN_RANKINGS",
    "PolicyDecision",
    "PolicyInput",
    "QueryFormulator",
    "QueryInput",
    "Ranker",
    "RecallDecision",
    "RecallFence",
    "RecallPolicy",
    "RecallStatus",
    "current_session_recall_policy",
    "latest_user_text",
    "score_order",
    "store_order",
]


class RecallStatus(enum.StrEnum):
    """What recall achieved for a run (R20–R22)."""

    #: Every discovered source that fit was read, validated and included.
    COMPLETE = "complete"
    #: Something was dropped: by a budget, by allocation, by validation or as a contract violation.
    PARTIAL = "partial"
    #: Recall worked and found nothing this scope may see.
    NO_ACCESSIBLE_EVIDENCE = "no_accessible_evidence"
    #: Recall itself failed: the store raised, timed out or broke its contract on open.
    FAILED = "failed"


class RecallDecision(enum.StrEnum):
    """What a policy decides at a fence."""

    PROCEED = "proceed"
    STOP = "stop"
    CLARIFY = "clarify"
    CONTINUE = "continue_with_uncertainty"


class RecallFence(enum.StrEnum):
    """Where the policy is asked: before the model is called, or before the session commit (R24)."""

    DISPATCH = "dispatch"
    COMMIT = "commit"


@attrs.frozen(slots=True)
class QueryInput:
    """What a query formulator sees: the new user text, resident history and a clarification answer."""

    user_input: str
    history: tuple[Message, ...] = ()
    clarification: str | None = None


@attrs.frozen(slots=True)
class PolicyInput:
    """What a policy's ``decide`` sees at a fence.

    ``allocation_omitted`` is true when whole excerpts were left out because
    they did not fit a budget; ``problems`` lists every reason the status is
    not ``complete`` in plain words, whole, as the ``recall_*`` diagnostics
    have them: they quote what adapters wrote (a store's error text, the ids it
    returned out of contract, possibly another scope's), which the model's
    ``recall-status`` notice and ``RunResult.recall.uncertainty`` (committed
    with the turn) never do, so a ``question`` built from them (asked of the
    user, then an assistant message the model reads) would. The decision's
    ``reason`` is the host's (``RunResult.recall.reason``), never committed;
    ``clarified`` is true once this run has used its one clarification.
    """

    status: RecallStatus
    fence: RecallFence
    allocation_omitted: bool = False
    problems: tuple[str, ...] = ()
    clarified: bool = False


@attrs.frozen(slots=True)
class PolicyDecision:
    """A policy's answer. ``question`` is asked when the decision is ``clarify``."""

    decision: RecallDecision
    reason: str = ""
    question: str | None = None


QueryFormulator = Callable[[QueryInput], str]
Ranker = Callable[[Sequence[Candidate]], Sequence[Candidate]]


def latest_user_text(turn: QueryInput) -> str:
    """The query is the latest user text, followed by the clarification answer if there is one (R21).

    :raises InvalidArgumentError: ``turn`` is not a :class:`QueryInput` (a host's own formulator
        may call this one; given a ``str`` it raised ``AttributeError``).
    """
    turn = require_instance(turn, QueryInput, "turn")
    if turn.clarification:
        return f"{turn.user_input}\n{turn.clarification}"
    return turn.user_input


def previous_and_latest_user_text(turn: QueryInput) -> str:
    """The previous resident user message and the latest user text (for follow-up questions).

    A tool's output in the history (sent as a ``tool_output`` block in a user-side message) is
    no user message: the query never takes a fetched page for what the user asked before.
    """
    turn = require_instance(turn, QueryInput, "turn")
    previous = next(
        (m.content for m in reversed(turn.history) if m.role is Role.USER and not is_tool_output_block(m)), ""
    )
    return "\n".join(p for p in (previous, latest_user_text(turn)) if p)


def store_order(candidates: Sequence[Candidate]) -> Sequence[Candidate]:
    """Keep the store's own rank order."""
    return candidates


def score_order(candidates: Sequence[Candidate]) -> Sequence[Candidate]:
    """Highest score first; ties by source id, so the order is deterministic whatever the store did.

    :raises InvalidArgumentError: ``candidates`` is not a sequence of :class:`Candidate`.
    """
    return sorted(
        require_instances(candidates, Candidate, "candidates"), key=lambda c: (-c.score, c.ref.source_id)
    )


#: Query formulators selectable by name from ``[recall] query``.
BUILTIN_QUERIES: dict[str, QueryFormulator] = {
    "latest_user_text": latest_user_text,
    "previous_and_latest_user_text": previous_and_latest_user_text,
}
#: Rankings selectable by name from ``[recall] ranking``.
BUILTIN_RANKINGS: dict[str, Ranker] = {"store_order": store_order, "score": score_order}

OnPartial = Literal["stop", "continue", "clarify"]
OnFailed = Literal["stop", "continue"]
OnNoEvidence = Literal["proceed", "stop", "clarify"]

_DEFAULT_QUESTION = (
    "I could not find the earlier context I need for this. Could you restate the relevant details?"
)


def _policy_name(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"recall policy name must be a non-empty str, got {value!r:.80}")


def _a_callable(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # decide=None stopped every run ("recall_stopped"), rank="score" failed every recall: both
    # only at run time. Refused where the policy is built.
    if not callable(value):
        raise InvalidArgumentError(
            f"recall policy {attribute.name} must be a callable, got {type(value).__name__}"
            + (" (a name such as 'score' is for [recall] in a config file)" if isinstance(value, str) else "")
        )


@attrs.frozen(slots=True)
class RecallPolicy:
    """How a runtime uses recall: the query, the ranking and the decision at each fence."""

    name: str = attrs.field(validator=_policy_name)
    decide: Callable[[PolicyInput], PolicyDecision] = attrs.field(validator=_a_callable)
    # Factories rather than plain defaults keep the generated signature free of object addresses.
    query: QueryFormulator = attrs.field(factory=lambda: latest_user_text, validator=_a_callable)
    rank: Ranker = attrs.field(factory=lambda: store_order, validator=_a_callable)


def current_session_recall_policy(
    *,
    strict: bool = False,
    on_partial: OnPartial = "stop",
    on_failed: OnFailed = "stop",
    on_no_evidence: OnNoEvidence | None = None,
    query: QueryFormulator | None = None,
    rank: Ranker | None = None,
    question: str | None = None,
) -> RecallPolicy:
    """The current-session recall policy (R21): stop on ``failed`` or ``partial``, permit no evidence.

    ``strict=True`` also stops on ``no_accessible_evidence`` (``strict`` is a
    bool: anything else raises :class:`InvalidArgumentError`). ``on_partial``
    may instead ``continue`` with explicit uncertainty or ``clarify``;
    ``on_failed`` may ``continue``; ``on_no_evidence`` may ``clarify``.
    ``query`` defaults to :func:`latest_user_text`, ``rank`` to
    :func:`store_order`; ``question`` is what a clarification asks. A
    clarification after an allocation omission never asks (more input cannot
    fix an unchanged ceiling): the engine ends the run with
    ``recall_assembly_omitted`` (R22).
    """
    if type(strict) is not bool:  # not its truth: strict="no" would make a strict policy
        raise InvalidArgumentError(f"strict must be True or False, got {type(strict).__name__}")
    if on_partial not in ("stop", "continue", "clarify"):
        raise InvalidArgumentError(f"on_partial must be stop, continue or clarify, got {on_partial!r}")
    if on_failed not in ("stop", "continue"):
        raise InvalidArgumentError(f"on_failed must be stop or continue, got {on_failed!r}")
    if on_no_evidence is None:
        on_no_evidence = "stop" if strict else "proceed"
    elif on_no_evidence not in ("proceed", "stop", "clarify"):
        raise InvalidArgumentError(f"on_no_evidence must be proceed, stop or clarify, got {on_no_evidence!r}")
    elif strict and on_no_evidence == "proceed":
        raise InvalidArgumentError(
            "strict=True rejects no_accessible_evidence; on_no_evidence='proceed' contradicts it"
        )
    query = latest_user_text if query is None else query
    rank = store_order if rank is None else rank
    question = _DEFAULT_QUESTION if question is None else question
    if not callable(query) or not callable(rank):
        raise InvalidArgumentError("query and rank must be callables")
    if not isinstance(question, str) or not question.strip():
        raise InvalidArgumentError("question must be a non-empty string")
    words: dict[str, RecallDecision] = {
        "stop": RecallDecision.STOP,
        "continue": RecallDecision.CONTINUE,
        "clarify": RecallDecision.CLARIFY,
        "proceed": RecallDecision.PROCEED,
    }
    no_evidence = words[on_no_evidence]
    partial = words[on_partial]
    failed = words[on_failed]

    def decide(seen: PolicyInput) -> PolicyDecision:
        if seen.status is RecallStatus.COMPLETE:
            return PolicyDecision(RecallDecision.PROCEED, "recall complete")
        chosen = {
            RecallStatus.NO_ACCESSIBLE_EVIDENCE: no_evidence,
            RecallStatus.PARTIAL: partial,
            RecallStatus.FAILED: failed,
        }[seen.status]
        reason = f"recall {seen.status.value}" + (f": {'; '.join(seen.problems)}" if seen.problems else "")
        if chosen is RecallDecision.CLARIFY:
            return PolicyDecision(chosen, reason, question)
        return PolicyDecision(chosen, reason)

    name = "current_session_strict" if on_no_evidence == "stop" else "current_session"
    if on_partial != "stop" or on_failed != "stop" or on_no_evidence == "clarify":
        name += f"(partial={on_partial},failed={on_failed},no_evidence={on_no_evidence})"
    return RecallPolicy(name=name, decide=decide, query=query, rank=rank)
