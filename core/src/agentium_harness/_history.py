"""Canonical history records: messages, message groups and their digests.

A :class:`MessageGroup` is the unit of canonical history: one user turn with
everything the model and tools produced for it. A group is *complete* when
every tool call it contains has its result and every tool result answers an
earlier call of the group, once; completeness is computed from the
messages, never asserted by a flag. Only complete groups are evicted, archived
or summarised.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar

import attrs

from ._codec import canonical_json, digest_bytes, unstructure
from ._scope import Scope, validate_id
from ._validators import non_negative_int, str_tuple
from ._verdicts import VerificationRecord

__all__ = [
    "InterruptionCause",
    "Message",
    "MessageGroup",
    "RetainedRecord",
    "Role",
    "ToolCall",
    "TurnInterruption",
    "estimate_tokens",
]


def _tuple_of_toolcall(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


def _tuple_of_message(value: Iterable[Message]) -> tuple[Message, ...]:
    """Typed tuple converter (keeps mypy precise at call sites)."""
    return tuple(value)


def estimate_tokens(text: str) -> int:
    """A deterministic, model-free token estimate: one token per 4 UTF-8 bytes, rounded up."""
    n = len(text.encode("utf-8"))
    return (n + 3) // 4


class Role(enum.StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def _tool_call_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    validate_id(value, attribute.name)


@attrs.frozen(slots=True)
class ToolCall:
    """A tool call requested by the model. ``arguments`` is plain JSON data."""

    id: str = attrs.field(validator=_tool_call_id)
    name: str = attrs.field(validator=_tool_call_id)
    arguments: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen(slots=True)
class Message:
    """One message of canonical history."""

    role: Role = attrs.field(converter=Role)
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tuple_of_toolcall)
    tool_call_id: str | None = None

    @property
    def estimated_tokens(self) -> int:
        """Token estimate of the content and tool calls."""
        extra = sum(estimate_tokens(c.name) + estimate_tokens(str(c.arguments)) for c in self.tool_calls)
        return estimate_tokens(self.content) + extra + 4


class InterruptionCause(enum.StrEnum):
    """What stopped a turn after its tools had run."""

    #: The provider failed (or answered out of contract) on a later step.
    PROVIDER_FAILED = "provider_failed"
    #: The recall policy stopped the turn at the commit fence.
    RECALL_STOPPED = "recall_stopped"


@attrs.frozen(slots=True)
class TurnInterruption:
    """Why a committed group has no final answer: the turn stopped after its tools had run.

    Tools that ran changed the world, so their calls and results are
    committed, never dropped; the model's answer (if it gave one) is not.
    ``detail`` is the error or the policy's reason, cut to a bound.
    """

    cause: InterruptionCause = attrs.field(converter=InterruptionCause)
    detail: str = ""


@attrs.frozen(slots=True)
class RetainedRecord:
    """What is kept with a committed group about how its answer was produced (R26).

    ``source_view_revision`` identifies the validated view of recalled sources,
    ``summary_policy``/``summary_version`` the summary that was in the request,
    ``uncertainty`` every caveat the run carried, and ``verification`` the
    verdict, evidence and revision count of a verified completion, and
    ``interruption`` why a group committed after its tools ran has no answer.
    """

    #: Left out of the encoding when ``None``: groups committed before
    #: these fields existed keep their bytes and digests.
    __agentium_omit_if_none__: ClassVar[tuple[str, ...]] = ("verification", "interruption")

    scope: Scope
    source_view_revision: str | None = None
    summary_policy: str | None = None
    summary_version: str | None = None
    uncertainty: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)
    #: How the turn's completion was judged, when it was verified (R27).
    verification: VerificationRecord | None = None
    #: Set when the turn stopped after its tools ran: the group holds what ran, not an answer.
    interruption: TurnInterruption | None = None


# A group is frozen, and a turn asks for its bytes many times (eviction
# planning, the archive append, the receipt check, the snapshot encoding), so
# each group object is encoded once. The cache is keyed by object identity and
# its entry removed when the object dies, so an id can never be reused while
# its entry is alive. The one way to make an entry stale is to mutate a tool
# call's arguments dict inside a committed group, which the engine never does
# (tool handlers receive a copy).
_ENCODED: dict[int, list[Any]] = {}


def _encoding(group: MessageGroup) -> list[Any]:
    """``[canonical bytes, digest or None, tokens or None]`` of ``group``, encoded on first use."""
    key = id(group)
    cached = _ENCODED.get(key)
    if cached is None:
        cached = [canonical_json(unstructure(group)), None, None]
        _ENCODED[key] = cached
        weakref.finalize(group, _ENCODED.pop, key, None)
    return cached


def _match_tool_results(messages: tuple[Message, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``(ids of calls left unanswered, indexes of results answering no open call)``, in message order.

    Ids are unique within one reply, not within a turn: a model may reuse an
    id on a later step, so each result answers the earliest call with its id
    that is still open, and a call is open until a result after it answers it.
    """
    open_calls: dict[str, list[int]] = {}
    order: list[tuple[int, str]] = []
    orphans: list[int] = []
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            open_calls.setdefault(call.id, []).append(len(order))
            order.append((index, call.id))
        if message.role is Role.TOOL:
            pending = open_calls.get(message.tool_call_id or "")
            if message.tool_call_id is None or not pending:
                orphans.append(index)
            else:
                pending.pop(0)
    still_open = sorted(n for positions in open_calls.values() for n in positions)
    return tuple(order[n][1] for n in still_open), tuple(orphans)


@attrs.frozen(slots=True)
class MessageGroup:
    """A complete-or-not run of messages, numbered by ``seq`` within its session."""

    seq: int = attrs.field(validator=non_negative_int)
    messages: tuple[Message, ...] = attrs.field(converter=_tuple_of_message)
    retained: RetainedRecord | None = None

    @property
    def missing_tool_results(self) -> tuple[str, ...]:
        """IDs of tool calls in this group that have no tool result message after them."""
        return _match_tool_results(self.messages)[0]

    @property
    def orphan_tool_results(self) -> tuple[int, ...]:
        """Indexes of tool results that answer no open tool call made earlier in this group.

        A result must follow the call it answers, in the same group, once:
        a group that is only a tool result (its call lost or in another
        group) is not a turn anyone can read back.
        """
        return _match_tool_results(self.messages)[1]

    @property
    def is_complete(self) -> bool:
        """True when the group is non-empty, every tool call has its result, and every result its call."""
        return bool(self.messages) and not self.missing_tool_results and not self.orphan_tool_results

    def canonical_bytes(self) -> bytes:
        """The canonical JSON encoding of this group (computed once per group object)."""
        data: bytes = _encoding(self)[0]
        return data

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of :meth:`canonical_bytes` (computed once per group object)."""
        cached = _encoding(self)
        digest: str | None = cached[1]
        if digest is None:
            digest = cached[1] = digest_bytes(cached[0])
        return digest

    @property
    def size_bytes(self) -> int:
        """Length of the canonical encoding in bytes."""
        return len(self.canonical_bytes())

    @property
    def estimated_tokens(self) -> int:
        """Token estimate of all messages (computed once per group object)."""
        cached = _encoding(self)
        tokens: int | None = cached[2]
        if tokens is None:
            tokens = cached[2] = sum(m.estimated_tokens for m in self.messages)
        return tokens
