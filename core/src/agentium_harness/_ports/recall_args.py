"""Argument checks adapters' public methods share: bad input is a typed error, never a crash.

The built-in stores (SQLite, in-memory) and plugins (through
``agentium_harness.plugin_api``) call these before doing anything, so
a wrong type gives :class:`~agentium_harness._errors.InvalidArgumentError`
(and changes nothing) instead of whatever bare TypeError or AttributeError
the store's internals would raise, and counts or seqs too large for any
store are clamped rather than overflowing a database integer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from .._errors import InvalidArgumentError
from .._scope import SessionKey
from .._validators import exact_int
from ._base import OpContext
from .recall import SourceRef
from .recall_sources import SourceOwner

__all__ = [
    "MAX_ARGUMENT_INT",
    "checked_argument",
    "checked_count",
    "checked_ctx",
    "checked_key",
    "checked_owner",
    "checked_query",
    "checked_refs",
    "checked_sequence",
]

T = TypeVar("T")

#: Counts and seqs are clamped to this magnitude: more than any store holds, and within SQLite's 64 bits.
MAX_ARGUMENT_INT: Final = 2**62


def checked_argument(value: object, kind: type[T], what: str, operation: str) -> T:
    """``value`` if it is a ``kind``; else :class:`InvalidArgumentError` naming ``what`` and its type."""
    if not isinstance(value, kind):
        raise InvalidArgumentError(
            f"{operation}: {what} must be a {kind.__name__}, got {type(value).__name__}; nothing was changed"
        )
    return value


def checked_ctx(ctx: object, operation: str) -> OpContext:
    """``ctx`` if it is an :class:`OpContext`."""
    if type(ctx) is OpContext:  # every engine call's: passes without the general check's two calls
        return ctx
    return checked_argument(ctx, OpContext, "ctx", operation)


def checked_query(query: object, operation: str) -> str:
    """``query`` if it is a ``str``."""
    return checked_argument(query, str, "query", operation)


def checked_count(value: object, what: str, operation: str) -> int:
    """``value`` if it is an ``int`` (not a ``bool``), clamped to ±:data:`MAX_ARGUMENT_INT`."""
    plain = exact_int(value)  # an int subclass as its number: its own comparisons are not trusted
    if plain is None:
        raise InvalidArgumentError(
            f"{operation}: {what} must be an int, got {type(value).__name__}; nothing was changed"
        )
    return max(-MAX_ARGUMENT_INT, min(MAX_ARGUMENT_INT, plain))


def checked_sequence(value: object, what: str, operation: str) -> Sequence[object]:
    """``value`` if it is a sequence (a ``str`` or ``bytes`` is not one here)."""
    if type(value) is tuple or type(value) is list:  # passes without the ABC's Python-level check
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidArgumentError(
            f"{operation}: {what} must be a sequence, got {type(value).__name__}; nothing was changed"
        )
    return value


def checked_refs(refs: object, operation: str) -> list[SourceRef]:
    """``refs`` as a list, if it is a sequence of :class:`SourceRef` with ``str`` fields."""
    out: list[SourceRef] = []
    for item in checked_sequence(refs, "refs", operation):
        ref = checked_argument(item, SourceRef, "each of refs", operation)
        if not isinstance(ref.source_id, str) or not isinstance(ref.revision, str):
            raise InvalidArgumentError(
                f"{operation}: a SourceRef's source_id and revision must be str; nothing was changed"
            )
        out.append(ref)
    return out


def checked_key(key: object, operation: str) -> SessionKey:
    """``key`` if it is a :class:`SessionKey`."""
    if type(key) is SessionKey:  # as checked_ctx: the common case without the general check
        return key
    return checked_argument(key, SessionKey, "key", operation)


def checked_owner(owner: object, operation: str) -> SourceOwner:
    """``owner`` if it is a :class:`SourceOwner`."""
    return checked_argument(owner, SourceOwner, "owner", operation)
