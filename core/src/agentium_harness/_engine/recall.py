"""Step 3a of a turn: recall evidence under budgets the engine enforces itself (R11–R13, R17–R19).

:func:`gather_evidence` opens a scoped recall session, discovers, reads and
validates, and closes the session on every path (also when a call is
cancelled or times out). Every adapter call runs under the recall latency
budget through :meth:`.lifecycle.Ticket.call`. Whatever the adapter declared,
everything it returns is checked here: item types, scope (on every item),
count, discovery bytes, excerpt bytes, source bytes and estimated tokens.
An item that breaks a bound is dropped whole and reported as a contract
violation, and the status becomes ``partial``. Nothing is ever cut inside an
excerpt: excerpts become labeled source blocks and are assembled whole, in
rank order, under the evidence token budget with their wrappers counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel
import attrs

from .._observe.spans import error_type
from .._ports.embedder import Vector
from .._ports.provider import SourceBlock, SourceKind
from .._ports.recall import (
    Excerpt,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceRef,
    Validation,
    ValidationStatus,
)
from .._scope import Scope
from .._text import error_text
from .embedding import Hybrid, embed_query
from .lifecycle import Ticket
from .recall_checks import Failed as _Failed
from .recall_checks import capped, checked_excerpts, same_candidates
from .recall_close import close, close_late
from .recall_discovery import discover_visible
from .recall_erased_docs import hide_erased_documents
from .recall_groups import attributed_texts
from .recall_items import exact_validation, validation_fault
from .recall_policy import QueryInput, RecallPolicy, RecallStatus
from .recall_readback import GroupReader
from .recall_round import RecallUsage, Round, adapter_call
from .sources import assemble_sources

__all__ = [
    "Evidence",
    "RecallUsage",
    "gather_evidence",
    "revalidate",
    "truncate_utf8",
]

_log = logging.getLogger("agentium.engine.recall")


@attrs.frozen(slots=True)
class Evidence:
    """What one round of recall produced, before the policy decides.

    ``blocks`` are the included source blocks in rank order, ``refs`` the refs
    behind them (same order); ``omitted`` the source ids left out by
    allocation; ``violations`` the contract violations found (each dropped
    item; past a bound, counted in one); ``invalidated`` the validations that removed a source;
    ``problems`` every reason the status is not ``complete``, and ``shown``
    the same as the model's ``recall-status`` notice lists them: no adapter's
    error text, no id an adapter returned out of contract (``Round.problem``).
    """

    status: RecallStatus
    query: str
    blocks: tuple[SourceBlock, ...] = ()
    refs: tuple[SourceRef, ...] = ()
    omitted: tuple[str, ...] = ()
    violations: tuple[str, ...] = ()
    invalidated: tuple[Validation, ...] = ()
    problems: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    usage: RecallUsage = attrs.field(factory=RecallUsage)
    #: Why the query could not be embedded (hybrid recall fell back to words), or empty.
    embedding_failure: str = ""
    #: Why discovery stopped while candidates the view hides may have crowded visible ones out, or empty.
    crowded: str = ""
    #: Why recalled documents were hidden: an erasure of their owner their recall store missed, or empty.
    erased_documents: str = ""

    @property
    def allocation_omitted(self) -> bool:
        """True when whole excerpts were left out because a budget could not hold them (R22)."""
        return bool(self.omitted)


def truncate_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes at a character boundary."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")


async def gather_evidence(
    ticket: Ticket,
    store: RecallStore,
    scope: Scope,
    limits: RecallLimits,
    policy: RecallPolicy,
    turn: QueryInput,
    *,
    spent: RecallUsage | None = None,
    hidden: Callable[[str], bool] | None = None,
    hybrid: Hybrid | None = None,
    groups: GroupReader | None = None,
    said: set[tuple[str, str]] | None = None,
) -> Evidence:
    """One round of recall for ``turn``: query, discover, rank, read, assemble, validate (fence 1).

    ``spent`` is what earlier rounds of the same run used; this round gets
    only what is left of each budget, and its usage includes theirs.
    ``hidden`` says which source ids the session's view hides (groups a
    retraction touched or a reset cleared): they are left out before reading.
    With ``hybrid``, the query is embedded and discovery is the store's
    ``discover_hybrid`` (lexical and vector candidates fused); if embedding
    fails, discovery is lexical and the round is ``partial``, saying why.
    ``groups`` reads the session's groups back, digest-checked: each
    recalled group's excerpt is rendered from its group, one line per
    message (:mod:`.recall_groups`); without it, a group excerpt is shown on
    one line, its roles unchecked, and the round is ``partial``. ``said`` gets the key of every
    violation the round met, listed or counted; one met before is not listed again (:class:`Round`).
    """
    state = Round(limits, spent if spent is not None else RecallUsage(), hidden, said=said)
    try:
        query = policy.query(turn)
    except Exception as exc:
        why = "query formulation raised "
        return _failed(state, "", why + error_text(exc), why + error_type(exc))
    if not isinstance(query, str):
        return _failed(state, "", f"query formulation returned {type(query).__name__}, not str")
    query = query.strip()
    if len(query.encode("utf-8", "surrogatepass")) > limits.max_query_bytes:
        query = truncate_utf8(query, limits.max_query_bytes)
        state.notes.append(f"recall query truncated to {limits.max_query_bytes} bytes")
    if not query:
        state.notes.append("recall query is empty; no store call was made")
        return Evidence(
            RecallStatus.NO_ACCESSIBLE_EVIDENCE, "", notes=tuple(state.notes), usage=state.usage()
        )
    if state.queries >= limits.max_queries:
        return _failed(state, query, f"the query budget ({limits.max_queries}) is spent")
    state.queries += 1
    session: RecallSession | None = None
    until = anyio.current_effective_deadline()  # the caller's, for the close (recall_close.close)
    try:
        try:
            opened = await adapter_call(
                ticket, state, "recall open", lambda ctx: store.open(scope, limits, ctx), on_late=close_late
            )
            if not callable(getattr(opened, "discover", None)):
                raise _Failed(f"recall open returned {type(opened).__name__}, not a recall session")
            session = opened
            evidence = await _gather_open(ticket, state, session, scope, policy, query, hybrid, groups)
        finally:
            if session is not None:
                await close(session, state, until, ticket.late)
    except _Failed as exc:
        return _failed(state, query, str(exc), exc.shown)
    # The session closes after the evidence is built: what its close noted is carried over, not lost.
    return attrs.evolve(evidence, notes=tuple(state.notes))


def _failed(state: Round, query: str, why: str, shown: str | None = None) -> Evidence:
    state.problem(why, shown)
    state.finish()
    return Evidence(
        RecallStatus.FAILED,
        query,
        violations=tuple(state.violations),
        problems=tuple(state.problems),
        shown=tuple(state.shown),
        notes=tuple(state.notes),
        usage=state.usage(),
        embedding_failure=state.embedding_failure,
        crowded=state.crowded,
    )


async def _query_vector(ticket: Ticket, state: Round, hybrid: Hybrid, query: str) -> Vector | None:
    """The query's vector, or ``None`` (and a problem recorded) when embedding failed.

    The embedding gets at most half of what is left of the recall latency
    budget, so an embedder that hangs still leaves lexical discovery its time.
    """
    left = state.left(ticket) / 2
    shown = None
    if left <= 0:
        why = "query embedding not started: the recall latency budget is spent; discovery was lexical only"
    else:
        try:
            return await embed_query(ticket, hybrid, query, left)
        except Exception as exc:
            why = f"query embedding failed ({error_text(exc)}); discovery was lexical only"
            shown = f"query embedding failed ({error_type(exc)}); discovery was lexical only"
    state.problem(why, shown)
    state.embedding_failure = why
    return None


async def _gather_open(
    ticket: Ticket,
    state: Round,
    session: RecallSession,
    scope: Scope,
    policy: RecallPolicy,
    query: str,
    hybrid: Hybrid | None,
    groups: GroupReader | None,
) -> Evidence:
    limits = state.limits
    wanted = limits.max_candidates - state.candidates
    discovery_left = limits.max_discovery_bytes - state.discovery_bytes
    if wanted <= 0 or discovery_left <= 0:
        raise _Failed(
            f"discovery not started: the run's candidate budget (max_candidates={limits.max_candidates}, "
            f"max_discovery_bytes={limits.max_discovery_bytes}) is spent"
        )
    vector = await _query_vector(ticket, state, hybrid, query) if hybrid is not None else None
    candidates = await discover_visible(ticket, state, session, scope, query, vector, wanted)
    try:
        ranked_raw = policy.rank(list(candidates))
    except Exception as exc:
        raise _Failed(f"ranking raised {error_text(exc)}", f"ranking raised {error_type(exc)}") from exc
    # Read no further than one past what the ranker was given (it may only reorder or drop).
    ranked = same_candidates(ranked_raw, candidates, state)
    # Each included source is validated twice (before dispatch and before
    # commit), so what is left of the validation budget caps how many sources are read.
    readable = max(0, (limits.max_validations - state.validations) // 2)
    source_left = limits.max_source_bytes - state.source_bytes
    if source_left <= 0:
        readable = 0
    to_read, omitted = ranked[:readable], [c.ref.source_id for c in ranked[readable:]]
    for source_id in omitted:
        why = (
            f"the run's source byte budget (max_source_bytes={limits.max_source_bytes}) is spent"
            if source_left <= 0
            else f"what is left of the validation budget covers {readable} sources"
        )
        state.problem(f"source {source_id} left out: {why}")
    excerpts: list[Excerpt] = []
    if to_read:
        refs = [c.ref for c in to_read]
        raw_excerpts = await adapter_call(
            ticket,
            state,
            "recall read",
            lambda ctx: session.read(refs, limits.max_excerpt_bytes, ctx),
            remaining_bytes=source_left,
            remaining_tokens=limits.max_evidence_tokens,
        )
        excerpts = checked_excerpts(raw_excerpts, state, scope, to_read)
    texts = await attributed_texts(excerpts, state, scope, groups)
    await hide_erased_documents(excerpts, texts, state, groups)  # an erasure the recall store missed
    # ``None``: hidden (a group of the session as erased before its id was used again), said in a note.
    shown = [(e, text) for e, text in zip(excerpts, texts, strict=True) if text is not None]
    excerpts = [e for e, _ in shown]
    blocks = [_block(e, text, rank) for rank, (e, text) in enumerate(shown, start=1)]
    assembly = assemble_sources(blocks, limits.max_evidence_tokens)
    for source_id in assembly.omitted:
        omitted.append(source_id)
        state.problem(f"source {source_id} left out whole: it did not fit the evidence token budget")
    included = [e for e in excerpts if e.ref.source_id not in set(assembly.omitted)]
    kept_blocks = list(assembly.included)
    invalidated: list[Validation] = []
    if included:
        checked = await validate_refs(ticket, state, session, [e.ref for e in included])
        invalidated = [v for v in checked if v.status is not ValidationStatus.CURRENT]
        gone = {v.ref.source_id for v in invalidated}
        for v in invalidated:
            state.problem(f"source {v.ref.source_id} is {v.status.value} at the dispatch fence")
        included = [e for e in included if e.ref.source_id not in gone]
        kept_blocks = [b for b in kept_blocks if b.source_id not in gone]
    state.tokens = sum(b.estimated_tokens for b in kept_blocks)
    state.finish()
    if state.problems:
        status = RecallStatus.PARTIAL
    elif not included:
        status = RecallStatus.NO_ACCESSIBLE_EVIDENCE
    else:
        status = RecallStatus.COMPLETE
    return Evidence(
        status,
        query,
        blocks=tuple(kept_blocks),
        refs=tuple(e.ref for e in included),
        omitted=tuple(omitted),
        violations=tuple(state.violations),
        invalidated=tuple(invalidated),
        problems=tuple(state.problems),
        shown=tuple(state.shown),
        notes=tuple(state.notes),
        usage=state.usage(),
        embedding_failure=state.embedding_failure,
        crowded=state.crowded,
        erased_documents=state.erased_documents,
    )


def _block(excerpt: Excerpt, text: str, rank: int) -> SourceBlock:
    """An excerpt shown as ``text`` in a labeled block: id, revision, completeness, omissions (R18, R19)."""
    omitted = ",".join(sorted(o.value for o in excerpt.omitted)) or "none"
    return SourceBlock(
        SourceKind.RECALL,
        excerpt.ref.source_id,
        text,
        (
            ("revision", excerpt.ref.revision),
            ("completeness", excerpt.completeness.value),
            ("omitted-context", omitted),
            ("rank", str(rank)),
        ),
    )


async def validate_refs(
    ticket: Ticket, state: Round, session: RecallSession, refs: list[SourceRef]
) -> list[Validation]:
    """Current-view validation of ``refs`` (R24): one answer per ref, or the ref counts as unknown."""
    if state.validations + len(refs) > state.limits.max_validations:
        raise _Failed(
            f"validating {len(refs)} sources would exceed max_validations={state.limits.max_validations}"
        )
    state.validations += len(refs)
    raw = await adapter_call(
        ticket, state, "recall validate_current", lambda ctx: session.validate_current(refs, ctx)
    )
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise _Failed(f"recall validate_current returned {type(raw).__name__}, not a sequence")
    answers: dict[SourceRef, Validation] = {}
    for item in capped(raw, len(refs), "validate_current", "answers", state):
        fault = validation_fault(item)
        if fault is not None:
            state.violation(f"validate_current returned {fault}; ignored")
            continue
        assert isinstance(item, Validation)
        item = exact_validation(item)  # compared, kept and named as the plain text it holds
        if item.ref not in refs or item.ref in answers:  # worded apart: a violation is keyed by its text
            why = (
                "twice" if item.ref in answers else f"at revision {item.ref.revision!r}, which was not asked"
            )
            state.violation(f"validate_current answered for {item.ref.source_id!r} {why}")
            continue
        if (
            item.status is ValidationStatus.CURRENT
            and item.current_revision is not None
            and item.current_revision != item.ref.revision
        ):
            # "Current" at another revision than the one read is a change, whatever the store calls it.
            state.violation(
                f"validate_current called {item.ref.source_id!r} current at revision "
                f"{item.current_revision!r}, not the {item.ref.revision!r} that was read; treated as changed"
            )
            item = Validation(item.ref, ValidationStatus.CHANGED, item.current_revision)
        answers[item.ref] = item
    out: list[Validation] = []
    for ref in refs:
        found = answers.get(ref)
        if found is None:
            state.violation(f"validate_current gave no answer for {ref.source_id!r}; treated as unknown")
            found = Validation(ref, ValidationStatus.UNKNOWN)
        out.append(found)
    return out


async def revalidate(
    ticket: Ticket,
    store: RecallStore,
    scope: Scope,
    limits: RecallLimits,
    refs: Sequence[SourceRef],
    spent: RecallUsage,
    *,
    said: set[tuple[str, str]] | None = None,
) -> tuple[list[Validation], list[str], list[str], _Failed | None, RecallUsage]:
    """The commit fence (R24): validate the included sources again in a fresh, closed-on-every-path session.

    It runs on what the dispatch rounds left of the run's budgets
    (``spent``). Returns ``(validations, violations, notes, failure, usage)``;
    ``failure`` is set when the fence could not run (the store raised or
    timed out, or a budget was spent), which counts as ``failed``: its text
    is the reason in full, its ``shown`` the engine's words alone (what may
    be committed or shown to the model); ``usage`` is the run's, this fence
    included. ``said``: the keys of the violations the run met, not said again (:class:`Round`).
    """
    state = Round(limits, spent, said=said, once=True)
    session: RecallSession | None = None
    until = anyio.current_effective_deadline()  # the caller's: the look's, the keep's (recall_close.close)
    try:
        try:
            opened = await adapter_call(
                ticket, state, "recall open", lambda ctx: store.open(scope, limits, ctx), on_late=close_late
            )
            if not callable(getattr(opened, "validate_current", None)):
                raise _Failed(f"recall open returned {type(opened).__name__}, not a recall session")
            session = opened
            checked = await validate_refs(ticket, state, session, list(refs))
        finally:
            if session is not None:
                await close(session, state, until, ticket.late)
    except _Failed as exc:
        state.finish()
        return [], state.violations, state.notes, exc, _fence_usage(state, spent)
    state.finish()
    return checked, state.violations, state.notes, None, _fence_usage(state, spent)


def _fence_usage(state: Round, spent: RecallUsage) -> RecallUsage:
    """The run's usage after the commit fence: its validations and latency added; the evidence as sent."""
    return attrs.evolve(state.usage(), evidence_tokens=spent.evidence_tokens)
