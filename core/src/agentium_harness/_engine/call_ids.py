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
whole request held moved whenever a later group took it. Groups *before* it
can leave (the resident window, a view reset, an erasure): a repeat whose
earlier holder left is sent under its own id from then on, only in requests
whose earlier messages changed anyway. A name decided from its group alone
would have to rename ids a model gave (two groups alike but for what came
before them get one name); keeping the renamed one needs it stored.

Every id a request carries is valid (:data:`_VALID`): 1 to
:data:`MAX_OWN_ID_LENGTH` characters of ``[A-Za-z0-9_-]``, plus ``.`` and ``:``
(Kimi's ``functions.edit:0``: its models read their own ids back in that form
and stop calling tools when sent others). A valid id is sent as given. A
reply's call whose id is not (``call_7#2``, one of 80 characters, ``fn#a``)
runs and is committed under an id of its own (:func:`distinct_ids`), so every
request sends it alike: it was committed as given, sent so on the turn's next
step and otherwise from the next run on (or, ``#`` inside, always). An id
stored so (a host's ``append``, an earlier release) is sent in its valid form
(:func:`sent_id_form`): ids an earlier release renamed ``"<id>#<n>"`` as this
release names them, ``own_id_form(<id>, n)`` (``#`` is in no strict alphabet,
and Anthropic, Bedrock and Mistral refused every request of such a session);
any other as its first characters, ``_`` and 16 hex digits of its SHA-256, so
no two such ids, nor such an id and a valid one, share a name whatever else the
request holds. Any clash left is settled as a repeated id's (:class:`_SentNames`).
A history whose ids are all valid (the common case) is sent as it is, after
one check of all its ids together (:func:`_all_valid`): no digest, no match per id.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import re
from collections.abc import Collection, Container, Iterable, Sequence
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

#: The messages of a ``(seq, messages)`` pair of :func:`.history_view.model_groups`.
_MESSAGES: Final = operator.itemgetter(1)

#: A valid id: what a request may carry as it is (module docs).
_VALID: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")

#: The characters of a valid id, as bytes: :func:`_all_valid` deletes them and expects nothing left.
_ALPHABET: Final = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-"

#: A character no valid id holds, sent as ``_`` (:func:`_fit`, :func:`_digest_form`).
_OUTSIDE: Final = re.compile(r"[^A-Za-z0-9_.:-]")

#: Hex digits of an invalid id's SHA-256 in its valid form (:func:`_digest_form`): 64 bits.
_DIGEST_HEX: Final = 16

#: An earlier release's id of its own: ``"<id>#<n>"``, ``n`` from 1 (``<id>`` cut to keep 256).
_HASH_FORM: Final = re.compile(r"(.+)#([1-9][0-9]{0,17})", re.DOTALL)


def _all_valid(ids: Collection[str]) -> bool:
    """Whether every one of ``ids`` (none empty) is valid: :data:`_VALID`'s rule, for many ids at once.

    A history's ids are checked on every turn: one ``fullmatch`` each cost as much again as the
    rest of :func:`distinct_history`'s plain pass. Joined, the check is a few calls in C: ASCII
    (a flag of the string), nothing left once the alphabet's bytes are deleted, none over 64.
    """
    joined = "".join(ids)
    return (
        joined.isascii()
        and not joined.encode("ascii").translate(None, _ALPHABET)
        and max(map(len, ids), default=0) <= MAX_OWN_ID_LENGTH
    )


def _fit(call_id: str) -> str:
    """``call_id`` with each character outside the valid alphabet as ``_``, cut to 64 characters."""
    return _OUTSIDE.sub("_", call_id[:MAX_OWN_ID_LENGTH])


def _digest_form(call_id: str) -> str:
    """The valid form of an id that is not valid (and not of the old ``"<id>#<n>"`` form).

    Its first characters (each outside the alphabet as ``_``), ``_`` and 16 hex digits of the
    SHA-256 of the whole id: 64 characters at most. The digest keeps two such ids apart
    (``"fn#a"`` and ``"fn a"``, two ids alike for 64 characters) whatever else the request holds,
    and off the names of valid ids, which are sent as they are: a cut or a bare ``_`` for each
    character would give both one name, and the later call's name would depend on whether the
    earlier one is still in the history sent. Only for an id not valid: the common path hashes nothing.
    """
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_HEX]
    head = _OUTSIDE.sub("_", call_id[: MAX_OWN_ID_LENGTH - 1 - _DIGEST_HEX])
    return f"{head}_{digest}"


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
            "the history sent, or an id no provider takes (over 64 characters, or a character other "
            "than letters, digits and _ - . :); each runs and is committed under an id of its own"
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
    result then answers one call, and the model reads which; and so is a call whose id is not
    valid (:data:`_VALID`), so that every request of the turn and every later run sends it alike. The
    new id is its :func:`sent_id_form` if neither ``used`` nor any call of the reply names that,
    else :func:`own_id`'s of it, taken by neither. Returns the reply (itself when nothing was
    renamed) and how many calls were. ``reply`` is a checked copy: plain ids.
    """
    calls = reply.tool_calls
    seen: set[str] = set()
    for call in calls:
        if call.id in used or call.id in seen or not _VALID.fullmatch(call.id):
            break
        seen.add(call.id)
    else:
        return reply, 0
    taken = used | {call.id for call in calls}
    own_ids = _OwnIds(taken)  # shares the set: a name given here is taken there
    kept: set[str] = set()
    renamed: list[ToolCall] = []
    for call in calls:
        if call.id not in used and call.id not in kept and _VALID.fullmatch(call.id):
            kept.add(call.id)
            renamed.append(call)
            continue
        wanted = sent_id_form(call.id)
        if wanted in taken:
            own = own_ids(wanted)
        else:
            taken.add(wanted)
            own = wanted
        renamed.append(ToolCall(own, call.name, call.arguments))
    return attrs.evolve(reply, tool_calls=tuple(renamed)), len(calls) - len(kept)


def sent_id_form(call_id: str) -> str:
    """The valid id a stored ``call_id`` is sent as where no earlier call of the request is sent under it.

    ``call_id`` itself when it is valid: 1 to 64 characters of ``[A-Za-z0-9_.:-]``. An id an
    earlier release renamed ``"<id>#<n>"`` is sent as ``own_id_form(<id>, n)``, the name this
    release gives (a suffix of a suffix, ``"c1#1#2"``, each so: ``"c1_1_2"``; ``<id>`` with
    each character outside the alphabet as ``_``, cut to 64). Any other id is sent as its
    first 47 characters (each outside the alphabet as ``_``), ``_`` and 16 hex digits of its
    SHA-256 (``"fn#a"`` → ``"fn_a_"`` and 16 hex digits): two such ids are not sent under one
    name. Always valid, and deterministic, so every run sends a stored id alike. Public
    (``plugin_api``) so an integration that hands stored ids to a framework sends them so too.
    """
    if _VALID.fullmatch(call_id):  # most ids
        return call_id
    numbers: list[int] = []
    base = call_id
    while (old := _HASH_FORM.fullmatch(base)) is not None:
        base = old[1]
        numbers.append(int(old[2]))
    if not numbers:
        return _digest_form(call_id)
    base = _fit(base)
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
    # One pass while no call names an id twice, then one check that every id is valid (most
    # histories: sent as they are, no digest); a history of no tool call (most sessions) builds
    # nothing but the empty set. A result names its call's id (checked with it), or is checked alone.
    named: set[str] = set()
    plain = True
    for _seq, messages in groups:
        for message in messages:
            for call in message.tool_calls:
                if call.id in named:
                    plain = False
                    break
                named.add(call.id)
            answered = message.tool_call_id
            if plain and answered is not None and answered not in named and not _VALID.fullmatch(answered):
                plain = False
            if not plain:
                break
        if not plain:
            break
    if plain and _all_valid(named):
        return tuple(itertools.chain.from_iterable(map(_MESSAGES, groups))), 0  # at C speed
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
