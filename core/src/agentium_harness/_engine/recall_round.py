"""The state every recall round shares, and how it calls an adapter (R17).

Split from :mod:`.recall`: :class:`RecallUsage` (what a run used of each
budget), :class:`Round` (one round's running counters and findings) and
:func:`adapter_call` (one adapter call under what is left of the latency
budget, any failure turned into :class:`.recall_checks.Failed`).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs

from .._observe.state import error_type
from .._ports._base import OpContext
from .._ports.recall import RecallLimits
from .._text import error_text, shorten
from .lifecycle import Ticket
from .recall_checks import Failed
from .results import Diagnostic, Severity

__all__ = [
    "MAX_FINDING_CHARS",
    "MAX_LISTED_PROBLEMS",
    "MAX_LISTED_VIOLATIONS",
    "RecallUsage",
    "Round",
    "VIOLATION",
    "ViolationKey",
    "adapter_call",
    "add_violations",
    "counts_violations",
    "listed_violations",
    "run_worded",
    "violation_key",
]

T = TypeVar("T")

# A store that answers with thousands of bad items must not make a run carry (or log) thousands
# of findings: each one becomes a diagnostic, a WARNING record and a line of the uncertainty the
# run commits. A round lists this many and counts the rest in one line.
#: Contract violations listed per round; the rest are counted in one more.
MAX_LISTED_VIOLATIONS = 16
#: The line counting what a round (or the run) did not list: the engine's own words, read back to
#: merge the counts (a violation's text starts with the operation that broke, never with "and ").
_UNLISTED = re.compile(r"and (\d{1,18}) more contract violation\(s\) in this (round|run), not listed")
#: What makes a contract violation the same as one an earlier round met: ``(kind, item)``, the
#: misbehaviour and what it is about (a source id), never the round's counts (how many were asked).
#: A violation given none is its text (``("", text)``): one whose words hold nothing of the round.
#: The item is whole, never cut as the listed text is (:func:`violation_key`).
ViolationKey = tuple[str, str]
#: The diagnostic code of a contract violation (a WARNING record each, an ``agentium.diagnostic`` event each).
VIOLATION = "recall_contract_violation"
#: Problems (reasons the status is not ``complete``) listed per round; the rest are counted in one more.
MAX_LISTED_PROBLEMS = 32
#: A finding (it may quote what an adapter returned) is cut to this many characters.
MAX_FINDING_CHARS = 400


@attrs.frozen(slots=True)
class RecallUsage:
    """What a run used of each recall budget (R17)."""

    queries: int = 0
    candidates: int = 0
    discovery_bytes: int = 0
    source_bytes: int = 0
    evidence_tokens: int = 0
    validations: int = 0
    latency_s: float = 0.0
    #: Bytes of archived groups read back to render recalled excerpts (``max_readback_bytes``).
    readback_bytes: int = 0


class Round:
    """The mutable state of one recall round: counters, findings and the latency deadline.

    A run's budgets are shared by all its rounds (the first one, the one after
    a clarification, the commit fence): a round starts from what the earlier
    ones ``spent``, so its counters and its latency deadline are what is left
    of the run's. Only the evidence token count is per round: it bounds the
    blocks of the one request the round builds.
    """

    def __init__(
        self,
        limits: RecallLimits,
        spent: RecallUsage,
        hidden: Callable[[str], bool] | None = None,
        *,
        said: set[ViolationKey] | None = None,
        once: bool = False,
    ) -> None:
        self.limits = limits
        #: The keys of the contract violations the run's rounds met, listed or counted (``None``: not
        #: kept): each this round meets is added. One the earlier rounds met is the violation they said,
        #: however this round words it: neither listed (``finish`` drops it) nor counted again; with
        #: ``once``, for a round that validates again what they validated (:func:`~.recall.revalidate`),
        #: not a problem of the round either. Met twice in this round, it is two.
        self.said = said
        self.once = once
        self.earlier = frozenset(said) if said else frozenset()
        #: Source ids the session's view hides (retracted or cleared groups): left out, not read.
        self.hidden = hidden
        self.started = time.monotonic()
        self.spent_latency = spent.latency_s
        self.deadline = self.started + max(0.0, limits.max_latency_s - spent.latency_s)
        self.queries = spent.queries
        self.candidates = spent.candidates
        self.discovery_bytes = spent.discovery_bytes
        self.source_bytes = spent.source_bytes
        self.tokens = 0
        self.validations = spent.validations
        self.readback_bytes = spent.readback_bytes
        self.violations: list[str] = []
        #: Where in :attr:`violations` those an earlier round met are: listed while the round runs (its
        #: checks read the list), dropped by ``finish`` (the run listed them).
        self.repeated: list[int] = []
        self.problems: list[str] = []
        #: The problems as the model's ``recall-status`` notice lists them: the engine's own words, no
        #: adapter's error text and no id an adapter returned (a violation may name another scope's).
        self.shown: list[str] = []
        self.notes: list[str] = []
        self.embedding_failure = ""
        self.crowded = ""
        #: Why recalled documents were hidden as erased (:mod:`.recall_erased_docs`), or empty.
        self.erased_documents = ""
        #: Contract violations found past :data:`MAX_LISTED_VIOLATIONS` (counted by :meth:`finish`).
        self.unlisted = 0
        #: Those an earlier round met (:attr:`said`): a problem of this round, not counted in its
        #: violations again (``finish``).
        self.again = 0
        #: Contract violations not yet counted in :attr:`shown` (one line says how many: ``finish``).
        self.broken = 0
        #: Where in :attr:`shown` that line goes: the place of the first violation among the problems,
        #: so the model's list is cut where the host's is (``finish``), not the count first to go.
        self.counted_at: int | None = None

    def left(self, ticket: Ticket) -> float:
        """Seconds left for the next adapter call: the recall latency budget, within the operation's."""
        return max(0.0, min(self.deadline - time.monotonic(), ticket.op_timeout_s))

    def violation(self, what: str, key: ViolationKey | None = None) -> None:
        """Record a contract violation (it makes the round partial); past the cap it is only counted.

        ``key`` names the misbehaviour and its item (:data:`ViolationKey`; ``None``: the text is the
        key): what makes it the one an earlier round of the run met (:attr:`said`), though this
        round words it with its own counts. Such a one is a problem of this round, neither listed
        (``finish``) nor counted in its violations again (the run's list has it): the round's status
        and what the model is told count it either way. With ``once`` it is not even a problem: such
        a round's status is not made from its violations (the commit fence's is the validations').
        """
        said = self.said
        again = False
        if said is not None:
            key = violation_key(("", what) if key is None else key)  # of the whole text: never cut
            again = key in self.earlier
            if again and self.once:
                return
            said.add(key)
        if len(self.violations) >= MAX_LISTED_VIOLATIONS:
            if again:
                self.again += 1  # counted by the round that met it first: the run's count has it
            else:
                self.unlisted += 1
            return
        if again:
            self.repeated.append(len(self.violations))
        what = shorten(what, MAX_FINDING_CHARS)
        self.violations.append(what)
        self.problems.append(f"contract violation: {what}")
        if self.counted_at is None:
            self.counted_at = len(self.shown)
            self.shown.append("")  # the count's place, filled in by ``finish``
        self.broken += 1  # the model is told how many, never what: see ``finish``

    def problem(self, what: str, shown: str | None = None) -> None:
        """Record why the round is not ``complete``: ``what`` in full, ``shown`` as the model is told it.

        ``shown`` leaves out what an adapter, an embedder or a policy wrote (an
        error's message: a server, a path, a row's text); ``None`` when ``what``
        is the engine's own words throughout (an id it names is one the round
        checked is in the run's scope).
        """
        self.problems.append(what)
        self.shown.append(what if shown is None else shown)

    def finish(self) -> None:
        """Close the findings before they leave the round: what was past each cap counted in one line.

        What an earlier round met (:attr:`repeated`) leaves the round's violations here: the run lists it.
        """
        if self.repeated:
            again = set(self.repeated)
            self.violations[:] = [v for at, v in enumerate(self.violations) if at not in again]
            self.repeated.clear()
        past = self.unlisted + self.again
        if past:
            if self.unlisted:
                self.violations.append(
                    f"and {self.unlisted} more contract violation(s) in this round, not listed"
                )
            self.problems.append(
                f"contract violation: and {past} more contract violation(s) in this round, not listed"
            )
            self.broken += past
            self.unlisted = self.again = 0
        if self.broken:
            # What a violation quotes is the adapter's answer (an id of another scope, a stray text).
            counted = (
                f"the recall store answered out of contract {self.broken} time(s); what it returned there "
                "was dropped"
            )
            if self.counted_at is None:
                self.shown.append(counted)
            else:
                self.shown[self.counted_at] = counted
            self.broken, self.counted_at = 0, None
        for findings in (self.problems, self.shown):
            if len(findings) > MAX_LISTED_PROBLEMS:
                rest = len(findings) - MAX_LISTED_PROBLEMS + 1
                del findings[MAX_LISTED_PROBLEMS - 1 :]
                findings.append(f"and {rest} more problem(s) in this round, not listed")
            findings[:] = [shorten(p, MAX_FINDING_CHARS) for p in findings]

    def usage(self) -> RecallUsage:
        return RecallUsage(
            queries=self.queries,
            candidates=self.candidates,
            discovery_bytes=self.discovery_bytes,
            source_bytes=self.source_bytes,
            evidence_tokens=self.tokens,
            validations=self.validations,
            latency_s=round(self.spent_latency + time.monotonic() - self.started, 6),
            readback_bytes=self.readback_bytes,
        )


