"""What the engine checks on each item a recall store returns, before it touches any field (R10, R13).

Candidates, excerpts and validations are plain attrs records an adapter
can fill with anything, so every field is checked here for its type; the
caller in :mod:`.recall` drops a faulty item as a contract violation.
"""

from __future__ import annotations

import math

from .._ports.recall import (
    Candidate,
    Completeness,
    Excerpt,
    OmittedContext,
    SourceOwner,
    SourceRef,
    Validation,
    ValidationStatus,
)
from .._scope import Scope
from .._validators import exact_int, exact_number, shown_number

__all__ = [
    "candidate_fault",
    "exact_candidate",
    "exact_ref",
    "exact_validation",
    "excerpt_fault",
    "validation_fault",
    "visible",
]


def _is_ref(ref: object) -> bool:
    return isinstance(ref, SourceRef) and isinstance(ref.source_id, str) and isinstance(ref.revision, str)


def _is_count(value: object) -> bool:
    # The int a subclass holds: its own ``__ge__`` could pass a negative count.
    count = value if type(value) is int else exact_int(value)
    return count is not None and count >= 0


def exact_ref(ref: SourceRef) -> SourceRef:
    """``ref`` (checked by :func:`_is_ref`) with exact ``str`` fields: a subclass's text copied.

    Its own ``__eq__``, ``__hash__`` or ``encode`` would otherwise decide which source an
    item is, and what it costs, after the check.
    """
    if type(ref.source_id) is str and type(ref.revision) is str:
        return ref
    return SourceRef(str.__str__(ref.source_id), str.__str__(ref.revision))


def exact_candidate(item: Candidate) -> Candidate:
    """A :class:`Candidate` that passed :func:`candidate_fault`, holding the exact values checked.

    A subclass of ``int``, ``float`` or ``str`` in it is replaced by the number or text it
    holds, so no method of the adapter's class runs later (ranking negates the score).
    """
    score, size, title, ref = item.score, item.size_bytes, item.title, item.ref
    if (
        (type(score) is float or type(score) is int)
        and type(size) is int
        and type(title) is str
        and type(ref.source_id) is str
        and type(ref.revision) is str
    ):
        return item
    return Candidate(exact_ref(ref), item.owner, exact_number(score), exact_int(size), str.__str__(title))  # type: ignore[arg-type]


def exact_validation(item: Validation) -> Validation:
    """A :class:`Validation` that passed :func:`validation_fault`, holding the exact text checked.

    A ``str`` subclass's own ``__eq__`` and ``__hash__`` could make an answer for
    another source (another scope's id) pass for the one asked, and its text be
    reported as that source's (in the model's ``recall-status`` notice too): the
    ref and revision are compared, and named, as the plain text they hold.
    """
    ref, current = item.ref, item.current_revision
    if type(ref.source_id) is str and type(ref.revision) is str and (current is None or type(current) is str):
        return item
    return Validation(exact_ref(ref), item.status, None if current is None else str.__str__(current))


def candidate_fault(item: object) -> str | None:
    """Why ``item`` is not a well-formed :class:`Candidate` (``None`` when it is).

    The records are plain attrs classes an adapter can fill with anything, so
    every field is checked before the engine touches it.
    """
    if not isinstance(item, Candidate):
        return f"{type(item).__name__}, not a Candidate"
    try:
        if not _is_ref(item.ref):
            return "a Candidate whose ref is not a SourceRef of two strings"
        if not isinstance(item.owner, SourceOwner):
            return f"a Candidate whose owner is a {type(item.owner).__name__}, not a SourceOwner"
        # The number a subclass holds (its own ``__float__`` is never called).
        score = item.score if type(item.score) is float else exact_number(item.score)
        if score is None or not math.isfinite(score):
            shown = f"{type(item.score).__name__} {shown_number(item.score)}"
            return f"a Candidate whose score is {shown}, not a finite number"
        if not _is_count(item.size_bytes):
            return f"a Candidate whose size_bytes is {shown_number(item.size_bytes)}, not a count"
        if not isinstance(item.title, str):
            return f"a Candidate whose title is a {type(item.title).__name__}, not a str"
    except AttributeError:  # built without its fields (``__new__``)
        return "a Candidate missing its fields"
    return None


def excerpt_fault(item: object) -> str | None:
    """Why ``item`` is not a well-formed :class:`Excerpt` (``None`` when it is)."""
    if not isinstance(item, Excerpt):
        return f"{type(item).__name__}, not an Excerpt"
    try:
        if not _is_ref(item.ref):
            return "an Excerpt whose ref is not a SourceRef of two strings"
        if not isinstance(item.owner, SourceOwner):
            return f"an Excerpt whose owner is a {type(item.owner).__name__}, not a SourceOwner"
        if not isinstance(item.text, str):
            return f"an Excerpt whose text is a {type(item.text).__name__}, not a str"
        if not isinstance(item.completeness, Completeness) or not (
            isinstance(item.omitted, frozenset) and all(isinstance(o, OmittedContext) for o in item.omitted)
        ):
            return f"an Excerpt of {item.ref.source_id!r} with malformed completeness flags"
    except AttributeError:
        return "an Excerpt missing its fields"
    return None


def validation_fault(item: object) -> str | None:
    """Why ``item`` is not a well-formed :class:`Validation` (``None`` when it is)."""
    if not isinstance(item, Validation):
        return f"{type(item).__name__}, not a Validation"
    try:
        if not _is_ref(item.ref):
            return "a Validation whose ref is not a SourceRef of two strings"
        if not isinstance(item.status, ValidationStatus):
            return f"a Validation whose status is {item.status!r}, not a ValidationStatus"
        if item.current_revision is not None and not isinstance(item.current_revision, str):
            return f"a Validation whose current_revision is a {type(item.current_revision).__name__}"
    except AttributeError:
        return "a Validation missing its fields"
    return None


def visible(owner: object, scope: Scope) -> bool:
    """True if ``owner`` is a real owner a run in ``scope`` may see; any failure counts as not visible."""
    visible = getattr(owner, "visible_to", None)
    try:
        return bool(visible(scope)) if visible is not None else False
    except Exception:
        return False
