"""Which of a save's messages are new: the rule the framework's own history providers apply.

A host that replays the whole conversation as each run's input (chat UIs,
AG-UI) has the framework hand every earlier message to ``save_messages``
again. The framework's in-memory and file providers keep only what follows
the ordered overlap with what they hold; this provider does the same, so
history does not grow by a copy of itself every turn. Messages compare by
the framework's identity: their ``message_id`` when they have one, else
their role and serialized contents. A lone repeated user message without
an id is kept (a user may say the same thing twice).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

from agent_framework import Message as AFMessage

from ._exchanges import as_loaded, pair_results

__all__ = ["Tail", "decided", "message_identity", "new_messages"]

Identity = tuple[str, ...]


def message_identity(message: AFMessage) -> Identity:
    """``("id", message_id)``, or ``("content", role, contents as sorted JSON)``."""
    found = getattr(message, "message_id", None)
    if found is None:
        found = getattr(message, "id", None)
    if found is not None:
        return ("id", str(found))
    try:
        contents = [c.to_dict() for c in message.contents] if message.contents else []
        return ("content", str(message.role), json.dumps(contents, sort_keys=True, ensure_ascii=False))
    except Exception:  # contents that do not serialize compare by their text, as the framework does
        return ("content", str(message.role), str(message.contents))


def _lone_user_repeat(existing: Sequence[Identity | None], roles: Sequence[str | None]) -> bool:
    return roles[-1] == "user" and existing[-1] is not None and existing[-1][0] != "id"


def new_messages(
    existing: Sequence[Identity | None], roles: Sequence[str | None], incoming: Sequence[Identity]
) -> int:
    """How many of the first incoming messages repeat history (the rest are new).

    ``incoming`` are the identities (:func:`message_identity`) of the messages
    to save; ``existing`` those of the view's last messages, oldest first
    (``None`` for a message that is not a framework message: it matches
    nothing), at least ``len(incoming)`` of them unless the view is shorter;
    ``roles`` their roles. Only the last ``len(incoming)`` can overlap, so
    that many are enough to decide as a provider holding all of history does.
    """
    if not existing:
        return 0
    have = list(existing)
    got = list(incoming)
    for i in range(len(got) - len(have) + 1):
        if got[i : i + len(have)] == have:
            if i == 0 and len(have) == 1 and _lone_user_repeat(have, roles):
                break
            return i + len(have)
    for overlap in range(min(len(have), len(got)), 0, -1):
        if have[-overlap:] != got[:overlap]:
            continue
        if overlap == 1 and _lone_user_repeat(have, roles):
            continue
        return overlap
    return 0


def decided(existing: Sequence[Identity | None], incoming: Sequence[Identity]) -> bool:
    """Whether the view's last ``len(existing)`` messages decide :func:`new_messages`, older ones unread.

    A save reads the view's tail newest first and stops as soon as this
    holds, so a replay check reads only what it needs. An older message
    matters only to an overlap longer than ``existing`` (or to the whole view
    found inside ``incoming``), and each of those holds ``existing`` inside
    ``incoming`` starting past its first message. Found nowhere there,
    :func:`new_messages` on ``existing`` alone gives what all of history
    would; found, older messages must be read. (``None``, a message of
    another framework, matches nothing.)
    """
    if not existing:
        return False
    # Each identity as one character, so str.find searches in linear time: a session's tail of
    # identical messages would make a window-by-window comparison quadratic on every page read.
    codes: dict[Identity, str] = {}
    for identity in incoming:
        codes.setdefault(identity, chr(len(codes)))
    have = [codes.get(identity) if identity is not None else None for identity in existing]
    if None in have:  # a message found nowhere in the incoming ones (or another framework's)
        return True
    got = "".join(codes[identity] for identity in incoming)
    return got.find("".join(c for c in have if c is not None), 1) == -1


def _found_past_first(tokens: Sequence[str | int], got: str) -> bool:
    """Whether ``tokens`` match a run of ``got`` beginning at 1 or later (an int: up to that many of any).

    A simulation over the positions reached (no backtracking): linear in ``got`` per token.
    """
    reached = set(range(1, len(got) + 1))
    for token in tokens:
        if isinstance(token, int):
            reached = {p + d for p in reached for d in range(min(token, len(got) - p) + 1)}
        else:
            reached = {p + 1 for p in reached if p < len(got) and got[p] == token}
        if not reached:
            return False
    return True


class Tail:
    """The view's last messages a save's replay check has read, oldest first (``None``: another framework's).

    A host may replay what a load handed it, and a load leaves out the calls
    no result answers (what a partial retraction leaves) and the results
    whose call is before the load's first message (where its bound cut),
    :mod:`._exchanges`: such a message must still be found as the one
    stored, or the whole replayed transcript would be stored again. So the
    tail is compared as stored, as a load of all of it hands it out
    (:func:`._exchanges.as_loaded`), and as a load beginning at each of its
    messages would hand it out; the longest overlap found is taken.
    """

    def __init__(self) -> None:
        self._messages: list[AFMessage | None] = []
        self._identities: list[Identity | None] = []
        self._roles: list[str | None] = []

    def __len__(self) -> int:
        return len(self._messages)

    def prepend(self, older: list[AFMessage | None]) -> None:
        """Add the messages of an older page (oldest first) before those read so far."""
        self._messages[:0] = older
        self._identities[:0] = [None if m is None else message_identity(m) for m in older]
        self._roles[:0] = [None if m is None else str(m.role) for m in older]

    def covers(self, count: int) -> bool:
        """Whether the tail holds ``count`` messages a load cannot leave out whole: enough to decide.

        A message only of calls and results is left out of a load when each lost its other half.
        """
        solid = sum(
            1
            for m in self._messages
            if m is None or any(c.type not in ("function_call", "function_result") for c in m.contents)
        )
        return solid >= count

    def _loaded(self) -> tuple[list[Identity | None], list[str | None]] | None:
        """The identities and roles of the tail as a load hands it out; ``None``: as stored."""
        shown = as_loaded(self._messages)
        if shown is None:
            return None
        return (
            [None if m is None else message_identity(m) for m in shown],
            [None if m is None else str(m.role) for m in shown],
        )

    def _shown(
        self, at: int, out: frozenset[int], made: dict[tuple[int, frozenset[int]], Identity]
    ) -> Identity | None:
        """The identity of message ``at`` without its contents ``out``; ``None``: nothing is left of it."""
        message = self._messages[at]
        assert message is not None  # another framework's message has no contents of ours to leave out
        if not out:
            return self._identities[at]
        if len(out) == len(message.contents):
            return None
        if (at, out) not in made:
            trimmed = copy.copy(message)
            trimmed.contents = [c for i, c in enumerate(message.contents) if i not in out]
            made[at, out] = message_identity(trimmed)
        return made[at, out]

    def _loads_from(
        self, incoming: Sequence[Identity]
    ) -> list[tuple[list[Identity | None], list[str | None]]]:
        """The tail from each message a bounded load could begin at, as that load hands it out.

        Only the beginnings that leave a result out for its call before them (the others are
        the tail as loaded, compared already), whose first message is the first of ``incoming``
        (a replay of the load begins with it; a message the load leaves out whole answers no
        call, so the load from the next one is the same), and of ``len(incoming)`` messages at most.
        """
        answers, unanswered = pair_results(self._messages)
        starts = {j for (at, _), call in answers.items() for j in range(call + 1, at + 1)}
        made: dict[tuple[int, frozenset[int]], Identity] = {}
        loads: list[tuple[list[Identity | None], list[str | None]]] = []

        def shown(at: int, begin: int) -> Identity | None:
            message = self._messages[at]
            if message is None:
                return None
            out = frozenset(
                index
                for index in range(len(message.contents))
                if (at, index) in unanswered or answers.get((at, index), begin) < begin
            )
            return self._shown(at, out, made)

        for begin in sorted(starts, reverse=True):
            if not incoming or shown(begin, begin) != incoming[0]:
                continue
            identities: list[Identity | None] = []
            roles: list[str | None] = []
            for at in range(begin, len(self._messages)):
                message, identity = self._messages[at], shown(at, begin)
                if message is None:
                    identities.append(None)
                    roles.append(None)
                elif identity is not None:  # else nothing is left of it: the load leaves it out
                    identities.append(identity)
                    roles.append(str(message.role))
            if len(identities) > len(incoming):
                break  # an earlier beginning leaves out no more: it loads no fewer messages
            loads.append((identities, roles))
        return loads

    def _older_loads_decided(self, incoming: Sequence[Identity]) -> bool:
        """Whether no load beginning before the tail can hold the tail inside ``incoming`` past its first.

        Such a load hands the tail out as loaded, less some of the results whose call is before
        the tail (which, depends on where it began): each message holding one is taken as any
        one message or none.
        """
        answers, unanswered = pair_results(self._messages)
        open_ended = {at for (at, _), call in answers.items() if call < 0}
        if not open_ended:
            return True  # the tail as loaded: compared already
        codes: dict[Identity, str] = {}
        for identity in incoming:
            codes.setdefault(identity, chr(len(codes)))
        made: dict[tuple[int, frozenset[int]], Identity] = {}
        tokens: list[str | int] = []  # a code, or how many messages may stand for any one or none
        for at, message in enumerate(self._messages):
            if at in open_ended:
                if tokens and isinstance(tokens[-1], int):
                    tokens[-1] += 1
                else:
                    tokens.append(1)
                continue
            if message is None:
                return True  # another framework's message repeats nothing of ours
            out = frozenset(index for index in range(len(message.contents)) if (at, index) in unanswered)
            shown = self._shown(at, out, made)
            if shown is None:
                continue  # only calls no result answers: every load leaves it out
            code = codes.get(shown)
            if code is None:
                return True  # found nowhere in the incoming ones: no such load repeats it
            tokens.append(code)
        return not _found_past_first(tokens, "".join(codes[i] for i in incoming))

    def decided(self, incoming: Sequence[Identity]) -> bool:
        """Whether the tail read decides :meth:`repeated`: as stored, as loaded, as loads from before it."""
        if not decided(self._identities, incoming):
            return False
        loaded = self._loaded()
        if loaded is not None and not decided(loaded[0], incoming):
            return False
        return self._older_loads_decided(incoming)

    def repeated(self, incoming: Sequence[Identity]) -> int:
        """How many of the first ``incoming`` repeat the tail (:func:`new_messages`), stored or loaded."""
        count = len(incoming)
        skip = new_messages(self._identities[-count:], self._roles[-count:], incoming)
        loaded = self._loaded()
        if loaded is not None:
            skip = max(skip, new_messages(loaded[0][-count:], loaded[1][-count:], incoming))
        for identities, roles in self._loads_from(incoming):
            # A replay of that load holds it whole, first: its first messages are the load's.
            size = len(identities)
            if (
                size > skip
                and list(incoming[:size]) == identities
                and not (size == 1 and _lone_user_repeat(identities, roles))
            ):
                skip = size
        return skip