def violation_key(key: ViolationKey) -> ViolationKey:
    """``key`` as a round keeps it: an item over :data:`MAX_FINDING_CHARS` by a digest of all of it.

    Not cut as a listed text is: a source id can be longer than that (a document's names six ids of up
    to 256 characters, encoded: a non-ASCII character is nine), and two documents whose ids share their first
    400 characters, or two revisions a store gave past them, were one key, the later violation never
    listed, warned of or counted. The digest's kind is marked, so no short item can be taken for one.
    """
    kind, item = key
    if len(item) <= MAX_FINDING_CHARS:
        return key
    return f"{kind}#", hashlib.blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def listed_violations(listed: Sequence[str], found: Sequence[str]) -> tuple[str, ...]:
    """A run's ``listed`` violations with a later round's ``found`` added, within one bound for the run.

    Each round lists :data:`MAX_LISTED_VIOLATIONS` and counts the rest, but a run has many rounds
    (the document fence's look before each later model call, the commit fence): added up whole,
    ``RunResult.recall.violations`` grew by that many per look. The run lists the first
    :data:`MAX_LISTED_VIOLATIONS` too, and counts every other one (a round's count line included)
    in one last line. With nothing ``found``, ``listed`` is left as it is.
    """
    if not found:
        return tuple(listed)
    kept: list[str] = []
    unlisted = 0
    for what in (*listed, *found):
        counted = _UNLISTED.fullmatch(what)
        if counted is not None:
            unlisted += int(counted[1])
        elif len(kept) < MAX_LISTED_VIOLATIONS:
            kept.append(what)
        else:
            unlisted += 1
    if unlisted:
        kept.append(f"and {unlisted} more contract violation(s) in this run, not listed")
    return tuple(kept)


