"""The shared field validators raise the library's typed error, never a bare ``TypeError``/``ValueError``.

``InvalidArgumentError`` subclasses both, so code that caught those still
does; a host catching ``AgentiumError`` now catches these too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentium_harness import (
    ControlKind,
    HistoryControl,
    InvalidArgumentError,
    Message,
    MessageGroup,
    RetainedRecord,
    Role,
    Scope,
)

SCOPE = Scope("acme", "ana", "s")

CASES: dict[str, Callable[[], object]] = {
    "negative seq": lambda: MessageGroup(seq=-1, messages=(Message(Role.USER, "hi"),)),
    "bool seq": lambda: MessageGroup(seq=True, messages=(Message(Role.USER, "hi"),)),
    "a lone string for a tuple of strings": lambda: RetainedRecord(SCOPE, uncertainty="note"),
    "a number for a tuple of strings": lambda: RetainedRecord(SCOPE, uncertainty=5),  # type: ignore[arg-type]
    "a control group with messages": lambda: MessageGroup(
        seq=0, messages=(Message(Role.USER, "hi"),), control=HistoryControl(ControlKind.RESET_VIEW)
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_field_raises_invalid_argument_error(case: str) -> None:
    with pytest.raises(InvalidArgumentError):
        CASES[case]()
