"""A store's typed error as the engine raises it: a fresh copy, the engine's to mark, committed by its class.

A store (session store, archive, recall or memory store) may be shared by
tenants, and may keep one exception object per failure kind and raise it
again. So the object it raised is never what the engine raises or marks:
:meth:`.lifecycle.Ticket.call` raises :func:`store_error`, a fresh error of
its class, message and fields (caused by the store's), without what the
engine marks on its errors (``commit_state``, ``run_result``,
``committed_detail``: a value the store set is not the engine's and is not
copied). The copy's ``committed_detail`` names it by its class and the call
that raised it: what ran of a turn it stopped is committed in those words
(:func:`.turn_commit.committed_text`), never the store's text, which may
name another tenant's rows; the message, the host's, keeps the text whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import MemberDescriptorType

from .._errors import AgentiumError
from .._text import clean_text, error_text

__all__ = ["fresh_copy", "store_error"]

#: What the engine marks on an error it raises; never copied from an object a store raised.
_MARKS = frozenset({"commit_state", "run_result", "committed_detail"})


def fresh_copy(error: AgentiumError) -> AgentiumError | None:
    """A fresh error of ``error``'s class, message and fields, the engine's to mark; ``error`` untouched.

    Made without calling the class's ``__init__`` (an adapter's may take other
    arguments). Its fields are those in ``error``'s ``__dict__`` and those kept
    outside it (:func:`_slot_fields`). A class that cannot be made so gives way
    to its nearest Agentium base class that can; ``None`` when none can (its
    ``args`` or fields cannot be read).
    """
    for kind in type(error).__mro__:
        if not issubclass(kind, AgentiumError):
            continue  # a foreign mixin (TypeError, ValueError …) of an Agentium class: its Agentium base next
        try:
            fresh = kind.__new__(kind, *error.args)
            fresh.args = error.args
            fresh.__dict__.update({k: v for k, v in vars(error).items() if k not in _MARKS})
            notes = vars(error).get("__notes__")
            if type(notes) is list:
                # Its own list: a note a host adds (add_note) to its copy goes neither on the
                # store's object nor on the next copy (another tenant's run).
                fresh.__notes__ = list(notes)
            for field in _slot_fields(kind):
                value = _held(field, error)
                # A slot never set stays unset; an unset built-in one reads None, as the copy's does.
                if value is not _UNSET and _held(field, fresh) is not value:
                    field.__set__(fresh, value)
        except Exception:  # noqa: S112 - an adapter's class that cannot be made so: its base next
            continue
        return fresh
    return None


def _held(field: MemberDescriptorType, error: AgentiumError) -> object:
    """What ``error`` holds in ``field``; a sentinel for a slot never set."""
    try:
        return field.__get__(error, type(error))
    except AttributeError:
        return _UNSET


_UNSET = object()


def _slot_fields(kind: type) -> Iterator[MemberDescriptorType]:
    """The fields ``kind``'s instances keep outside their ``__dict__``, none of the engine's marks.

    Slots (an attrs class's fields) and a built-in base's own fields (a
    ``ConnectionError``'s ``errno`` and ``filename``, which its message is
    made from): a copy without them would lose them (read, an AttributeError;
    its ``repr``, an attrs class's, raising) or say another message.
    Dunder ones (``__suppress_context__``) are the raise's, not the error's.
    """
    for klass in kind.__mro__:
        for name, value in vars(klass).items():
            if isinstance(value, MemberDescriptorType) and not name.startswith("__") and name not in _MARKS:
                yield value


def store_error(error: AgentiumError, operation: str) -> AgentiumError:
    """The error to raise for ``error``, which a store's ``operation`` call raised (see the module).

    Its ``committed_detail`` says it by its class and the call: ``InvalidArgumentError (the session save's
    error; its text is not committed)``.
    """
    fresh = fresh_copy(error)
    if fresh is None:
        fresh = AgentiumError(f"{operation} failed: {error_text(error)}")
    fresh.committed_detail = (
        f"{clean_text(type(fresh).__name__)} (the {operation}'s error; its text is not committed)"
    )
    return fresh
