"""A load never hands the framework half a tool exchange: a call without its result, or back.

:func:`whole_exchanges` begins a load cut inside one group after an exchange
of Agentium's own ``run()`` the cut would split. :func:`without_half_exchanges`
handles what is left: a retraction takes the view's last messages, so one
that takes a tool result but not the assistant message before it leaves
that message's ``function_call`` with no ``function_result`` in the view,
and a load's bound can begin after a call whose result it keeps (the call
saved in an older group). The framework (1.23) hands such contents to the
chat client as they are, and the chat APIs refuse a request holding a tool
result without its call, or a call without its result. So the loaded view
leaves out those *contents* only, as core's ``run()`` does: the rest of the
message (its text) stays, and a message goes only when nothing else is
left of it. Kept apart from the provider (:mod:`._provider`), which reads
and writes history.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from agent_framework import Content
from agent_framework import Message as AFMessage

from agentium_harness import Message, Role

from ._observe import halves_left_out

__all__ = ["as_loaded", "pair_results", "whole_exchanges", "without_half_exchanges"]


def _needs_result(content: Content) -> bool:
    """A call the framework would run itself: without a result the next request is refused.

    An informational-only call (recorded for the transcript, an MCP server's
    call) or a hosted one (the service runs it) gets no local result: it is
    no half exchange, and is left as it is.
    """
    return (
        content.type == "function_call"
        and not getattr(content, "informational_only", False)
        and not getattr(content, "hosted", False)
    )


def whole_exchanges(messages: list[Message]) -> list[Message]:
    """``messages`` (the newest of one group) from the first one after which no tool exchange is cut.

    A tool result of Agentium's own ``run()`` whose call is not among
    ``messages`` would reach the model without it (the chat APIs refuse
    that): the messages up to it are left out, so the load begins after
    the cut exchange, never inside it.
    """
    begin = 0
    calls: set[str] = set()
    for at, message in enumerate(messages):
        if message.payload_format is not None:
            continue
        calls.update(call.id for call in message.tool_calls)
        if message.role is Role.TOOL and message.tool_call_id not in calls:
            begin = at + 1
    return messages[begin:]


def pair_results(
    messages: Sequence[AFMessage | None],
) -> tuple[dict[tuple[int, int], int], set[tuple[int, int]]]:
    """Each result's call in ``messages``, and the calls no result answers there.

    The first value maps a ``function_result``'s (message, content) indexes
    to the index of the message holding the call it answers, ``-1`` when it
    answers none there; the second holds the (message, content) indexes of
    the calls left unanswered that the framework would run itself
    (:func:`_needs_result`). A result answers the latest call of its
    ``call_id`` before it still unanswered: models use a call id again
    (another turn, another run), so an id answered once is no proof that a
    later call of it was, a call left unanswered (its result retracted, or
    never saved) is no call a later result of its id answers (the result
    answers the call the model just made), and a second result of an
    answered call answers nothing. (Within one group of ``run()`` every call
    is answered before the next assistant message, so this pairs them as
    core does.) Pairing ``messages[j:]`` alone gives the same pairs, but
    for the results whose call is before ``j``, which answer none there.
    """
    pending: dict[str, list[tuple[int, int, Content]]] = {}  # call id -> its unanswered calls, oldest first
    answers: dict[tuple[int, int], int] = {}
    for at, message in enumerate(messages):
        if message is None:  # another framework's message (a save's replay check): no call of ours
            continue
        for index, content in enumerate(message.contents):
            call_id = content.call_id
            if content.type == "function_call" and call_id is not None:
                pending.setdefault(call_id, []).append((at, index, content))
            elif content.type == "function_result":
                calls = pending.get(call_id) if call_id is not None else None
                answers[at, index] = calls.pop()[0] if calls else -1
    unanswered = {
        (at, index) for calls in pending.values() for at, index, call in calls if _needs_result(call)
    }
    return answers, unanswered


def _unpaired(messages: Sequence[AFMessage | None]) -> set[tuple[int, int]]:
    """The (message, content) indexes of the calls and results that have no other half in ``messages``.

    Paired by :func:`pair_results`. A call the framework never runs itself
    (:func:`_needs_result`) is never unpaired.
    """
    answers, unanswered = pair_results(messages)
    return unanswered | {place for place, call in answers.items() if call < 0}


def without_half_exchanges(messages: Sequence[AFMessage]) -> list[AFMessage]:
    """``messages`` without a ``function_result`` answering no call before it, nor a call never answered.

    Paired in order over the whole loaded view (a call and its result may be
    in different groups; see :func:`_unpaired`). Only those contents are left
    out; a message with nothing else left is left out too. ``messages`` are
    the load's own (decoded for it), so the ones changed are changed in
    place. A WARNING on ``agentium.agent_framework`` and a span event say how
    many were left out (counts only: :func:`._observe.halves_left_out`).
    """
    unpaired = _unpaired(messages)
    if not unpaired:  # the usual load: every exchange whole
        return list(messages)
    kept: list[AFMessage] = []
    contents_out = messages_out = 0
    for at, message in enumerate(messages):
        contents = [c for index, c in enumerate(message.contents) if (at, index) not in unpaired]
        contents_out += len(message.contents) - len(contents)
        if len(contents) == len(message.contents):
            kept.append(message)
        elif contents:
            message.contents = contents
            kept.append(message)
        else:
            messages_out += 1
    if contents_out:
        halves_left_out(contents_out, messages_out)
    return kept


def as_loaded(messages: Sequence[AFMessage | None]) -> list[AFMessage | None] | None:
    """The view's last ``messages`` as a load hands them out, or ``None`` when that is them as they are.

    For a save's replay check (:mod:`._replay`): a host that replays what a
    load gave it replays its messages without the calls no result answers
    (:func:`without_half_exchanges`), and such a message must still be
    found as the one stored. Only unanswered calls are left out here: every
    result of a call in the view's tail is in that tail (it follows its
    call), so the tail decides them as the load does; whether a result's
    call is in a load depends on where the load began, which a tail read
    newest first does not know. New messages, the given ones unchanged;
    ``None`` (another framework's message) stays.
    """
    calls_out = {
        (at, index)
        for at, index in _unpaired(messages)
        if messages[at].contents[index].type == "function_call"  # type: ignore[union-attr]
    }
    if not calls_out:
        return None
    shown: list[AFMessage | None] = []
    for at, message in enumerate(messages):
        if message is None:
            shown.append(None)
            continue
        contents = [c for index, c in enumerate(message.contents) if (at, index) not in calls_out]
        if len(contents) == len(message.contents):
            shown.append(message)
        elif contents:
            trimmed = copy.copy(message)
            trimmed.contents = contents
            shown.append(trimmed)
    return shown
