"""``agentium_harness.testing``'s helpers refuse bad arguments with InvalidArgumentError before running.

A test author's typo used to pass silently (an unknown loop style ran as
"asyncio", ``collision_pairs("abc")`` took three one-letter fields, zero calls
ran nothing) or fail with an error that did not say which argument was wrong
(``AttributeError``, ``AssertionError``, ``ZeroDivisionError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentium_harness import InvalidArgumentError, SessionKey
from agentium_harness.testing import (
    HarnessEvalTarget,
    collision_pairs,
    rich_group,
    run_in_threads,
    run_in_turn,
    scoped_snapshot,
)

KEY = SessionKey("t", "u", "s")


async def _work(i: int) -> int:
    return i


BAD: dict[str, Callable[[], object]] = {
    "rich_group key": lambda: rich_group(1, "t/u/s"),  # type: ignore[arg-type]
    "scoped_snapshot key": lambda: scoped_snapshot("t/u/s"),  # type: ignore[arg-type]
    "scoped_snapshot groups -1": lambda: scoped_snapshot(KEY, groups=-1),
    "scoped_snapshot groups True": lambda: scoped_snapshot(KEY, groups=True),
    "collision_pairs str": lambda: collision_pairs("abc"),
    "collision_pairs int field": lambda: collision_pairs([5]),  # type: ignore[list-item]
    "collision_pairs twice": lambda: collision_pairs(["a", "a"]),
    "collision_pairs stray optional": lambda: collision_pairs(["a", "b"], optional=["c"]),
    "collision_pairs str optional": lambda: collision_pairs(["a", "b"], optional="b"),
    "run_in_threads no threads": lambda: run_in_threads(_work, threads=0),
    "run_in_threads bool threads": lambda: run_in_threads(_work, threads=True),
    "run_in_threads unknown style": lambda: run_in_threads(_work, styles=("asynico",)),  # type: ignore[arg-type]
    "run_in_threads str styles": lambda: run_in_threads(_work, styles="trio"),  # type: ignore[arg-type]
    "run_in_threads nan timeout": lambda: run_in_threads(_work, timeout_s=float("nan")),
    "run_in_threads no work": lambda: run_in_threads(None),  # type: ignore[arg-type]
    "run_in_turn no styles": lambda: run_in_turn(_work, styles=()),
    "run_in_turn no calls": lambda: run_in_turn(_work, calls=0),
    "run_in_turn unknown style": lambda: run_in_turn(_work, styles=("trio ",)),  # type: ignore[arg-type]
    "HarnessEvalTarget nothing": lambda: HarnessEvalTarget(),
    "HarnessEvalTarget runtime str": lambda: HarnessEvalTarget(runtime="rt"),  # type: ignore[arg-type]
    "HarnessEvalTarget resolved dict": lambda: HarnessEvalTarget(resolved={}),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_argument_is_the_typed_error_and_nothing_runs(name: str) -> None:
    ran: list[int] = []

    async def counted(i: int) -> int:
        ran.append(i)
        return i

    call: Callable[[], object] = BAD[name]
    if name.startswith(("run_in_threads", "run_in_turn")):
        # The same bad call, with work that records whether it ran.
        call = _with_work(name, counted)
    with pytest.raises(InvalidArgumentError):
        call()
    assert ran == []


def _with_work(name: str, work: Callable[[int], Any]) -> Callable[[], object]:
    """``BAD[name]`` with ``work`` in place of ``_work`` (except where the work itself is the bad part)."""
    swaps: dict[str, Callable[[], object]] = {
        "run_in_threads no threads": lambda: run_in_threads(work, threads=0),
        "run_in_threads bool threads": lambda: run_in_threads(work, threads=True),
        "run_in_threads unknown style": lambda: run_in_threads(work, styles=("asynico",)),  # type: ignore[arg-type]
        "run_in_threads str styles": lambda: run_in_threads(work, styles="trio"),  # type: ignore[arg-type]
        "run_in_threads nan timeout": lambda: run_in_threads(work, timeout_s=float("nan")),
        "run_in_turn no styles": lambda: run_in_turn(work, styles=()),
        "run_in_turn no calls": lambda: run_in_turn(work, calls=0),
        "run_in_turn unknown style": lambda: run_in_turn(work, styles=("trio ",)),  # type: ignore[arg-type]
    }
    return swaps.get(name, BAD[name])


def test_good_arguments_work_as_before() -> None:
    assert run_in_threads(_work, threads=2, styles=("asyncio", "trio")) == [0, 1]
    assert run_in_turn(_work, calls=2, styles=["asyncio-loop"]) == [0, 1]  # type: ignore[arg-type]
    assert rich_group(1, KEY).seq == 1
    assert len(scoped_snapshot(KEY, groups=0).resident) == 0 and len(scoped_snapshot(KEY).resident) == 2
    assert len(collision_pairs(("tenant", "user"), optional=("user",))) > 0
