"""A host's own sequence of items, read once and no further than a bound (``append``, the SDK sessions).

A sequence of the host's own type runs the host's code when read: its
``__len__``, ``__iter__`` and ``__getitem__`` need not agree (one whose
``len`` said 1 yielded any number of items past a bound checked on it), one
that never ends held the event loop in a check that never awaits, and what
they raise reached the host as that bare exception. So it is iterated once,
in a loop (``list()`` would first allocate what ``__len__`` claims), cut off
one item past the bound, and whatever its iteration raises is refused as
:class:`InvalidArgumentError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from ._errors import InvalidArgumentError

__all__ = ["read_host_items"]

T = TypeVar("T")


def read_host_items(items: Iterable[T], limit: int, *, too_many: str, unreadable: str) -> list[T]:
    """The items of the host's ``items``, read once: at most ``limit``, else :class:`InvalidArgumentError`.

    ``too_many`` is the refusal's message once an item past ``limit`` is
    read; ``unreadable`` is the start of the message when iterating raises
    (``" (<exception type> raised); nothing was written"`` follows it; the
    exception is the refusal's ``__cause__``). The host's items are its own:
    none is copied or checked here.
    """
    given: list[T] = []
    try:
        for item in items:
            given.append(item)
            if len(given) > limit:
                raise InvalidArgumentError(too_many)
    except InvalidArgumentError:
        raise
    except Exception as exc:
        raise InvalidArgumentError(
            f"{unreadable} ({type(exc).__name__} raised); nothing was written"
        ) from exc
    return given
