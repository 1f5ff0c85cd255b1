"""What the engine checks on everything a recall store's discover and read return (R10, R13, R17).

Split from :mod:`.recall` (the round itself): each check takes the round's
running counters (:class:`RoundState`), drops whatever breaks a bound, the
scope or the request whole, records why as a contract violation, and
raises :class:`Failed` when the answer as a whole is nonsense.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from .._errors import ContractViolationError
from .._history import estimate_tokens
from .._ports.recall import Candidate, Excerpt, RecallLimits, SourceRef, source_owner
from .._scope import Scope
from .._validators import lone_surrogate_at
from .adapter_lists import listed
from .recall_items import candidate_fault, exact_candidate, exact_ref, excerpt_fault, visible

__all__ = ["Failed", "RoundState", "capped", "checked_candidates", "checked_excerpts", "same_candidates"]


class Failed(Exception):
    """Recall failed as a whole (the store raised, timed out or returned nonsense).

    Its message is the reason in full, for the host (``RunResult``, diagnostics); ``shown`` is the
    reason as the model's ``recall-status`` notice gives it: the engine's own words only, never an
    adapter's error text (it may name a server, a path, another scope's ids). ``None``: the message
    is the engine's own words throughout.
    """

    def __init__(self, message: str, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = message if shown is None else shown


class RoundState(Protocol):
    """The counters of one recall round the checks read and advance (see ``recall_round.Round``)."""

    limits: RecallLimits
    #: When the round's latency budget ends (``time.monotonic()``).
    deadline: float
    candidates: int
    discovery_bytes: int
    source_bytes: int
    tokens: int
    #: Bytes of archived groups the run read back to render recalled excerpts (``max_readback_bytes``).
    readback_bytes: int
    violations: list[str]
    problems: list[str]
    notes: list[str]
    #: Which source ids the session's view hides (retracted or cleared), or ``None``.
    hidden: Callable[[str], bool] | None

    def violation(self, what: str, key: tuple[str, str] | None = None) -> None:
        """Record a contract violation (it also makes the round partial); ``key``: its ``(kind, item)``."""

    def problem(self, what: str, shown: str | None = None) -> None:
        """Record why the round is not ``complete`` (``shown``: as the model is told, see ``Failed``)."""


def capped(raw: object, asked: int, operation: str, what: str, state: RoundState) -> list[object]:
    """The first ``asked`` items of an adapter's answer; more is one contract violation, the rest unseen.

    Every item the engine looks at costs checks, findings and log lines, so
    what a store returns past what it was asked for is never looked at: the
    answer is read through its iterator to one item past ``asked`` at most
    (:func:`.adapter_lists.listed`; its ``__len__`` and slicing are never
    trusted), and an answer that is no sequence, or cannot be read, fails
    the round (:class:`Failed`).
    """
    try:
        items = listed(raw, asked, f"recall {operation}", what)
    except ContractViolationError as exc:
        raise Failed(
            str(exc), f"recall {operation} answered out of contract; nothing of it was used"
        ) from exc
    if len(items) <= asked:
        return items
    # The same misbehaviour whatever was asked: a look asks for fewer answers than recall did.
    state.violation(
        f"{operation} returned more than the {asked} {what} asked; the extra were ignored",
        (f"{operation} returned more than asked", what),
    )
    return items[:asked]


#: Hidden sources a note names; the rest are counted.
_NAMED_HIDDEN = 5


def checked_candidates(
    raw: object, state: RoundState, scope: Scope, asked: int, *, earlier: set[str] | None = None
) -> tuple[list[Candidate], int, int]:
    """``(the candidates that pass every check, in order; how many the view hid; how many were read)``.

    The last is what the store answered, counted as read (one past ``asked``
    at most), never by the answer's own ``__len__``: fewer than ``asked``
    means the store has no more matches.

    What fails a check is dropped as a violation.

    ``earlier`` holds the source ids a previous discovery call of the same
    round already handled (kept, hidden or dropped): a call that asked for
    more because the view hid candidates gets them again first, so they are
    skipped without being counted or reported twice. The ids this call
    handles are added to it.
    """
    limits = state.limits
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise Failed(f"recall discover returned {type(raw).__name__}, not a sequence of candidates")
    left = limits.max_candidates - state.candidates
    prior = frozenset(earlier) if earlier is not None else frozenset()
    kept: list[Candidate] = []
    seen: set[str] = set()
    hidden: list[str] = []
    items = capped(raw, asked, "discover", "candidates", state)
    for item in items:
        fault = candidate_fault(item)
        if fault is not None:
            state.violation(f"discover returned {fault}; dropped")
            continue
        assert isinstance(item, Candidate)
        item = exact_candidate(item)
        sid = item.ref.source_id
        if sid in prior:
            continue
        if earlier is not None:
            earlier.add(sid)
        encoded = source_owner(sid)
        if encoded is None:
            state.violation(
                f"discover returned {sid!r}, which is not a recall source id "
                "(document_source_id or group_source_id); dropped"
            )
            continue
        if encoded != item.owner:
            # A store that mislabels the owner could otherwise pass another
            # tenant's source off as visible: the id is what it indexed under.
            state.violation(
                f"discover returned {sid!r} declaring an owner other than the one its id encodes; dropped"
            )
            continue
        # The owner the id encodes, decoded by the engine: the adapter's owner object (a subclass's
        # own visible_to or ==) could pass the comparison above and any scope.
        if not visible(encoded, scope):
            state.violation(f"discover returned {sid!r} from outside the run's scope; dropped")
            continue
        if state.hidden is not None and state.hidden(sid):
            hidden.append(sid)
            continue
        if len(kept) >= left:
            # Only a later call asks for more than are left (to get past hidden ones): enough were found.
            continue
        if sid in seen:
            state.violation(f"discover returned {sid!r} twice; the repeat was dropped")
            continue
        cost = item.discovery_bytes
        if state.discovery_bytes + cost > limits.max_discovery_bytes:
            state.violation(
                f"discover exceeded max_discovery_bytes={limits.max_discovery_bytes}; {sid!r} dropped"
            )
            continue
        state.discovery_bytes += cost
        seen.add(sid)
        kept.append(item)
    state.candidates += len(kept)
    if hidden:
        # One note per call, naming the first few (a store's answer may hold many).
        named = ", ".join(hidden[:_NAMED_HIDDEN]) + (", …" if len(hidden) > _NAMED_HIDDEN else "")
        state.notes.append(
            f"{len(hidden)} source(s) left out: retracted or cleared from the session's view, "
            f"or erased ({named})"
        )
    return kept, len(hidden), len(items)


def same_candidates(ranked: object, candidates: list[Candidate], state: RoundState) -> list[Candidate]:
    """The ranker's order, holding only candidates it was given, each once.

    A ranker may only reorder and drop what it was given, so its answer is
    read through its iterator to one item past ``len(candidates)`` at most
    (:func:`.adapter_lists.listed`: an endless or huge answer is never walked
    to its end, nor its ``__len__`` trusted). Longer, not a sequence, or
    unreadable fails the round (:class:`Failed`), as its raising does.
    """
    given = len(candidates)
    try:
        items = listed(ranked, given, "recall ranking", "candidates")
    except ContractViolationError as exc:
        raise Failed(str(exc), "recall ranking answered out of contract; nothing of it was used") from exc
    if len(items) > given:
        raise Failed(
            f"recall ranking returned more than the {given} candidates it was given (it may only reorder "
            "or drop them); nothing of it was used"
        )
    allowed = {id(c) for c in candidates}
    out: list[Candidate] = []
    used: set[int] = set()
    for c in items:
        if id(c) not in allowed or id(c) in used:
            state.problem("ranking returned a candidate it was not given (or twice); dropped")
            continue
        used.add(id(c))
        out.append(c)  # type: ignore[arg-type]  # one of ``candidates``: checked by identity above
    return out


def checked_excerpts(raw: object, state: RoundState, scope: Scope, asked: list[Candidate]) -> list[Excerpt]:
    """The excerpts that pass every check, in the ranker's order; the rest dropped as violations."""
    limits = state.limits
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise Failed(f"recall read returned {type(raw).__name__}, not a sequence of excerpts")
    wanted = {c.ref: c for c in asked}
    got: dict[SourceRef, Excerpt] = {}
    for item in capped(raw, len(asked), "read", "excerpts", state):
        fault = excerpt_fault(item)
        if fault is not None:
            state.violation(f"read returned {fault}; dropped")
            continue
        assert isinstance(item, Excerpt)
        ref = exact_ref(item.ref)
        sid, text = ref.source_id, item.text
        # The text as a plain copy, read once: a str subclass's own encode or translate (its size,
        # its escaping in the request) is never trusted, and what is checked is what is kept.
        text = str.__str__(text) if isinstance(text, str) else text
        if any(
            not isinstance(t, str) or lone_surrogate_at(str.__str__(t)) is not None
            for t in (text, sid, ref.revision)
        ):
            # It could never be rendered, stored or hashed: refused before it reaches the request.
            state.violation(
                f"read returned {sid!r} with text that is not valid Unicode (a lone surrogate); dropped"
            )
            continue
        candidate = wanted.get(ref)
        # Visibility of the owner the id encodes (decoded here), never the adapter's owner object.
        encoded = source_owner(sid)
        if encoded is None or not visible(encoded, scope) or not visible(item.owner, scope):
            state.violation(f"read returned {sid!r} from outside the run's scope; dropped")
            continue
        if candidate is None:
            state.violation(
                f"read returned {sid!r} at revision {ref.revision!r}, which was not asked for; dropped"
            )
            continue
        if item.owner != candidate.owner:
            state.violation(f"read returned {sid!r} with another owner than discovery reported; dropped")
            continue
        if ref in got:
            state.violation(f"read returned {sid!r} twice; the repeat was dropped")
            continue
        assert isinstance(text, str)
        size = len(text.encode("utf-8"))
        if size > limits.max_excerpt_bytes:
            state.violation(
                f"read returned {size} bytes for {sid!r}, "
                f"over max_excerpt_bytes={limits.max_excerpt_bytes}; dropped",
                ("read over max_excerpt_bytes", sid),
            )
            continue
        if state.source_bytes + size > limits.max_source_bytes:
            state.violation(f"read exceeded max_source_bytes={limits.max_source_bytes}; {sid!r} dropped")
            continue
        tokens = estimate_tokens(text)
        if state.tokens + tokens > limits.max_evidence_tokens:
            state.violation(
                f"read exceeded max_evidence_tokens={limits.max_evidence_tokens}; {sid!r} dropped"
            )
            continue
        state.source_bytes += size
        state.tokens += tokens
        got[ref] = Excerpt(ref, item.owner, text, item.completeness, item.omitted)
    for candidate in asked:
        named = repr(candidate.ref.source_id)  # quoted, as a violation names it: 'rota-1' is not in 'rota-10'
        if candidate.ref not in got and not any(named in v for v in state.violations):
            state.problem(f"source {candidate.ref.source_id} was discovered but not read")
    # Rank order is the ranker's, whatever order the store answered in.
    return [got[c.ref] for c in asked if c.ref in got]
