"""What the engine reads of an adapter's sequence answer: a real sequence, read no further than its bound.

A port method that returns many things (``read_groups``, ``list_sessions``,
``unindexed_groups``, ``append``'s receipts, a recall session's answers)
answers with a value the engine then walks in its own task, outside the
adapter call's deadline. So the engine never trusts what the value says of
itself: its ``__len__`` may lie, its slicing may return anything, its
iterator may never end or raise half way. :func:`listed` reads it through
its iterator once, at most one item past the bound (enough to tell it
broke the bound), into a plain list, and :func:`bounded_list` refuses an
answer over the bound or holding an item of the wrong type. A value that is
not a sequence (a generator, a set, a dict, a string, ``None``) is refused
before anything of it is read. Every refusal is a
:class:`~agentium_harness._errors.ContractViolationError` naming the adapter
and method, raised before the engine acts on any of the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from itertools import islice
from typing import TypeVar

from .._errors import ContractViolationError
from .._history import MessageGroup
from .._text import clean_text, error_text

__all__ = ["adapter_method", "bounded_list", "listed", "read_on"]

T = TypeVar("T")


def adapter_method(role: str, adapter: object, method: str) -> str:
    """How an error names the call: ``"archive InMemoryArchive.read_groups"``."""
    return f"{role} {type(adapter).__name__}.{method}"


def listed(raw: object, limit: int, who: str, what: str = "items") -> list[object]:
    """Up to ``limit + 1`` items of ``raw``, a sequence, read once through its iterator.

    ``who`` names the adapter and method (:func:`adapter_method`), ``what``
    the items. Raises :class:`ContractViolationError` when ``raw`` is not a
    sequence (text and bytes are not) or reading it raises. The caller
    decides what more than ``limit`` items means (refused, or cut: recall).
    """
    if isinstance(raw, str | bytes | bytearray | memoryview) or not isinstance(raw, Sequence):
        raise ContractViolationError(
            f"{who} returned {type(raw).__name__}, not a sequence of {what} (a list, a tuple, or a class "
            "subclassing or registered with collections.abc.Sequence); nothing of it was used"
        )
    try:
        # Never ``len(raw)`` or ``raw[:n]``: a subclass's own methods could say anything. What its
        # iterator yields is what is used, and it is never read past one item over the bound.
        return list(islice(iter(raw), max(limit, 0) + 1))
    except Exception as exc:
        error = ContractViolationError(
            f"{who} returned a sequence that could not be read ({error_text(exc)}); nothing of it was used"
        )
        # Committed (a stop after tools ran: turn_commit.committed_text) by the exception's class: its
        # text is the adapter's and may name another tenant's rows. The message, the host's, keeps it.
        error.committed_detail = (
            f"ContractViolationError: {who} returned a sequence that could not be read "
            f"({clean_text(type(exc).__name__)}); nothing of it was used"
        )
        raise error from exc


def bounded_list(raw: object, limit: int, who: str, what: str, item: type[T]) -> list[T]:
    """The items of ``raw`` as a plain list: a sequence of at most ``limit`` items, each an ``item``.

    Anything else is a :class:`ContractViolationError` (see :func:`listed`).
    """
    items = listed(raw, limit, who, what)
    if len(items) > limit:
        raise ContractViolationError(
            f"{who} returned more than the {limit} {what} asked at most; nothing of it was used"
        )
    for i, value in enumerate(items):
        if not isinstance(value, item):
            raise ContractViolationError(
                f"{who} returned {type(value).__name__} as item {i}, not {item.__name__}; "
                "nothing of it was used"
            )
    return items  # type: ignore[return-value]  # each item checked above


async def read_on(
    read: Callable[[int, int], Awaitable[object]],
    first: int,
    count: int,
    who: str,
    on_page: Callable[[Sequence[object]], None] | None = None,
) -> list[object]:
    """Up to ``count`` archived groups from seq ``first``: ``read(start, n)`` again after a shorter page.

    ``read_groups`` may answer with fewer groups than asked (an archive
    bounding the bytes one call returns, as the SQLite archive does); only an
    empty page means there is nothing more. So a page shorter than asked is
    followed by a read of the rest from its last group's seq + 1, until
    ``count`` items, an empty page, or a page whose last item is not a group
    at or past where that read started (returned as it is, for the caller's
    own checks to refuse). Each page is read with :func:`listed` and handed
    to ``on_page`` first; one over what it was asked is a
    :class:`ContractViolationError`. At most ``count`` reads: each moves past
    the last.
    """
    out: list[object] = []
    start = first
    while len(out) < count:
        left = count - len(out)
        page = listed(await read(start, left), left, who, "groups")
        if on_page is not None:
            on_page(page)
        if len(page) > left:
            raise ContractViolationError(f"{who} returned more than the {left} groups asked at most")
        out.extend(page)
        last = page[-1] if page else None
        # ``type(...) is int``: a seq set past the group's validator is not compared by its ``__ne__``.
        if len(page) == left or not isinstance(last, MessageGroup) or type(last.seq) is not int:
            break
        if last.seq < start:
            break
        start = last.seq + 1
    return out
