"""The engine's checks on what a memory store (or an extractor) answers: whatever it returns (R36, R39).

The :class:`~.manager.MemoryManager` trusts no store's own checks: a read
is bounded and must be the asking tenant's and user's (a ``history`` also
the asked fact's), a correction past :data:`MAX_FACT_REVISIONS` is refused
from the revisions read, and an extracted fact may not leave its scope.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Final

import attrs

from ..._errors import ContractViolationError, InvalidArgumentError
from ..._observe import spans as observe
from ..._ports.memory import (
    MAX_FACT_REVISIONS,
    MAX_LOOKUP_LIMIT,
    AckStatus,
    FactStatus,
    MemoryAck,
    MemoryFact,
    MemoryScope,
    StoredFact,
    check_revision,
)
from ..._validators import exact_int
from ..adapter_lists import listed
from ..results import CommitState
from ..unexpected import Outcomes
from .sources_write import names_facts

__all__ = [
    "MEMORY_WRITE",
    "check_cap",
    "check_owner_kind",
    "check_work",
    "checked_ack",
    "checked_facts",
    "checked_history",
    "checked_listing",
    "checked_scope",
    "within",
]

_log = logging.getLogger("agentium.engine.memory")

#: What an unexpected error leaving remember, correct or forget says its state means (docs/memory.md).
MEMORY_WRITE: Outcomes = {
    CommitState.NOT_COMMITTED: (
        "it failed before the store's write began: nothing was written (commit_state not_committed)"
    ),
    CommitState.UNKNOWN: (
        "it failed while the store's write was under way: whether it was written is unknown "
        "(commit_state unknown); read the fact back (list, history) before writing it again"
    ),
    CommitState.COMMITTED: (
        "it failed after the store acknowledged the write: it stands (commit_state committed); "
        "do not write it again"
    ),
}


def checked_ack(ack: object, operation: str, fact_id: str | None = None) -> MemoryAck:
    """``ack`` if it acknowledges the write asked for (the fact asked about, a real revision)."""
    # The host is told what was written: the fact it asked about (a correction or a forget)
    # at a real revision, never another fact's id or a revision of None, True or -1.
    if not isinstance(ack, MemoryAck):
        raise ContractViolationError(_ACK_RULE.format(operation, type(ack).__name__))
    # Compared and kept as the exact str and int they hold: a subclass's own ``__ne__`` or ``__lt__``
    # could pass another fact's id or a revision of 0, and its methods would run again where the ack goes.
    said, revision = ack.fact_id, ack.revision
    exact = type(said) is str and type(revision) is int
    if not exact:
        said = str.__str__(said) if isinstance(said, str) else None
        revision = exact_int(revision)
    if (
        ack.status is AckStatus.REJECTED
        or said is None
        or (fact_id is not None and said != fact_id)
        or revision is None
        or revision < 1
    ):
        shown = (
            repr(ack)
            if exact
            else f"a MemoryAck of {type(ack.fact_id).__name__} {type(ack.revision).__name__}"
        )
        raise ContractViolationError(_ACK_RULE.format(operation, shown))
    return ack if exact else attrs.evolve(ack, fact_id=said, revision=revision)


_ACK_RULE: Final = (
    "{} returned {}: a store acknowledges with a MemoryAck naming the fact asked about and its "
    "revision (and raises MemoryRejectedError to refuse)"
)


def check_cap(revisions: Sequence[StoredFact], replacement: MemoryFact) -> None:
    """Refuse a correction past :data:`MAX_FACT_REVISIONS` whatever the store would do (engine-enforced).

    ``revisions`` is the owner check's history read. A replacement identical
    to the current revision, citing no group it does not, is left to the
    store (it answers ``DUPLICATE``, writing nothing); one citing new groups
    would be a revision (``merged_provenance``), refused at the cap.
    """
    if not revisions:
        return
    latest = revisions[-1]
    if latest.status is FactStatus.FORGOTTEN:
        return  # the store refuses it as forgotten (MemoryFactForgottenError), the more useful answer
    held = max(len(revisions), latest.revision)
    if held < MAX_FACT_REVISIONS:
        return
    same = latest.fact
    if (same.scope, same.text, same.valid_from, same.valid_until) == (
        replacement.scope,
        replacement.text,
        replacement.valid_from,
        replacement.valid_until,
    ) and set(replacement.provenance) <= set(same.provenance):
        return
    check_revision(held)


def within(scope: MemoryScope, proposed: MemoryScope) -> bool:
    """True if ``proposed`` is ``scope`` or narrower: same tenant and user, and its project and repository.

    An extracted fact (what a model said) must not widen itself: from a conversation in project
    ``p`` it may not claim project ``q``, nor every project of the user (``project=None``).
    """
    return (
        scope.owns(proposed)
        and scope.project in (None, proposed.project)
        and scope.repository in (None, proposed.repository)
    )


def checked_scope(scope: object) -> MemoryScope:
    """``scope`` if it is a :class:`MemoryScope`; else :class:`InvalidArgumentError`."""
    if not isinstance(scope, MemoryScope):
        raise InvalidArgumentError(f"scope must be a MemoryScope, got {type(scope).__name__}")
    return scope


def checked_facts(raw: object, scope: MemoryScope, limit: int, operation: str) -> tuple[StoredFact, ...]:
    """A store's answer: at most ``limit`` facts ``scope`` owns, as a tuple (else ContractViolationError)."""
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise ContractViolationError(f"{operation} returned {type(raw).__name__}, not a sequence")
    # One past the limit is enough to refuse; an iteration that raises is the store's contract
    # broken (ContractViolationError), not a foreign exception reaching the host.
    facts = tuple(listed(raw, limit, operation, "facts"))
    if len(facts) > limit:
        raise ContractViolationError(f"{operation} returned more than {limit} facts, over its limit")
    for fact in facts:
        if not isinstance(fact, StoredFact) or not scope.owns(fact.scope):
            raise ContractViolationError(
                f"{operation} returned a fact of another tenant or user; nothing was changed"
            )
    return facts  # type: ignore[return-value]  # each a StoredFact, checked above


