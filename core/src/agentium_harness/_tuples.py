"""The typed tuple converters of the records' tuple fields, each written once.

A record keeps a sequence as a tuple and accepts any iterable:
``attrs.field(converter=tuple_of_messages)``. The converter is a named
function of one concrete element type because that is what mypy's attrs
plugin reads the constructor's parameter type from: ``converter=tuple`` or
a generic ``as_tuple(Iterable[T])`` leaves the element type unbound, and a
converter built by a factory call is not supported at all.

The element types are imported for the type checker only, so every record
module can import this one without an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._engine.history_records import HistoryGroup
    from ._history import Message, MessageGroup, ToolCall
    from ._history_controls import MessageRef, RetractedSpan
    from ._ports.provider import SourceBlock, ToolSpec
    from ._ports.sessions import ArchivedDigest
    from ._ports.summary import Citation, CoverageGap
    from ._verdicts import EvidenceEntry, VerificationAttempt

__all__ = [
    "tuple_of_archived_digests",
    "tuple_of_citations",
    "tuple_of_evidence",
    "tuple_of_gaps",
    "tuple_of_history_groups",
    "tuple_of_message_groups",
    "tuple_of_messages",
    "tuple_of_refs",
    "tuple_of_source_blocks",
    "tuple_of_spans",
    "tuple_of_tool_calls",
    "tuple_of_tool_specs",
    "tuple_of_verification_attempts",
]


def tuple_of_messages(value: Iterable[Message]) -> tuple[Message, ...]:
    """``Message`` items as a tuple."""
    return tuple(value)


def tuple_of_tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """``ToolCall`` items as a tuple."""
    return tuple(value)


def tuple_of_refs(value: Iterable[MessageRef]) -> tuple[MessageRef, ...]:
    """``MessageRef`` items as a tuple."""
    return tuple(value)


def tuple_of_spans(value: Iterable[RetractedSpan]) -> tuple[RetractedSpan, ...]:
    """``RetractedSpan`` items as a tuple."""
    return tuple(value)


def tuple_of_message_groups(value: Iterable[MessageGroup]) -> tuple[MessageGroup, ...]:
    """``MessageGroup`` items as a tuple."""
    return tuple(value)


def tuple_of_archived_digests(value: Iterable[ArchivedDigest]) -> tuple[ArchivedDigest, ...]:
    """``ArchivedDigest`` items as a tuple."""
    return tuple(value)


def tuple_of_source_blocks(value: Iterable[SourceBlock]) -> tuple[SourceBlock, ...]:
    """``SourceBlock`` items as a tuple."""
    return tuple(value)


def tuple_of_tool_specs(value: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    """``ToolSpec`` items as a tuple."""
    return tuple(value)


def tuple_of_citations(value: Iterable[Citation]) -> tuple[Citation, ...]:
    """``Citation`` items as a tuple."""
    return tuple(value)


def tuple_of_gaps(value: Iterable[CoverageGap]) -> tuple[CoverageGap, ...]:
    """``CoverageGap`` items as a tuple."""
    return tuple(value)


def tuple_of_evidence(value: Iterable[EvidenceEntry]) -> tuple[EvidenceEntry, ...]:
    """``EvidenceEntry`` items as a tuple."""
    return tuple(value)


def tuple_of_verification_attempts(value: Iterable[VerificationAttempt]) -> tuple[VerificationAttempt, ...]:
    """``VerificationAttempt`` items as a tuple."""
    return tuple(value)


def tuple_of_history_groups(value: Iterable[HistoryGroup]) -> tuple[HistoryGroup, ...]:
    """``HistoryGroup`` items as a tuple."""
    return tuple(value)
