"""Turns whose tool run committed before the turn failed, and the detail their commit kept.

Shared by the tests of what a failure's words commit (a provider's error, a
store's error): a runtime with one ``note`` tool, turns that each raise, and
the committed interruption's detail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from agentium_harness import (
    AgentiumError,
    CommitState,
    EffectLevel,
    InterruptionCause,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)


async def _note(args: Any) -> str:
    return "noted"


def noting_runtime(provider: Any, archive: Any, session_store: Any) -> Any:
    """A runtime of ``provider`` and the stores with one WRITE tool, ``note``."""
    return create_harness_runtime(
        provider=provider,
        archive=archive,
        session_store=session_store,
        tools=ToolRegistry([Tool("note", _note, EffectLevel.WRITE)]),
    )


async def failed_runs(
    rt: Any, identities: Sequence[VerifiedIdentity], before: Callable[[int], None] | None = None
) -> list[AgentiumError]:
    """One turn per identity (session ``s<i>``, ``note`` granted), each raising; their errors.

    ``before(i)`` runs before the ``i``-th turn (to arm the failure it meets).
    """
    caught: list[AgentiumError] = []
    async with rt:
        for i, identity in enumerate(identities):
            if before is not None:
                before(i)
            with anyio.fail_after(30), pytest.raises(AgentiumError) as raised:
                await rt.run(identity, f"s{i}", "note it", grants=["note"])
            caught.append(raised.value)
    return caught


def committed_detail(error: AgentiumError, cause: InterruptionCause) -> str:
    """The committed detail of the turn ``error`` stopped (its tool run committed), of ``cause``."""
    assert error.commit_state is CommitState.COMMITTED and error.run_result is not None, repr(error)
    interruption = error.run_result.retained.interruption
    assert interruption is not None and interruption.cause is cause
    return interruption.detail