def checked_history(raw: object, scope: MemoryScope, fact_id: str, operation: str) -> tuple[StoredFact, ...]:
    """A store's ``history`` of ``fact_id``: bounded, owned by ``scope``, and every revision ``fact_id``'s.

    ``runtime.forget`` erases the groups the revisions cite: another fact's
    revisions would have it erase that fact's sources (ContractViolationError instead).
    """
    revisions = checked_facts(raw, scope, MAX_LOOKUP_LIMIT, operation)
    if any(r.fact_id != fact_id for r in revisions):
        # Hosts log error texts, and an id is content: named only with content capture (sources_write).
        named = repr(fact_id) if names_facts() else "a fact"
        raise ContractViolationError(
            f"{operation}: the store's history of {named} holds another fact; nothing was changed"
        )
    return revisions


def checked_listing(
    facts: Sequence[StoredFact], forgotten: Collection[str], operation: str
) -> tuple[StoredFact, ...]:
    """A ``list_facts`` answer (already :func:`checked_facts`) with what a listing may not hold dropped.

    A listing is of current facts, each once: a fact listed again, one whose
    status is not ``current`` (a tombstone or a replaced revision), or one
    forgotten through this manager (a store listing it as current) is
    dropped, whatever the store returned, and the drops are a WARNING on
    ``agentium.engine.memory`` and an ``agentium.memory.listing_incomplete``
    event on the span current (the listing's ``search_memory``): counts only,
    never a fact's text or id.
    """
    kept: list[StoredFact] = []
    seen: set[str] = set()
    why: Counter[str] = Counter()
    for fact in facts:
        if fact.fact_id in seen:
            why["listed twice"] += 1
        elif fact.fact_id in forgotten:
            why["forgotten through this manager"] += 1
        elif fact.status is not FactStatus.CURRENT:
            why[f"{fact.status.value}, not current"] += 1
        else:
            kept.append(fact)
        seen.add(fact.fact_id)  # a second entry of the id is dropped, whichever the first was
    if why:
        _log.warning(
            "%s: the store listed %d fact(s) a listing may not hold; dropped (%s)",
            operation,
            sum(why.values()),
            ", ".join(f"{n} {reason}" for reason, n in sorted(why.items())),
            extra={"agentium_dropped": sum(why.values())},
        )
        observe.current_span_event(
            "agentium.memory.listing_incomplete", {"agentium.memory.dropped": sum(why.values())}
        )
    return tuple(kept)


def check_work(name: object, kind: object, work: object) -> None:
    """Owned work's name and kind must be text (a drain names them), its work callable."""
    for what, value in (("name", name), ("kind", kind)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgumentError(f"owned work's {what} must be a non-empty str, got {value!r}")
    if not callable(work):
        raise InvalidArgumentError(f"owned work must be callable, got {type(work).__name__}")


def check_owner_kind(owner: object) -> None:
    """A history claim's owner kind: ``"harness"`` or ``"agent"``."""
    if owner not in ("harness", "agent"):
        raise InvalidArgumentError(f"owner must be 'harness' or 'agent', got {owner!r}")
