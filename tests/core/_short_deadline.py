"""Tests that time one adapter call out: only that call runs under the short ``op_timeout_s``.

The engine gives every adapter call of an operation one deadline, the
runtime's ``op_timeout_s`` (read when the runtime is built), so a test that
wants a run's archive append (say) to time out at 0.3 s runs the run's
session loads and save under 0.3 s too. On a loaded CI machine a stall of
the test process longer than that fails one of those, which did nothing
wrong, and the test with it.

:func:`short_only_for` keeps the runtime's own deadline for the calls a
test names and gives every other call of the default deadline a generous
one. The calls a test names still get their deadline the engine's way
(``RuntimeLimits`` -> admission -> ticket -> call): what the test checks of
them is unchanged. Calls given a deadline of their own (the model's
``model_timeout_s``, a recall round's budget) are left alone, and the model
call is never widened: a test about its deadline must not pass because it
got 30 s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentium_harness._engine.lifecycle import Ticket

#: The deadline of every call a test expects to succeed.
ROOMY_S = 30.0
#: Never widened: its deadline is what ``model_timeout_s`` tests are about.
_NEVER_WIDENED = frozenset({"provider complete"})


class ShortCalls:
    """The calls that keep the short deadline, and each that did (its operation and deadline), in order.

    ``operations`` may be changed as the test goes on: emptied, every call
    after (but the model's) gets :data:`ROOMY_S`.
    """

    def __init__(self, operations: set[str]) -> None:
        self.operations = operations
        self.kept: list[tuple[str, float]] = []


def short_only_for(monkeypatch: pytest.MonkeyPatch, *operations: str) -> ShortCalls:
    """Until the test ends, only ``operations`` (engine call names) keep the runtime's ``op_timeout_s``.

    Every other adapter call that would take that default runs under
    :data:`ROOMY_S`. Returns the record of the calls that kept it, so a
    test can check that the call it times out did.
    """
    original = Ticket.call
    seen = ShortCalls(set(operations))

    async def call(self: Ticket, operation: str, work: Callable[..., Awaitable[Any]], **kw: Any) -> Any:
        if kw.get("timeout_s") is None:
            if operation in seen.operations or operation in _NEVER_WIDENED:
                seen.kept.append((operation, self.op_timeout_s))
            else:
                kw["timeout_s"] = ROOMY_S
        return await original(self, operation, work, **kw)

    monkeypatch.setattr(Ticket, "call", call)
    return seen
