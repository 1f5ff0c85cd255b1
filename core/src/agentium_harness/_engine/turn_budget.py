"""The bytes one turn's messages may take, so its group can always be committed.

A run's group lives in the session snapshot (the newest group always stays
resident), and a snapshot over :data:`~agentium_harness._json.MAX_JSON_BYTES`
is refused at the commit, after the turn's tools ran: their effects would
stand with no record in history. So the turn's messages, as canonical JSON,
are held to :data:`MAX_TURN_BYTES` (half the snapshot bound: the other half
is room for the resident history kept with the group, its retained record
and the session state) while the turn goes:

- a provider reply is measured before any of its tool calls runs, with room
  set aside for one result per call (:data:`RESULT_RESERVE_BYTES` of text
  each); one that does not fit is refused with
  :class:`~agentium_harness._errors.ContractViolationError`;
- a tool's result (its output or its error text) is cut to the room the
  turn has left, keeping the room set aside for the calls after it: the
  tool ran, so its call and result must be committable.

The snapshot check at the commit stays the last line: a resident history or
session state larger than the other half can still reach it.

The turn's messages are counted too, against :data:`MAX_TURN_MESSAGES`
(``append``'s bound of one group, so a run never commits a group ``append``
would refuse): the model is called only while its reply, with the most
tool calls a reply may carry each answered, still fits (:func:`room_for_reply`).
A tool loop that reaches it stops there, before that call, as at the step
limit: the turn is committed as it stands, with diagnostic ``message_limit``.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._codec import canonical_json, unstructure
from .._errors import ContractViolationError
from .._history import Message, Role, ToolCall
from .._json import MAX_JSON_BYTES
from .._text import cut_text
from .history_checks import MAX_APPEND_MESSAGES
from .results import Diagnostic, Severity
from .tools import ToolOutcome, ToolStatus

__all__ = [
    "MAX_TURN_BYTES",
    "MAX_TURN_MESSAGES",
    "RESULT_RESERVE_BYTES",
    "TurnBudget",
    "message_limit",
    "room_for_reply",
]

#: Most canonical-JSON bytes of one turn's messages (its group's messages): 128 MiB, half the snapshot bound.
MAX_TURN_BYTES = MAX_JSON_BYTES // 2
#: Most messages of one turn (its group): what one ``append`` may commit, so ``read_history`` and
#: every integration meet no group from a run larger than one they could have written.
MAX_TURN_MESSAGES = MAX_APPEND_MESSAGES
#: Bytes of result text set aside for each tool call of a reply before it runs: no result is cut below it.
RESULT_RESERVE_BYTES = 1024
#: Most bytes of JSON text one character can become (a control character: ``\u0000``).
_ESCAPE_GROWTH = 6


def _size(message: Message) -> int:
    """Canonical-JSON bytes of ``message`` in its group's list, the comma after it included.

    Measured call by call, so a reply of many large arguments is never encoded whole at once.
    """
    bare = Message(
        message.role,
        message.content,
        (),
        message.tool_call_id,
        message.payload,
        message.payload_format,
    )
    size = len(canonical_json(unstructure(bare))) + 1
    return size + sum(_call_size(c) for c in message.tool_calls)


def _fixed_size() -> int:
    """The most bytes a plain message takes besides its text and tool call id (any role, ``null`` id)."""
    return max(_size(Message(role, "")) for role in Role)


#: What a plain message (no tool calls, no payload) takes at most besides its escaped text and id.
_PLAIN_FIXED = 0  # set below, once _size is defined


def _bound(message: Message) -> int | None:
    """An upper bound of :func:`_size` for a plain message, without encoding it; ``None`` for others.

    Every character is at most :data:`_ESCAPE_GROWTH` bytes of JSON, and an id
    in place of ``null`` adds at most its escaped text. A turn's messages are
    counted by this bound (no encoding on the common path) and measured
    exactly only when the bound comes near :data:`MAX_TURN_BYTES`.
    """
    if message.tool_calls or message.payload is not None or message.payload_format is not None:
        return None
    return _PLAIN_FIXED + _ESCAPE_GROWTH * (len(message.content) + len(message.tool_call_id or ""))


def _call_size(call: ToolCall) -> int:
    return len(canonical_json(unstructure(call))) + 1


def _result_overhead(call: ToolCall) -> int:
    """Bytes of the result message answering ``call``, but for its text (its ``""`` counted)."""
    return _size(Message(Role.TOOL, "", tool_call_id=call.id))


_PLAIN_FIXED = _fixed_size()


class TurnBudget:
    """What the turn's messages take so far, against :data:`MAX_TURN_BYTES` (read at each check)."""

    __slots__ = ("_estimated", "_reserved", "used")

    def __init__(self, messages: Iterable[Message]) -> None:
        self.used = 2  # the list's brackets; then each message, exact or by its bound (``_estimated``)
        # Messages counted by their bound (:func:`_bound`), with it: measured when it matters.
        self._estimated: list[tuple[Message, int]] = []
        self._reserved: list[int] = []  # what each call of the last reply not yet answered has set aside
        for message in messages:
            self._count(message)

    def _count(self, message: Message) -> None:
        bound = _bound(message)
        if bound is None:
            self.used += _size(message)
        else:
            self.used += bound
            self._estimated.append((message, bound))

    def _measure(self) -> bool:
        """Replace the bounds counted so far by exact sizes; True if there were any."""
        if not self._estimated:
            return False
        for message, bound in self._estimated:
            self.used += _size(message) - bound
        self._estimated.clear()
        return True

    def admit(self, reply: Message) -> None:
        """Count ``reply`` in, or refuse it (ContractViolationError) if the turn could not be committed.

        A reply with tool calls must fit with its results' reserved room. One
        without (nothing runs) is let through when the turn was over the
        bound before it: the turn's own input, not the reply, is too large,
        and the commit says so; a reply that makes a turn that fitted too
        large is refused, so what ran before it is still committed.
        """
        limit = MAX_TURN_BYTES
        reserved = [_result_overhead(c) + RESULT_RESERVE_BYTES for c in reply.tool_calls]
        bound = _bound(reply)
        size = self.used + sum(reserved) + (_size(reply) if bound is None else bound)
        if size > limit and (self._measure() or bound is not None):
            # Near the bound: what an estimate said is measured before anything is refused.
            bound = None
            size = self.used + sum(reserved) + _size(reply)
        over = size > limit
        if over and (reply.tool_calls or self.used <= limit):
            what = f", counting room for its {len(reserved)} tool result(s)" if reserved else ""
            raise ContractViolationError(
                f"provider returned a reply that would take the turn over {limit} bytes of canonical JSON "
                f"(MAX_TURN_BYTES, what a committed turn may take{what}); none of its tool calls was run"
            )
        self.used = size - sum(reserved)
        if bound is not None:
            self._estimated.append((reply, bound))
        self._reserved = reserved

    def fit(self, outcome: ToolOutcome, text: str) -> tuple[ToolOutcome, str]:
        """The outcome and result text of the next call, the text cut to fit (:meth:`fit_result`).

        A cut ``ok`` outcome says so in its detail (the run reports it as
        diagnostic ``tool_output_cut``); a failure's error text is only cut,
        its outcome already says what happened.
        """
        text, cut = self.fit_result(text)
        if cut and outcome.status is ToolStatus.OK:
            detail = (
                f"tool {outcome.name!r} ran, but its output left too little room for the turn to be "
                f"committed (MAX_TURN_BYTES); {cut} bytes were cut from it"
            )
            if outcome.detail:
                detail = f"{outcome.detail}; {detail}"
            outcome = ToolOutcome(outcome.call_id, outcome.name, outcome.status, outcome.effect, detail)
        return outcome, text

    def fit_result(self, text: str) -> tuple[str, int]:
        """``text`` as the next call's result, cut to the room the turn has left; ``(text, bytes cut)``.

        The room set aside for the calls after it is kept, so each of them
        still has at least :data:`RESULT_RESERVE_BYTES` for its own result.
        """
        mine = self._reserved.pop(0) if self._reserved else RESULT_RESERVE_BYTES
        room = MAX_TURN_BYTES - self.used - sum(self._reserved) - (mine - RESULT_RESERVE_BYTES)
        if len(text) * _ESCAPE_GROWTH > room and self._measure():
            # The room may only look short because earlier messages were counted by their bound.
            room = MAX_TURN_BYTES - self.used - sum(self._reserved) - (mine - RESULT_RESERVE_BYTES)
        room = max(room, RESULT_RESERVE_BYTES)
        cut = 0
        # A character is at most six bytes of JSON (``\u0000``): shorter text is not encoded to check.
        if len(text) * _ESCAPE_GROWTH > room and len(canonical_json(text)) - 2 > room:
            kept, cut = cut_text(text, room)
            if len(canonical_json(kept)) - 2 > room:
                kept, cut = cut_text(text, room // _ESCAPE_GROWTH)
            text = kept
        self.used += mine - RESULT_RESERVE_BYTES + len(canonical_json(text)) - 2
        return text, cut


def room_for_reply(held: int, max_calls: int) -> bool:
    """Whether a turn of ``held`` messages may call the model again within :data:`MAX_TURN_MESSAGES`.

    It may when the reply and a result for each of up to ``max_calls`` tool
    calls (the most a reply may carry) still fit: checked before the call, so
    no model call is made, and no tool run, whose reply could not be committed.
    """
    return held + 1 + max_calls <= MAX_TURN_MESSAGES


def message_limit(held: int, made: int) -> Diagnostic:
    """The diagnostic of a turn stopped at :data:`MAX_TURN_MESSAGES` (``message_limit``, a WARNING)."""
    return Diagnostic(
        "message_limit",
        f"stopped after {made} model call(s): the turn holds {held} messages, and another reply with its "
        f"tool calls answered could take it over {MAX_TURN_MESSAGES} (MAX_APPEND_MESSAGES, what one group "
        "may hold)",
        Severity.WARNING,
    )
