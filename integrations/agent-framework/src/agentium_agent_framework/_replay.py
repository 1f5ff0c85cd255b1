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

import json
from collections.abc import Sequence

from agent_framework import Message as AFMessage

from ._exchanges import as_loaded

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


class Tail:
    """The view's last messages a save's replay check has read, oldest first (``None``: another framework's).

    A host may replay what a load handed it, and a load leaves out the calls
    no result answers (what a partial retraction leaves, :mod:`._exchanges`):
    such a message must still be found as the one stored, or the whole
    replayed transcript would be stored again. So the tail is compared both
    as stored and as a load hands it out (:func:`._exchanges.as_loaded`),
    and the longer overlap found is taken.
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

    def _loaded(self) -> tuple[list[Identity | None], list[str | None]] | None:
        """The identities and roles of the tail as a load hands it out; ``None``: as stored."""
        shown = as_loaded(self._messages)
        if shown is None:
            return None
        return (
            [None if m is None else message_identity(m) for m in shown],
            [None if m is None else str(m.role) for m in shown],
        )

    def decided(self, incoming: Sequence[Identity]) -> bool:
        """Whether the tail read decides :meth:`repeated`, both as stored and as loaded (:func:`decided`)."""
        if not decided(self._identities, incoming):
            return False
        loaded = self._loaded()
        return loaded is None or decided(loaded[0], incoming)

    def repeated(self, incoming: Sequence[Identity]) -> int:
        """How many of the first ``incoming`` repeat the tail (:func:`new_messages`), stored or loaded."""
        count = len(incoming)
        skip = new_messages(self._identities[-count:], self._roles[-count:], incoming)
        loaded = self._loaded()
        if loaded is not None:
            skip = max(skip, new_messages(loaded[0][-count:], loaded[1][-count:], incoming))
        return skip
