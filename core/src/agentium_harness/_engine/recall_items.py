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

__all__ = ["candidate_fault", "excerpt_fault", "validation_fault", "visible"]


def _is_ref(ref: object) -> bool:
    return isinstance(ref, SourceRef) and isinstance(ref.source_id, str) and isinstance(ref.revision, str)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
        score = item.score
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            return f"a Candidate whose score is {type(score).__name__} {score!r}, not a finite number"
        if not _is_count(item.size_bytes):
            return f"a Candidate whose size_bytes is {item.size_bytes!r}, not a count"
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
