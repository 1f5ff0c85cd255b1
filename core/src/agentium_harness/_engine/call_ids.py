"""Each tool call id once in every request ``run()`` sends: ids of their own where one was reused.

Chat Completions refuses a request with two ``tool`` results of one id
anywhere in it ("Duplicate value for 'tool_call_id'"). Ids are reused:

- by a provider's reply (:func:`distinct_ids`): models that number their
  calls per response name ``call_0`` on every step of every turn, and some
  name one id twice in one reply. Such a call runs and is committed under an
  id of its own: the turn is one group, sent as committed on every later turn.
- by the history sent (:func:`request_history`): groups a host appended may
  hold an id an earlier group holds (the rule of ``append`` is per group),
  and groups ``run()`` committed before its own renaming may too. A later
  duplicate is sent under an id of its own, in this request only: canonical
  history is never rewritten.

The id of its own (:func:`own_id`) keeps the strict alphabets provider APIs
hold ids to: it adds only ``_`` and ASCII digits, ``"<id>_<n>"``, at most
:data:`MAX_OWN_ID_LENGTH` characters; an id of exactly nine ASCII letters and
digits (Mistral's form, which its API requires of every id it is sent) keeps
that form, its last characters replaced by ``n``. Ids renamed by an earlier
release (``"<id>#<n>"``) are committed history and are sent as stored.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Container, Iterable
from typing import Final, Literal

import attrs

from .._history import Message, MessageGroup, Role, ToolCall, ViewState
from .history_view import model_history
from .results import Diagnostic, Severity

__all__ = ["MAX_OWN_ID_LENGTH", "distinct_ids", "own_id", "own_id_form", "renamed_note", "request_history"]

#: Most characters of an id of its own: an original id longer than it is cut to fit with its
#: suffix. Bedrock's Converse documents ``toolUseId`` as 1 to 64 characters of ``[a-zA-Z0-9_-]``
#: (the alphabet Anthropic's ``tool_use`` ids are held to): the tightest documented cap of an
#: API whose ids have no fixed form; OpenAI's call ids are well within it.
MAX_OWN_ID_LENGTH: Final = 64

#: Mistral's form of a tool call id: exactly nine ASCII letters and digits.
_NINE: Final = re.compile(r"[A-Za-z0-9]{9}")


def own_id_form(call_id: str, n: int) -> str:
    """The ``n``-th form of an id of its own for a call named ``call_id`` (``n`` ≥ 0; module docs).

    ``"<id>_<n>"`` cut to :data:`MAX_OWN_ID_LENGTH`, or, for nine ASCII letters and digits, the id
    with its last ``len(str(n))`` characters replaced by ``n``. Public (``plugin_api``) so an
    integration that renames ids of its own reads them in the very form ``run()`` gives.
    """
    digits = str(n)
    if len(digits) < 9 and _NINE.fullmatch(call_id):
        return call_id[: 9 - len(digits)] + digits
    suffix = f"_{digits}"
    return call_id[: MAX_OWN_ID_LENGTH - len(suffix)] + suffix


def own_id(call_id: str, taken: Container[str]) -> str:
    """An id of its own for a call named ``call_id``: the first form, ``n`` from 1, not in ``taken``.

    ``"<id>_<n>"`` with ``<id>`` cut so that it fits :data:`MAX_OWN_ID_LENGTH`; for an id of
    nine ASCII letters and digits, the id with its last ``len(str(n))`` characters replaced by
    ``n``. Each ``n`` gives another id, so the first one ``taken`` lacks is found.
    """
    n = 1
    while (own := own_id_form(call_id, n)) in taken:
        n += 1
    return own


class _OwnIds:
    """:func:`own_id` for many calls against one ``taken``, to which it adds each id it gives.

    The same ids, each form tried once per id: for the next repeat of an id, ``n`` goes on after
    the last one given (every form before it is taken, and ``taken`` only grows). Tried from 1
    again, a history naming one id in ``k`` groups cost ``k²/2`` forms, on every turn, on the
    event loop. Ids alike in their first ``MAX_OWN_ID_LENGTH - 2`` characters have the same forms
    (each is cut to fit), so they share the count.
    """

    __slots__ = ("_next", "_taken")

    def __init__(self, taken: set[str]) -> None:
        self._taken = taken
        self._next: dict[str, int] = {}

    def __call__(self, call_id: str) -> str:
        key = call_id[: MAX_OWN_ID_LENGTH - 2]  # all of own_id_form's input, for every n
        n = self._next.get(key, 1)
        while (own := own_id_form(call_id, n)) in self._taken:
            n += 1
        self._next[key] = n + 1
        self._taken.add(own)
        return own


def renamed_note(count: int, where: Literal["reply", "history"]) -> Diagnostic:
    """The INFO note ``tool_call_ids_renamed``: ``count`` calls (of ``where``) got ids of their own.

    A count and no id: ids are the model's text, which no diagnostic carries.
    """
    calls = f"{count} tool call{'' if count == 1 else 's'}"
    if where == "reply":
        what = (
            f"{calls} of the reply named the id of an earlier call of this turn, of the reply or of "
            "the history sent; each runs and is committed under an id of its own (<id>_<n>)"
        )
    else:
        what = (
            f"{calls} of the history sent named the id of an earlier call of it; each is sent in "
            "this run's requests under an id of its own (<id>_<n>), history kept as committed"
        )
    return Diagnostic("tool_call_ids_renamed", what, Severity.INFO)


def distinct_ids(reply: Message, used: set[str]) -> tuple[Message, int]:
    """``reply`` with each call naming an id in ``used`` (the calls the request sends) given its own.

    So is a call naming the id of an earlier call of the same reply (the first keeps it): each
    result then answers one call, and the model reads which. The new id is :func:`own_id`'s,
    taken by neither ``used`` nor any call of the reply. Returns the reply (itself when nothing
    was renamed) and how many calls were. ``reply`` is a checked copy: plain ids.
    """
    calls = reply.tool_calls
    seen: set[str] = set()
    for call in calls:
        if call.id in used or call.id in seen:
            break
        seen.add(call.id)
    else:
        return reply, 0
    own_ids = _OwnIds(used | {call.id for call in calls})
    kept: set[str] = set()
    renamed: list[ToolCall] = []
    for call in calls:
        if call.id not in used and call.id not in kept:
            kept.add(call.id)
            renamed.append(call)
            continue
        own = own_ids(call.id)
        renamed.append(ToolCall(own, call.name, call.arguments))
    return attrs.evolve(reply, tool_calls=tuple(renamed)), len(calls) - len(kept)


def request_history(
    groups: Iterable[MessageGroup], view: ViewState | None, diagnostics: list[Diagnostic]
) -> tuple[Message, ...]:
    """The history ``run()`` sends (:func:`.history_view.model_history`), each call id once in it.

    A call naming the id of an earlier call of the history is sent under an id of its own, and so
    is its result (:func:`distinct_history`); the note goes to ``diagnostics``.
    """
    history, count = distinct_history(model_history(groups, view))
    if count:
        diagnostics.append(renamed_note(count, "history"))
    return history


def distinct_history(history: tuple[Message, ...]) -> tuple[tuple[Message, ...], int]:
    """``history`` with each call naming an earlier call's id, and its result, given an id of its own.

    The first call of an id keeps it. A result answers the earliest call of its id still open
    (as :func:`~agentium_harness._history.match_tool_results` pairs them within a group), and
    takes that call's id as sent. A new id is :func:`own_id`'s, taken by no call and no result of
    ``history``. Returns ``history`` itself when no id is named twice, and how many calls were
    renamed.
    """
    # One pass while no call names an id twice (most histories: sent as they are); a history of
    # no tool call (most sessions) builds nothing but the empty set.
    named: set[str] = set()
    for message in history:
        for call in message.tool_calls:
            if call.id in named:
                break
            named.add(call.id)
        else:
            continue
        break
    else:
        return history, 0
    taken = {call.id for message in history for call in message.tool_calls}
    taken.update(m.tool_call_id for m in history if m.tool_call_id is not None)
    own_ids = _OwnIds(taken)  # taken by no call and no result of the history, nor by one given
    named.clear()
    sent_as: dict[str, list[str]] = {}  # a call id -> the ids its open calls are sent as, oldest first
    out: list[Message] = []
    count = 0
    for message in history:
        if message.tool_calls:
            calls: list[ToolCall] = []
            for call in message.tool_calls:
                sent = call
                if call.id in named:
                    sent = ToolCall(own_ids(call.id), call.name, call.arguments)
                named.add(call.id)
                sent_as.setdefault(call.id, []).append(sent.id)
                calls.append(sent)
            renamed = sum(map(operator.is_not, calls, message.tool_calls))
            if renamed:
                count += renamed
                message = attrs.evolve(message, tool_calls=tuple(calls))
        answered = message.tool_call_id
        if message.role is Role.TOOL and answered is not None and sent_as.get(answered):
            own = sent_as[answered].pop(0)
            if own != answered:
                message = attrs.evolve(message, tool_call_id=own)
        out.append(message)
    return tuple(out), count