def run_worded(listed: tuple[str, ...]) -> tuple[str, ...]:
    """A round's ``listed`` violations as the run's list: its count line counts what the run did not list.

    The dispatch fence's first round starts the run's list: when no later round adds to it
    (:func:`listed_violations` words the count for the run), its ``in this round`` line is the run's.
    """
    counted = _UNLISTED.fullmatch(listed[-1]) if listed else None
    if counted is None or counted[2] == "run":
        return listed
    return (*listed[:-1], f"and {counted[1]} more contract violation(s) in this run, not listed")


def counts_violations(what: str) -> bool:
    """Whether ``what`` is the line counting violations a round (or the run) did not list."""
    return _UNLISTED.fullmatch(what) is not None


def add_violations(
    diagnostics: list[Diagnostic], listed: Sequence[str], found: Sequence[str]
) -> tuple[str, ...]:
    """The run's ``listed`` violations with ``found`` added (:func:`listed_violations`), said as listed.

    ``diagnostics`` are the run's, holding one ``recall_contract_violation`` WARNING per line of
    ``listed``: a violation newly listed adds one, and the line counting the rest replaces the
    count already there (or is added). So a run that adds rounds (looks) says no more than it
    lists, the first :data:`MAX_LISTED_VIOLATIONS` and one count for every other, and not one
    WARNING (and span event) per violation of every round: a store answering each look with new
    violations made the records grow with the looks.
    """
    if not found:
        return tuple(listed)
    merged = listed_violations(listed, found)
    shown = sum(not counts_violations(what) for what in listed)
    for what in merged[shown:]:
        said = Diagnostic(VIOLATION, what, Severity.WARNING)
        if counts_violations(what):
            at = next(
                (
                    i
                    for i in range(len(diagnostics) - 1, -1, -1)
                    if diagnostics[i].code == VIOLATION and counts_violations(diagnostics[i].message)
                ),
                None,
            )
            if at is not None:
                diagnostics[at] = said  # one count for the run: the total now
                continue
        diagnostics.append(said)
    return merged


async def adapter_call(
    ticket: Ticket,
    state: Round,
    operation: str,
    work: Callable[[OpContext], Awaitable[T]],
    *,
    remaining_bytes: int | None = None,
    remaining_tokens: int | None = None,
    on_late: Callable[[T], Awaitable[None]] | None = None,
) -> T:
    left = state.left(ticket)
    if left <= 0:
        raise Failed(
            f"{operation} not started: the recall latency budget of {state.limits.max_latency_s}s is spent"
        )
    try:
        return await ticket.call(
            operation,
            work,
            timeout_s=left,
            remaining_bytes=remaining_bytes,
            remaining_tokens=remaining_tokens,
            on_late=on_late,
        )
    except Exception as exc:
        raise Failed(
            f"{operation} failed: {error_text(exc)}", f"{operation} failed: {error_type(exc)}"
        ) from exc
