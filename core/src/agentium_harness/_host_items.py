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

from collections.abc import Iterable, Iterator
from typing import TypeVar

from ._errors import InvalidArgumentError

__all__ = ["iter_host_items", "read_host_items"]

T = TypeVar("T")


def iter_host_items(
    items: Iterable[T], *, unreadable: str, outcome: str = "nothing was written"
) -> Iterator[T]:
    """The items of the host's ``items`` as they are read; what reading them raises, typed.

    The host's ``__iter__`` and ``__next__`` run here: whatever they raise is
    :class:`InvalidArgumentError` (``"<unreadable> (<exception type> raised);
    <outcome>"``, the exception its ``__cause__``). The caller stops reading at
    its own bound.
    """
    try:
        iterator = iter(items)
    except Exception as exc:
        raise _unreadable(unreadable, outcome, exc) from exc
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            raise _unreadable(unreadable, outcome, exc) from exc
        yield item


def read_host_items(
    items: Iterable[T], limit: int, *, too_many: str, unreadable: str, outcome: str = "nothing was written"
) -> list[T]:
    """The items of the host's ``items``, read once: at most ``limit``, else :class:`InvalidArgumentError`.

    ``too_many`` is the refusal's message once an item past ``limit`` is
    read; what iterating raises is refused as :func:`iter_host_items` says,
    with ``unreadable`` and ``outcome``. The host's items are its own: none is
    copied or checked here.
    """
    given: list[T] = []
    for item in iter_host_items(items, unreadable=unreadable, outcome=outcome):
        given.append(item)
        if len(given) > limit:
            raise InvalidArgumentError(too_many)
    return given


def _unreadable(unreadable: str, outcome: str, exc: Exception) -> InvalidArgumentError:
    return InvalidArgumentError(f"{unreadable} ({type(exc).__name__} raised); {outcome}")
