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

The id of its own (:func:`own_id_form`) keeps the strict alphabets provider
APIs hold ids to: it adds only ``_`` and ASCII digits, ``"<id>_<n>"``, at most
:data:`MAX_OWN_ID_LENGTH` characters; an id of exactly nine ASCII letters and
digits (Mistral's form, which its API requires of every id it is sent) keeps
that form, its last characters replaced by ``n``.

The history sent names each call from what comes before it and its own group
only (:func:`distinct_history`): a call keeps its id unless an earlier call of
the request is sent under it, and a duplicate's name is the form numbered by
its group's ``seq``. So a call is sent under one name on every run, whatever
groups come after it, where a name taken by the first ``n`` no call of the
whole request held moved whenever a later group took it.

Ids an earlier release renamed ``"<id>#<n>"`` are committed history, kept as
stored; each is sent as this release names it, ``own_id_form(<id>, n)``
(:func:`sent_id_form`): ``#`` is in no strict alphabet, and Anthropic, Bedrock and
Mistral refused every request of such a session. Only that suffix, which the
engine made, is rewritten: an id the model gave in an alphabet of its own
(Kimi's ``functions.edit:0``) is sent as given, since Kimi's models read their
own ids back in that form and stop calling tools when sent others.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Container, Iterable, Sequence
from typing import Final, Literal

import attrs

from .._history import Message, MessageGroup, Role, ToolCall, ViewState
from .history_view import model_groups
from .results import Diagnostic, Severity

__all__ = [
    "MAX_OWN_ID_LENGTH",
    "distinct_history",
    "distinct_ids",
    "own_id",
    "own_id_form",
    "renamed_note",
    "request_history",
    "sent_id_form",
]

#: Most characters of an id of its own: an original id longer than it is cut to fit with its
#: suffix. Bedrock's Converse documents ``toolUseId`` as 1 to 64 characters of ``[a-zA-Z0-9_-]``
#: (the alphabet Anthropic's ``tool_use`` ids are held to): the tightest documented cap of an
#: API whose ids have no fixed form; OpenAI's call ids are well within it.
MAX_OWN_ID_LENGTH: Final = 64

#: Mistral's form of a tool call id: exactly nine ASCII letters and digits.
_NINE: Final = re.compile(r"[A-Za-z0-9]{9}")

#: An earlier release's id of its own: ``"<id>#<n>"``, ``n`` from 1 (``<id>`` cut to keep 256).
_HASH_FORM: Final = re.compile(r"(.+)#([1-9][0-9]{0,17})", re.DOTALL)


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
    ``n``. Two ``n`` may give one id (nine characters, the eighth ``1``: ``n`` 1 and 11 both end
    ``11``), so each form is checked against ``taken``; the forms never run out (from ``n`` of
    nine digits on they are ``"<id>_<n>"``), so the first one ``taken`` lacks is found.
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
            f"{calls} of the history sent named the id an earlier call of it is sent under; each is sent in "
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


def sent_id_form(call_id: str) -> str:
    """The id a stored ``call_id`` is sent as where no earlier call of the request is sent under it.

    ``call_id`` itself, but for an id an earlier release renamed ``"<id>#<n>"``: that is sent as
    ``own_id_form(<id>, n)``, the name this release gives (a suffix of a suffix, ``"c1#1#2"``,
    each so: ``"c1_1_2"``). Deterministic, so every run sends a stored id alike. Public
    (``plugin_api``) so an integration that hands stored ids to a framework sends them so too.
    """
    if "#" not in call_id:  # most ids: no stored id of the old form lacks it
        return call_id
    numbers: list[int] = []
    base = call_id
    while (old := _HASH_FORM.fullmatch(base)) is not None:
        base = old[1]
        numbers.append(int(old[2]))
    for n in reversed(numbers):
        base = own_id_form(base, n)
    return base


class _SentNames:
    """The names the calls of one request are sent under, given oldest first."""

    __slots__ = ("_given", "_more")

    def __init__(self) -> None:
        self._given: set[str] = set()
        self._more = _OwnIds(self._given)  # shares the set: a name it gives is given

    def __call__(self, call_id: str, seq: int) -> tuple[str, bool]:
        """The name of a call of ``call_id`` in group ``seq``, and whether an earlier call took its own.

        Its :func:`sent_id_form`, unless an earlier call is sent under that; then the form numbered
        ``seq``, and if an earlier call took that too (a group naming one id twice, or a group's
        own id equal to it), :func:`own_id`'s first form of that one no name given holds. None
        of it reads a later call, so no later group changes a name given.
        """
        wanted = sent_id_form(call_id)
        if wanted not in self._given:
            self._given.add(wanted)
            return wanted, False
        own = own_id_form(wanted, seq)
        if own in self._given:
            return self._more(own), True
        self._given.add(own)
        return own, True


def request_history(
    groups: Iterable[MessageGroup], view: ViewState | None, diagnostics: list[Diagnostic]
) -> tuple[Message, ...]:
    """The history ``run()`` sends (:func:`.history_view.model_history`), each call id once and valid.

    A call naming the id an earlier call of the history is sent under is sent under an id of its
    own, and so is its result; an id of the old ``"<id>#<n>"`` form is sent in this release's
    (:func:`distinct_history`). The note on renamed duplicates goes to ``diagnostics``.
    """
    history, count = distinct_history(model_groups(groups, view))
    if count:
        diagnostics.append(renamed_note(count, "history"))
    return history


def distinct_history(groups: Iterable[tuple[int, Sequence[Message]]]) -> tuple[tuple[Message, ...], int]:
    """The messages of ``groups`` (each a ``seq`` and what it sends), every call under a name of its own.

    Each call is sent under :class:`_SentNames`'s name (its :func:`sent_id_form`, or, where an
    earlier call is sent under that, the form numbered by its group's ``seq``). A result answers
    the earliest call of its id still open (as
    :func:`~agentium_harness._history.match_tool_results` pairs them within a group), and takes
    that call's name; a result answering none is sent under its id's :func:`sent_id_form`. Returns
    the messages (themselves when nothing is renamed) and how many calls were sent under another
    name because an earlier call held theirs.
    """
    groups = list(groups)
    # One pass while no call names an id twice and no id has the old form (most histories: sent
    # as they are); a history of no tool call (most sessions) builds nothing but the empty set.
    named: set[str] = set()
    plain = True
    for _seq, messages in groups:
        for message in messages:
            for call in message.tool_calls:
                if call.id in named or "#" in call.id:
                    plain = False
                    break
                named.add(call.id)
            if plain and message.tool_call_id is not None and "#" in message.tool_call_id:
                plain = False
            if not plain:
                break
        if not plain:
            break
    if plain:
        return tuple(m for _seq, messages in groups for m in messages), 0
    names = _SentNames()
    sent_as: dict[str, list[str]] = {}  # a call id -> the names its open calls are sent under, oldest first
    out: list[Message] = []
    count = 0
    for seq, messages in groups:
        for message in messages:
            if message.tool_calls:
                calls: list[ToolCall] = []
                for call in message.tool_calls:
                    name, reused = names(call.id, seq)
                    count += reused
                    sent_as.setdefault(call.id, []).append(name)
                    calls.append(call if name == call.id else ToolCall(name, call.name, call.arguments))
                if any(map(operator.is_not, calls, message.tool_calls)):
                    message = attrs.evolve(message, tool_calls=tuple(calls))
            answered = message.tool_call_id
            if message.role is Role.TOOL and answered is not None:
                pending = sent_as.get(answered)
                own = pending.pop(0) if pending else sent_id_form(answered)
                if own != answered:
                    message = attrs.evolve(message, tool_call_id=own)
            out.append(message)
    return tuple(out), count
