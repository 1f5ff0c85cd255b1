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

__all__ = ["decided", "message_identity", "new_messages"]

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
