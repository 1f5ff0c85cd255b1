"""Argument checks the adapters' public methods share: bad input is a typed error, never a crash.

Hosts may call the adapters directly, not only through the engine. A wrong
type must give :class:`~agentium_harness.InvalidArgumentError` and change
nothing, instead of whatever bare ``TypeError`` or ``AttributeError`` the
adapters' internals would raise, or a value PostgreSQL would coerce (``"1"``
compared as a revision) or refuse untyped. Counts and seqs are clamped to
what a ``bigint`` holds, so no bound can overflow into a server error.
Text bound for a ``text`` parameter must be encodable and hold no NUL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import MessageGroup, OpContext, SessionKey, SourceRef

__all__ = [
    "MAX_BIGINT_ARGUMENT",
    "checked",
    "checked_count",
    "checked_ctx",
    "checked_expected_revision",
    "checked_groups",
    "checked_key",
    "checked_refs",
    "checked_sequence",
    "checked_text",
]

T = TypeVar("T")

#: Counts and seqs are clamped to this magnitude: more than any table holds, within a ``bigint``.
MAX_BIGINT_ARGUMENT: Final = 2**62


def checked(value: object, kind: type[T], what: str, operation: str) -> T:
    """``value`` if it is a ``kind``; else :class:`InvalidArgumentError` naming ``what`` and its type."""
    if not isinstance(value, kind):
        raise InvalidArgumentError(
            f"{operation}: {what} must be a {kind.__name__}, got {type(value).__name__}; nothing was changed"
        )
    return value


def checked_ctx(ctx: object, operation: str) -> OpContext:
    """``ctx`` if it is an :class:`~agentium_harness.plugin_api.OpContext`."""
    return checked(ctx, OpContext, "ctx", operation)


def checked_count(value: object, what: str, operation: str) -> int:
    """``value`` if it is an ``int`` (not a ``bool``), clamped to ±:data:`MAX_BIGINT_ARGUMENT`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"{operation}: {what} must be an int, got {type(value).__name__}; nothing was changed"
        )
    return max(-MAX_BIGINT_ARGUMENT, min(MAX_BIGINT_ARGUMENT, value))


def checked_sequence(value: object, what: str, operation: str) -> Sequence[object]:
    """``value`` if it is a sequence (a ``str`` or ``bytes`` is not one here)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidArgumentError(
            f"{operation}: {what} must be a sequence, got {type(value).__name__}; nothing was changed"
        )
    return value


def checked_text(value: object, what: str, operation: str) -> str:
    """``value`` if it is a ``str`` PostgreSQL ``text`` can hold (valid UTF-8, no NUL)."""
    text = checked(value, str, what, operation)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{operation}: {what} is not valid Unicode text (a lone surrogate); nothing was changed"
        ) from None
    if "\x00" in text:
        raise InvalidArgumentError(
            f"{operation}: {what} contains NUL, which PostgreSQL text cannot hold; nothing was changed"
        )
    return text


def checked_refs(refs: object, operation: str) -> list[SourceRef]:
    """``refs`` as a list, if it is a sequence of :class:`SourceRef` with ``str`` fields."""
    out: list[SourceRef] = []
    for ref in checked_sequence(refs, "refs", operation):
        ref = checked(ref, SourceRef, "each of refs", operation)
        if not isinstance(ref.source_id, str) or not isinstance(ref.revision, str):
            raise InvalidArgumentError(f"{operation}: a SourceRef's source_id and revision must be str")
        out.append(ref)
    return out


def checked_key(key: object, operation: str) -> SessionKey:
    """``key`` if it is a :class:`~agentium_harness.plugin_api.SessionKey`."""
    return checked(key, SessionKey, "key", operation)


def checked_groups(groups: object, operation: str) -> list[MessageGroup]:
    """``groups`` as a list, if it is a sequence of :class:`~agentium_harness.plugin_api.MessageGroup`."""
    return [
        checked(g, MessageGroup, "each of groups", operation)
        for g in checked_sequence(groups, "groups", operation)
    ]


def checked_expected_revision(expected: object, operation: str) -> int | None:
    """A compare-and-set's ``expected_revision``: ``None`` or an ``int`` (not a ``bool``), clamped.

    Anything else was bound as whatever PostgreSQL made of it: ``"1"`` matched
    revision 1, ``True`` was reported as a damaged schema. A revision no row
    holds (0, negative, huge) stays a :class:`SessionConflictError` at the
    server, as the port says.
    """
    return None if expected is None else checked_count(expected, "expected_revision", operation)
