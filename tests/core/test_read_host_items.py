"""``plugin_api.read_host_items``: a host's own iterable read once, one item past its bound at most."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import read_host_items

TOO_MANY, UNREADABLE = "too many; nothing was written", "items could not be read"


def test_what_the_bound_allows_is_returned_as_a_plain_list_in_order() -> None:
    assert read_host_items(iter(range(3)), 3, too_many=TOO_MANY, unreadable=UNREADABLE) == [0, 1, 2]
    assert read_host_items((), 0, too_many=TOO_MANY, unreadable=UNREADABLE) == []


def test_an_endless_iterable_is_read_one_item_past_the_bound_then_refused() -> None:
    read: list[int] = []

    def endless() -> Iterator[int]:
        for n in itertools.count():
            read.append(n)
            yield n

    with pytest.raises(InvalidArgumentError, match=r"^too many"):
        read_host_items(endless(), 5, too_many=TOO_MANY, unreadable=UNREADABLE)
    assert len(read) == 6


class _Lies(list[int]):
    """A list whose ``len`` says 1 whatever it holds."""

    def __len__(self) -> int:
        return 1


def test_a_sequence_whose_len_lies_is_counted_by_what_it_yields() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^too many"):
        read_host_items(_Lies(range(10)), 3, too_many=TOO_MANY, unreadable=UNREADABLE)


def test_what_iterating_raises_is_refused_typed_with_the_exception_as_its_cause() -> None:
    def breaks() -> Iterator[int]:
        yield 1
        raise RuntimeError("host bug")

    with pytest.raises(InvalidArgumentError) as info:
        read_host_items(breaks(), 10, too_many=TOO_MANY, unreadable=UNREADABLE)
    assert str(info.value) == "items could not be read (RuntimeError raised); nothing was written"
    assert isinstance(info.value.__cause__, RuntimeError)
